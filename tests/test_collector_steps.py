"""What a step is in a real program's loop, and one numbering of the profiled steps: an evaluation before
and between training iterations, a rollout loop, a manual-SGD loop and a generation loop. Each test reads
the trace itself: which ops each ``ProfilerStep`` holds, and its number against stderr and the sidecar."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _programs import TINY_LM

torch = pytest.importorskip("torch")

from stallscope.analyzer.load.loader import load  # noqa: E402
from stallscope.collector import session  # noqa: E402
from stallscope.collector.bundle import SIDECAR_NAME, bundle_trace  # noqa: E402
from stallscope.commands import main  # noqa: E402

WINDOW = ["--no-analyze", "--skip", "1", "--warmup", "0", "--steps", "3"]


@pytest.fixture(autouse=True)
def no_leftover_session() -> Any:
    yield
    assert session.active() is None


def _run(tmp_path: Path, text: str, *args: str) -> tuple[Path, dict[str, Any]]:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(text))
    out = tmp_path / "o"
    assert main(["profile", "-o", str(out), *args, str(script)]) == 0
    return out, json.loads((out / SIDECAR_NAME).read_text())["run"]


def _steps(out: Path, tail: str | None = None) -> dict[int, dict[str, int]]:
    """Each ProfilerStep of the trace (by number; the span named ``tail`` as step 0): how many events of
    each name it holds (on its thread)."""
    path = bundle_trace(out)
    assert path is not None
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = {}
    for e in events:
        m = re.fullmatch(r"ProfilerStep#(\d+)", e["name"])
        if m or e["name"] == tail:
            steps[int(m.group(1)) if m else 0] = (e["ts"], e["ts"] + e["dur"], e["tid"])
    held: dict[int, dict[str, int]] = {n: {} for n in steps}
    for e in events:
        for n, (start, end, tid) in steps.items():
            if e["tid"] == tid and start <= e["ts"] < end:
                held[n][e["name"]] = held[n].get(e["name"], 0) + 1
    return held


def _count(held: dict[str, int], prefix: str) -> int:
    return sum(c for name, c in held.items() if name.startswith(prefix))


def _said(stderr: str) -> list[int]:
    """The steps stderr says were profiled ("profiled steps A-B" / "profiled step A")."""
    m = re.search(r"profiled steps? (\d+)(?:-(\d+))?", stderr)
    assert m is not None, stderr
    return [int(m.group(1)), int(m.group(2) or m.group(1))]


MODEL = """\
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
x, y = torch.randn(4, 8), torch.randn(4, 1)


def evaluate():
    model.eval()
    with torch.no_grad():
        for _ in range(4):
            model(x)
    model.train()
"""

EVAL_TRAIN = (
    MODEL
    + """
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for it in range(9):
    if it % 3 == 0:
        evaluate()  # at iteration 0 too, before the first optimizer step (as nanoGPT does)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
)


def test_evaluation_forwards_are_no_steps_once_the_program_has_an_optimizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a training loop that evaluates (4 no_grad forwards) at iteration 0 and every 3 iterations
    out, run = _run(tmp_path, EVAL_TRAIN, *WINDOW)
    stderr = capsys.readouterr().err
    # THEN the steps are its 9 training iterations
    assert (run["step_source"], run["steps_seen"], run["window"]) == ("optimizer", 9, "steps")
    held = _steps(out)
    # AND the window holds whole iterations, one optimizer step each; the one that evaluates (iteration
    # 4, it == 3) holds its 4 evaluation forwards too (2 linears each, beside its training forward's 2)
    assert sorted(held) == [4, 5, 6]
    assert [_count(held[n], "Optimizer.step#") for n in (4, 5, 6)] == [1, 1, 1]
    assert [held[n].get("aten::linear", 0) for n in (4, 5, 6)] == [10, 2, 2]
    # AND stderr, the sidecar and the trace number the steps alike
    assert _said(stderr) == run["profiled_steps"] == [4, 6]


