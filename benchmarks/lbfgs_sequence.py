"""An LBFGS loop like pytorch/examples' time_sequence_prediction: two LSTM cells unrolled over a sine wave,
``optimizer.step(closure)`` with up to 20 closure calls per step. Many tiny ops per step: the case that
makes profiling cost explode without an event budget.

Usage: python benchmarks/lbfgs_sequence.py [STEPS] [LENGTH] [SAMPLES]
"""

from __future__ import annotations

import sys

import torch
from torch import nn


class Sequence(nn.Module):
    def __init__(self, hidden: int = 51) -> None:
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.size(0)
        h1 = c1 = torch.zeros(n, self.hidden, dtype=x.dtype)
        h2 = c2 = torch.zeros(n, self.hidden, dtype=x.dtype)
        outputs = []
        for x_t in x.split(1, dim=1):
            h1, c1 = self.lstm1(x_t, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            outputs.append(self.linear(h2))
        return torch.cat(outputs, dim=1)


def main(steps: int = 15, length: int = 1000, samples: int = 97) -> None:
    torch.manual_seed(0)
    t = torch.arange(length, dtype=torch.float64) / 20.0
    phase = torch.randint(-80, 80, (samples, 1), dtype=torch.float64) / 20.0
    data = torch.sin(t + phase)
    inputs, target = data[:, :-1], data[:, 1:]
    model = Sequence().double()
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.8)
    for i in range(steps):

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = criterion(model(inputs), target)
            loss.backward()
            return loss

        loss = optimizer.step(closure)
        print(f"step {i} loss {loss.item():.6f}")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    main(*args)
