"""``stallscope profile`` and the collector API on tiny CPU workloads (a few matmuls per step).

Each test writes a small program to ``tmp_path``, runs it in-process through ``main(argv)`` (or as a
subprocess) and reads the bundle back with the analyzer.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import stallscope  # noqa: E402
from stallscope.analyzer.load.loader import load  # noqa: E402
from stallscope.collector import session  # noqa: E402
from stallscope.collector.bundle import SCHEMA, SIDECAR_NAME, TRACE_SUFFIX, bundle_trace, default_output  # noqa: E402
from stallscope.commands import main  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FAST = ["--skip", "0", "--warmup", "0", "--steps", "2"]
PROFILE = [sys.executable, "-m", "stallscope", "profile"]

TRAIN = """\
import sys
import torch

torch.manual_seed(0)
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 32)
for i in range({n}):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
{tail}
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def train_script(folder: Path, n: int = 5, tail: str = "", name: str = "train.py") -> Path:
    return write(folder, name, TRAIN.format(n=n, tail=tail))


def step_names(bundle: Path) -> list[str]:
    return [s.name for s in load(bundle, use_cache=False).models[0].steps]


def read_sidecar(bundle: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((bundle / SIDECAR_NAME).read_text())
    return doc


@pytest.fixture(autouse=True)
def no_leftover_session() -> Any:
    yield
    assert session.active() is None


# -- running a program -----------------------------------------------------------------------------


def test_profile_script_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a training loop with an SGD optimizer and no stallscope code
    script = train_script(tmp_path, n=5)
    out = tmp_path / "bundle"
    # WHEN profiled with a 2-step window right after the first iteration
    assert main(["profile", "-o", str(out), *FAST, str(script)]) == 0
    # THEN the bundle holds a Kineto trace with two ProfilerStep spans from the optimizer hook, the
    # sidecar, and the verdict, bundle and next command are printed; stderr says there is no GPU
    names = sorted(p.name for p in out.iterdir())
    assert names[0] == SIDECAR_NAME and names[1].startswith("train-") and names[1].endswith(TRACE_SUFFIX)
    assert step_names(out) == ["ProfilerStep#3", "ProfilerStep#4"]
    side = read_sidecar(out)
    assert side["schema"] == SCHEMA
    assert side["run"]["argv"] == [str(script)]
    assert side["run"]["torch"] == torch.__version__
    assert side["run"]["window"] == "steps"
    assert side["run"]["steps_seen"] == 5
    assert isinstance(side["sync_sites"], list)
    assert isinstance(side["step_timing"], dict)
    stdout, stderr = capsys.readouterr()
    assert "  verdict   " in stdout
    assert f"  bundle    {out}" in stdout
    assert f"  next      stallscope report {out}" in stdout
    if not torch.cuda.is_available():
        assert stderr.count("no CUDA device available: profiling the CPU only") == 1


def test_profile_as_subprocess(tmp_path: Path) -> None:
    # GIVEN the same loop; WHEN run as `python -m stallscope profile ... script args` from another cwd
    script = train_script(tmp_path, n=4, tail="print('args', sys.argv[1:])")
    out = tmp_path / "sub"
    done = subprocess.run(
        [sys.executable, "-m", "stallscope", "profile", "-o", str(out), *FAST, str(script), "--lr", "3"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    # THEN the script's own options reached it untouched and the bundle has the profiled steps
    assert done.returncode == 0, done.stderr
    assert "args ['--lr', '3']" in done.stdout
    assert "  verdict   " in done.stdout
    assert step_names(out) == ["ProfilerStep#3", "ProfilerStep#4"]


def test_module_mode_and_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a package module that records what it sees as __main__
    pkg = tmp_path / "pkgx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    seen = tmp_path / "seen.json"
    tail = (
        "import json, os\n"
        f"json.dump({{'argv': sys.argv, 'path0': sys.path[0], 'name': __name__}}, open({str(seen)!r}, 'w'))"
    )
    train_script(pkg, n=4, tail=tail, name="trainmod.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv_before = sys.argv[:]
    # WHEN run with -m and arguments that look like stallscope's own options
    out = tmp_path / "mod"
    code = main(["profile", "-o", str(out), "--no-analyze", *FAST, "-m", "pkgx.trainmod", "--steps", "9"])
    # THEN the module ran as __main__ with `python -m` argv and path, and ours is restored
    assert code == 0
    got = json.loads(seen.read_text())
    assert got["name"] == "__main__"
    assert got["argv"] == [str(pkg / "trainmod.py"), "--steps", "9"]
    assert got["path0"] == str(tmp_path)
    assert sys.argv == argv_before
    assert step_names(out) == ["ProfilerStep#3", "ProfilerStep#4"]


def test_script_sees_its_argv_and_path(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    script = write(
        tmp_path,
        "show.py",
        f"""\
        import json, sys
        json.dump({{"argv": sys.argv, "path0": sys.path[0], "name": __name__}}, open({str(seen)!r}, "w"))
        """,
    )
    assert main(["profile", "-o", str(tmp_path / "o"), "--no-analyze", str(script), "a", "-x", "--y=1"]) == 0
    got = json.loads(seen.read_text())
    assert got == {"argv": [str(script), "a", "-x", "--y=1"], "path0": str(tmp_path), "name": "__main__"}


# -- exit codes, errors, Ctrl-C --------------------------------------------------------------------


def test_exit_code_passes_through(tmp_path: Path) -> None:
    script = train_script(tmp_path, n=3, tail="sys.exit(3)")
    out = tmp_path / "o"
    assert main(["profile", "-o", str(out), "--no-analyze", *FAST, str(script)]) == 3
    assert read_sidecar(out)["run"]["exit_code"] == 3


def test_exception_shows_the_scripts_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a script that fails after its loop
    script = train_script(tmp_path, n=4, tail="raise ValueError('boom in the script')")
    out = tmp_path / "o"
    # WHEN profiled
    code = main(["profile", "-o", str(out), *FAST, str(script)])
    # THEN exit 1, the traceback is the script's own (no runpy / collector frames), and the bundle of
    # what ran is written and analysed
    assert code == 1
    stdout, stderr = capsys.readouterr()
    assert "ValueError: boom in the script" in stderr
    assert f'File "{script}", line' in stderr
    assert "runpy" not in stderr
    assert "collector" not in stderr
    assert step_names(out) == ["ProfilerStep#3", "ProfilerStep#4"]
    assert "  verdict   " in stdout


def test_ctrl_c_writes_a_partial_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a script interrupted (Ctrl-C) in the middle of the profiled window
    script = train_script(tmp_path, n=4, tail="raise KeyboardInterrupt")
    out = tmp_path / "o"
    code = main(
        [
            "profile",
            "-o",
            str(out),
            "--no-analyze",
            "--skip",
            "0",
            "--warmup",
            "0",
            "--steps",
            "5",
            str(script),
        ]
    )
    # THEN exit 130 and the bundle holds the steps that completed in the window (what ran after them,
    # up to the interrupt, is no step)
    assert code == 130
    assert "interrupted" in capsys.readouterr().err
    assert step_names(out) == ["ProfilerStep#3", "ProfilerStep#4"]
    assert read_sidecar(out)["run"]["exit_code"] == 130


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: [str(d / "missing.py")], "missing.py: no such file"),
        (lambda d: [str(write(d, "data.txt", "x = 1\n"))], "data.txt: not a Python file"),
        (lambda d: ["-m", "no_such_module_xyz"], "no module named 'no_such_module_xyz'"),
        (
            lambda d: ["-o", str(write(d, "afile", "") / "out"), str(write(d, "ok.py", "pass\n"))],
            "cannot write",
        ),
        (lambda d: ["--steps", "0", str(write(d, "ok.py", "pass\n"))], "--steps must be 1 or more"),
        (lambda d: [], "give a script"),
    ],
    ids=["missing", "not-python", "no-module", "unwritable-output", "bad-steps", "no-program"],
)
def test_bad_input_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, message: str
) -> None:
    assert main(["profile", *make(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stallscope: error: ")
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_output_folder_that_is_not_a_bundle_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    assert main(["profile", "-o", str(busy), str(write(tmp_path, "ok.py", "pass\n"))]) == 2
    assert "not a stallscope bundle" in capsys.readouterr().err
    assert (busy / "notes.txt").read_text() == "mine"


def test_no_torch_says_how_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails
    assert main(["profile", str(write(tmp_path, "ok.py", "pass\n"))]) == 2
    err = capsys.readouterr().err
    assert "torch is not installed" in err
    assert "pip install torch" in err
    assert len(err.strip().splitlines()) == 1


# -- windows without an optimizer ------------------------------------------------------------------

INFER = """\
import torch
import stallscope

w = torch.randn(32, 32)
for i in range({n}):
    y = (w @ w).relu()
    stallscope.step()
"""


def _window(out: Path) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(ProfilerStep spans, Optimizer.step spans) of a bundle's trace."""
    trace = bundle_trace(out)
    assert trace is not None
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]

    def spans(prefix: str) -> list[tuple[float, float]]:
        return [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith(prefix)]

    return spans("ProfilerStep#"), spans("Optimizer.step#")


WINDOW_1_0_3 = ["--no-analyze", "--skip", "1", "--warmup", "0", "--steps", "3"]


@pytest.mark.parametrize(
    "scheduler",
    ["", "sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)"],
    ids=["optimizer", "with-lr-scheduler"],
)
def test_profiler_steps_never_cut_an_optimizer_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scheduler: str
) -> None:
    # GIVEN a training loop, with or without an LR scheduler wrapping opt.step (the optimizer's post
    # hook runs inside its Optimizer.step record_function)
    text = TRAIN.format(n=8, tail="").replace("x = torch.randn", f"{scheduler}\nx = torch.randn")
    if scheduler:
        text = text.replace("    opt.step()\n", "    opt.step()\n    sched.step()\n")
    script = write(tmp_path, "train.py", text)
    out = tmp_path / "bundle"
    # WHEN profiled with a 3-step window after one skipped step
    assert main(["profile", "-o", str(out), *WINDOW_1_0_3, str(script)]) == 0
    steps, opt = _window(out)
    # THEN the profiler moved between steps only after an optimizer step had returned: every optimizer
    # step of the trace lies whole inside one profiled step, one per step
    assert len(steps) == 3 and len(opt) == 3
    for start, end in opt:
        assert any(s <= start and end <= e for s, e in steps), (start, end, steps)
    assert read_sidecar(out)["run"]["steps_seen"] == 8
    # AND the user is told which steps were profiled while the program went on: the first transition
    # waits for the second step's end, then 1 skipped step, then steps 4-6
    assert "stallscope: profiled steps 4-6 of the run, trace written" in capsys.readouterr().err


def test_a_program_that_kept_the_old_step_is_still_profiled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a loop calling a reference to opt.step taken before any step (our wrapper is bypassed)
    text = TRAIN.format(n=8, tail="").replace("    opt.step()\n", "    step()\n")
    script = write(tmp_path, "train.py", text.replace("x = torch.randn", "step = opt.step\nx = torch.randn"))
    out = tmp_path / "bundle"
    # WHEN profiled
    assert main(["profile", "-o", str(out), *WINDOW_1_0_3, str(script)]) == 0
    # THEN the transitions ran in the hook, the scheduled profiler starting one step after the
    # fallback stopped: 3 profiled steps, 5-7
    steps, _ = _window(out)
    assert len(steps) == 3
    assert "stallscope: profiled steps 5-7 of the run, trace written" in capsys.readouterr().err


def test_stallscope_step_drives_steps(tmp_path: Path) -> None:
    script = write(tmp_path, "infer.py", INFER.format(n=5))
    out = tmp_path / "o"
    assert main(["profile", "-o", str(out), "--no-analyze", *FAST, str(script)]) == 0
    assert step_names(out) == ["ProfilerStep#2", "ProfilerStep#3"]


def test_no_steps_profiles_the_whole_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path, "once.py", "import torch\nx = torch.randn(8, 8)\ny = (x @ x).sum()\n")
    out = tmp_path / "o"
    assert main(["profile", "-o", str(out), "--no-analyze", str(script)]) == 0
    assert "profiled the whole run" in capsys.readouterr().err
    assert read_sidecar(out)["run"]["window"] == "whole_run"
    assert load(out, use_cache=False).models[0].event_count > 0


def test_too_few_steps_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = train_script(tmp_path, n=2)
    out = tmp_path / "o"
    assert main(["profile", "-o", str(out), str(script)]) == 0  # default skip 5: the window never opens
    stdout, stderr = capsys.readouterr()
    assert "nothing was traced" in stderr
    assert "verdict" not in stdout
    assert sorted(p.name for p in out.iterdir()) == [SIDECAR_NAME]


def test_duration_window(tmp_path: Path) -> None:
    script = write(tmp_path, "infer.py", INFER.format(n=4))
    out = tmp_path / "o"
    assert main(["profile", "-o", str(out), "--no-analyze", "--duration", "30", str(script)]) == 0
    assert read_sidecar(out)["run"]["window"] == "duration"
    assert len(step_names(out)) >= 4


def test_no_analyze_prints_only_the_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = train_script(tmp_path, n=3)
    out = tmp_path / "o"
    assert main(["profile", "-o", str(out), "--no-analyze", *FAST, str(script)]) == 0
    stdout = capsys.readouterr().out
    assert "verdict" not in stdout
    assert f"  bundle    {out}" in stdout


def test_rerun_replaces_a_bundle(tmp_path: Path) -> None:
    script = train_script(tmp_path, n=3)
    out = tmp_path / "o"
    for _ in range(2):
        assert main(["profile", "-o", str(out), "--no-analyze", *FAST, str(script)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no staging left


def test_default_output_name(tmp_path: Path) -> None:
    first = default_output("train", root=tmp_path, now=0)
    first.mkdir(parents=True)
    assert first.parent == tmp_path
    assert first.name.startswith("train-")
    assert default_output("train", root=tmp_path, now=0).name == first.name + "-2"


# -- Python API ------------------------------------------------------------------------------------


def _loop(n: int, p: Any = None) -> None:
    w = torch.randn(16, 16)
    for _ in range(n):
        (w @ w).sum()
        (p or stallscope).step()


def test_api_context_manager(tmp_path: Path) -> None:
    with stallscope.profile(tmp_path / "ctx", skip=0, warmup=0, steps=2) as p:
        _loop(4, p)
    assert p.bundle == (tmp_path / "ctx").absolute()
    assert step_names(p.bundle) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert read_sidecar(p.bundle)["schema"] == SCHEMA


def test_api_decorator(tmp_path: Path) -> None:
    @stallscope.profiled(tmp_path / "dec", skip=1, warmup=0, steps=2)
    def work(n: int) -> int:
        _loop(n)
        return n

    assert work(5) == 5
    assert step_names(tmp_path / "dec") == ["ProfilerStep#3", "ProfilerStep#4"]


def test_step_without_a_session_is_a_no_op() -> None:
    stallscope.step()
    assert session.active() is None


def test_import_does_not_import_torch() -> None:
    code = "import sys, stallscope, stallscope.commands; assert 'torch' not in sys.modules, 'torch imported'"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_profile_upload_sends_the_bundle_to_a_dashboard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stallscope.dashboard import client
    from stallscope.dashboard.app import Running, create_app, open_services

    # GIVEN a dashboard on a free localhost port
    services = open_services(tmp_path / "store", max_upload_mb=16, processes=False)
    running = Running(create_app(services), "127.0.0.1", 0).start()
    try:
        # WHEN a training loop is profiled with --upload
        script = train_script(tmp_path, n=5)
        out = tmp_path / "bundle"
        code = main(["profile", "-o", str(out), "--no-analyze", *FAST, "--upload", running.url, str(script)])
        stdout = capsys.readouterr().out
        # THEN the bundle (trace and sidecar) reached the dashboard, which analysed it
        assert code == 0
        line = next(x for x in stdout.splitlines() if x.startswith("  uploaded  "))
        trace_id = line.rsplit("/", 1)[-1]
        assert line == f"  uploaded  {running.url}/trace/{trace_id}"
        entry = client.wait(trace_id, running.url, timeout=120)
        assert entry["status"] == "ready", entry
        # AND an unreachable dashboard is one line on stderr and exit code 2 (the program itself passed)
        assert (
            main(
                [
                    "profile",
                    "-o",
                    str(out),
                    *FAST,
                    "--no-analyze",
                    "--upload",
                    "http://127.0.0.1:9",
                    str(script),
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert "upload to http://127.0.0.1:9 failed" in err and "Traceback" not in err
    finally:
        running.stop()
        assert services.worker is not None
        services.worker.shutdown()


def test_real_sigint_writes_a_partial_bundle(tmp_path: Path) -> None:
    # GIVEN a long inference loop run by `stallscope profile` in its own process
    script = write(
        tmp_path,
        "forever.py",
        """\
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
        """,
    )
    out = tmp_path / "o"
    proc = subprocess.Popen(
        [*PROFILE, "-o", str(out), "--no-analyze", *FAST[:4], "--steps", "1000", str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "in the window"
        # WHEN the user presses Ctrl-C
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    # THEN exit 130, one line saying so, and a bundle with the steps profiled until then
    assert proc.returncode == 130, stderr
    (closing,) = [line for line in stderr.splitlines() if "the bundle holds what ran until then" in line]
    assert closing.startswith(f"stallscope: interrupted (exit code {proc.returncode}): traced ")
    assert "Traceback" not in stderr
    names = step_names(out)
    assert len(names) >= 3 and names[0] == "ProfilerStep#2"
    assert read_sidecar(out)["run"]["exit_code"] == 130