ROLLOUT = """\
import torch

torch.manual_seed(0)
policy = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
opt = torch.optim.Adam(policy.parameters(), lr=0.01)
for episode in range(8):
    logps = []
    state = torch.randn(4)
    for t in range(6):  # one policy forward per move of the episode
        dist = torch.distributions.Categorical(logits=policy(state))
        action = dist.sample()
        logps.append(dist.log_prob(action))
        state = state + 0.1 * action
    loss = -torch.stack(logps).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_step_of_a_rollout_loop_is_an_episode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a REINFORCE-like loop: 6 policy forwards per episode, then one optimizer step
    out, run = _run(tmp_path, ROLLOUT, *WINDOW)
    stderr = capsys.readouterr().err
    # THEN a step is an episode: 8 of them, not 48 policy forwards
    assert (run["step_source"], run["steps_seen"]) == ("optimizer", 8)
    held = _steps(out)
    assert sorted(held) == [4, 5, 6]
    # AND each profiled step holds one episode: its 6 forwards (2 linears each) and one optimizer step
    assert [held[n].get("aten::linear", 0) for n in (4, 5, 6)] == [12, 12, 12]
    assert [_count(held[n], "Optimizer.step#") for n in (4, 5, 6)] == [1, 1, 1]
    assert _said(stderr) == run["profiled_steps"] == [4, 6]


MANUAL_SGD = (
    MODEL
    + """
for it in range(8):
    if it % 3 == 0:
        evaluate()
    loss = torch.nn.functional.mse_loss(model(x), y)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.data -= 0.01 * p.grad
"""
)


def test_backward_passes_are_the_steps_of_a_loop_without_an_optimizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN manual SGD (no optimizer) with evaluation forwards before and between iterations
    out, run = _run(tmp_path, MANUAL_SGD, *WINDOW)
    stderr = capsys.readouterr().err
    # THEN each backward pass ends a step: 8 iterations, 8 steps; the evaluation forwards are none
    assert (run["step_source"], run["steps_seen"], run["window"]) == ("backward", 8, "steps")
    held = _steps(out)
    # (the first boundary is the first backward's end; --skip 1 skips step 2; steps 3-5 are recorded)
    assert sorted(held) == [3, 4, 5]
    # AND each step holds one backward (one AddmmBackward0 per linear) and one update (4 parameters);
    # step 4 (it == 3) holds the evaluation as well
    assert [_count(held[n], "autograd::engine::evaluate_function: AddmmBackward0") for n in (3, 4, 5)] == [
        2,
        2,
        2,
    ]
    assert [held[n].get("aten::sub_", 0) for n in (3, 4, 5)] == [4, 4, 4]
    assert [held[n].get("aten::linear", 0) for n in (3, 4, 5)] == [2, 10, 2]
    assert _said(stderr) == run["profiled_steps"] == [3, 5]


GENERATE = (
    TINY_LM
    + """

model = TinyLM()
prompt = torch.tensor([[1, 2]])
for _ in range(6):
    out = model.generate(prompt, max_new_tokens=5)
