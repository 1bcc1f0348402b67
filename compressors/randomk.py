"""Random-k sparsification (Stich et al. 2018, "Sparsified SGD with Memory"; Wangni et al. 2018).

The k = ratio * n coordinates are drawn from a generator seeded by (seed, tensor name, step),
so every rank picks the same ones: the payload carries only the values and the 64-bit key that
regenerates the indices, and payloads of different ranks add up value by value. With
``rescale`` the decoded values are multiplied by n / k, which makes the estimate unbiased.
NaN/Inf at chosen coordinates pass exactly. One anywhere else is not dropped like a value:
it replaces the first sent value (a NaN, or the infinity itself when all are the same one),
so the decoded tensor, and the sum over ranks, shows that the step overflowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import kernels
from ._util import check_range, index_dtype, numel_of
from .arrays import from_f32, storage_dtype, to_f32
from .base import Capabilities, Compressor, Layout, register
from .payload import Payload
from .topk import k_of

__all__ = ["RandomK", "nonfinite_marker", "random_indices"]

BF16_EXPONENT = 0x7F80
BF16_NAN = 0x7FC0


def random_indices(numel: int, k: int, key: int) -> np.ndarray:
    """The k ascending indices that the 64-bit key selects out of numel."""
    rng = np.random.default_rng(key)
    return np.sort(rng.choice(numel, size=k, replace=False)).astype(index_dtype(numel))


def _bad(flat: np.ndarray, dtype: str) -> np.ndarray:
    """The NaN/Inf entries of a flat storage array (bfloat16 as uint16 bit patterns)."""
    if dtype == "bfloat16":
        return flat[(flat & BF16_EXPONENT) == BF16_EXPONENT]
    return flat[~np.isfinite(flat)]


def nonfinite_marker(flat: np.ndarray, dtype: str) -> np.ndarray | None:
    """One storage value standing for the input's NaN/Inf entries (the infinity when they are
    all the same one, else NaN), or None for a finite input."""
    if dtype != "bfloat16":
        # One cheap pass: float16 is summed in float32, where it cannot overflow; a float32
        # sum of finite values that does overflow only costs the full test below.
        acc = np.float64 if dtype == "float64" else np.float32
        with np.errstate(over="ignore", invalid="ignore"):
            if np.isfinite(np.add.reduce(flat, dtype=acc)):
                return None
    bad = _bad(flat, dtype)
    if not bad.size:
        return None
    if np.all(bad == bad[0]):  # one infinity (NaN != NaN, but as bfloat16 bits one NaN
        return bad[:1].copy()  # pattern equals itself: still a NaN)
    return np.array([BF16_NAN if dtype == "bfloat16" else np.nan], flat.dtype)


@register("randomk")
@dataclass(frozen=True)
class RandomK(Compressor):
    """Keep a shared random ``ratio`` fraction of the coordinates.

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("randomk:ratio=0.05")
        >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        >>> payload = comp.compress(x, name="layer1.weight", step=0)
        >>> y = comp.decompress(payload)  # x's shape and dtype; the error is the compressor's
        >>> assert y.shape == x.shape and payload.nbytes <= x.nbytes + 64
    """

    ratio: float = 0.01
    rescale: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        check_range(self, "ratio", 0.0, 1.0, lo_open=True)
        if not isinstance(self.rescale, bool):
            raise ValueError(f"RandomK: rescale must be a bool, got {self.rescale!r}")

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(summable=True, sparse=True, same_size_on_all_ranks=True,
                            needs_shared_seed=True)

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        n = numel_of(shape)
        return {"key": (np.dtype(np.uint64), 1),
                "values": (storage_dtype(dtype), k_of(n, self.ratio))}

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: dict[str, np.ndarray],
                **where: Any) -> None:
        bufs["key"][0] = seed
        idx = random_indices(flat.size, bufs["values"].size, seed)
        vals = bufs["values"]
        kernels.gather(flat, idx, vals)
        # A NaN/Inf the sample misses must still reach the output (a GradScaler then skips
        # the step); it goes in place of the first sent value.
        mark = nonfinite_marker(flat, dtype) if vals.size else None
        if mark is not None and not _bad(vals, dtype).size:
            vals[:1] = mark

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        vals = payload.buffers["values"]
        idx = random_indices(out.size, vals.size, int(payload.buffers["key"][0]))
        if self.rescale and vals.size:
            # n / k scaling in float64 for float64 data, in float32 otherwise
            wide = vals.astype(np.float64) if payload.dtype == "float64" else to_f32(
                vals, payload.dtype)
            scaled = np.empty_like(vals)
            from_f32(wide * wide.dtype.type(out.size / vals.size), payload.dtype, scaled)
            vals = scaled
        out.fill(0)
        kernels.scatter(out, idx, vals)
