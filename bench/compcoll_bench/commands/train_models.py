"""Models and data for ``compcoll bench train``: nothing is downloaded.

* ``cnn``: a small CNN on scikit-learn's ``load_digits`` (1797 8x8 images shipped with it).
* ``mlp-wide``: an MLP on the same digits, 6.4M parameters in three big matrices.
* ``lm`` / ``lm-large``: a byte-level causal transformer on the Python standard library's own
  source files (``sysconfig.get_paths()["stdlib"]``); ``lm-large`` has > 10M parameters.
* ``gpt`` / ``vit``: a decoder language model on a word-level vocabulary and a vision
  transformer on the digits (``transformer_models``).
* ``embed``: next-byte prediction on the same text from hashed 1-, 2- and 3-byte contexts:
  4.2M of its 4.3M parameters are one embedding table, of which a step touches a few rows.
* ``gru`` / ``gpt-char``: a 2-layer GRU and a 6-layer narrow decoder with a tied embedding,
  both byte-level on the same text and held-out bytes as ``lm`` (``extra_models``).

Each task declares its metric: accuracy (higher is better) or bits per byte on held-out text
(lower is better; ``HIGHER_IS_BETTER``).

Every random choice (initial weights, batches) comes from a generator seeded from (seed,
step, rank); the global RNG is not touched.
"""

from __future__ import annotations

import math
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .extra_models import GRULM, CharGPT
from .transformer_models import DecoderLM, DigitsViT, TokenBatches, tokenize

LM_SIZES = {"lm": dict(d=64, layers=2, heads=4), "lm-large": dict(d=512, layers=4, heads=8)}
CONTEXT = 64
#: Held-out windows of CONTEXT bytes that bits per byte is measured on, evenly spaced over the
#: held-out text (128 x 64 bytes: about 25 ms for embed, 40 ms for lm on one thread).
EVAL_WINDOWS = 128
#: Byte-level language models of ``extra_models``, on the same text as ``lm``.
BYTE_MODELS = {"gru": GRULM, "gpt-char": lambda: CharGPT(context=CONTEXT)}
MODELS = ["cnn", "mlp-wide", *LM_SIZES, "embed", "gpt", "vit", *BYTE_MODELS]
HIGHER_IS_BETTER = {"accuracy": True, "bits_per_byte": False, "loss": False}


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        h = nn.functional.max_pool2d(h, 2).flatten(1)
        return self.fc2(torch.relu(self.fc1(h)))


class WideMLP(nn.Module):
    """64 -> 2048 -> 2048 -> 1024 -> 10: almost every parameter in three large matrices."""

    def __init__(self, widths: tuple[int, ...] = (64, 2048, 2048, 1024, 10)) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(widths) - 2 else [])
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class HashedContext(nn.Module):
    """Next byte from the sum of the embeddings of the last 1, 2 and 3 bytes, each hashed into
    one shared table of ``buckets`` rows, then a small MLP head."""

    def __init__(self, buckets: int = 1 << 16, d: int = 64) -> None:
        super().__init__()
        self.buckets = buckets
        self.table = nn.Embedding(buckets, d)
        self.head = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, 256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = nn.functional.pad(x, (2, 0), value=256)  # 256: "before the start", not a byte
        b0, b1, b2 = pad[:, 2:], pad[:, 1:-1], pad[:, :-2]
        # Distinct odd multipliers per context length spread the contexts over the table.
        ids = torch.stack([b0, b0 * 257 + b1 + 7919, (b0 * 257 + b1) * 257 + b2 + 104729], -1)
        return self.head(self.table((ids * 2654435761) % self.buckets).sum(-2))


class ByteLM(DecoderLM):
    """The byte-level language model: 256 byte tokens, ``CONTEXT`` bytes of context."""

    def __init__(self, d: int, layers: int, heads: int) -> None:
        super().__init__(vocab=256, d=d, layers=layers, heads=heads, context=CONTEXT)