print("GENERATED", out.shape[1])
"""
)


def test_a_generation_loop_that_ends_inside_the_window_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN 6 model.generate(...) calls (5 tokens each), profiled asking for 8 steps
    out, run = _run(tmp_path, GENERATE, "--no-analyze", "--skip", "0", "--warmup", "0", "--steps", "8")
    stderr = capsys.readouterr().err
    # THEN each generate call is one step: 6 of them
    assert (run["step_source"], run["steps_seen"]) == ("generate", 6)
    held = _steps(out)
    # AND each profiled step holds one whole call (5 forwards); the last call's step ends with the run
    assert sorted(held) == [2, 3, 4, 5, 6]
    assert [held[n].get("aten::linear", 0) for n in (2, 3, 4, 5, 6)] == [5, 5, 5, 5, 5]
    # AND the window's shortfall is said on stderr and in the sidecar, with the steps it holds
    assert run["profiled_steps"] == [2, 6]
    (note,) = [n for n in run["notes"] if "inside the window" in n]
    assert "profiled steps 2-6, 5 of the 8 asked" in note and "'after step" not in note
    assert note in stderr
    # AND the analysis counts the 5 steps
    steps = load(out, use_cache=False).models[0].steps
    assert [s.name for s in steps] == [f"ProfilerStep#{n}" for n in range(2, 7)]


def test_a_run_too_short_for_the_window_says_it_profiled_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the same loop with a window that starts after its last call (--skip 5)
    out, run = _run(tmp_path, GENERATE, "--no-analyze", "--skip", "5", "--warmup", "2")
    stderr = capsys.readouterr().err
    # THEN no trace, and the sidecar and stderr say why
    assert bundle_trace(out) is None and run["profiled_steps"] is None
    assert "the run made 6 step(s), too few to reach the window" in stderr
    assert [n for n in run["notes"] if "too few to reach the window" in n] == [
        "the run made 6 step(s), too few to reach the window (the first step, then --skip 5 and --warmup 2): "
        "nothing was profiled; lower --skip/--warmup or run more steps"
    ]


def test_an_optimizer_older_than_the_session_drops_the_steps_forwards_counted(tmp_path: Path) -> None:
    from stallscope.collector.options import ProfileOptions

    # GIVEN a model and optimizer made before the session (the session cannot see them made), then
    # 5 evaluation forwards and 6 training iterations under the session
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    trace = tmp_path / "o" / "run.pt.trace.json.gz"
    s = session.Session(ProfileOptions(skip=1, warmup=0, steps=2), trace)
    s.start()
    try:
        with torch.no_grad():
            for _ in range(5):  # forward steps: enough for a whole window of them
                model(x)
        for _ in range(6):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        capture = s.stop()
    # THEN the first optimizer step starts the count again: 6 steps; the 5 the forwards marked (the
    # first training forward's among them) and the one of the first backward pass are dropped, and the
    # window they had written with them
    assert (capture.step_source, capture.steps_seen, capture.step_timing["count"]) == ("optimizer", 6, 6)
    assert (
        "the steps are optimizer steps: the step(s) counted before the first (5 marked by forward calls "
        "and 1 marked by backward passes) are not counted"
    ) in capture.notes
    held = _steps(trace.parent)
    assert sorted(held) == [4, 5] and capture.profiled_steps == [4, 5]
    assert [_count(held[n], "Optimizer.step#") for n in (4, 5)] == [1, 1]


WARM_THEN_SGD = (
    MODEL
    + """
with torch.no_grad():
    for _ in range(6):  # inference first: its forward calls look like the steps of a loop
        model(x)
for it in range(6):
    loss = torch.nn.functional.mse_loss(model(x), y)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.data -= 0.01 * p.grad
