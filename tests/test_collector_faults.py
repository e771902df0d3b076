"""``stallscope profile`` under faults (issue 14): SIGTERM, SIGHUP and SIGINT write the bundle and leave no
staging folder; ``os._exit`` and ``kill -9`` leave at most a staging folder, which the next run removes;
a forked child neither writes nor holds up the parent's bundle; a full disk is one line, and the exit
code is always the program's.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from test_collector import FAST, PROFILE, REPO, read_sidecar, step_names, train_script, write

from stallscope.collector.bundle import Staging, remove_stale
from stallscope.commands import main

LOOP = """\
import os
import sys
import textwrap
import time
import torch
import stallscope

w = torch.randn(64, 64)
for i in range(100000):
    (w @ w).relu()
    stallscope.step()
    if i == 3:
        print("in the window", flush=True)
    time.sleep(0.01)
"""


def _profile(tmp_path: Path, script: Path, out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PROFILE, "-o", str(out), "--no-analyze", *FAST[:4], *extra, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _staging_left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_ending_signals_write_the_bundle(tmp_path: Path, signum: signal.Signals) -> None:
    # GIVEN a long loop run by `stallscope profile`, inside its profiled window
    out = tmp_path / "o"
    proc = _profile(tmp_path, write(tmp_path, "loop.py", LOOP), out, "--steps", "1000")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "in the window"
        # WHEN the signal arrives
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    # THEN exit 128 + n, one line saying so, a bundle with what was profiled, no staging folder
    assert proc.returncode == 128 + signum, stderr
    assert f"  bundle    {out}" in stdout
    (closing,) = [line for line in stderr.splitlines() if "the bundle holds what ran until then" in line]
    assert closing.startswith(f"stallscope: interrupted (exit code {proc.returncode}): traced ")
    assert "Traceback" not in stderr
    assert len(step_names(out)) >= 3
    assert read_sidecar(out)["run"]["exit_code"] == 128 + signum
    assert _staging_left(tmp_path) == []


def test_os_exit_leaves_a_staging_folder_that_the_next_run_removes(tmp_path: Path) -> None:
    # GIVEN a program that leaves with os._exit(5) (no finally, no atexit)
    script = train_script(tmp_path, n=3, tail="os._exit(5)\n").read_text()
    script_path = write(tmp_path, "leave.py", "import os\n" + script)
    proc = _profile(tmp_path, script_path, tmp_path / "o")
    proc.communicate(timeout=120)
    # THEN its exit code stands and at most one staging folder is left, no bundle
    assert proc.returncode == 5
    assert not (tmp_path / "o").exists()
    assert len(_staging_left(tmp_path)) <= 1
    # WHEN the next run starts there THEN the leftover is removed
    Staging(tmp_path / "next").discard()
    assert _staging_left(tmp_path) == []


def test_a_staging_folder_of_a_live_writer_is_kept(tmp_path: Path) -> None:
    # GIVEN the staging folder of a run in progress (this process) and of one killed with kill -9
    mine = Staging(tmp_path / "a")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    killed = tmp_path / ".b.xyz"
    killed.mkdir()
    (killed / ".stallscope-staging").write_text(str(dead.pid))
    foreign = tmp_path / ".git"
    foreign.mkdir()
    # WHEN stale folders are removed THEN only the killed run's goes
    assert remove_stale(tmp_path) == [killed]
    assert mine.path.is_dir() and foreign.is_dir()
    mine.discard()


def test_a_forked_child_neither_writes_nor_blocks_the_bundle(tmp_path: Path) -> None:
    # GIVEN a program that forks a child which leaves with sys.exit(0) while the parent trains on
    tail = """\
        import os, sys
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        os.waitpid(pid, 0)
        for i in range(3):
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        sys.exit(4)
    """
    script = train_script(tmp_path, n=3, tail=textwrap.dedent(tail))
    out = tmp_path / "o"
    start = time.monotonic()
    proc = _profile(tmp_path, script, out)
    _, stderr = proc.communicate(timeout=120)
    # THEN the parent's exit code, its bundle with all its steps, written once, soon
    assert proc.returncode == 4, stderr
    assert read_sidecar(out)["run"]["exit_code"] == 4
    assert read_sidecar(out)["run"]["steps_seen"] == 6
    assert _staging_left(tmp_path) == []
    assert time.monotonic() - start < 60


def test_a_full_disk_is_one_line_and_the_exit_code_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a program that exits with 3, and a disk that is full when the bundle's sidecar is written
    real_write = Path.write_text

    def write_text(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if self.name == "sidecar.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    script = train_script(tmp_path, n=3, tail="sys.exit(3)\n")
    # WHEN profiled THEN exit 3, one line naming the problem, and no staging folder left
    assert main(["profile", "-o", str(tmp_path / "o"), *FAST, str(script)]) == 3
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert errors == [
        f"stallscope: error: -o {tmp_path / 'o'}: cannot write the bundle (No space left on device)"
    ]
    assert _staging_left(tmp_path) == []
