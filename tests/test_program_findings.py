"""Right findings on CPU-only runs of real-shaped programs: a would-be sync counts only when its tensor
would live on the accelerator, copies take their direction from their arguments, only calls inside the
profiled steps are loop findings, decode loops get decode advice, and the input advice knows the
program's DataLoader."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _programs import TINY_LM, line_of

torch = pytest.importorskip("torch")

from stallscope.analyzer.analysis import Analysis, analyze  # noqa: E402
from stallscope.analyzer.document.analysis import to_json  # noqa: E402
from stallscope.analyzer.findings import advice  # noqa: E402
from stallscope.analyzer.findings.latent import UNMEASURED  # noqa: E402
from stallscope.analyzer.load.loader import load  # noqa: E402
from stallscope.analyzer.passes.syncs import SyncKind  # noqa: E402
from stallscope.collector import session  # noqa: E402
from stallscope.collector.bundle import SIDECAR_NAME  # noqa: E402
from stallscope.commands import main  # noqa: E402
from stallscope.dashboard import report  # noqa: E402
from stallscope.dashboard.report import findings_doc  # noqa: E402
from stallscope.render.summary import render  # noqa: E402

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
WINDOW = ["--no-analyze", "--skip", "1", "--warmup", "0", "--steps", "3"]

TRAIN = """\
import torch
from torch.utils.data import DataLoader, Dataset

device = "cuda" if torch.cuda.is_available() else "cpu"


class Fake(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        label = torch.randint(0, 10, (1,)).item()  # L12: host-side data, not a sync
        image = torch.randn(8)
        _ = image.numpy()  # L14: host-side data
        return image, label


model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
model.to(device)  # L19: setup, host to device
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Fake(), batch_size=8, num_workers={workers})
for x, y in loader:
    x = x.to(device, non_blocking=True)  # L23: host to device
    y = y.to(device)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # L28
    opt.step()
    print(loss.item())  # L30: would sync on a GPU, every step
print(f"{{loss:.3f}}")  # L31: once, after the loop
"""

DECODE = """\
import torch
import stallscope

torch.manual_seed(0)
emb = torch.nn.Embedding(16, 16)
head = torch.nn.Linear(16, 16)
EOS = 15
with torch.no_grad():
    for prompt in range(6):
        tok = torch.tensor([prompt])
        for _ in range(12):
            logits = head(emb(tok))
            tok = logits.argmax(-1)
            if tok.item() == EOS:  # L14: the token decides when to stop
                break
        stallscope.step()
"""

GENERATE = (
    TINY_LM
    + """

EOS = 15

torch.manual_seed(0)
model = TinyLM()
for prompt in range(6):
    out = model.generate(torch.tensor([[prompt]]), max_new_tokens=5)
    if out[0, -1].item() == EOS:  # once per generate call, decides what comes next
        break
