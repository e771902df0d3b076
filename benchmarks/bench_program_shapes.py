"""The cost of ``stallscope profile`` on each shape of program it must get right, against the bare run:
an evaluation before and between training iterations, a rollout loop (many policy forwards, one optimizer
step per episode), a DataLoader with two workers, a manual-SGD loop (no optimizer), a generate loop (no
optimizer, one step per call) and an LBFGS closure. Each program runs bare and under
``stallscope profile --no-analyze`` (default window and budget), each in a fresh process; the table gives
wall time and peak RSS of both, their ratio and difference, the steps the trace holds and its events.

    python benchmarks/bench_program_shapes.py [--scale 1.0] [--only NAME]

Prints a Markdown table for docs/performance.md. CPU only (the programs pick CUDA when it is there).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_HEAD = """\
import sys
import torch
torch.manual_seed(0)
S = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
dev = "cuda" if torch.cuda.is_available() else "cpu"
"""

PROGRAMS: dict[str, str] = {
    "eval before and between training": _HEAD
    + """
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(256, 256, device=dev), torch.randint(0, 10, (256,), device=dev)
for it in range(int(40 * S)):
    if it % 10 == 0:
        with torch.no_grad():
            for _ in range(10):
                val = torch.nn.functional.cross_entropy(model(x), y).item()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    "rollout loop (REINFORCE-like)": _HEAD
    + """
policy = torch.nn.Sequential(torch.nn.Linear(4, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2)).to(dev)
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
for episode in range(int(30 * S)):
    logps = []
    state = torch.randn(4, device=dev)
    for t in range(100):
        dist = torch.distributions.Categorical(logits=policy(state))
        action = dist.sample()
        logps.append(dist.log_prob(action))
        state = torch.randn(4, device=dev) + action.item()
    loss = -torch.stack(logps).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    "DataLoader with 2 workers": _HEAD
    + """
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
if __name__ == "__main__":
    for epoch in range(max(1, int(2 * S))):
        for xb, yb in DataLoader(data, batch_size=64, num_workers=2):
            xb, yb = xb.to(dev), yb.to(dev)
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
""",
    "manual SGD (no optimizer)": _HEAD
    + """
model = torch.nn.Sequential(torch.nn.Embedding(1000, 128), torch.nn.Linear(128, 1000)).to(dev)
ids = torch.randint(0, 1000, (32, 35), device=dev)
for step in range(int(40 * S)):
    model.zero_grad()
    out = model(ids)
    loss = torch.nn.functional.cross_entropy(out.view(-1, 1000), ids.view(-1))
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-0.1)
    total = loss.item()
""",
    "generate loop (no optimizer)": _HEAD
    + """
class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(256, 128)
        self.out = torch.nn.Linear(128, 256)

    def forward(self, idx):
        return self.out(self.emb(idx))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens):
        for _ in range(max_new_tokens):
            nxt = self(idx)[:, -1, :].argmax(-1, keepdim=True)
            idx = torch.cat([idx, nxt], dim=1)
        return idx

model = TinyLM().to(dev)
for k in range(int(10 * S)):
    y = model.generate(torch.tensor([[k]], device=dev), max_new_tokens=100)
    print(y[0].tolist()[:4])
""",
    "LBFGS closure": _HEAD
    + """
model = torch.nn.LSTMCell(1, 32).to(dev)
head = torch.nn.Linear(32, 1).to(dev)
params = list(model.parameters()) + list(head.parameters())
opt = torch.optim.LBFGS(params, lr=0.5, max_iter=5)
x = torch.sin(torch.linspace(0, 20, 200, device=dev)).view(-1, 1)
for step in range(int(8 * S)):
    def closure():
        opt.zero_grad()
        h = c = torch.zeros(1, 32, device=dev)
        outs = []
        for t in range(len(x) - 1):
            h, c = model(x[t : t + 1], (h, c))
            outs.append(head(h))
        loss = torch.nn.functional.mse_loss(torch.cat(outs), x[1:])
        loss.backward()
        return loss
    opt.step(closure)
""",
}


def measure(cmd: list[str], cwd: str) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, exit code) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024.0, os.waitstatus_to_exitcode(status)


def trace_facts(bundle: Path) -> tuple[int, int]:
    """(ProfilerStep spans, events) of the bundle's trace."""
    traces = sorted(bundle.glob("*.json.gz"))
    if not traces:
        return 0, 0
    with gzip.open(traces[0], "rt") as f:
        events = json.load(f)["traceEvents"]
    steps = sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    return steps, len(events)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="more (or fewer) iterations of every loop")
    ap.add_argument("--only", help="the programs whose name contains this")
    args = ap.parse_args()
    print(
        "| program | bare s | profiled s | ratio | bare peak MB | profiled peak MB | + MB | steps in trace | events |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, text in PROGRAMS.items():
        if args.only and args.only not in name:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "prog.py"
            script.write_text(text)
            bare = measure([sys.executable, str(script), str(args.scale)], tmp)
            out = Path(tmp) / "bundle"
            cmd = [sys.executable, "-m", "stallscope", "profile", "--no-analyze", "-o", str(out)]
            prof = measure([*cmd, str(script), str(args.scale)], str(ROOT))
            steps, events = trace_facts(out)
        status = "" if bare[2] == prof[2] == 0 else f" (exit {bare[2]}/{prof[2]})"
        print(
            f"| {name}{status} | {bare[0]:.2f} | {prof[0]:.2f} | {prof[0] / bare[0]:.2f}x | {bare[1]:,.0f} | "
            f"{prof[1]:,.0f} | {prof[1] - bare[1]:+,.0f} | {steps} | {events:,} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
