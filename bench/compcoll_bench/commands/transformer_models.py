"""Transformer tasks for ``compcoll bench train`` and ``bench tta``: nothing is downloaded.

* ``gpt``: a decoder language model on the standard library's source text, tokenized into a
  word-level vocabulary of 4096 tokens (the most frequent words, punctuation and runs of
  spaces of the training text; the rest map to one unknown token): a real token embedding and
  an untied output head (4096 x 256 each), two pre-norm decoder layers of width 256 with 4
  heads and a causal mask, 32-token contexts; 3.7M parameters, about half of them in the
  embedding and the head. Its metric is the held-out loss in nats per token.
* ``vit``: a vision transformer classifying the digits (8x8 images shipped with scikit-learn):
  2x2 patches (16 tokens) and a class token, four encoder layers of width 192 with 6 heads;
  1.8M parameters. Its metric is test accuracy.

Weights and batches come from generators seeded from (seed, step, rank); the global RNG is
not touched.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

VOCAB = 4096
TOKENS = 32  # the language model's context
EVAL_SEQUENCES = 256  # held-out windows of TOKENS tokens the loss is measured on
_WORD = re.compile(rb"[A-Za-z_][A-Za-z_0-9]*|[0-9]+| +|\n|[^A-Za-z_0-9 \n]")


def tokenize(text: bytes, vocab_size: int = VOCAB) -> tuple[np.ndarray, list[bytes]]:
    """Token ids of ``text`` and the vocabulary (id 0: unknown), most frequent tokens first:
    identifiers, numbers, runs of spaces, newlines and single other bytes."""
    words = _WORD.findall(text)
    vocab = [b"<unk>"] + [w for w, _ in Counter(words).most_common(vocab_size - 1)]
    index = {w: i for i, w in enumerate(vocab)}
    return np.fromiter((index.get(w, 0) for w in words), np.int64, len(words)), vocab


class DecoderLM(nn.Module):
    """Token and position embeddings, pre-norm causal self-attention blocks, an untied head."""

    def __init__(self, vocab: int = VOCAB, d: int = 256, layers: int = 2, heads: int = 4,
                 context: int = TOKENS) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        block = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.body = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        h = self.tok(x) + self.pos(torch.arange(t))
        return self.head(self.norm(self.body(h, mask=mask, is_causal=True)))


class DigitsViT(nn.Module):
    """8x8 images as 16 patches of 2x2 pixels plus a class token, then encoder blocks."""

    def __init__(self, d: int = 192, layers: int = 4, heads: int = 6, patch: int = 2) -> None:
        super().__init__()
        self.patch = patch
        n = (8 // patch) ** 2
        self.embed = nn.Linear(patch * patch, d)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        block = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.body = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.patch
        b = x.shape[0]
        patches = x.reshape(b, 8 // p, p, 8 // p, p).permute(0, 1, 3, 2, 4).reshape(b, -1, p * p)
        h = torch.cat([self.cls.expand(b, -1, -1), self.embed(patches)], 1) + self.pos
        return self.head(self.norm(self.body(h))[:, 0])


@dataclass
class TokenBatches:
    """Training windows and the held-out evaluation of a token-level language model."""

    train: torch.Tensor
    test: torch.Tensor

    def batch(self, step: int, rank: int, size: int, seed: int) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
        start = torch.randint(0, len(self.train) - TOKENS - 1, (size,), generator=g)
        win = torch.stack([self.train[s:s + TOKENS + 1] for s in start.tolist()])
        return win[:, :-1], win[:, 1:]

    def held_out(self) -> tuple[torch.Tensor, torch.Tensor]:
        gap = max(1, (len(self.test) - TOKENS - 1) // EVAL_SEQUENCES)
        starts = list(range(0, len(self.test) - TOKENS - 1, gap))[:EVAL_SEQUENCES]
        win = torch.stack([self.test[s:s + TOKENS + 1] for s in starts])
        return win[:, :-1], win[:, 1:]
