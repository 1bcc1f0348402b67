"""The per-call state of a sparse allreduce and the range split the algorithms share."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..transport.base import Communicator, Request

if TYPE_CHECKING:
    from ..costparams import CostParams

Sparse = tuple[np.ndarray, np.ndarray]
SparseSteps = Generator[list[Request], None, Sparse]
#: price(p, n, k, c, index_bytes, value_bytes): seconds for k entries per rank of a vector of
#: n over p > 1 ranks (``collectives.pricing`` has the formulas side by side).
SparsePrice = Callable[[int, int, int, "CostParams", int, int], float]


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


@dataclass(frozen=True)
class SparseAlgorithm:
    """A named sparse allreduce: how it runs, its price, and (where it can) how it hands its
    result over as sets whose merge it is. ``exact`` is False for one whose result keeps only
    some entries of the sum (global top-k): "auto" chooses among the exact ones."""

    name: str
    run: Callable[[SparseJob], SparseSteps]
    price: SparsePrice
    parts: Callable[[SparseJob], Generator[list[Request], None, list[Sparse]]] | None = None
    exact: bool = True
