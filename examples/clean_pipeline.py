"""A clean loop: no read-back inside it, one synchronize-free read at the end. Nothing to fix."""

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(1024, 1024).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(512, 1024, device=device)
total = torch.zeros((), device=device)

for _step in range(15):
    opt.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    total += loss.detach()

print(f"mean loss {total.item() / 15:.4f}")
