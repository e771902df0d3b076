"""One recording: a profiling session around a body of work, written as a bundle. Shared by
``stallscope profile`` (the body runs a program) and the Python API (the body is the ``with`` block)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from collector.bundle import TRACE_SUFFIX, Staging, run_metadata, sidecar
from collector.embed import embed_sidecar
from collector.session import Capture, ProfileOptions, Session


@dataclass(frozen=True)
class Recording:
    exit_code: int
    bundle: Path
    capture: Capture


class Recorder:
    """``start()`` -> (work, calling ``session.step()`` or an optimizer) -> ``finish(exit_code)``."""

    def __init__(
        self, options: ProfileOptions, output: str | Path, argv: list[str], program_dir: Path | None
    ):
        options.check()
        self.argv = argv
        self.program_dir = program_dir
        self.staging = Staging(output, trace_name(argv))
        self.session = Session(options, self.staging.trace_path)
        self.started = ""

    def start(self) -> None:
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        try:
            self.session.start()
        except BaseException:
            self.staging.discard()
            raise

    def finish(self, exit_code: int) -> Recording:
        """Stop profiling and publish the bundle (also after a failed or interrupted workload)."""
        try:
            capture = self.session.stop()
            meta = run_metadata(self.argv, self.program_dir, self.started)
            meta.update(
                exit_code=exit_code,
                window=capture.mode,
                steps_seen=capture.steps_seen,
                options=asdict(self.session.options),
                notes=capture.notes,
                step_source=capture.step_source,
                dataloaders=capture.dataloaders,
            )
            doc = sidecar(meta, capture.sync_sites, capture.step_timing)
            if capture.trace is not None:
                embed_sidecar(capture.trace, doc)  # the trace alone carries everything
            bundle = self.staging.commit(doc)
        except BaseException:
            self.staging.discard()
            raise
        return Recording(exit_code, bundle, capture)


def trace_name(argv: list[str]) -> str:
    """``<script>-<YYYYmmdd-HHMMSS>.pt.trace.json.gz``: the program's name (a module's last part)."""
    name = Path(argv[0]).name if argv else ""
    name = name[:-3] if name.endswith(".py") else name.rsplit(".", 1)[-1]
    return f"{name or 'python'}-{time.strftime('%Y%m%d-%H%M%S')}{TRACE_SUFFIX}"


def record(
    body: Callable[[], int],
    options: ProfileOptions,
    output: str | Path,
    argv: list[str],
    program_dir: Path | None,
    on_start: Callable[[Session], None] | None = None,
) -> Recording:
    """Run ``body`` (returning an exit code) under a session and write the bundle to ``output``."""
    rec = Recorder(options, output, argv, program_dir)
    rec.start()
    if on_start is not None:
        on_start(rec.session)
    code = 1
    try:
        code = body()
    finally:
        result = rec.finish(code)
    return result
