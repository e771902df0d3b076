"""A loop with `torch.cuda.synchronize()` after every step (planted at line 20), on a GPU."""

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(1024, 1024).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(512, 1024, device=device)


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


for _step in range(15):
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    synchronize()  # the planted problem: a device-wide wait every step

print("done")
