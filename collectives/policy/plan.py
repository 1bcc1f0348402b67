"""Pricing a layer under a compressor and planning the whole step (fusion counted)."""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np

import compressors

from .. import costmodel, pricing
from ..compressed import feasible
from .dp import solve
from .layers import Layer


def price(p: int, layer: Layer, spec: str, col: np.ndarray, cost: costmodel.CostParams) -> float:
    """Predicted seconds to allreduce ``layer`` alone with ``spec``: the measured compress and
    decompress times (col[2], col[3]) plus the cost model's price of the payload (col[4]
    bytes, col[5] kept elements), over the cheapest scheme the compressor can use."""
    comp = compressors.get(spec)
    nbytes = 4 * max(layer.numel, 1)
    cs, ds = col[2] / nbytes, col[3] / nbytes
    return min(pricing.predict_scheme(s, p, layer.numel, 4, int(col[4]), cost, cs, ds,
                                      int(col[5])) for s in feasible(comp))


def latency(p: int, spec: str, cost: costmodel.CostParams) -> float:
    """The price of one collective of this compressor on a one-element tensor (its latency;
    an empty one would cost nothing: the algorithms skip it)."""
    comp = compressors.get(spec)
    nbytes = comp.payload_nbytes(1) or 8
    return min(pricing.predict_scheme(s, p, 1, 4, nbytes, cost, 0.0, 0.0, 1)
               for s in feasible(comp))


def plan(p: int, cands: tuple[str, ...], times: list[list[float]], errors: list[list[float]],
         budget: float, bins: int, cost: costmodel.CostParams,
         buckets: list[Hashable]) -> tuple[list[int], float]:
    """Per-layer choice and its predicted step time, counting fusion.

    Layers of one bucket that share a compressor travel in one collective, so a compressor's
    latency is paid once per bucket that uses it, not per layer (``buckets[i]`` names layer
    i's bucket). The dynamic program runs on each subset of candidates on latency-free layer
    prices; the latencies of the (bucket, compressor) pairs its plan uses are added, and the
    cheapest plan wins.
    """
    lat = [latency(p, spec, cost) for spec in cands]
    body = [[max(t - lat[c], 0.0) for c, t in enumerate(row)] for row in times]
    n = len(cands)
    subsets = [[c for c in range(n) if mask >> c & 1] for mask in range(1, 1 << n)] \
        if n <= 8 else [list(range(n))]
    best: tuple[float, list[int]] | None = None
    for sub in subsets:
        allowed = set(sub)
        masked = [[t if c in allowed else math.inf for c, t in enumerate(row)] for row in body]
        try:
            pick = solve(masked, errors, budget, bins)
        except ValueError:  # this subset cannot meet the budget (the one of "none" can)
            continue
        pairs = {(buckets[i], c) for i, c in enumerate(pick)}
        total = sum(body[i][c] for i, c in enumerate(pick)) + sum(lat[c] for _, c in pairs)
        if best is None or total < best[0]:
            best = (total, pick)
    assert best is not None
    return best[1], best[0]
