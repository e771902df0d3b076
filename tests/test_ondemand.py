"""Captures of a running program on request (``stallscope profile --on-demand`` and ``stallscope capture
PID``): real programs on the CPU, real bundles, the same step numbers as the run counts them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

from test_collector import PROFILE, REPO, read_sidecar, step_names, write

from stallscope.analyzer.analysis import analyze
from stallscope.analyzer.document.analysis import to_json
from stallscope.analyzer.load.loader import load
from stallscope.collector.ondemand import parse_every, registered
from stallscope.commands import main

LOOP = """\
import os
import sys
import time
import torch

model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 32), torch.randn(16, 1)
stop = sys.argv[1]
for i in range(100000):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.01)
    if os.path.exists(stop):
        break
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""

NO_STEPS = """\
import os
import sys
import time
import torch

while not os.path.exists(sys.argv[1]):
    torch.ones(4).sum()
    time.sleep(0.02)
"""


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A registry of this test's own (``XDG_RUNTIME_DIR``), for the programs and for ``capture``."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    return {**os.environ, "PYTHONPATH": str(REPO), "XDG_RUNTIME_DIR": str(runtime)}


class Program:
    """A program under ``profile --on-demand``, read line by line from stderr on a thread."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self._out: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._out_reader = threading.Thread(target=self._read_out, daemon=True)
        self._out_reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        self._out.extend(self.proc.stdout)

    @property
    def out(self) -> str:
        return "".join(self._out)

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no {text!r} on stderr: {self.lines}")

    @property
    def pid(self) -> int:
        line = self.wait_for("on demand: pid ")
        return int(line.split("on demand: pid ")[1].split(",")[0])

    def finish(self, timeout: float = 60.0) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        self._out_reader.join(timeout=5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def programs() -> Iterator[list[Program]]:
    started: list[Program] = []
    yield started
    for p in started:
        p.kill()


def _start(
    programs: list[Program], tmp_path: Path, env: dict[str, str], text: str, *extra: str
) -> tuple[Program, Path, Path]:
    script = write(tmp_path, "loop.py", text)
    out, stop = tmp_path / "run", tmp_path / "stop"
    args = [*PROFILE, "--on-demand", "--warmup", "1", "--steps", "3", *extra, "-o", str(out)]
    program = Program([*args, str(script), str(stop)], env, tmp_path)
    programs.append(program)
    return program, out, stop


def _capture(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["capture", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _bundle(out: str) -> Path:
    (line,) = [row for row in out.splitlines() if row.startswith("  bundle    ")]
    return Path(line.split("  bundle    ")[1])


def test_two_captures_at_different_steps_give_two_bundles_numbered_as_the_run(
    tmp_path: Path, env: dict[str, str], programs: list[Program], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a training loop waiting on demand
    program, out, stop = _start(programs, tmp_path, env, LOOP)
    pid = program.pid
    # WHEN it is captured twice, a few steps apart
    code1, out1, _ = _capture(capsys, str(pid), "--steps", "3")
    time.sleep(0.5)
    code2, out2, _ = _capture(capsys, str(pid), "--steps", "2", "--no-analyze")
    stop.touch()
    code = program.finish()
    # THEN two bundles, each with the steps it recorded, numbered as the run counts them
    assert (code1, code2, code) == (0, 0, 0), program.lines
    first, second = _bundle(out1), _bundle(out2)
    assert (first, second) == (out / "capture-1", out / "capture-2")
    steps1 = read_sidecar(first)["run"]["profiled_steps"]
    steps2 = read_sidecar(second)["run"]["profiled_steps"]
    assert steps1[1] - steps1[0] == 2 and steps2[1] - steps2[0] == 1
    assert steps2[0] > steps1[1]
    assert step_names(first) == [f"ProfilerStep#{n}" for n in range(steps1[0], steps1[1] + 1)]
    assert step_names(second) == [f"ProfilerStep#{n}" for n in range(steps2[0], steps2[1] + 1)]
    # the verdict printed is the bundle's, and each bundle says which capture of which run it is
    assert "verdict" in out1 and "verdict" not in out2
    docs = [to_json(analyze(load(b, use_cache=False))) for b in (first, second)]
    caps = [d["source"]["capture"] for d in docs]
    assert [c["index"] for c in caps] == [1, 2]
    assert caps[0]["run_id"] == caps[1]["run_id"] and caps[0]["trigger"] == "request"
    assert [c["steps"] for c in caps] == [steps1, steps2]
    # the run's end lists both; the program's waiting left no registry entry and no staging folder
    assert "capture 1  steps" in program.out and "capture 2  steps" in program.out
    assert registered() == []
    assert not [p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".control"]


def test_a_program_that_exited_or_never_steps_gets_one_line(
    tmp_path: Path, env: dict[str, str], programs: list[Program], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a program that makes torch calls but no step
    program, _out, stop = _start(programs, tmp_path, env, NO_STEPS)
    pid = program.pid
    # WHEN captured with a short timeout
    code, _, err = _capture(capsys, str(pid), "--timeout", "2")
    # THEN one line says it never stepped, and the request is withdrawn
    assert code == 2
    (line,) = err.strip().splitlines()[-1:]
    assert "made no step in 2 s" in line and "request is withdrawn" in line and "Traceback" not in err
    stop.touch()
    assert program.finish() == 0
    # WHEN the program has exited: one line
    code, _, err = _capture(capsys, str(pid))
    assert code == 2 and err.strip() == f"stallscope: error: no process {pid}: it has exited (or never ran)"
    # a live process that is not waiting for captures (this test): one line
    code, _, err = _capture(capsys, str(os.getpid()))
    assert code == 2 and "is not waiting for captures" in err and len(err.strip().splitlines()) == 1
    # junk
    assert _capture(capsys, "12x")[0] == 2


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_while_waiting_keeps_the_exit_code_and_the_bundles(
    tmp_path: Path,
    env: dict[str, str],
    programs: list[Program],
    capsys: pytest.CaptureFixture[str],
    signum: signal.Signals,
) -> None:
    # GIVEN a program on demand with one capture done
    program, _out, _stop = _start(programs, tmp_path, env, LOOP)
    code, out1, _ = _capture(capsys, str(program.pid), "--no-analyze")
    assert code == 0
    # WHEN the signal arrives while it waits
    program.proc.send_signal(signum)
    # THEN the program's exit code is 128 + n, the capture stays whole and analysable
    assert program.finish() == 128 + signum
    bundle = _bundle(out1)
    assert len(step_names(bundle)) == 3
    assert "capture 1  steps" in program.out and "Traceback" not in "\n".join(program.lines)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_while_capturing_keeps_the_exit_code_and_leaves_no_half_bundle(
    tmp_path: Path,
    env: dict[str, str],
    programs: list[Program],
    capsys: pytest.CaptureFixture[str],
    signum: signal.Signals,
) -> None:
    # GIVEN a program recording a long capture (requested from a thread)
    program, out, _stop = _start(programs, tmp_path, env, LOOP, "--max-events", "0")
    pid = program.pid
    asker = threading.Thread(target=main, args=(["capture", str(pid), "--steps", "10000", "--no-analyze"],))
    asker.start()
    program.wait_for("recording from step")
    time.sleep(0.5)
    # WHEN the signal arrives inside the window
    program.proc.send_signal(signum)
    code = program.finish()
    asker.join(timeout=60)
    capsys.readouterr()
    # THEN exit 128 + n; the window so far is a whole bundle (its steps whole), no staging folder stays
    assert code == 128 + signum, program.lines
    bundle = out / "capture-1"
    steps = read_sidecar(bundle)["run"]["profiled_steps"]
    assert steps is not None and step_names(bundle)[: steps[1] - steps[0] + 1] == [
        f"ProfilerStep#{n}" for n in range(steps[0], steps[1] + 1)
    ]
    assert not [p.name for p in out.rglob(".*") if p.name != ".control" and p.parent.name != ".control"]


def test_a_capture_is_refused_while_another_is_recording(
    tmp_path: Path, env: dict[str, str], programs: list[Program], capsys: pytest.CaptureFixture[str]
) -> None:
    program, _out, stop = _start(programs, tmp_path, env, LOOP, "--max-events", "0")
    pid = program.pid
    asker = threading.Thread(target=main, args=(["capture", str(pid), "--steps", "60", "--no-analyze"],))
    asker.start()
    program.wait_for("recording from step")
    code, _, err = _capture(capsys, str(pid))
    asker.join(timeout=60)
    stop.touch()
    assert program.finish() == 0
    assert code == 2 and "is busy: a capture is recording" in err


DDP = """\
import os
import sys
import time
import torch
import torch.distributed as dist

