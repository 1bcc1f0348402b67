"""Automatic per-layer compressor choice: least predicted step time under an error budget.

The measurements are taken once (``probing``): each layer of at least ``min_numel`` elements
is profiled for ``probe_steps`` steps, whole DDP buckets together (relative error and
residual growth of every candidate inside error feedback, compress and decompress time on
this machine; until the first decision such layers send ``initial``, fp16), and the fixed
cost of one collective per candidate is timed through this stack (``costs``). Both are kept
on disk (``cachefile``): a later run of the same model, world size and link decides at step
``first`` without profiling. Each layer's allreduce is priced with the fitted cost model,
and layers are chosen by dynamic programming over the discretised budget (L-GreCo, Markov et
al. 2024); layers of a bucket sharing a compressor are fused into one collective, so each
(bucket, compressor) pair pays one fixed cost (``decide``, ``plan``). Later decisions
re-price the same measurements with the live gradient statistics (``decider``).

The budget bounds the total relative error of the step, sqrt(sum_l w_l r_l^2) <= max_error,
with w_l the layer's share of the squared gradient norm and r_l its relative error. Every
rank reaches the same decision: measurements are combined across ranks (or read by rank 0
and broadcast), the live norms are of the averaged gradient, identical on every rank, and
rank 0's plan is taken by all (``plan.agreed``). Timing noise does not flip decisions: a
candidate of more error is taken only when predicted faster by ``margin`` (10%) and
``min_gain``, over a plan of less error and over the standing decision (hysteresis); the
identity twin is never priced above a compressor for the work they share (``plain_first``).
Each decision is logged on rank 0 (logger ``collectives.policy.auto``): one line at INFO,
with the table (``report``) when the decisions changed, else the table at DEBUG.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from .. import costmodel
from . import latency as latencies
from . import report
from .base import Policy
from .cachefile import CacheFile
from .config import DEFAULT_CANDIDATES, AutoConfig
from .costs import Costs
from .decider import Decider
from .layers import Layer
from .layout import Layout
from .part import Kept, Part
from .probing import Probing

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_CANDIDATES", "AutoConfig", "AutoPolicy"]


class AutoPolicy(Policy):
    """Measures once, prices and decides per layer; see the module doc.

    ``cost`` overrides the cost model fitted on the communicator (to plan for a network that
    is not this one). ``latency`` is the fixed cost of one collective per candidate: None
    measures it at the first decision and keeps it (in ``state_dict`` and the cache too);
    with ``cost`` given, the measured overhead of this stack over this machine's modelled
    latency is added to the model's latency under ``cost`` (``latency.fixed``). "model" uses
    the model's one-element price alone; a number or {spec: seconds} is used as it is.
    """

    adaptive = True
    SHIFT = 0.05  # a move of a bucket's live share that is worth pricing again
    #: Sampled elements profiled in one step (each under every candidate): about 10 ms.
    PROBE_ELEMENTS = 1 << 20
    NORM_EVERY = 4  # steps per gradient-norm reading once decided (see ``wants_norm``)

    # The state others read (and may set), kept by the parts.
    decisions, rows, total_error, collective_s = (Kept("_decider") for _ in range(4))
    cost, latency, measured, fitted = (Kept("_costs") for _ in range(4))
    measurements = Kept("_probing")

    def __init__(self, config: AutoConfig | None = None, *,
                 cost: costmodel.CostParams | None = None,
                 latency: str | float | Mapping[str, float] | None = None,
                 **options: Any) -> None:
        self.config = cfg = config or AutoConfig(**options)
        self._costs = Costs(cfg.candidates, cost, latencies.check(latency, cfg.candidates))
        self.log: list[dict[str, Any]] = []
        self.cached = False  # the measurements came from the cache
        self._called = False  # update has run (on this communicator)
        self._unsaved = False  # measurements the cache does not hold yet
        self._layout, self._probing = Layout(), Probing(cfg)
        self._cache, self._decider = CacheFile(cfg), Decider(cfg)

    def choose(self, layer: Layer) -> str:
        return self._decider.choose(layer)

    def choose_bucket(self, layers: list[Layer]) -> list[str]:
        """Each layer's decision, with the small layers (under ``min_numel``) of a bucket
        whose larger layers all use one elementwise compressor (a quantizer or a 16-bit
        format) riding in that group.

        Small layers never get a compressor of their own. Left out of such a bucket, they
        would cost it a second collective for a few kilobytes, and the large layers would be
        gathered into a fused buffer and scattered back around them; riding keeps the bucket
        one collective over its own memory. Sparse and low-rank groups keep them out (a bias
        is not a matrix, and top-k would starve it). Decided on the bucket the hook has now
        (DDP rebuilds its buckets after the first step), the same on every rank."""
        return self._decider.choose_bucket(layers)

    # -- what the hook reports (see ``Policy``) -------------------------------------------
    def see_bucket(self, bucket: int, layers: list[Layer], dtypes: list[str]) -> None:
        self._layout.see_bucket(bucket, layers, dtypes)

    def wants_profile(self, step: int, layer: str | None = None) -> bool:
        return self._probing.wants(step, layer)

    def observe(self, step: int, layer: Layer, grad: np.ndarray,
                bucket: int | None = None) -> None:
        self._layout.note(layer, bucket)
        if layer.numel >= self.config.min_numel and self.wants_profile(step, layer.name):
            self._probing.observe(step, layer, grad, bucket)

    def wants_norm(self, step: int) -> bool:
        """Whether the hook should report ``step``'s gradient norms: one step in
        ``NORM_EVERY`` (a pass over every bucket on the critical path; the window's mean
        needs no more), and every step of the window before the first decision."""
        return step % self.NORM_EVERY == 0 or self._decider.last is None

    def observe_norm(self, step: int, sq_norm: float, bucket: Hashable | None = None) -> None:
        self._decider.signals.add(step, sq_norm, bucket)

    # -- deciding ------------------------------------------------------------------------
    def update(self, comm: Any, step: int, *, plain: str | None = None) -> bool:
        """Read or finish the measurements, decide when due (see ``Policy.update``).
        Collective when it reads the cache, profiles or decides."""
        cfg, probing, dec, old = self.config, self._probing, self._decider, dict(self.decisions)
        if not self._called:  # the first step pays the one-time costs: the link's fit too
            self._called = True
            if self._costs.wants_fit() or cfg.cache and not cfg.link:
                costmodel.params(comm)  # (collective on first use; kept on the communicator)
        change = dec.close(step)
        if change is not None:
            self.log.append({"step": step, "event": "regime change", "norm_change": change})
        if not probing.active and step >= cfg.first:
            if not probing.ready and dec.last is None:
                self._read_cache(comm, step)
            todo = probing.todo(self._layout)
            if not probing.ready or todo:
                probing.begin(step, todo, self._layout, self.PROBE_ELEMENTS)
        if probing.active and step >= probing.end():
            probing.finish(comm)
            self._unsaved = True
            self._decide(comm, step, plain, "measured" if dec.last is None
                         else "new layers measured")
        elif probing.active:
            self._costs.round(comm, plain)  # spread over the profiling steps
        elif probing.ready and dec.due(step):
            if dec.last is not None and not dec.regime and not dec.moved(self.SHIFT):
                # The prices depend on nothing else that moves: the same plan, at no cost.
                dec.keep(step)
                self.log.append({"step": step, "event": "kept (live shares unchanged)"})
                return False
            self._decide(comm, step, plain, dec.why_now(self.cached))
        if self._unsaved:  # measured something new: keep it for the next run
            self._cache.write(comm, self._layout, self.measurements, self.measured,
                              self.fitted)
            self._unsaved = False
        return old != self.decisions

    def _decide(self, comm: Any, step: int, plain: str | None, reason: str) -> None:
        self._decider.begin(step)
        if not self._layout.layers:  # no gradient was seen (the same on every rank)
            self.log.append({"step": step, "event": "nothing profiled; decisions kept"})
            return
        cost = self._costs.model(comm)  # (collective on first use)
        fixed, seconds = self._costs.fixed(comm, cost, plain)
        if seconds is not None:
            self._unsaved = True
            self.log.append({"step": step, "event": "collective latency measured",
                             "latency_us": {k: v * 1e6 for k, v in seconds.items()}})
        old = dict(self.decisions)
        out = self._decider.decide(comm, self._layout, self.measurements, cost, fixed)
        self.log.append({"step": step, "event": f"decided ({reason})",
                         "predicted_s": out.total, "error": self.total_error,
                         "collective_us": {k: v * 1e6 for k, v in self.collective_s.items()}})
        if comm.rank == 0 and log.isEnabledFor(logging.INFO):  # every rank decides alike
            line = report.summary(step, reason, self.rows, out.total,
                                  self._decider.rides(self._layout))
            if old != self.decisions:
                log.info("%s\n%s", line, self.table())
            else:
                log.info("%s", line)
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("step %d: the decisions, unchanged\n%s", step, self.table())

    def _read_cache(self, comm: Any, step: int) -> None:
        record = self._cache.read(comm, self._layout)
        if record is None:
            return
        self._probing.adopt(record["table"])
        self._costs.adopt(record["measured"], record["fit"])
        self.cached = True
        assert self._cache.found is not None
        self.log.append({"step": step, "event": "measurements read",
                         "file": str(self._cache.found.path)})

    # -- reporting and state -------------------------------------------------------------
    def table(self, layers: list[Layer] | None = None) -> str:
        """The last decision (see ``report``: per layer its compressor, bytes, part of the
        predicted step, error and why), or what is sent until the first; ``layers`` is not
        needed (the policy knows them from the hook)."""
        return self._decider.table(self._layout)

    def _parts(self) -> tuple[Part, ...]:
        return self._layout, self._probing, self._costs, self._cache, self._decider

    def state_dict(self) -> dict[str, Any]:
        """One flat dict: the log, ``cached`` and each part's fields (see ``part``)."""
        state: dict[str, Any] = {"log": self.log, "cached": self.cached}
        for part in self._parts():
            state.update(part.state_dict())
        return copy.deepcopy(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = copy.deepcopy(state)
        self.log, self.cached = state.get("log", self.log), state.get("cached", self.cached)
        for part in self._parts():
            part.load_state_dict(state)
