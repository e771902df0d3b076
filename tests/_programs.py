"""Program text the profiling tests run: pieces several of them share."""

TINY_LM = """\
import torch


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 16)
        self.head = torch.nn.Linear(16, 16)

    def forward(self, ids):
        return self.head(self.embed(ids))

    @torch.no_grad()
    def generate(self, ids, max_new_tokens):
        for _ in range(max_new_tokens):
            nxt = self(ids)[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
        return ids
"""  # an HF-style model: ``generate`` calls the model once per token


def line_of(text: str, marker: str) -> int:
    """The 1-based line of ``text`` that holds ``marker`` (exactly one does)."""
    (line,) = [i for i, row in enumerate(text.splitlines(), 1) if marker in row]
    return line
