"""The analysis JSON is a function of the input's bytes: identical under any ``PYTHONHASHSEED`` (sets and
dicts of strings iterate in a seed-dependent order), so the dashboard and the CLI agree on one file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fuzzing import CORPUS, SHARED_TRACES


def _json(trace: Path, out: Path, seed: int) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    cmd = [sys.executable, "-m", "stallscope", "analyze", str(trace), "--no-cache", "-q", "--json", str(out)]
    subprocess.run(cmd, env=env, check=True, timeout=300)
    return out.read_bytes()


@pytest.mark.parametrize(
    "trace",
    [
        SHARED_TRACES / "hta_v100_ns_resolution_rank0.pt.trace.json.gz",  # tensor_cores_unused's example
        CORPUS / "hang_alexnet_launch_1000s_early.json.gz",
    ],
    ids=lambda p: p.name,
)
def test_same_json_under_different_hash_seeds(trace: Path, tmp_path: Path) -> None:
    if not trace.exists():
        pytest.skip(f"{trace} not present")
    # GIVEN one trace WHEN analysed under three hash seeds THEN the JSON bytes are identical
    first = _json(trace, tmp_path / "1.json", 1)
    assert b'"findings"' in first
    assert _json(trace, tmp_path / "2.json", 2) == first
    assert _json(trace, tmp_path / "3.json", 3) == first
