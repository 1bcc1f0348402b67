"""Two more byte-level language models for ``compcoll bench train`` and ``bench tta``, on the
same standard-library text, context windows and held-out bytes as ``lm`` (bits per byte):

* ``gru``: a recurrent model: a 256-wide byte embedding, a 2-layer GRU with hidden size 256
  and a linear head to the 256 bytes; 0.92M parameters, most of them in the GRU's gate
  matrices.
* ``gpt-char``: a deeper, narrower decoder than ``gpt``: six pre-norm causal self-attention
  blocks of width 96 with 4 heads, a learned positional embedding and an output head tied to
  the byte embedding (one 256 x 96 matrix used twice, as GPT-2 does; no head bias),
  embeddings initialized N(0, 0.02); 0.70M parameters.

Their weights come from the seeded factory of ``train_models``; the global RNG is not touched.
"""

from __future__ import annotations

import torch
from torch import nn

from .transformer_models import DecoderLM

BYTES = 256


class GRULM(nn.Module):
    """Byte embedding, a stacked GRU, a linear head: ``x`` [B, T] -> logits [B, T, 256]."""

    def __init__(self, hidden: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(BYTES, hidden)
        self.rnn = nn.GRU(hidden, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, BYTES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.embed(x))
        return self.head(h)


class CharGPT(DecoderLM):
    """A byte-level decoder whose output head is the token embedding itself (tied)."""

    def __init__(self, context: int, d: int = 96, layers: int = 6, heads: int = 4) -> None:
        super().__init__(vocab=BYTES, d=d, layers=layers, heads=heads, context=context)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)
        self.head = nn.Linear(d, BYTES, bias=False)
        self.head.weight = self.tok.weight
