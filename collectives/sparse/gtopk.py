"""Global top-k sparse allreduce in the style of gTop-k (Shi et al. 2019) and Ok-Topk
(Li & Hoefler 2022): the result stays k-sparse.

1. Balanced ranges: every rank histograms its indices into 8p bins; the summed histogram
   (identical everywhere) is cut into p ranges holding about equal numbers of non-zeros, so
   no rank owns most of them even when the gradient's mass is clustered.
2. Reduce-scatter by range (alltoallv); the owner merges its range in rank order.
3. Each owner keeps its k largest |values|; the candidates are allgathered and every rank
   picks the same global top-k (ties broken by the lower index).
What a rank contributed outside the final index set goes back to its error feedback (the
compressed allreduce does that with the returned indices).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..exchange import allgather_ints, allgatherv, alltoallv
from .common import Sparse, SparseJob, SparseSteps, split_by_ranges
from .merge import merge, pack, unpack

if TYPE_CHECKING:
    from ..costparams import CostParams


def top_k(idx: np.ndarray, val: np.ndarray, k: int) -> Sparse:
    """The k entries of largest magnitude (ties: lower index), returned in index order."""
    if idx.size <= k:
        return idx, val
    order = np.lexsort((idx, -np.abs(val)))[:k]
    keep = np.sort(order)
    return idx[keep], val[keep]


def balanced_bounds(hist: np.ndarray, size: int, p: int) -> np.ndarray:
    """Cut ``size`` into p ranges at bin edges so each holds ~1/p of the histogram's mass."""
    bins = hist.size
    edges = np.array([size * b // bins for b in range(bins + 1)], dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(hist)])
    total = cum[-1]
    bounds = [0]
    for j in range(1, p):
        b = int(np.searchsorted(cum, total * j / p, side="left")) if total else bins * j // p
        bounds.append(max(int(edges[min(b, bins)]), bounds[-1]))
    bounds.append(size)
    return np.array(bounds, dtype=np.int64)


def gtopk(job: SparseJob) -> SparseSteps:
    p, k = job.comm.size, job.k
    if k is None or k < 0:
        raise ValueError("global top-k needs k >= 0 (the number of entries to keep)")
    bins = 8 * p
    mine = np.bincount(job.idx * bins // max(job.size, 1), minlength=bins)[:bins]
    hists = yield from allgather_ints(job.comm, job.tag, mine)
    bounds = balanced_bounds(hists.sum(axis=0), job.size, p)
    parts = split_by_ranges(job.idx, job.val, bounds)
    got = yield from alltoallv(job.comm, job.tag, [pack(i, v, job.size) for i, v in parts])
    oi, ov = merge([unpack(b, job.size, job.acc) for b in got], job.acc)
    owned = (oi[ov != 0], ov[ov != 0])
    cand = yield from allgatherv(job.comm, job.tag, pack(*top_k(*owned, k), job.size))
    idx, val = merge([unpack(b, job.size, job.acc) for b in cand], job.acc)  # disjoint ranges
    nz = val != 0  # an entry that summed to zero carries nothing: never spend k on it
    return top_k(idx[nz], val[nz], k)


def price(p: int, n: int, k: int, c: CostParams, index_bytes: int, value_bytes: int) -> float:
    """3(p-1) alpha + (p-1)/p (2k + p k)(I+V) beta (k = the result's size)."""
    e = index_bytes + value_bytes
    return 3 * (p - 1) * c.alpha + (p - 1) / p * (2 * k + p * k) * e * c.beta
