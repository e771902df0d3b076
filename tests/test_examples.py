"""The examples run under `stallscope profile` on the CPU and the verdict names each planted line."""

from __future__ import annotations

from pathlib import Path

import pytest

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.load.loader import load
from stallscope.commands import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize(
    ("example", "rule", "line"),
    [
        ("item_logging", "would_sync_scalar_read", 18),
        ("mask_indexing", "would_sync_data_dependent", 15),
        ("decode_readback", "would_sync_decode", 20),
        ("pageable_copy", "would_sync_to_host", 15),
        ("blanket_sync", "would_sync_blanket", 17),
        ("clean_pipeline", None, None),
    ],
)
def test_example_profile_names_the_planted_line(
    example: str, rule: str | None, line: int | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an example script with one planted problem (on the CPU: sites that would sync on a GPU)
    bundle = tmp_path / example
    # WHEN profiled end to end
    code = main(
        [
            "profile",
            "-o",
            str(bundle),
            "--skip",
            "2",
            "--warmup",
            "1",
            "--steps",
            "4",
            str(EXAMPLES / f"{example}.py"),
        ]
    )
    out = capsys.readouterr().out
    # THEN the run succeeds, writes a bundle, and its findings name exactly the planted line
    assert code == 0 and (bundle / "sidecar.json").is_file() and any(bundle.glob("*.pt.trace.json.gz"))
    a = analyze(load(bundle))
    if rule is None:
        assert a.findings == ()
        return
    top = a.findings[0]
    assert top.rule == rule and top.call_site is not None
    assert (Path(top.call_site.file).name, top.call_site.line) == (f"{example}.py", line)
    assert f"{example}.py:{line}" in out
