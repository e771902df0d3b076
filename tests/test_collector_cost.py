"""The cost of profiling is bounded: no Python stacks unless asked, an event budget that cuts the window,
no recording of the imports, and progress while torch collects and writes the trace."""

from __future__ import annotations

import gzip
import json
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from stallscope.collector import session  # noqa: E402
from stallscope.collector.bundle import SIDECAR_NAME, bundle_trace  # noqa: E402
from stallscope.collector.window import Heartbeat, budget_steps  # noqa: E402
from stallscope.commands import main  # noqa: E402

TRAIN = """\
import torch

def setup_helper(k):
    return k * 2

for k in range(300):  # import-time Python work: never profiled
    setup_helper(k)

torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(8)])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 16)
for i in range({n}):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.fixture(autouse=True)
def no_leftover_session() -> Any:
    yield
    assert session.active() is None


def _program(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(text))
    return path


def _events(bundle: Path) -> list[dict[str, Any]]:
    trace = bundle_trace(bundle)
    assert trace is not None
    with gzip.open(trace, "rt") as f:
        events: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return events


def _steps(events: list[dict[str, Any]]) -> list[str]:
    return sorted(e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))


def _notes(bundle: Path) -> list[str]:
    notes: list[str] = json.loads((bundle / SIDECAR_NAME).read_text())["run"]["notes"]
    return notes


def test_no_python_stacks_by_default_and_stacks_on_request(tmp_path: Path) -> None:
    # GIVEN a training loop, WHEN profiled with the defaults and with --stacks
    script = _program(tmp_path, TRAIN.format(n=4))
    plain, stacked = tmp_path / "plain", tmp_path / "stacked"
    window = ["--no-analyze", "--skip", "0", "--warmup", "0", "--steps", "2"]
    assert main(["profile", "-o", str(plain), *window, str(script)]) == 0
    assert main(["profile", "-o", str(stacked), "--stacks", *window, str(script)]) == 0
    # THEN only --stacks records Python frames (the sidecar still has the exact sync lines)
    cats = [str(e.get("cat")) for e in _events(plain)]
    assert "python_function" not in cats
    assert "cpu_op" in cats
    assert any(e.get("cat") == "python_function" for e in _events(stacked))


def test_event_budget_cuts_the_window_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a loop whose first step makes a few hundred events, WHEN 4 steps are asked for under a budget
    # that holds about one step
    script = _program(tmp_path, TRAIN.format(n=8))
    out = tmp_path / "o"
    args = ["--skip", "0", "--warmup", "0", "--steps", "4", "--max-events", "200"]
    assert main(["profile", "-o", str(out), "--no-analyze", *args, str(script)]) == 0
    # THEN one step is profiled, and stderr and the sidecar say why
    assert _steps(_events(out)) == ["ProfilerStep#3"]
    note = next(n for n in _notes(out) if "--max-events" in n)
    assert "profiling 1 step(s) instead of 4" in note
    assert note in capsys.readouterr().err
    # AND without a budget the four steps are there
    unbounded = tmp_path / "u"
    assert main(["profile", "-o", str(unbounded), "--no-analyze", *args[:-1], "0", str(script)]) == 0
    assert len(_steps(_events(unbounded))) == 4
    assert not any("--max-events" in n for n in _notes(unbounded))


def test_bad_max_events_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = _program(tmp_path, TRAIN.format(n=1))
    assert main(["profile", "--max-events", "-1", str(script)]) == 2
    assert "--max-events must be 0 (no limit) or more, not -1" in capsys.readouterr().err


def test_imports_are_never_profiled(tmp_path: Path) -> None:
    # GIVEN a program that runs Python work before its first torch call, and never steps
    script = _program(
        tmp_path,
        """\
        import torch

        def setup_helper(k):
            return k * 2

        for k in range(300):
            setup_helper(k)
        x = torch.randn(8, 8)
        y = (x @ x).sum()
        """,
    )
    out = tmp_path / "o"
    # WHEN profiled whole, with Python stacks
    assert main(["profile", "-o", str(out), "--no-analyze", "--stacks", str(script)]) == 0
    # THEN the trace starts at the first torch call: the setup frames are not in it, the torch ops are
    names = {str(e.get("name")) for e in _events(out)}
    assert not any("setup_helper" in n for n in names)
    assert "aten::randn" in names and "aten::matmul" in names
    assert session.WHOLE_RUN_NOTE in _notes(out)


def test_window_closed_line_says_size_and_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = _program(tmp_path, TRAIN.format(n=6))
    out = tmp_path / "o"
    window = ["--skip", "0", "--warmup", "0", "--steps", "2"]
    assert main(["profile", "-o", str(out), "--no-analyze", *window, str(script)]) == 0
    err = capsys.readouterr().err
    trace = bundle_trace(out)
    assert trace is not None
    size = trace.stat().st_size / 1e6
    assert f"({size:.1f} MB in " in err


@pytest.mark.parametrize(
    ("events", "budget", "steps", "expected"),
    [(100, 1000, 5, 5), (300, 1000, 5, 3), (5000, 1000, 5, 1), (300, 0, 5, 5), (0, 1000, 5, 5)],
)
def test_budget_steps(events: int, budget: int, steps: int, expected: int) -> None:
    fit, note = budget_steps(events, budget, steps)
    assert fit == expected
    assert (note is None) == (fit == steps)


def test_heartbeat_says_the_stage_while_it_lasts() -> None:
    said: list[str] = []
    got = threading.Event()

    def say(message: str) -> None:
        said.append(message)
        if len(said) >= 2:
            got.set()

    beat = Heartbeat(say, "writing the trace", delay=0.01, interval=0.01)
    assert got.wait(5.0)
    beat.stop()
    count = len(said)
    assert said[0].startswith("writing the trace... (") and said[0].endswith(" s)")
    threading.Event().wait(0.05)
    assert len(said) == count  # stopped: nothing more


def test_stderr_and_trace_number_steps_alike(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a training loop, WHEN steps 2 and 3 after a skip are profiled
    script = _program(tmp_path, TRAIN.format(n=9))
    out = tmp_path / "o"
    window = ["--skip", "2", "--warmup", "1", "--steps", "2"]
    assert main(["profile", "-o", str(out), "--no-analyze", *window, str(script)]) == 0
    # THEN stderr's "profiled steps A-B" are the trace's ProfilerStep#A..#B
    err = capsys.readouterr().err
    said = err.split("profiled steps ", 1)[1].split(" ", 1)[0]
    first, last = (int(x) for x in said.split("-"))
    assert last - first == 1
    assert _steps(_events(out)) == [f"ProfilerStep#{first}", f"ProfilerStep#{last}"]


DECODE = """\
import torch
from torch.autograd import _profiler_enabled
from torch.overrides import _get_current_function_mode_stack as modes

