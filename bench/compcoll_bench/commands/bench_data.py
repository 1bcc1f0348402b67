"""Buffers and checks of the benchmark: inputs whose reduction is exact in any order.

Rank r holds ``((i*7 + r) % 11) - 5`` at index i (without the ``- 5`` for unsigned types):
small integers, so every partial sum is exact in every dtype (bfloat16 up to 51 ranks) and
the result cannot depend on the order an algorithm adds in. The input repeats every 11
elements, so the expected result is 11 numbers computed in closed form, not a p-rank replay.
bfloat16 has no numpy type: its buffers are torch tensors, viewed as uint16 bit patterns.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from compressors.dtypes import DType

PERIOD = 11


def empty(dtype: DType, count: int) -> Any:
    """An uninitialized 1-D buffer: numpy, or a torch tensor for bfloat16."""
    if dtype.name == "bfloat16":
        try:
            import torch
        except ImportError:
            raise SystemExit("compcoll: --dtype bfloat16 needs torch; pip install "
                             "'compcoll[torch]' or pick another --dtype") from None
        return torch.empty(count, dtype=torch.bfloat16)
    return np.empty(count, dtype=dtype.raw)


def bits(buf: Any) -> np.ndarray:
    """The buffer's memory as a numpy array (bfloat16: its uint16 bit patterns), no copy."""
    if isinstance(buf, np.ndarray):
        return buf
    import torch

    return buf.view(torch.int16).numpy().view(np.uint16)


def as_float64(buf: Any) -> np.ndarray:
    """A float64 copy of the buffer's values."""
    if isinstance(buf, np.ndarray):
        return buf.astype(np.float64)
    return buf.float().numpy().astype(np.float64)


def pattern(count: int, rank: int, dtype: DType) -> np.ndarray:
    """Rank ``rank``'s input values (int64)."""
    values = (np.arange(count, dtype=np.int64) * 7 + rank) % PERIOD
    return values if dtype.name == "uint8" else values - 5


def fill(buf: Any, rank: int, dtype: DType) -> None:
    """Write rank ``rank``'s input into ``buf``."""
    assign(buf, pattern(len(buf), rank, dtype))


def assign(buf: Any, values: np.ndarray) -> None:
    """Write ``values`` into ``buf``, rounded to its dtype (bfloat16 through torch)."""
    if isinstance(buf, np.ndarray):
        buf[...] = values.astype(buf.dtype)
    else:
        import torch

        buf.copy_(torch.from_numpy(values.astype(np.float32)))


def expected(p: int, dtype: DType, op: str) -> np.ndarray:
    """The reduced values at indices 0..10 (float64), in the result's dtype where exact."""
    inputs = np.stack([pattern(PERIOD, r, dtype) for r in range(p)])
    if op in ("sum", "avg"):
        result = inputs.sum(axis=0)
    else:
        result = {"min": np.min, "max": np.max, "prod": np.prod}[op](inputs, axis=0)
    if not dtype.is_float:
        return result.astype(dtype.raw).astype(np.float64)  # integers wrap like the kernels
    return result / p if op == "avg" else result.astype(np.float64)


def tolerance(p: int, dtype: DType, op: str) -> float:
    """Relative error allowed: none where the result is exact (sums of small integers)."""
    if not dtype.is_float or op in ("sum", "min", "max"):
        return 0.0
    eps = 2.0 ** -7 if dtype.name == "bfloat16" else float(np.finfo(dtype.raw).eps)
    return 2 * p * eps  # avg divides (and fp16/bf16 pre-divides by p); prod may round


def count_wrong(result: Any, p: int, dtype: DType, op: str) -> int:
    """Elements of ``result`` that differ from the expected reduction (NaN counts as wrong)."""
    want = expected(p, dtype, op)
    tol = tolerance(p, dtype, op)
    values = as_float64(result)
    wrong = 0
    for j in range(min(PERIOD, values.size)):
        got = values[j::PERIOD]
        ok = np.abs(got - want[j]) <= tol * max(abs(want[j]), 1.0)
        wrong += int(got.size - np.count_nonzero(ok))
    return wrong


def checksum(buf: Any) -> int:
    """CRC-32 of the buffer's bytes: equal on all ranks iff they hold identical bits."""
    return zlib.crc32(np.ascontiguousarray(bits(buf)).view(np.uint8))


def corrupt(buf: Any) -> None:
    """Invert every bit of element 0 (test-only: proves the check catches a wrong result)."""
    raw = bits(buf)
    as_uint = raw.view(np.dtype(f"u{raw.itemsize}"))
    as_uint[0] = ~as_uint[0]
