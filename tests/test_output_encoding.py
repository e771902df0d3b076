"""The JSON document written without a Python object per critical-path segment is the same document."""

from __future__ import annotations

import json

import pytest
from fuzzing import SHARED_TRACES

from analyzer import load
from analyzer.analysis import analyze
from analyzer.output import encode_analysis, encode_json, to_json

TRACES = [
    "hta_v100_ns_resolution_rank0.pt.trace.json.gz",  # long critical path (stream runs, launches)
    "hta_a100_multistream_event_sync.pt.trace.json.gz",  # several streams and event waits
]


@pytest.mark.parametrize("name", TRACES)
def test_encode_analysis_is_byte_for_byte_the_document(name: str) -> None:
    # GIVEN the analysis of a real trace
    path = SHARED_TRACES / name
    if not path.exists():
        pytest.skip(f"{path} is not here")
    a = analyze(load(path))
    extra = {"job": None}
    # WHEN it is encoded from the columns, the segments a chunk at a time
    fast = encode_analysis(a, extra)
    # THEN the bytes are those of the document built as objects, segments included and in order
    assert fast == encode_json(to_json(a) | extra)
    segments = json.loads(fast)["critical_path"]["segments"]
    assert a.critical is not None and len(segments) == len(a.critical.kind) > 0
    assert list(segments[0]) == ["kind", "lane", "name", "start_us", "end_us"]


def test_to_json_without_segments_keeps_the_other_keys() -> None:
    path = SHARED_TRACES / TRACES[1]
    if not path.exists():
        pytest.skip(f"{path} is not here")
    a = analyze(load(path))
    full, bare = to_json(a), to_json(a, segments=False)
    assert "segments" not in bare["critical_path"]
    assert {k: v for k, v in full["critical_path"].items() if k != "segments"} == bare["critical_path"]