model = torch.nn.Linear(4, 4)
x = torch.randn(2, 4)
label = torch.tensor([3])  # made on the host from a Python int: never on the accelerator
with torch.no_grad():
    for i in range(10):
        tok = model(x).argmax()
        tok.item()
        label.item()
        print("STEP", len(modes()), _profiler_enabled())
"""


def test_origin_tracking_is_off_inside_the_window_and_sites_keep_their_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a CPU-only inference loop reading a model output and a host-made tensor every step
    script = _program(tmp_path, DECODE)
    out = tmp_path / "o"
    window = ["--skip", "2", "--warmup", "0", "--steps", "3"]
    # WHEN profiled
    assert main(["profile", "-o", str(out), "--no-analyze", *window, str(script)]) == 0
    # THEN no torch-function mode slows the profiled steps (origin tracking is off there), but it was on
    # for the step before them, where the sites were learnt (the first iteration, before any step
    # boundary, is the setup's recording, dropped at the first step, under the first-op trigger too;
    # the second, skipped, step is recorded alone to measure a step's events)
    steps = [line.split()[1:] for line in capsys.readouterr().out.splitlines() if line.startswith("STEP")]
    assert len(steps) == 10
    profiled = [i for i, (_, on) in enumerate(steps) if on == "True" and i > 0]
    assert profiled == [1, 3, 4, 5]  # the second step is the event budget's probe; 3-5 the window
    # (the probe, step 1, has the budget's call counter; step 2 origin tracking, where sites are learnt)
    assert [mode for mode, _ in steps] == ["2", "1", "1", "0", "0", "0", "0", "0", "0", "0"]
    # AND the model output's read is a would-be sync in each recorded step, the host tensor's is not
    sites = json.loads((out / SIDECAR_NAME).read_text())["sync_sites"]
    by_line = {s["line"]: s for s in sites if s["op"] == "Tensor.item"}
    assert (by_line[11]["on_device"], by_line[11]["count"]) == (True, 3)
    assert (by_line[12]["on_device"], by_line[12]["count"]) == (False, 3)


WARMUP_HEAVY = """\
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 16)
for i in range(12):
    if i == 0:  # warm-up work of the first iteration only (lazy setup, caches)
        for _ in range(400):
            torch.zeros(2).add_(1)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_event_budget_measures_a_step_after_the_warm_up(tmp_path: Path) -> None:
    # GIVEN a loop whose first iteration makes several times the events of the others, and a budget
    # that holds three ordinary steps but not one first step
    script = _program(tmp_path, WARMUP_HEAVY)
    out = tmp_path / "o"
    args = ["--skip", "2", "--warmup", "0", "--steps", "3", "--max-events", "1000"]
    # WHEN profiled
    assert main(["profile", "-o", str(out), "--no-analyze", *args, str(script)]) == 0
    # THEN the budget was judged on a step after the warm-up: all three steps are recorded, with no note
    assert len(_steps(_events(out))) == 3
    assert not any("--max-events" in n for n in _notes(out))
    assert len(_events(out)) < 1000 * 1.2


