"""A training loop that logs `loss.item()` every step: a sync per step on a GPU (planted at line 18)."""

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 512, device=device)
y = torch.randint(0, 10, (256,), device=device)
losses = []

for _step in range(15):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    # the planted problem: reading the loss back every step
    losses.append(loss.item())

print(f"final loss {losses[-1]:.4f}")