"""
)


@pytest.fixture(autouse=True)
def no_leftover_session() -> Any:
    yield
    assert session.active() is None


def _profile(tmp_path: Path, text: str, name: str = "prog.py") -> tuple[Analysis, dict[str, Any]]:
    script = tmp_path / name
    script.write_text(textwrap.dedent(text))
    out = tmp_path / "bundle"
    assert main(["profile", "-o", str(out), *WINDOW, str(script)]) == 0
    side: dict[str, Any] = json.loads((out / SIDECAR_NAME).read_text())
    return analyze(load(out, use_cache=False)), side


def _would(a: Analysis) -> dict[int, str]:
    return {f.call_site.line: f.rule for f in a.findings if f.rule.startswith("would_sync") and f.call_site}


def test_cpu_training_loop_reports_only_device_bound_reads_in_the_loop(tmp_path: Path) -> None:
    # GIVEN a CPU-only training loop: data-side .item()/.numpy(), .to(device) moves, clip_grad_norm_,
    # loss.item() every step and one formatted print after the loop
    a, side = _profile(tmp_path, TRAIN.format(workers=0))
    # THEN the only would-be sync is the loss read in the loop
    assert _would(a) == {30: "would_sync_scalar_read"}
    (loss_read,) = [f for f in a.findings if f.rule == "would_sync_scalar_read"]
    assert loss_read.count == 3  # once in each of the 3 profiled steps
    # AND the sidecar says which calls' tensors would be on the device
    by_line = {(r["line"], r["op"]): r["on_device"] for r in side["sync_sites"]}
    assert by_line[(30, "Tensor.item")] is True
    assert by_line[(12, "Tensor.item")] is False
    assert by_line[(14, "Tensor.numpy")] is False
    assert not any(on for (line, op), on in by_line.items() if op == "Tensor.to")
    assert side["run"]["step_source"] == "optimizer"
    assert side["run"]["dataloaders"][0]["num_workers"] == 0


def test_decode_loop_gets_decode_advice(tmp_path: Path) -> None:
    # GIVEN a greedy decode loop under no_grad whose per-token .item() decides stopping
    a, side = _profile(tmp_path, DECODE, "decode.py")
    # THEN it is one decode finding at that line (the token came from the model: device-bound)
    (f,) = [f for f in a.findings if f.rule.startswith("would_sync")]
    assert (f.rule, f.call_site.line if f.call_site else None) == ("would_sync_decode", 14)
    assert f.advice == advice.DECODE
    assert f.count >= 3
    assert side["run"]["step_source"] == "explicit"
    # AND every view says its cost cannot be measured here, not that it is free
    (line,) = [r for r in render(a, 5, 0).splitlines() if f.title in r]
    assert line.endswith(f"({UNMEASURED})") and "costs" not in line
    (row,) = [r for r in findings_doc(to_json(a)) if r["rule"] == "would_sync_decode"]
    assert (row["measured"], row["cost"]) == (False, UNMEASURED)
    assert UNMEASURED in report.render(a) and "costs <b>0.0 us</b>" not in report.render(a)


def test_generate_loop_gets_decode_advice(tmp_path: Path) -> None:
    # GIVEN an HF-style loop whose steps are found from generate calls, reading one token back per call
    a, side = _profile(tmp_path, GENERATE, "gen.py")
    assert side["run"]["step_source"] == "generate"
    # THEN that read is a decode finding, not training advice
    (f,) = [f for f in a.findings if f.rule.startswith("would_sync")]
    line = line_of(GENERATE, "out[0, -1].item()")
    assert (f.rule, f.call_site.line if f.call_site else None) == ("would_sync_decode", line)
    assert f.advice == advice.DECODE


def test_dataloader_workers_are_recorded(tmp_path: Path) -> None:
    _, side = _profile(tmp_path, TRAIN.format(workers=2))
    (loader,) = side["run"]["dataloaders"]
    assert (loader["num_workers"], loader["batch_size"], loader["pin_memory"]) == (2, 8, False)


def test_input_advice_knows_the_workers() -> None:
    loaders = [{"num_workers": 2, "batch_size": 8, "pin_memory": False, "prefetch_factor": 2}]
    text = advice.input_bound({"dataloaders": loaders})
    assert "already has num_workers=2" in text
    assert "`num_workers=4`" in text and "`prefetch_factor=4`" in text and "pin_memory=True" in text
    assert "`__getitem__`" in text
    assert "num_workers=N" in advice.input_bound({"dataloaders": [{"num_workers": 0}]})
    assert "num_workers=N" in advice.input_bound({})


def _sites(side: dict[str, Any], line: int) -> list[dict[str, Any]]:
    return [r for r in side["sync_sites"] if r["line"] == line]


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_from_workers_are_host_tensors(tmp_path: Path, workers: int) -> None:
    # GIVEN the training loop fed by a DataLoader with and without worker processes
    a, side = _profile(tmp_path, TRAIN.format(workers=workers))
    assert side["run"]["dataloaders"][0]["num_workers"] == workers
    # THEN the batch's `.to(device)` (a copy to the device) is no copy to the host: the batch that
    # came back from a worker is host data, as it is without workers
    moves = [r for r in side["sync_sites"] if r["op"] == "Tensor.to" and r["line"] in (23, 24)]
    assert moves and not any(r["on_device"] for r in moves)
    # AND the only would-be sync is still the loss read, with training advice
    assert _would(a) == {30: "would_sync_scalar_read"}
    (f,) = [f for f in a.findings if f.rule == "would_sync_scalar_read"]
    assert f.advice == advice.SYNC[SyncKind.SCALAR_READ] and "loss.detach()" in f.advice


MANUAL_SGD = """\
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
ids = torch.randint(0, 16, (4, 6))
lr = 0.1
for step in range(8):
    model.zero_grad()
    out = model(ids)
    loss = torch.nn.functional.cross_entropy(out.view(-1, 16), ids.view(-1))
    loss.backward()
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)  # no optimizer: the word language model's update
    total = loss.item()  # LOSS READ