NO_STEPS = """\
import torch

x = torch.randn(8, 8)
for _ in range(3000):  # no optimizer, no module, no stallscope.step(): a window without steps
    y = (x @ x).relu().sum()
print("DONE")
"""


@pytest.mark.parametrize("mode", [[], ["--duration", "60"]], ids=["whole_run", "duration"])
def test_event_budget_ends_a_window_without_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: list[str]
) -> None:
    # GIVEN a program without steps making about 12,000 torch calls, WHEN profiled whole (or for 60 s)
    # under a budget of 2,000 events
    script = _program(tmp_path, NO_STEPS)
    out = tmp_path / "o"
    assert main(["profile", "-o", str(out), "--no-analyze", *mode, "--max-events", "2000", str(script)]) == 0
    # THEN the program ran to its end, the window ended early near the budget, and the note (on stderr
    # and in the sidecar) says how many events it holds and how long it lasted
    assert "DONE" in capsys.readouterr().out
    ops = [e for e in _events(out) if e.get("cat") == "cpu_op"]
    assert 0 < len(ops) <= 2000
    note = next(n for n in _notes(out) if n.startswith("--max-events 2,000"))
    assert "ended early" in note and "s after the first torch call" in note
    assert ("--duration 60 s window" in note) == bool(mode)
    recorded = int(note.split("(")[1].split(" events")[0].replace(",", ""))
    assert recorded >= len(ops)


def test_a_step_after_a_budget_cut_setup_still_gets_its_window(tmp_path: Path) -> None:
    # GIVEN a program whose setup makes more torch calls than the budget allows, then trains
    setup = "import torch\n\nfor _ in range(2000):\n    torch.zeros(4).add_(1)\n"
    script = _program(tmp_path, setup + TRAIN.format(n=8).split("import torch\n", 1)[1])
    out = tmp_path / "o"
    args = ["--skip", "1", "--warmup", "0", "--steps", "2", "--max-events", "3000"]
    # WHEN profiled
    assert main(["profile", "-o", str(out), "--no-analyze", *args, str(script)]) == 0
    # THEN the setup's cut recording gave way to the scheduled window, and no note speaks of the cut
    run = json.loads((out / SIDECAR_NAME).read_text())["run"]
    assert run["window"] == "steps"
    assert len(_steps(_events(out))) == 2
    assert not any("ended early" in n for n in _notes(out))
