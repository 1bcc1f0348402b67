"""Pricing a layer under a compressor and planning the whole step (fusion counted)."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

import compressors

from .. import costmodel, pricing
from ..compressed import feasible
from ..compressed.checks import known_hierarchy
from ..costparams import several_per_host
from .columns import BYTES, COMPRESS, DECOMPRESS, KEPT
from .dp import solve
from .layers import Layer

if TYPE_CHECKING:
    from ..transport import Communicator


def price(p: int, layer: Layer, spec: str, col: np.ndarray, cost: costmodel.CostParams,
          hierarchy: str = "auto") -> float:
    """Predicted seconds to allreduce ``layer`` alone with ``spec``: the measured compress and
    decompress times (``col``: the candidate's columns, ``columns``) plus the cost model's
    price of the payload (its bytes and kept elements), over the cheapest scheme the
    compressor can use. On hosts of several ranks (``cost.layout(p)``) the call runs as
    ``hierarchy`` has it (the hook's): "auto" prices the two-level call too and takes the
    cheaper, as the call does; "two_level" prices only the two-level call (its bytes across
    hosts and the codec work of the ranks that do it, 1/L each, its full-precision traffic
    inside the host); "flat" only the flat one."""
    comp = compressors.get(spec)
    nbytes = 4 * max(layer.numel, 1)
    cs, ds = col[COMPRESS] / nbytes, col[DECOMPRESS] / nbytes
    load = pricing.SchemeLoad.of_rates(p, layer.numel, 4, int(col[BYTES]), cs, ds,
                                       int(col[KEPT]))
    known_hierarchy(hierarchy)
    if hierarchy == "flat" or not crosses_hosts(p, cost) or comp.capabilities.allreduce_steps:
        return min(pricing.predict_scheme(s, load, cost) for s in feasible(comp))
    two = min(sum(pricing.two_level_costs(s, load, cost)) for s in feasible(comp))
    if hierarchy == "two_level":
        return two
    return min(two, min(pricing.predict_scheme(s, load, cost) for s in feasible(comp)))


def crosses_hosts(p: int, cost: costmodel.CostParams) -> bool:
    """Whether ``cost`` places ``p`` ranks on several hosts of the same size, several ranks
    each (where a compressed call may run two-level)."""
    return several_per_host(cost.layout(p))


def latency(p: int, spec: str, cost: costmodel.CostParams) -> float:
    """The price of one collective of this compressor on a one-element tensor (its latency;
    an empty one would cost nothing: the algorithms skip it)."""
    comp = compressors.get(spec)
    nbytes = comp.payload_nbytes(1) or 8
    load = pricing.SchemeLoad.of_rates(p, 1, 4, nbytes, 0.0, 0.0, 1)
    return min(pricing.predict_scheme(s, load, cost) for s in feasible(comp))


def bodies(p: int, cands: tuple[str, ...], times: list[list[float]],
           cost: costmodel.CostParams) -> list[list[float]]:
    """Each layer's price (``times[i][c]``, :func:`price` under ``cost``) less the model's
    latency of its candidate: what the layer adds to a collective it shares (at least 0)."""
    lat = [latency(p, spec, cost) for spec in cands]
    return [[max(t - lat[c], 0.0) for c, t in enumerate(row)] for row in times]


@dataclass(frozen=True)
class Noise:
    """What timing noise can explain: a gain of at most ``min_gain`` seconds, or of at most
    the share ``margin`` of the slower time (``AutoConfig``'s, see :func:`clear`)."""

    min_gain: float = 0.0
    margin: float = 0.0

    def clear(self, t: float, than: float) -> bool:
        """Whether ``t`` beats ``than`` by more than this noise (:func:`clear`)."""
        return clear(t, than, self.min_gain, self.margin)


@dataclass(frozen=True)
class Fusion:
    """How a plan's layers share collectives: each candidate's fixed cost of one collective
    (``fixed[c]``, seconds), each layer's bucket (``buckets[i]``), and the candidates that
    send each layer in collectives of its own (``alone``, :func:`sends_alone`)."""

    fixed: list[float]
    buckets: list[Hashable]
    alone: frozenset[int] = frozenset()


def sends_alone(cands: tuple[str, ...]) -> frozenset[int]:
    """The candidates whose every layer is its own collectives: the hook sends each matrix of
    a multi-step method (PowerSGD) apart, so its fixed cost is paid once per layer."""
    return frozenset(c for c, spec in enumerate(cands)
                     if compressors.get(spec).capabilities.allreduce_steps)


def clear(t: float, than: float, min_gain: float, margin: float) -> bool:
    """Whether ``t`` seconds is faster than ``than`` by more than timing noise: by more than
    ``min_gain`` seconds and by more than the share ``margin`` of ``than`` (any finite time
    beats an infinite one)."""
    if not math.isfinite(than):
        return t < than
    return t < than - max(min_gain, margin * than)


def prune(body: list[list[float]], errors: list[list[float]],
          min_gain: float, margin: float = 0.0) -> list[list[float]]:
    """Bodies with every option that is not clearly faster (:func:`clear`) than each
    lower-error option of its layer set to inf: a smaller gain is timing noise, and on a tie
    the lower error wins. The least-error option of each layer always stays."""
    out = []
    for row, err in zip(body, errors, strict=True):
        out.append([t if all(clear(t, u, min_gain, margin)
                             for u, f in zip(row, err, strict=True) if f < e) else math.inf
                    for t, e in zip(row, err, strict=True)])
    return out


def plan(cands: tuple[str, ...], body: list[list[float]], errors: list[list[float]],
         budget: float, bins: int, fixed: list[float], buckets: list[Hashable],
         noise: Noise = Noise()) -> tuple[list[int], float]:
    """Per-layer choice and its predicted step time, counting fusion.

    Layers of one bucket that share a compressor travel in one collective, so candidate c's
    fixed cost ``fixed[c]`` (seconds per collective, see ``latency``) is paid once per bucket
    that uses it (``buckets[i]`` names layer i's bucket), and ``body[i][c]`` (see
    :func:`bodies`) once per layer; a candidate that sends each layer alone (PowerSGD: each
    matrix is its own pair of collectives, :func:`sends_alone`) pays its fixed cost once per
    layer. The dynamic program runs on each subset of candidates, on the bodies :func:`prune`
    keeps; then :func:`regroup` moves whole groups within their bucket while that saves
    collectives. Of these plans, the one of least error among those not clearly slower than
    the fastest (``noise``: :func:`clear`) wins: more error is taken only for a gain that
    timing noise cannot explain.
    """
    n, base = len(cands), cands.index("none") if "none" in cands else None
    fusion = Fusion(fixed, buckets, sends_alone(cands))
    alone = fusion.alone
    kept = prune(body, errors, noise.min_gain, noise.margin)
    # Subsets of the candidates some layer may use: one that adds an unusable candidate
    # would plan the same as without it.
    usable = [c for c in range(n) if any(math.isfinite(row[c]) for row in kept)]
    subsets = [[c for j, c in enumerate(usable) if mask >> j & 1]
               for mask in range(1, 1 << len(usable))] if len(usable) <= 8 else [usable]
    plans: list[tuple[float, float, list[int]]] = []
    for sub in subsets:
        allowed = set(sub)
        masked = [[t if c in allowed else math.inf for c, t in enumerate(row)] for row in kept]
        try:
            pick = solve(masked, errors, budget, bins)
        except ValueError:  # this subset cannot meet the budget (the one of "none" can)
            continue
        pick = regroup(pick, body, errors, fusion, budget, base, noise)
        plans.append((step_time(pick, body, fixed, buckets, alone),
                      sum(errors[i][c] for i, c in enumerate(pick)), pick))
    if not plans:  # no subset meets the budget: not even "none" is priced and error-free
        raise ValueError("no plan fits the error budget: the measurements give 'none' (the "
                         "identity) an error or no finite time")
    fastest = min(total for total, _, _ in plans)
    _, total, pick = min((err, total, pick) for total, err, pick in plans
                         if not noise.clear(fastest, total))
    return pick, total


def step_time(pick: list[int], body: list[list[float]], fixed: list[float],
              buckets: list[Hashable], alone: frozenset[int] = frozenset()) -> float:
    """Predicted seconds of a plan: every layer's body, every (bucket, compressor) once (a
    compressor in ``alone`` once per layer)."""
    groups = {_group(i, c, buckets, alone) for i, c in enumerate(pick)}
    return sum(body[i][c] for i, c in enumerate(pick)) + sum(fixed[c] for _, c, _ in groups)


def shares(pick: list[int], body: list[list[float]], fixed: list[float],
           buckets: list[Hashable], alone: frozenset[int] = frozenset(),
           payers: list[bool] | None = None) -> list[float]:
    """Each layer's part of :func:`step_time` (they add up to it): its body, and an equal
    part of its collective's fixed cost, split among the collective's layers that
    ``payers`` marks (all of them when it marks none)."""
    groups: dict[tuple[Hashable, int, int | None], list[int]] = {}
    for i, c in enumerate(pick):
        groups.setdefault(_group(i, c, buckets, alone), []).append(i)
    out = [body[i][c] for i, c in enumerate(pick)]
    for (_, c, _), members in groups.items():
        paying = [i for i in members if payers is None or payers[i]] or members
        for i in paying:
            out[i] += fixed[c] / len(paying)
    return out


def _group(i: int, c: int, buckets: list[Hashable], alone: frozenset[int]
           ) -> tuple[Hashable, int, int | None]:
    """The collective layer i travels in under candidate c: (bucket, c, the layer if c
    sends each layer alone)."""
    return buckets[i], c, i if c in alone else None


def regroup(pick: list[int], body: list[list[float]], errors: list[list[float]],
            fusion: Fusion, budget: float, base: int | None, noise: Noise = Noise()
            ) -> list[int]:
    """Move whole groups (the layers of a bucket sharing a candidate) while it pays.

    A group may move to ``base`` (the error-free candidate) or into another group of its
    bucket (not into a candidate of ``fusion.alone``: that saves no collective); a move is
    taken when it clearly saves time within the budget (more than ``noise`` can explain of the
    group's time), or lowers the error at no extra time, best first.
    So a small layer keeps a compressor only where its bucket sends that compressor anyway: a
    collective of its own costs more than its few bytes save. Each move lowers (time, error)
    lexicographically: it ends.
    """
    fixed, buckets, alone = fusion.fixed, fusion.buckets, fusion.alone
    pick = list(pick)
    err = sum(errors[i][c] for i, c in enumerate(pick))
    while True:
        groups: dict[tuple[Hashable, int, int | None], list[int]] = {}
        for i, c in enumerate(pick):
            groups.setdefault(_group(i, c, buckets, alone), []).append(i)
        best: tuple[tuple[float, float], list[int], int] | None = None
        for (b, c, _), members in groups.items():
            targets = {d for bb, d, _ in groups if bb == b} | \
                ({base} if base is not None else set())
            for d in targets - {c} - alone:
                dt = sum(body[i][d] - body[i][c] for i in members) - fixed[c] \
                    + (0.0 if (b, d, None) in groups else fixed[d])
                de = sum(errors[i][d] - errors[i][c] for i in members)
                now = sum(body[i][c] for i in members) + fixed[c]
                if err + de > budget or not (noise.clear(now + dt, now)
                                             or (dt <= 0 and de < 0)):
                    continue
                if best is None or (dt, de) < best[0]:
                    best = ((dt, de), members, d)
        if best is None:
            return pick
        (_, de), members, d = best
        for i in members:
            pick[i] = d
        err += de


def agreed(comm: Communicator, pick: list[int]) -> list[int]:
    """Rank 0's plan on every rank (collective). Every rank plans from the same combined
    measurements, so the plans already agree; taking one rank's makes it so by construction
    (a last ulp of a sum cannot split the ranks' groups, which would deadlock the hook)."""
    table = comm.allgather_ints(np.asarray(pick, dtype=np.int64), collective="policy plan")
    return [int(c) for c in np.asarray(table).reshape(comm.size, len(pick))[0]]
