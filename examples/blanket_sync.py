"""A loop that waits for the whole device after every step (planted at line 17): `torch.cuda.synchronize()`
on a GPU, `torch.cpu.synchronize()` (the same call, device-agnostic) on a CPU."""

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
backend = torch.get_device_module(device)  # torch.cuda or torch.cpu
model = torch.nn.Linear(1024, 1024).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(512, 1024, device=device)

for _step in range(15):
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    # the planted problem: a device-wide wait every step
    backend.synchronize()

print("done")