"""


def test_manual_sgd_loop_gets_training_advice_not_decode(tmp_path: Path) -> None:
    # GIVEN a training loop with no optimizer (parameters updated by hand) reading its loss every step
    a, side = _profile(tmp_path, MANUAL_SGD, "lm.py")
    assert side["run"]["step_source"] != "optimizer"
    # THEN the read is a training finding with loss-accumulation advice, not decode advice
    line = line_of(MANUAL_SGD, "LOSS READ")
    assert _would(a) == {line: "would_sync_scalar_read"}
    (f,) = [f for f in a.findings if f.rule.startswith("would_sync")]
    assert "total += loss.detach()" in f.advice and "EOS" not in f.advice and "decode" not in f.title


SAMPLE = (
    TINY_LM
    + """

torch.manual_seed(0)
model = TinyLM()
for k in range(6):
    y = model.generate(torch.tensor([[k]]), max_new_tokens=5)
    print(y[0].tolist())  # ONE SAMPLE
"""
)


def test_sample_readback_is_needed_not_loss_advice(tmp_path: Path) -> None:
    # GIVEN nanoGPT's sample.py shape: one `.tolist()` of each generated sample
    a, _ = _profile(tmp_path, SAMPLE, "sample.py")
    line = line_of(SAMPLE, "ONE SAMPLE")
    # THEN it is the result read back once per call, low severity, with no loss advice
    assert _would(a) == {line: "would_sync_output_readback"}
    (f,) = [f for f in a.findings if f.rule.startswith("would_sync")]
    assert f.severity.value == "low" and f.advice == advice.OUTPUT_READBACK
    assert "loss" not in f.advice and "once per call" in f.advice


REINFORCE = """\
import torch
from torch.distributions import Categorical

torch.manual_seed(0)
policy = torch.nn.Linear(4, 3)
opt = torch.optim.Adam(policy.parameters(), lr=0.01)
for episode in range(8):
    log_probs = []
    all_logits = policy(torch.randn(5, 4))  # the episode's observations, in one forward call
    for t in range(5):  # the episode: one action per environment step
        dist = Categorical(logits=all_logits[t])  # DIST
        action = dist.sample()
        log_probs.append(dist.log_prob(action))  # LOGPROB
        env_action = action.item()  # ACTION
    loss = -torch.stack(log_probs).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_distribution_checks_get_validate_args_advice(tmp_path: Path) -> None:
    # GIVEN REINFORCE's policy step: a Categorical built from the policy's logits every step
    a, side = _profile(tmp_path, REINFORCE, "reinforce.py")
    dist = line_of(REINFORCE, "# DIST")
    # THEN the argument check's read is attributed to the user's line, made inside torch.distributions
    inside = [r for r in _sites(side, dist) if r["on_device"]]
    assert inside and all(r["library"].startswith("torch.distributions") for r in inside)
    assert {r["library_call"] for r in inside} == {"torch.distributions.categorical.Categorical.__init__"}
    # AND its finding names the library call and says `validate_args=False`, not loss accumulation
    found = [f for f in a.findings if f.rule == "would_sync_distribution_checks" and f.call_site]
    assert found
    assert dist in {f.call_site.line for f in found if f.call_site}
    for f in found:
        assert "`Categorical(..., validate_args=False)`" in f.advice
        called = re.search(r"inside `([^`]+)`", f.title)
        assert called and called[1].startswith("torch.distributions.Categorical")
        assert f.advice == advice.distributions_validate(called[1]) and f"`{called[1]}`" in f.advice
        assert "torch.distributions" in f.title and "loss.detach()" not in f.advice
    (init,) = [f for f in found if f.call_site and f.call_site.line == dist]
    assert "`torch.distributions.Categorical`" in init.title
    # AND the action read back for the environment, 5x a step, is an inner loop's read, not a loss
    action = line_of(REINFORCE, "# ACTION")
    assert _would(a)[action] == "would_sync_scalar_read"
    (read,) = [f for f in a.findings if f.call_site and f.call_site.line == action]
    assert read.advice == advice.INNER_LOOP_READS and "loss.detach()" not in read.advice
    assert read.count == 15  # 5 a step in each of the 3 profiled steps


