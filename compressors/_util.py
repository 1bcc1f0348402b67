"""Helpers shared by the compressor implementations (parameter checks, non-finite side list)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .arrays import from_f32
from .base import NONFINITE, Layout
from .errors import PayloadError
from .payload import Payload

NF_IDX, NF_VAL = "nf_idx", "nf_val"


def check_range(obj: Any, name: str, lo: float, hi: float, *, lo_open: bool = False,
                integer: bool = False) -> None:
    """Raise ValueError naming the parameter and its allowed range; normalise the type."""
    v = getattr(obj, name)
    ok_type = isinstance(v, int) if integer else isinstance(v, int | float)
    if isinstance(v, bool) or not ok_type or not math.isfinite(v) or v > hi or v < lo or (
            lo_open and v == lo):
        rng = f"{'(' if lo_open else '['}{lo}, {hi}]"
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{type(obj).__name__}: {name} must be {kind} in {rng}, got {v!r}")
    if not integer:
        object.__setattr__(obj, name, float(v))


def check_bucket(obj: Any) -> None:
    check_range(obj, "bucket_size", 8, 2**30, integer=True)
    if obj.bucket_size % 8:
        raise ValueError(f"{type(obj).__name__}: bucket_size must be a multiple of 8, "
                         f"got {obj.bucket_size}")


def nonfinite_layout(lay: Layout, storage: np.dtype) -> Layout:
    lay[NF_IDX] = (np.dtype(np.int64), NONFINITE)
    lay[NF_VAL] = (storage, NONFINITE)
    return lay


def split_nonfinite(x32: np.ndarray, flat: np.ndarray, count: int, bufs: dict) -> None:
    """Record the positions and exact original values of NaN/Inf entries (count of them)."""
    idx = np.flatnonzero(~np.isfinite(x32)) if count else np.empty(0, np.int64)
    bufs[NF_IDX] = idx.astype(np.int64)
    bufs[NF_VAL] = flat[idx]


def restore_nonfinite(payload: Payload, out: np.ndarray) -> None:
    idx = payload.buffers[NF_IDX]
    if idx.size:
        out[idx] = payload.buffers[NF_VAL]


def decode_dense(payload: Payload, out: np.ndarray,
                 fill: Callable[[np.ndarray], None]) -> None:
    """Decode a dense float32 reconstruction into ``out`` (any storage dtype): ``fill`` writes
    float32 values, straight into ``out`` when it is contiguous float32, then the NaN/Inf
    side list is put back."""
    direct = out.dtype == np.float32 and out.flags.c_contiguous
    x32 = out if direct else np.empty(out.size, np.float32)
    fill(x32)
    if not direct:
        from_f32(x32, payload.dtype, out)
    restore_nonfinite(payload, out)


def check_indices(idx: np.ndarray, vals: np.ndarray, numel: int, what: str) -> None:
    """Index lists must be strictly ascending, in range, and as long as their values."""
    if idx.size != vals.size:
        raise PayloadError(f"{what}: {idx.size} indices but {vals.size} values")
    if idx.dtype.kind not in "iu":
        raise PayloadError(f"{what}: indices must be integers, got {idx.dtype}")
    # Range first (min and max, no arithmetic), then the differences: with every index in
    # [0, numel) they cannot overflow, as INT32_MIN after a large index would in np.diff.
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= numel or
                     np.any(np.diff(idx) <= 0)):
        raise PayloadError(f"{what}: indices must be ascending within [0, {numel})")


def check_nonfinite(payload: Payload) -> None:
    check_indices(payload.buffers[NF_IDX], payload.buffers[NF_VAL], payload.numel, "nf_idx")


def index_dtype(numel: int) -> np.dtype:
    """int32 indices while they fit, int64 beyond 2**31 elements."""
    return np.dtype(np.int32) if numel < 2**31 else np.dtype(np.int64)


def numel_of(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