dist.init_process_group(
    "gloo", init_method="file://" + os.environ["RENDEZVOUS"],
    rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 32))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 32)
while True:
    stop = torch.tensor([float(os.path.exists(sys.argv[1]))])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # the ranks leave the loop at the same step
    if stop.item():
        break
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    time.sleep(0.01)
dist.destroy_process_group()
"""

LAUNCH = """\
import os
import subprocess
import sys

# what torchrun does for two ranks on one machine: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_* (gloo on loopback)
profile, out, script, stop = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ranks = []
for rank in range(2):
    env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511", "TORCHELASTIC_RUN_ID": "test",
           "GLOO_SOCKET_IFNAME": "lo"}
    ranks.append(subprocess.Popen([sys.executable, "-m", "stallscope", "profile", "--on-demand",
                                   "--warmup", "1", "--steps", "3", "-o", out, script, stop], env=env))
sys.exit(max(p.wait() for p in ranks))
"""


def test_one_capture_of_a_two_rank_job_is_a_job_bundle(
    tmp_path: Path, env: dict[str, str], programs: list[Program], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a 2-rank DDP job (gloo, 127.0.0.1) whose ranks wait on demand, started by a launcher
    script = write(tmp_path, "ddp.py", DDP)
    launch = write(tmp_path, "launch.py", LAUNCH)
    out, stop = tmp_path / "job", tmp_path / "stop"
    launcher = subprocess.Popen(
        [sys.executable, str(launch), "profile", str(out), str(script), str(stop)],
        env={**env, "RENDEZVOUS": str(tmp_path / "rendezvous")},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while len(registered()) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(registered()) == 2
        # WHEN one capture names the launcher's PID
        code, text, err = _capture(capsys, str(launcher.pid), "--steps", "3", "--no-analyze")
        stop.touch()
        log, _ = launcher.communicate(timeout=90)
    finally:
        launcher.kill()
    # THEN one job bundle: rank0 and rank1 recorded the same steps, and analyze reads a 2-rank job
    assert code == 0 and launcher.returncode == 0, (err, log)
    bundle = _bundle(text)
    assert bundle == out / "capture-1" and sorted(p.name for p in bundle.iterdir()) == ["rank0", "rank1"]
    steps = [read_sidecar(bundle / f"rank{r}")["run"]["profiled_steps"] for r in (0, 1)]
    assert steps[0] == steps[1] and steps[0][1] - steps[0][0] == 2
    assert "a job of 2 ranks on this machine" in err
    ids = {read_sidecar(bundle / f"rank{r}")["run"]["capture"]["run_id"] for r in (0, 1)}
    assert len(ids) == 1
    doc_path = tmp_path / "job.json"
    assert main(["analyze", "--no-cache", "-q", "--json", str(doc_path), str(bundle)]) == 0
    capsys.readouterr()
    doc = json.loads(doc_path.read_text())
    assert doc["job"] is not None and sorted(r["rank"] for r in doc["per_rank"]) == [0, 1]


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0), ("5", 5.0), ("1.5m", 90.0)]
)
def test_every_reads_durations(text: str, seconds: float) -> None:
    assert parse_every(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "0s", "-1m", "nan", "inf", "10d", "0.5"])
def test_every_refuses_junk(text: str) -> None:
    from stallscope.analyzer.core.errors import UsageError

    with pytest.raises(UsageError, match="--every"):
        parse_every(text)


def test_on_demand_refuses_duration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path, "t.py", "print(1)\n")
    assert main(["profile", "--on-demand", "--duration", "3", str(script)]) == 2
    assert "does not take --duration" in capsys.readouterr().err


SLOWS_DOWN = """\
import os
import sys
import time
import torch

