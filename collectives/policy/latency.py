"""The fixed cost of one collective per compressor, measured through this stack.

The cost model's alpha prices messages on the wire; a compressed collective here also costs
Python, several message rounds, the engine's progress and the ranks sharing the cores. That
overhead is paid once per collective, so it decides whether a small layer is worth a group
of its own. ``measure`` times real calls on a small tensor, as the DDP hook makes them, and
takes the slowest rank's median so that every rank plans with the same numbers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

import compressors

from .. import api, costmodel
from . import plan
from .base import canonical
from .tunables import DEFAULTS

if TYPE_CHECKING:
    from ..transport import Communicator

#: ``AutoPolicy``'s latency argument (see :func:`check`): None measures, "model" prices.
Latency = str | float | Mapping[str, float] | None
PROBE = "policy/latency-probe"  # a name no layer has: its own seeds, no residual kept


def measure(comm: Communicator, cands: tuple[str, ...], plain: str | None = None, *,
            size: int = DEFAULTS.latency_size, repeats: int = DEFAULTS.latency_repeats,
            timeout: float | None = None) -> dict[str, float]:
    """Seconds of one allreduce of ``size`` float32 elements per candidate, the same on every
    rank (collective): :func:`slowest` of every rank's :func:`medians`, :func:`plain_first`."""
    return plain_first(slowest(comm, cands, medians(comm, cands, plain, size=size,
                                                    repeats=repeats, timeout=timeout),
                               timeout))


def plain_first(seconds: dict[str, float]) -> dict[str, float]:
    """``seconds`` with "none" at most any compressor's: the identity twin sends through the
    engine's own allreduce with no coding, so measuring it slower is noise (which would price
    the uncompressed path above fp16 and flip decisions between runs)."""
    if "none" not in seconds or len(seconds) < 2:
        return dict(seconds)
    return {**seconds, "none": min(seconds.values())}


def medians(comm: Communicator, cands: tuple[str, ...], plain: str | None = None, *,
            size: int = DEFAULTS.latency_size, repeats: int = DEFAULTS.latency_repeats,
            timeout: float | None = None) -> np.ndarray:
    """This rank's median nanoseconds per candidate over ``repeats`` calls after a warm-up
    (:func:`one_round` ``repeats + 1`` times)."""
    runs = np.stack([one_round(comm, cands, plain, step, size=size, timeout=timeout)
                     for step in range(repeats + 1)])
    return nanoseconds(runs)


def nanoseconds(runs: np.ndarray) -> np.ndarray:
    """The median of rounds of seconds (one row per round) after the first (the warm-up),
    in integer nanoseconds."""
    return (np.median(runs[1:], axis=0) * 1e9).astype(np.int64)


def one_round(comm: Communicator, cands: tuple[str, ...], plain: str | None, step: int, *,
              size: int = DEFAULTS.latency_size, timeout: float | None = None,
              engine: bool = False) -> np.ndarray:
    """This rank's seconds of one allreduce of ``size`` float32 elements per candidate
    (collective); with ``engine``, one more column: the same through the communicator's
    engine (how the hook sends a bucket uncompressed whole, as DDP does).

    "none" goes the way the hook sends uncompressed groups (``plain``: the algorithm, None
    for the communicator's engine); the others through the compressed allreduce, scheme
    "auto", no error feedback, no validation. Round-robin over the candidates: a burst of
    load on shared cores hits them alike.
    """
    # Each rank its own values, drawn from its rank: sparse unions grow as in training.
    x = np.random.default_rng(comm.rank).standard_normal(size).astype(np.float32)
    side = int(size ** 0.5)
    out = np.zeros(len(cands))
    for j, spec in enumerate(cands):
        comp = compressors.get(spec)  # fresh: the hook's warm starts stay
        buf = x[:side * side].reshape(side, side) if comp.capabilities.allreduce_steps else x
        t0 = time.perf_counter()
        if spec == "none":
            api.allreduce(buf, comm=comm, algorithm=plain or comm.engine, validate=False,
                          timeout=timeout)
        else:
            api.allreduce(buf, comm=comm, compressor=comp, scheme="auto", name=PROBE,
                          step=step, validate=False, timeout=timeout)
        out[j] = time.perf_counter() - t0
    if engine:
        t0 = time.perf_counter()
        api.allreduce(x, comm=comm, algorithm=comm.engine, validate=False, timeout=timeout)
        out = np.append(out, time.perf_counter() - t0)
    return out


def slowest(comm: Communicator, cands: tuple[str, ...], mine: np.ndarray,
            timeout: float | None = None) -> dict[str, float]:
    """Seconds per candidate: the maximum of every rank's ``mine`` (nanoseconds), since the
    slowest rank paces every collective; identical on every rank (collective)."""
    table = comm.allgather_ints(mine, collective="policy latency", timeout=timeout)
    worst = np.asarray(table).reshape(comm.size, len(cands)).max(axis=0)
    return {spec: float(ns) * 1e-9 for spec, ns in zip(cands, worst, strict=True)}


def overhead(p: int, measured: Mapping[str, float],
             here: costmodel.CostParams) -> dict[str, float]:
    """What the stack adds to one collective per candidate: the measured seconds less the
    model's one-element price (:func:`plan.latency`) on this machine (``here``), at least 0."""
    return {spec: max(s - plan.latency(p, spec, here), 0.0) for spec, s in measured.items()}


def fixed(p: int, cands: tuple[str, ...], overhead: Mapping[str, float],
          cost: costmodel.CostParams) -> list[float]:
    """Seconds one collective of each candidate costs, whatever it carries: the model's
    latency under ``cost`` (the network planned for) plus this stack's ``overhead``.

    The overhead travels to any network, since the same code on the same cores runs each
    collective; the wire latency is the planned network's. With ``cost`` the model fitted
    here, this is the measurement itself (or the model's latency, if that is larger).
    """
    return [plan.latency(p, spec, cost) + overhead[spec] for spec in cands]


def check(latency: object, cands: tuple[str, ...]) -> Latency:
    """``AutoPolicy``'s latency argument, validated: None (measure), "model", seconds for
    every candidate, or {spec: seconds} (specs made canonical)."""
    if latency is None or latency == "model":
        return latency
    if isinstance(latency, Mapping):
        out = {canonical(k): float(v) for k, v in latency.items()}
        missing = [c for c in cands if c not in out]
        if missing or not all(0 <= v < math.inf for v in out.values()):
            raise ValueError(f"latency must give every candidate a finite number of seconds "
                             f">= 0; missing {missing}, got {dict(latency)}")
        return out
    if isinstance(latency, int | float) and not isinstance(latency, bool) \
            and 0 <= latency < math.inf:
        return float(latency)
    raise ValueError(f"latency must be None (measure), 'model', seconds >= 0 or "
                     f"{{spec: seconds}}, got {latency!r}")