LBFGS = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
x, y = torch.randn(32, 8), torch.randn(32, 1)
opt = torch.optim.LBFGS(model.parameters(), max_iter=3)


def closure():
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for step in range(8):
    opt.step(closure)  # STEP
"""


def test_lbfgs_internal_reads_are_blamed_on_the_library_call(tmp_path: Path) -> None:
    # GIVEN an LBFGS loop: the optimizer reads the loss and gradient norms itself, inside step(closure)
    a, side = _profile(tmp_path, LBFGS, "lbfgs.py")
    line = line_of(LBFGS, "# STEP")
    # THEN the reads sit at the user's step line, made inside torch.optim's LBFGS.step
    inside = [r for r in _sites(side, line) if r["on_device"]]
    assert inside and {r["library_call"] for r in inside} == {"torch.optim.lbfgs.LBFGS.step"}
    assert all(r["library"].startswith("torch.optim") for r in inside)
    # AND every would-be sync is an optimizer-internal finding there, whose advice fits LBFGS
    found = [f for f in a.findings if f.rule.startswith("would_sync")]
    assert found and {(f.rule, f.call_site.line if f.call_site else None) for f in found} == {
        ("would_sync_in_optimizer", line)
    }
    for f in found:
        assert "`torch.optim.LBFGS.step`" in f.title and "`torch.optim.LBFGS.step`" in f.advice
        assert "max_iter" in f.advice and "loss.detach()" not in f.advice


BRANCH = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 8), torch.randn(16, 1)
for step in range(8):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if loss > 100:  # BRANCH
        break
"""


def test_a_branch_on_a_tensor_gets_branch_advice(tmp_path: Path) -> None:
    # GIVEN a training loop that branches on its loss every step (`if loss > 100:`)
    a, _ = _profile(tmp_path, BRANCH, "branch.py")
    line = line_of(BRANCH, "# BRANCH")
    # THEN it is a scalar read whose advice is about deciding on the device, not accumulating a loss
    assert _would(a) == {line: "would_sync_scalar_read"}
    (f,) = [f for f in a.findings if f.rule.startswith("would_sync")]
    assert f.advice == advice.scalar_read("Tensor.__bool__") and "torch.where" in f.advice
    assert advice.scalar_read("Tensor.item") == advice.SYNC[SyncKind.SCALAR_READ]


def test_diff_of_adding_workers_shows_no_new_copy_to_the_host(tmp_path: Path) -> None:
    # GIVEN the training loop profiled with 0 and with 2 DataLoader workers
    script, bundles = tmp_path / "train.py", []
    for workers in (0, 2):
        script.write_text(TRAIN.format(workers=workers))  # the same file: the same call sites
        bundles.append(str(tmp_path / f"w{workers}"))
        assert main(["profile", "-o", bundles[-1], *WINDOW, str(script)]) == 0
    out = tmp_path / "diff.json"
    assert main(["diff", *bundles, "--json", str(out), "-q", "--no-cache"]) == 0
    d = json.loads(out.read_text())
    # THEN adding workers made no would-be sync: the same loss read on both sides, no copy to the host
    assert d["would_sync_count"]["before"] == d["would_sync_count"]["after"] == 3
    would = [r for r in d["findings"] if "block the host" in r["detail"] or "would" in r["detail"]]
    assert not [r for r in would if "to_host" in r["detail"] or r["status"] in ("new", "gone")]