"""
)


def test_backward_passes_take_over_from_forward_calls_and_their_window_is_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN 6 inference forwards (enough for a window of forward steps), then 6 manual-SGD iterations
    out, run = _run(tmp_path, WARM_THEN_SGD, "--no-analyze", "--skip", "0", "--warmup", "0", "--steps", "2")
    stderr = capsys.readouterr().err
    # THEN the steps are the backward passes: the window of forward steps was written, said, and dropped
    assert (run["step_source"], run["steps_seen"]) == ("backward", 6)
    assert "the window written (steps 2-3, marked by forward calls) is dropped" in stderr
    assert stderr.count("profiled steps 2-3 of the run") == 2
    held = _steps(out)
    assert sorted(held) == [2, 3] and run["profiled_steps"] == [2, 3]
    assert [_count(held[n], "autograd::engine::evaluate_function: AddmmBackward0") for n in (2, 3)] == [2, 2]


@pytest.mark.parametrize("chunk", [1, 5, 16, 1 << 20])
def test_the_end_of_the_run_is_renamed_whatever_the_read_size(tmp_path: Path, chunk: int) -> None:
    names = ["ProfilerStep#1", "ProfilerStep#11", "ProfilerStep#110", "ProfilerStep#11", "x"]
    trace = tmp_path / "t.pt.trace.json.gz"
    with gzip.open(trace, "wt") as f:
        json.dump({"traceEvents": [{"name": n} for n in names]}, f)
    session._rename_step(trace, 11, "after step 10", chunk=chunk)
    with gzip.open(trace, "rt") as f:
        got = [e["name"] for e in json.load(f)["traceEvents"]]
    assert got == ["ProfilerStep#1", "after step 10", "ProfilerStep#110", "after step 10", "x"]
    assert [p.name for p in tmp_path.iterdir()] == [trace.name]


CHECKPOINTED_SGD = """\
import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
head = torch.nn.Linear(8, 1)
x, y = torch.randn(4, 8), torch.randn(4, 1)
for it in range(5):
    # reentrant checkpointing: the block's backward runs torch.autograd.backward inside the outer one
    out = head(checkpoint(block, x.requires_grad_(), use_reentrant=True))
    loss = torch.nn.functional.mse_loss(out, y)
    loss.backward()
    with torch.no_grad():
        for p in [*block.parameters(), *head.parameters()]:
            p -= 0.01 * p.grad
            p.grad = None
"""


def test_a_backward_inside_a_backward_is_no_step_of_its_own(tmp_path: Path) -> None:
    # GIVEN manual SGD through a reentrant checkpoint (a backward call inside each loss.backward()),
    # profiled in a process of its own: torch (2.13) records every event twice in a later profiler of a
    # process that profiled reentrant checkpointing this way
    script = tmp_path / "prog.py"
    script.write_text(CHECKPOINTED_SGD)
    out = tmp_path / "o"
    args = ["profile", "-o", str(out), "--no-analyze", "--skip", "0", "--warmup", "0", "--steps", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "stallscope", *args, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    run = json.loads((out / SIDECAR_NAME).read_text())["run"]
    # THEN one step per iteration: 5, not 10
    assert (run["step_source"], run["steps_seen"]) == ("backward", 5)
    assert sorted(_steps(out)) == [2, 3]


def test_backward_passes_take_over_while_the_forward_window_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the same program with a window longer than its forward steps: it is recording at the first
    # backward pass
    out, run = _run(tmp_path, WARM_THEN_SGD, "--no-analyze", "--skip", "0", "--warmup", "0", "--steps", "8")
    stderr = capsys.readouterr().err
    # THEN that recording is dropped unsaid (nothing was written), and the backward steps' window is the
    # trace: steps 2-6, 5 of the 8 asked, the run ending inside it
    assert (run["step_source"], run["steps_seen"]) == ("backward", 6)
    assert "is dropped" not in stderr
    assert run["profiled_steps"] == [2, 6] and sorted(_steps(out)) == [2, 3, 4, 5, 6]
    assert any("profiled steps 2-6, 5 of the 8 asked" in n for n in run["notes"])


def test_duration_windows_number_their_steps_as_the_run(tmp_path: Path) -> None:
    # GIVEN a 6-iteration training loop profiled for its first 60 s (all of it)
    out, run = _run(tmp_path, EVAL_TRAIN.replace("range(9)", "range(6)"), "--no-analyze", "--duration", "60")
    held = _steps(out)
    # THEN ProfilerStep#N holds the run's N-th optimizer step: the first step's transition waits for the
    # second (#1 holds both), then #3-#6 one each, and #7 the end of the run
    assert run["window"] == "duration" and sorted(held) == [1, 3, 4, 5, 6, 7]
    assert [_count(held[n], "Optimizer.step#") for n in (1, 3, 4, 5, 6, 7)] == [2, 1, 1, 1, 1, 0]
