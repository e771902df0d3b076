"""Shared fixtures: an isolated model cache, the optional real-trace folder, and a trace writer."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from _kineto import WriteTrace, write_trace_file

# A suite started in the background (`cmd &` in a script, some CI runners) inherits SIGINT ignored, and
# so would every program a test starts: Python keeps an ignored SIGINT ignored, and the tests that send
# one (Ctrl-C of a profiled program) would wait for nothing. Its default comes back for the children.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty ``XDG_CACHE_HOME``: nothing is read from or written to ~/.cache."""
    cache_home = tmp_path_factory.mktemp("xdg-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    return cache_home


@pytest.fixture
def shared_traces() -> Path:
    """``../shared/traces`` (real traces from public repositories); absent from users' clones."""
    folder = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
    if not folder.is_dir():
        pytest.skip("../shared/traces not present")
    return folder


@pytest.fixture
def write_trace(tmp_path: Path) -> WriteTrace:
    """``write_trace(doc, name="trace.json")`` -> the path of the written file under ``tmp_path``."""

    def write(doc: Any, name: str = "trace.json") -> Path:
        return write_trace_file(tmp_path / name, doc)

    return write
