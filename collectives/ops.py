"""Reduction operators and the one function every algorithm uses to combine two buffers."""

from __future__ import annotations

import numpy as np

from compressors import kernels  # the extension loads on the first kernel call
from compressors.dtypes import DType

# Kernel codes of the C++ reduce_into. "avg" is a sum followed by a division (see finish()).
_KERNEL_CODE = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 0}
SUPPORTED_OPS = tuple(_KERNEL_CODE)


def check_op(op: str, dtype: DType) -> str:
    """Validate ``op`` for ``dtype`` and return its canonical name."""
    name = str(op).lower().removeprefix("reduceop.")
    name = {"average": "avg", "mean": "avg", "product": "prod"}.get(name, name)
    if name not in _KERNEL_CODE:
        raise ValueError(f"unsupported op {op!r}; supported: {', '.join(SUPPORTED_OPS)}")
    if name == "avg" and not dtype.is_float:
        raise ValueError(
            f"op 'avg' needs a floating-point dtype, got {dtype.name}; use op='sum' and divide "
            "with the rounding your integers need"
        )
    return name


def combine(dst: np.ndarray, src: np.ndarray, dtype: DType, op: str) -> None:
    """dst = dst (op) src, elementwise, in place (fp16/bf16 accumulate in fp32)."""
    if dst.size:
        kernels.reduce_into(dst, src, dtype.code, _KERNEL_CODE[op])


def sum_squares(buf: np.ndarray, dtype: DType) -> float:
    """Sum of squares of a flat float buffer (raw storage: bf16 as uint16), in double."""
    return kernels.sum_squares(buf, dtype.code) if buf.size else 0.0


def prescale(buf: np.ndarray, dtype: DType, op: str, size: int) -> None:
    """Before an fp16/bf16 average, divide each input by p so the partial sums cannot overflow."""
    if op == "avg" and dtype.itemsize == 2 and size > 1 and buf.size:
        kernels.scale(buf, dtype.code, 1.0 / size)


def finish(buf: np.ndarray, dtype: DType, op: str, size: int) -> None:
    """After the reduction: turn a sum into an average (fp32/fp64 divide after summing)."""
    if op == "avg" and dtype.itemsize > 2 and size > 1 and buf.size:
        kernels.scale(buf, dtype.code, 1.0 / size)