@dataclass
class Task:
    """A model factory, a batch source and an evaluation (accuracy or bits per byte)."""

    name: str
    make: Any
    train: tuple[torch.Tensor, torch.Tensor] | torch.Tensor | TokenBatches
    test: tuple[torch.Tensor, torch.Tensor] | torch.Tensor
    metric: str

    def batch(self, step: int, rank: int, size: int, seed: int) -> tuple[torch.Tensor, ...]:
        if isinstance(self.train, TokenBatches):
            return self.train.batch(step, rank, size, seed)
        g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
        if self.metric == "accuracy":
            x, y = self.train  # type: ignore[misc]
            idx = torch.randint(0, len(x), (size,), generator=g)
            return x[idx], y[idx]
        text = self.train
        start = torch.randint(0, len(text) - CONTEXT - 1, (size,), generator=g)
        win = torch.stack([text[s:s + CONTEXT + 1] for s in start.tolist()])
        return win[:, :-1], win[:, 1:]

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, y = batch
        out = model(x)
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    @property
    def higher_is_better(self) -> bool:
        return HIGHER_IS_BETTER[self.metric]

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> float:
        """Test accuracy (digits) or bits per byte on ``EVAL_WINDOWS`` windows of held-out
        text."""
        model.eval()
        try:
            if self.metric == "accuracy":
                x, y = self.test  # type: ignore[misc]
                return float((model(x).argmax(1) == y).float().mean())
            if isinstance(self.train, TokenBatches):  # nats per held-out token
                return float(self.loss(model, self.train.held_out()))
            text = self.test
            gap = max(1, (len(text) - CONTEXT) // EVAL_WINDOWS)
            starts = list(range(0, len(text) - CONTEXT - 1, gap))[:EVAL_WINDOWS]
            win = torch.stack([text[s:s + CONTEXT + 1] for s in starts])
            return float(self.loss(model, (win[:, :-1], win[:, 1:]))) / math.log(2)
        finally:
            model.train()


def _seeded(factory: Any, seed: int) -> Any:
    def make() -> nn.Module:
        with torch.random.fork_rng():  # the same weights on every rank, global RNG untouched
            torch.manual_seed(seed)
            return factory()
    return make


def digits(seed: int, name: str = "cnn") -> Task:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit("compcoll: bench train's cnn needs scikit-learn (pip install "
                         "scikit-learn) for its bundled digits data") from None
    data = load_digits()
    x = torch.tensor(data.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(data.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    tr, te = order[:1500], order[1500:]
    factory = {"cnn": DigitsCNN, "mlp-wide": WideMLP, "vit": DigitsViT}[name]
    return Task(name, _seeded(factory, seed), (x[tr], y[tr]), (x[te], y[te]), "accuracy")


def stdlib_text(limit: int) -> np.ndarray:
    """The first ``limit`` bytes of the standard library's .py files, in sorted path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out, total = [], 0
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        out.append(data)
        total += len(data)
        if total >= limit:
            break
    return np.frombuffer(b"".join(out)[:limit], dtype=np.uint8)


def language(name: str, seed: int, nbytes: int = 1 << 20) -> Task:
    text = torch.from_numpy(stdlib_text(nbytes).astype(np.int64))
    cut = int(len(text) * 0.95)
    factories = {"embed": HashedContext, **BYTE_MODELS}
    factory = factories.get(name, lambda: ByteLM(**LM_SIZES[name]))
    return Task(name, _seeded(factory, seed), text[:cut], text[cut:], "bits_per_byte")


def words(seed: int) -> Task:
    """The ``gpt`` task: 1 MB of standard-library source as word-level tokens."""
    ids, _ = tokenize(stdlib_text(1 << 20).tobytes())
    tokens = torch.from_numpy(ids)
    cut = int(len(tokens) * 0.95)
    data = TokenBatches(tokens[:cut], tokens[cut:])
    return Task("gpt", _seeded(DecoderLM, seed), data, data, "loss")


def task(name: str, seed: int) -> Task:
    if name == "gpt":
        return words(seed)
    if name in ("cnn", "mlp-wide", "vit"):
        return digits(seed, name)
    if name in LM_SIZES or name in BYTE_MODELS or name == "embed":
        return language(name, seed)
    raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
