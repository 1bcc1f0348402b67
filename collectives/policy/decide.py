"""One decision: the measured table, the cost model and the live gradient shares to a plan.

Pure pricing: nothing here profiles or times anything, so deciding again costs a few
milliseconds of arithmetic (and one small allgather in :func:`plan.agreed`).

What a compressor may do to a layer is bounded twice, in the error of ``criterion`` (the
optimizer's: in Adam's preconditioned space by default). The step's total error, weighted by
each layer's share of the norm, must fit the budget; and each layer's own relative error must
too. The second bound matters under Adam-type optimizers, which give every layer an update of
about the same size whatever its gradient's norm: an embedding table with a small share of
the norm is not free to lose most of its gradient. A compressor whose error-feedback residual
grew past ``max_residual`` steps of gradient while profiling, or whose error cannot be
bounded (``criterion``), is ruled out for the layer as well: such a layer sends 16 bits.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import costmodel
from . import criterion, plan, report
from .columns import BYTES, KEPT, per_candidate, width
from .layers import Layer

if TYPE_CHECKING:
    from ..transport import Communicator
    from .config import AutoConfig


@dataclass
class Outcome:
    """A plan: the candidate index per layer, its predicted seconds and total error, and the
    predicted seconds of sending every layer uncompressed."""

    pick: list[int]
    total: float
    error: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    uncompressed: float = 0.0
    #: The plan with its layers of 16 bits sent below 16 where the budget allows
    #: (:func:`narrowed`): what the trial times beside it, since the price can be wrong.
    narrow: list[int] = field(default_factory=list)


def unmeasured(layer: Layer, cands: tuple[str, ...]) -> np.ndarray:
    """The table row of a layer never profiled: no coding time, no error, its float32 bytes,
    or 16-bit ones under a 16-bit format (a small layer may ride in one, see
    :func:`decide`; a large one unmeasured is allowed only "none")."""
    row = np.zeros(width(len(cands)))
    cols = per_candidate(row)
    cols[:, BYTES], cols[:, KEPT] = 4 * max(layer.numel, 1), layer.numel
    for c, spec in enumerate(cands):
        if spec != "none" and criterion.sixteen(spec):
            cols[c, BYTES] = 2 * max(layer.numel, 1)
    return row


def weights(norms: np.ndarray, buckets: list[Hashable],
            live: Mapping[Hashable, float]) -> np.ndarray:
    """Each layer's share of the squared gradient norm: the profiled shares, with the buckets'
    totals moved to their shares of the live norms (the hook's averaged gradient over the
    last window) among the buckets both know; a bucket the hook did not see keeps its own."""
    w = norms / max(float(norms.sum()), 1e-300)
    known = {b for b in buckets if live.get(b, 0.0) > 0}
    if not known:
        return w
    mass = {b: float(sum(w[i] for i, bb in enumerate(buckets) if bb == b)) for b in known}
    pool, live_sum = sum(mass.values()), sum(live[b] for b in known)
    out = w.copy()
    for i, b in enumerate(buckets):
        if b in known and mass[b] > 0:
            out[i] = w[i] / mass[b] * pool * live[b] / live_sum
    return out


@dataclass(frozen=True)
class Table:
    """The layers a decision prices, in one order: each layer, its row of the measured table
    (``columns``; a layer never measured has :func:`unmeasured`'s), whether it was measured,
    and the DDP bucket it travels in (its name where unknown)."""

    layers: list[Layer]
    rows: np.ndarray
    measured: list[bool]
    buckets: list[Hashable]


@dataclass(frozen=True)
class Pricing:
    """How a collective is priced: the cost model, each candidate's fixed cost of one
    collective (seconds, ``costs``), and how compressed calls cross hosts (the hook's
    ``hierarchy``, see ``plan.price``)."""

    cost: costmodel.CostParams
    fixed: list[float]
    hierarchy: str = "auto"


def residual_grows(residual: np.ndarray, cfg: AutoConfig) -> np.ndarray:
    """The residual bound, per candidate: error feedback's residual grew past
    ``max_residual`` steps of gradient while profiling, so the compressor withholds ever more
    of the update (which its per-step error does not show)."""
    return residual > cfg.max_residual


def over_budget(rel: np.ndarray, cfg: AutoConfig) -> np.ndarray:
    """The per-layer error bound, per candidate: its own error is above the whole budget.
    Under Adam every layer moves about as far whatever its share of the norm, so a layer of a
    small share is not free to lose its gradient."""
    return rel > cfg.max_error


def keeps_standing(total: float, standing: float, cfg: AutoConfig) -> bool:
    """Hysteresis: a new plan of ``total`` seconds replaces the standing one (priced anew at
    ``standing``) only when clearly faster (``plan.clear``): noise must not flip decisions."""
    return not plan.clear(total, standing, cfg.min_gain, cfg.margin)


def decide(comm: Communicator, cfg: AutoConfig, table: Table, live: Mapping[Hashable, float],
           pricing: Pricing, standing: Mapping[str, str]) -> Outcome:
    """The plan of least predicted step time within the error budget (see ``auto``); a
    layer under ``cfg.min_numel`` elements or not measured is sent uncompressed, and a
    compressor whose residual grew past ``cfg.max_residual`` is not used for the layer.
    Compressed calls are priced crossing hosts as ``pricing.hierarchy`` has them
    (``plan.price``); ``standing``: the decisions in force (hysteresis)."""
    layers, rows, measured, buckets = table.layers, table.rows, table.measured, table.buckets
    cost, fixed, hierarchy = pricing.cost, pricing.fixed, pricing.hierarchy
    cands, budget = cfg.candidates, cfg.max_error ** 2
    crit = criterion.measure(cfg.optimizer, cands, rows)
    share = weights(crit.norms, buckets, live if crit.live else {})
    times, errors, rel, grew, over = [], [], [], [], []
    for i, (layer, row, w, seen) in enumerate(zip(layers, rows, share, measured, strict=True)):
        cols = per_candidate(row)
        r = crit.rel[i]
        # A small layer is never profiled and never gets a compressor of its own, but may
        # ride in a 16-bit group of its bucket (``Decider.choose_bucket``): pricing it there
        # lets a bucket's layers share one 16-bit collective rather than move to float32.
        small = layer.numel < cfg.min_numel
        plain_only = small or not seen
        # Ruled out for this layer: a residual that grows, a per-step error above the whole
        # budget, or one that cannot be bounded (see the module doc).
        grew.append(residual_grows(crit.residual[i], cfg))
        over.append(over_budget(r, cfg))
        times.append([math.inf if spec != "none" and (ruled or plain_only and not (
                          small and criterion.sixteen(spec))) else
                      plan.price(comm.size, layer, spec, col, cost, hierarchy)
                      for spec, col, ruled in zip(cands, cols,
                                                  grew[-1] | over[-1] | crit.unbounded[i],
                                                  strict=True)])
        errors.append([float(w * x * x) for x in r])
        rel.append(r)
    body = plan.bodies(comm.size, cands, times, cost)
    # The hook sends each matrix of a multi-step method (PowerSGD) in collectives of its own.
    alone = plan.sends_alone(cands)
    pick, total = plan.plan(cands, body, errors, budget, cfg.bins, fixed, buckets,
                            plan.Noise(cfg.min_gain, cfg.margin))
    wanted: list[int | None] = [None] * len(layers)  # what a standing plan overrode
    old = previous(cands, layers, standing, errors, budget)
    if old is not None:  # hysteresis: a new plan must clearly beat the standing one
        old_total = plan.step_time(old, body, fixed, buckets, alone)
        if keeps_standing(total, old_total, cfg):
            wanted = [c if c != o else None for c, o in zip(pick, old, strict=True)]
            pick = old
    both = plan.agreed(comm, pick + narrowed(pick, cands, times, errors, budget))
    pick, narrow = both[:len(pick)], both[len(pick):]
    out = Outcome(pick, plan.step_time(pick, body, fixed, buckets, alone),
                  math.sqrt(sum(errors[i][c] for i, c in enumerate(pick))),
                  uncompressed=plan.step_time([cands.index("none")] * len(pick), body, fixed,
                                              buckets, alone), narrow=narrow)
    # Each layer's part of the step: the small and unmeasured ones were never profiled.
    profiled = [lay.numel >= cfg.min_numel and seen for lay, seen in zip(layers, measured,
                                                                         strict=True)]
    parts = plan.shares(pick, body, fixed, buckets, alone, profiled)
    slack = budget - sum(errors[i][c] for i, c in enumerate(pick))
    out.rows = [{"layer": lay.name, "numel": lay.numel, "kind": lay.kind,
                 "compressor": cands[c],
                 "bytes": int(per_candidate(row)[c, BYTES]),
                 "predicted_us": (body[i][c] + fixed[c]) * 1e6, "error": float(rel[i][c]),
                 "step_us": parts[i] * 1e6, "profiled": profiled[i],
                 "residual": float(crit.residual[i][c]),
                 "held_back": [cands[j] for j, g in enumerate(grew[i]) if g],
                 "why": report.why(cfg, lay, measured[i], c, report.Options(body[i], errors[i]),
                                   report.Verdicts(grew[i], over[i], rel[i], crit.unbounded[i],
                                                   crit.blocked[i]), slack, wanted[i])}
                for i, (lay, c, row) in enumerate(zip(layers, pick, rows, strict=True))]
    return out


def narrowed(pick: list[int], cands: tuple[str, ...], times: list[list[float]],
             errors: list[list[float]], budget: float) -> list[int]:
    """``pick`` with layers it sends in 16 bits sent below 16 instead, each with its candidate
    of least error below 16 bits not ruled out for it, the smallest added errors first while
    the total stays within ``budget``. The price of a plan is a model (codec speeds measured
    alone, a fitted link, an assumed overlap): where it keeps 16 bits by a few percent, or by
    the margin a prediction must clear, the steps may still be faster below 16 bits, so the
    trial times this plan too. The same as ``pick`` where nothing can move."""
    spent = sum(errors[i][c] for i, c in enumerate(pick))
    moves = []
    for i, c in enumerate(pick):
        if cands[c] == "none" or not criterion.sixteen(cands[c]):
            continue
        below = [d for d, spec in enumerate(cands) if spec != "none"
                 and not criterion.sixteen(spec) and math.isfinite(times[i][d])]
        if below:
            d = min(below, key=lambda j: errors[i][j])
            moves.append((errors[i][d] - errors[i][c], i, d))
    out = list(pick)
    for extra, i, d in sorted(moves):
        if spent + extra <= budget:
            out[i], spent = d, spent + extra
    return out


def previous(cands: tuple[str, ...], layers: list[Layer], standing: Mapping[str, str],
             errors: list[list[float]], budget: float) -> list[int] | None:
    """The standing decisions as a plan of these layers, if they cover them all and still
    meet the budget under the new numbers."""
    if not standing or {lay.name for lay in layers} != set(standing) \
            or not set(standing.values()) <= set(cands):
        return None
    old = [cands.index(standing[lay.name]) for lay in layers]
    return old if sum(errors[i][c] for i, c in enumerate(old)) <= budget else None