# 10 ms steps; from step 40 on, once the run's first capture is written, 150 ms steps (the planted slowdown)
model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 32), torch.randn(16, 1)
run = sys.argv[2]
for i in range(100000):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    slow = i >= 40 and os.path.isdir(os.path.join(run, "capture-1"))
    time.sleep(0.15 if slow else 0.01)
    if os.path.isdir(os.path.join(run, "capture-3")) or os.path.exists(sys.argv[1]):
        break
"""


def test_every_uploads_each_capture_tagged_with_the_run(
    tmp_path: Path, env: dict[str, str], programs: list[Program]
) -> None:
    from stallscope.dashboard.app import Running, create_app, open_services

    services = open_services(tmp_path / "store", max_upload_mb=64, processes=False)
    running = Running(create_app(services), "127.0.0.1", 0, quiet=True).start()
    try:
        # GIVEN a program that slows down after its first capture, captured every second and uploaded
        script = write(tmp_path, "slows.py", SLOWS_DOWN)
        out, stop = tmp_path / "run", tmp_path / "stop"
        args = [
            *PROFILE,
            "--every",
            "1s",
            "--warmup",
            "0",
            "--steps",
            "3",
            "--upload",
            running.url,
            "-o",
            str(out),
        ]
        program = Program([*args, str(script), str(stop), str(out)], env, tmp_path)
        programs.append(program)
        code = program.finish(timeout=180)
        assert code == 0, program.lines
        # THEN three captures, each uploaded with the run's id as a tag, analysed by the dashboard
        run_id = json.loads((out / "run.json").read_text())["run_id"]
        assert sorted(p.name for p in out.glob("capture-*"))[:3] == ["capture-1", "capture-2", "capture-3"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            entries = [e for e in services.store.entries() if f"run:{run_id}" in e.tags]
            if len(entries) >= 3 and all(e.status.value in ("ready", "failed") for e in entries):
                break
            time.sleep(0.2)
        assert len(entries) >= 3 and all(e.status.value == "ready" for e in entries), entries
        by_index = {services.store.analysis(e.id)["source"]["capture"]["index"]: e for e in entries}
        docs = {i: services.store.analysis(e.id) for i, e in by_index.items()}
        assert all(d["source"]["capture"]["trigger"] == "every" for d in docs.values())
        assert all(d["source"]["capture"]["run_id"] == run_id for d in docs.values())
        # the planted slowdown is in the captures' steps: capture 1 fast, capture 3 slow
        median = {i: sorted(s["dur_us"] for s in d["steps"])[len(d["steps"]) // 2] for i, d in docs.items()}
        assert median[3] > median[1] + 100_000 and median[2] > median[1] + 100_000, median
        assert sum("uploaded" in line for line in program.out.splitlines()) >= 3
        # AND the dashboard's run page has the three captures in order, the slowdown flagged against capture 1
        import urllib.request

        with urllib.request.urlopen(f"{running.url}/api/runs/{run_id}", timeout=30) as answer:
            run = json.loads(answer.read())
        captures = run["captures"]
        assert [c["index"] for c in captures][:3] == [1, 2, 3]
        assert [c["step_us"] for c in captures[:3]] == pytest.approx([median[1], median[2], median[3]])
        assert captures[0]["flag"] is None
        for flagged in captures[1:3]:
            kinds = [r["kind"] for r in flagged["flag"]["reasons"]]
            assert "step_time" in kinds and flagged["flag"]["against"]["index"] == 1
            assert flagged["flag"]["diff"] == f"/compare?a={captures[0]['id']}&b={flagged['id']}"
        assert run["flagged"] >= 2
    finally:
        running.stop()
        assert services.worker is not None
        services.worker.shutdown()


def test_waiting_leaves_no_mode_on_the_stack_after_the_first_step(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # GIVEN an on-demand run of a CPU-only loop (origin tracking: a torch-function mode until the 1st step)
    import torch

    from stallscope.collector.ondemand import Control
    from stallscope.collector.recording import record_on_demand
    from stallscope.collector.session import ProfileOptions

    depths: list[int] = []

    def body() -> int:
        w = torch.zeros(4, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        for _ in range(5):
            (w * 2).sum().backward()
            opt.step()
            depths.append(torch._C._len_torch_function_stack())
        return 0

    control = Control(tmp_path / "run", "t-1", ["loop.py"])
    done = record_on_demand(body, ProfileOptions(), control, ["loop.py"], None, lambda _m: None)
    # THEN from the second step on nothing of stallscope's sits on the mode stack (the steps run bare)
    assert done.exit_code == 0 and depths[1:] == [0, 0, 0, 0]
