"""Boolean-mask indexing in the loop (planted at line 15): a data-dependent shape syncs the GPU."""

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(256, 256).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(1024, 256, device=device)

for _step in range(15):
    out = model(x)
    mask = out[:, 0] > 0
    opt.zero_grad()
    # the planted problem: the size of out[mask] depends on the data
    selected = out[mask]
    selected.square().mean().backward()
    opt.step()

print("done")
