"""The per-call state of a sparse allreduce and the range split the algorithms share."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import numpy as np

from ..transport.base import Communicator, Request

Sparse = tuple[np.ndarray, np.ndarray]
SparseSteps = Generator[list[Request], None, Sparse]


@dataclass
class SparseJob:
    """One sparse allreduce: this rank's coalesced set and the shape of the answer."""

    comm: Communicator
    tag: int
    idx: np.ndarray  # sorted unique int64
    val: np.ndarray  # acc dtype
    size: int  # length of the dense vector
    acc: np.dtype  # float32, or float64 for float64 input
    k: int | None = None  # result size for global top-k
    dense_threshold: float = 0.5  # DSAR: density above which a range goes dense


def split_by_ranges(idx: np.ndarray, val: np.ndarray, bounds: np.ndarray) -> list[Sparse]:
    """Cut a sorted set at ``bounds`` (p+1 increasing index boundaries) into p sets."""
    cuts = np.searchsorted(idx, bounds)
    return [(idx[a:b], val[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def even_bounds(size: int, p: int) -> np.ndarray:
    """p equal index ranges of [0, size)."""
    return np.array([size * j // p for j in range(p + 1)], dtype=np.int64)
