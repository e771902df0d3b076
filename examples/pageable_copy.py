"""`non_blocking=True` copies from pageable memory every step (planted at line 15): synchronous anyway on a GPU."""

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(1024, 1024).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batches = [torch.randn(512, 1024) for _ in range(4)]  # pageable host memory (no pin_memory())

for step in range(15):
    host_batch = batches[step % len(batches)]
    opt.zero_grad()
    # the planted problem: the source is pageable, so non_blocking does not overlap anything;
    # on CPU, .cpu() marks a copy towards the host that would sync on a GPU
    x = host_batch.to(device, non_blocking=True)
    model(x).square().mean().backward()
    opt.step()

print("done")
