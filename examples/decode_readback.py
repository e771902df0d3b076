"""An autoregressive decode loop that reads each token back before the next step (planted at line 20)."""

import torch

import stallscope

device = "cuda" if torch.cuda.is_available() else "cpu"
vocab, dim = 1000, 256
embed = torch.nn.Embedding(vocab, dim).to(device)
head = torch.nn.Linear(dim, vocab).to(device)
token = torch.tensor([1], device=device)
generated = []

with torch.no_grad():
    for _step in range(20):
        hidden = torch.tanh(embed(token))
        logits = head(hidden)
        token = logits.argmax(dim=-1)
        # the planted problem: the host reads each token back before it can launch the next step
        generated.append(int(token.item()))
        stallscope.step()  # no optimizer: mark the decode steps

print(len(generated), "tokens")
