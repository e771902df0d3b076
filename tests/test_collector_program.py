"""``stallscope profile`` follows what the program does: a program running its own torch.profiler makes
the session step aside, and an inference loop's steps come from its model's forward calls."""

from __future__ import annotations

import gzip
import json
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

FAST = ["--no-analyze", "--skip", "0", "--warmup", "0", "--steps", "2"]

OWN_PROFILER = """\
import torch
from torch.profiler import ProfilerActivity, profile

model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 8)
for _ in range(4):
    model(x).sum().backward()
    opt.step()
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(3):
        model(x).sum().backward()
        opt.step()
names = {e.key for e in prof.key_averages()}
print("OWN", "aten::addmm" in names, len(prof.events()) > 0)
"""

INFERENCE = """\
import torch

model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
x = torch.randn(2, 8)
with torch.no_grad():
    for _ in range(8):
        out = model(x)
        best = out.argmax().item()
"""


@pytest.fixture(autouse=True)
def no_leftover_session() -> Any:
    yield
    assert session.active() is None


def _run(tmp_path: Path, text: str, *args: str) -> Path:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(text))
    out = tmp_path / "o"
    assert main(["profile", "-o", str(out), *args, str(script)]) == 0
    return out


def test_a_program_with_its_own_profiler_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a training loop that runs torch.profiler itself after a few steps
    out = _run(tmp_path, OWN_PROFILER, "--no-analyze")  # its profiler starts before our window
    stdout, stderr = capsys.readouterr()
    # THEN the program's own profile is complete, stallscope says once that it stepped aside, and
    # its bundle has no trace (only the sidecar, with the note)
    assert "OWN True True" in stdout
    assert stderr.count("stepped aside") == 1
    assert bundle_trace(out) is None
    notes = json.loads((out / SIDECAR_NAME).read_text())["run"]["notes"]
    assert any("runs its own torch.profiler" in n for n in notes)


def test_what_was_recorded_before_the_programs_profiler_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a training loop that runs torch.profiler itself after 4 steps, profiled from its first step
    out = _run(tmp_path, OWN_PROFILER, *FAST[:-1], "10")  # a window of 10 steps: the program's comes first
    stdout, stderr = capsys.readouterr()
    # THEN the program's own profile is complete, and the steps recorded before it are the bundle's trace
    assert "OWN True True" in stdout
    (said,) = [line for line in stderr.splitlines() if "stepped aside" in line]
    assert "kept what it had recorded: steps 3-4;" in said, said  # optimizer steps: 1-2 are never recorded
    trace = bundle_trace(out)
    assert trace is not None
    names = {e.get("name") for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]}
    assert {"ProfilerStep#3", "ProfilerStep#4", "after step 4"} <= names and "ProfilerStep#5" not in names
    run = json.loads((out / SIDECAR_NAME).read_text())["run"]
    assert "no_trace" not in run and run["trace_events"] > 0
    # AND `stallscope analyze` reads it
    model = load(out, use_cache=False).models[0]
    assert model.event_count > 0 and len(model.steps) == 2


OWN_PROFILER_NO_STEPS = """\
import torch
from torch.profiler import ProfilerActivity, profile

x = torch.randn(16, 16)
for _ in range(20):
    x = torch.tanh(x @ x)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    y = torch.sigmoid(x)
names = {e.key for e in prof.key_averages()}
print("OWN", "aten::sigmoid" in names, "aten::tanh" in names)
"""


def test_a_run_without_steps_keeps_what_ran_before_the_programs_profiler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a program without steps (recorded from its first torch call) that then runs torch.profiler
    out = _run(tmp_path, OWN_PROFILER_NO_STEPS, "--no-analyze")
    stdout, stderr = capsys.readouterr()
    # THEN the program's profile holds only its own ops, and the bundle's trace those that ran before it
    assert "OWN True False" in stdout
    assert "kept what it had recorded: the run from its first torch call;" in stderr
    trace = bundle_trace(out)
    assert trace is not None
    names = [e.get("name") for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]]
    assert names.count("aten::tanh") == 20 and "aten::sigmoid" not in names


