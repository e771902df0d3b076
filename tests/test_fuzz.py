"""Property-based fuzzing of the whole analysis (``tests/fuzzing.py``): every generated or mutated trace
meets the contract (exit 0 or 2, one line, no traceback, bounded time, the same JSON twice). The number of
examples is bounded for CI; ``benchmarks/fuzz.py --minutes N`` runs the same generators for long.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from fuzzing import (
    BREAKERS,
    Case,
    check_contract,
    kineto_cases,
    mutated_cases,
    nested_cases,
    real_trace_docs,
    write_case,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,  # the same examples every CI run; long runs use benchmarks/fuzz.py
    suppress_health_check=list(HealthCheck),
    database=None,
)
REAL = real_trace_docs()


def _check(case: Case) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_contract(write_case(case, Path(tmp) / "in"), Path(tmp))


@pytest.mark.parametrize("kind", sorted(BREAKERS))
@FUZZ
@given(data=st.data())
def test_generated_traces_meet_the_contract(kind: str, data: st.DataObject) -> None:
    # GIVEN a generated trace of this class (valid, or broken one way) THEN it meets the contract
    _check(data.draw(kineto_cases(kind)))


@settings(FUZZ, max_examples=12)
@given(data=st.data())
def test_deeply_nested_traces_meet_the_contract(data: st.DataObject) -> None:
    # GIVEN a valid trace nested 100 to 100,000 deep (before, in, inside an event of, or around the event
    # list; some large enough to be streamed) THEN it meets the contract (nested too deeply: one line)
    _check(data.draw(nested_cases()))


@pytest.mark.skipif(not REAL, reason="../shared/traces not present")
@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_mutated_real_traces_meet_the_contract(data: st.DataObject) -> None:
    # GIVEN a shared real trace mutated (structure, literals, bytes, gzip) THEN it meets the contract
    _check(data.draw(mutated_cases(REAL)))