def test_a_bundle_without_a_trace_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the bundle of a program whose own profiler started before stallscope recorded anything
    out = _run(tmp_path, OWN_PROFILER, "--no-analyze")
    assert bundle_trace(out) is None
    capsys.readouterr()
    # WHEN analysed THEN one line says why it holds no trace
    assert main(["analyze", "--no-cache", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"stallscope: error: {out}: a stallscope bundle without a trace: the program ran its own "
        "torch.profiler before stallscope recorded anything: stallscope stepped aside (the program's own "
        "profile is its trace)"
    )


def test_inference_steps_come_from_the_models_forward_calls(tmp_path: Path) -> None:
    # GIVEN an inference loop with no optimizer and no stallscope.step(), WHEN profiled
    out = _run(tmp_path, INFERENCE, *FAST)
    run = json.loads((out / SIDECAR_NAME).read_text())["run"]
    # THEN each call of the root module starts a step, the last one ends with the run: 8 calls, 8 steps
    assert (run["step_source"], run["steps_seen"], run["window"]) == ("forward", 8, "steps")
    names = [s.name for s in load(out, use_cache=False).models[0].steps]
    assert names == ["ProfilerStep#2", "ProfilerStep#3"]
    # AND the inner modules (Linear, ReLU) never count as steps of their own
    assert json.loads((out / SIDECAR_NAME).read_text())["step_timing"]["count"] == 8


def test_stallscope_step_in_the_program_turns_forward_steps_off(tmp_path: Path) -> None:
    # GIVEN the same loop marking its steps by hand every 2 forward calls
    text = INFERENCE.replace("import torch\n", "import torch\nimport stallscope\n", 1)
    text = text.replace(
        "        best = out.argmax().item()\n",
        "        best = out.argmax().item()\n        if _ % 2:\n            stallscope.step()\n",
    )
    out = _run(tmp_path, text, *FAST)
    run = json.loads((out / SIDECAR_NAME).read_text())["run"]
    # THEN the steps are the explicit ones
    assert (run["step_source"], run["steps_seen"]) == ("explicit", 4)


LBFGS = """\
import torch

model = torch.nn.Linear(4, 1)
opt = torch.optim.LBFGS(model.parameters(), max_iter=5)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for _ in range(4):

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    opt.step(closure)
"""


def test_forward_calls_inside_an_optimizer_step_are_not_steps(tmp_path: Path) -> None:
    # GIVEN an LBFGS loop: the model is called several times inside each optimizer step
    out = _run(tmp_path, LBFGS, *FAST)
    run = json.loads((out / SIDECAR_NAME).read_text())["run"]
    # THEN the optimizer marks the steps: 4 of them
    assert (run["step_source"], run["steps_seen"]) == ("optimizer", 4)


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


def test_generate_calls_are_the_steps_of_a_generation_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an HF-style loop: 6 model.generate(...) calls, each calling the model 5 times
    out = _run(tmp_path, GENERATE, *FAST)
    run = json.loads((out / SIDECAR_NAME).read_text())["run"]
    # THEN each generate call is one step (6 calls, 6 steps), not each token's forward
    assert (run["step_source"], run["steps_seen"], run["window"]) == ("generate", 6, "steps")
    names = [s.name for s in load(out, use_cache=False).models[0].steps]
    assert names == ["ProfilerStep#2", "ProfilerStep#3"]
    # AND the program's generate still works
    assert "GENERATED 7" in capsys.readouterr().out


def test_forward_steps_unwrap_generate_when_removed() -> None:
    from stallscope.collector.program import ForwardSteps

    namespace: dict[str, Any] = {}
    exec(GENERATE.split("model = TinyLM()")[0], namespace)
    model, prompt = namespace["TinyLM"](), torch.tensor([[1, 2]])
    from torch.nn.modules import module as nn_module

    marked: list[int] = []
    hooks = len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks)
    steps = ForwardSteps(lambda: marked.append(1))
    steps.install()
    try:
        for _ in range(3):
            model.generate(prompt, max_new_tokens=4)
        model(prompt)  # a forward outside generate, once generate marks the steps: no step
        # once generate calls mark the steps, no module hook is left to cost every module call
        assert (len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks)) == hooks
    finally:
        steps.remove()
    # each later generate call starts a step (the session ends the last one with the run)
    assert (steps.generate, len(marked)) == (True, 2)
    assert "generate" not in vars(model)  # the instance wrapper is gone


def test_each_rank_of_a_distributed_launch_writes_its_own_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stallscope.collector.bundle import output_for

    # GIVEN two ranks of a torchrun job (RANK / WORLD_SIZE in the environment) profiled with one -o
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        _run(tmp_path, INFERENCE, *FAST)
    # THEN each wrote its bundle inside it, as rank<N>: one folder of ranks
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["rank0", "rank1"]
    assert all(bundle_trace(tmp_path / "o" / f"rank{r}") is not None for r in (0, 1))
    # AND without -o the ranks share a timestamped folder; a world of one is no job
    auto = output_for(None, "train", {"RANK": "3", "WORLD_SIZE": "4"})
    assert auto.name == "rank3" and auto.parent.name.startswith("train-")
    assert output_for("out", "train", {"RANK": "0", "WORLD_SIZE": "1"}) == Path("out")
