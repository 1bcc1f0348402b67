"""Automatic per-layer compressor choice: least predicted step time under an error budget.

The measurements are taken once (``probing``): each layer of at least ``min_numel`` elements
is profiled for ``probe_steps`` steps, a bounded number of gradient elements a step: the
error and residual growth of every candidate inside error feedback, in the optimizer's
measure (``criterion``: Adam's preconditioned space by default), and its codec times here
(until the first decision such layers send ``initial``, fp16); the fixed cost of one
collective per candidate is timed through this stack (``costs``). Both are kept on disk
(``cachefile``): a later run of the same model, world size and link decides at step ``first``
without profiling, and a new model on this machine times no codec timed before
(``machine``). Each layer's allreduce is priced with the fitted cost model, and layers are
chosen by dynamic programming over the discretised budget (L-GreCo, Markov et al. 2024),
each (bucket, compressor) pair paying one fixed cost (``decide``, ``plan``). Later decisions
re-price the same measurements with the live gradient statistics (``decider``). The training
loss the user reports (:meth:`AutoPolicy.observe_loss`) checks each decision that compresses
below 16 bits (``quality``): if the loss falls behind, those layers send 16 bits.

The budget bounds the step's total error, sqrt(sum_l w_l r_l^2) <= max_error, with w_l the
layer's share of the squared (preconditioned) gradient norm and r_l its error. Every rank
decides alike: measurements are combined across ranks (or read by rank 0 and broadcast), the
live norms are of the averaged gradient, the loss is averaged over the ranks, and rank 0's
plan is taken by all (``plan.agreed``). Timing noise does not flip decisions: more error is
taken only for a gain of ``margin`` (10%) and ``min_gain``, over a plan of less error and over
the standing decision (hysteresis). Each decision is logged on rank 0 (logger
``collectives.policy.auto``): one line at INFO, with the table (``report``) when the decisions
changed, else the table at DEBUG.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from .. import costmodel
from ..compressed.checks import known_hierarchy
from . import latency as latencies
from . import report
from .base import Policy
from .cachefile import CacheFile
from .config import DEFAULT_CANDIDATES, AutoConfig
from .costs import Costs
from .decider import Decider
from .layers import Layer
from .layout import Layout
from .part import Kept, Part, Whole
from .probing import Probing
from .quality import Quality
from .trial import Trial

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_CANDIDATES", "AutoConfig", "AutoPolicy"]


class AutoPolicy(Whole, Policy):
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
        self._cache, self._decider, self._quality = CacheFile(cfg), Decider(cfg), Quality(cfg)
        self._trial = Trial(cfg)

    def choose(self, layer: Layer) -> str:
        return self._decider.choose(layer)

    def describe(self) -> str:
        """'auto' and its settings that are not the defaults (the cache's directory aside:
        it may be another on each host)."""
        cfg, base = self.config, AutoConfig()
        keep = [f"{f.name}={getattr(cfg, f.name)}" for f in dataclasses.fields(cfg)
                if f.name != "cache_dir" and getattr(cfg, f.name) != getattr(base, f.name)]
        return "auto:" + ",".join(keep) if keep else "auto"

    def engine_first(self) -> bool | None:
        """Whether a bucket sent uncompressed whole should go through the engine's own
        allreduce, as DDP sends it (``Costs.engine_first``; None: not measured)."""
        return self._costs.engine_first(self.config.margin)

    def choose_bucket(self, layers: list[Layer]) -> list[str]:
        """Each layer's decision, small layers riding in their bucket's elementwise
        compressor (see ``Decider.choose_bucket``)."""
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

    def observe_loss(self, step: int, loss: float) -> None:
        """This rank's training loss of ``step`` (see ``Policy.observe_loss``, ``quality``)."""
        try:
            value = float(loss)  # a number, or a one-element tensor (loss.detach())
        except (TypeError, ValueError):
            raise TypeError("observe_loss: loss must be the step's training loss as a number "
                            f"(e.g. loss.item()), got {type(loss).__name__} {loss!r:.60}") from None
        self._quality.add(step, value)

    # -- deciding ------------------------------------------------------------------------
    def update(self, comm: Any, step: int, *, plain: str | None = None,
               hierarchy: str = "auto") -> bool:
        """Read or finish the measurements, decide when due (see ``Policy.update``).
        Collective when it reads the cache, profiles or decides."""
        cfg, probing, dec, old = self.config, self._probing, self._decider, dict(self.decisions)
        known_hierarchy(hierarchy)
        if not self._called:  # the first step pays the one-time costs: the link's fit too
            self._called = True
            if self._costs.wants_fit() or cfg.cache and not cfg.link:
                costmodel.params(comm)  # (collective on first use; kept on the communicator)
        change = dec.close(step)
        if change is not None:
            self.log.append({"step": step, "event": "regime change", "norm_change": change})
        self._trial.tick(step)
        if self._trial.due():
            self._time_plan(comm, step)
        if self._quality.due(step):
            self._check_loss(comm, step)
        if not probing.active and step >= cfg.first:
            if not probing.ready and dec.last is None:
                self._read_cache(comm, step)
            todo = probing.todo(self._layout)
            if not probing.ready or todo:
                probing.begin(step, todo, self._layout)
        if probing.active and step >= probing.end():
            self._cache.keep_speeds(comm, probing.finish(comm))
            self._unsaved = True
            self._decide(comm, step, plain, hierarchy, "measured" if dec.last is None
                         else "new layers measured")
        elif probing.active:
            self._costs.round(comm, plain)  # spread over the profiling steps
        elif probing.ready and dec.due(step):
            if dec.last is not None and not dec.regime and not dec.moved(self.SHIFT) \
                    and self._quality.fallback is None:
                # The prices depend on nothing else that moves: the same plan, at no cost.
                dec.keep(step)
                self.log.append({"step": step, "event": "kept (live shares unchanged)"})
            else:
                self._decide(comm, step, plain, hierarchy, dec.why_now(self.cached))
        if self._unsaved:  # measured something new: keep it for the next run
            self._cache.write(comm, self._layout, self.measurements, self.measured,
                              self.fitted)
            self._unsaved = False
        return old != self.decisions

    def _decide(self, comm: Any, step: int, plain: str | None, hierarchy: str,
                reason: str) -> None:
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
        before = self._quality.before(comm, step)  # (collective when the check is on)
        out = self._decider.decide(comm, self._layout, self.measurements, cost, fixed,
                                   hierarchy)
        self.log.append({"step": step, "event": f"decided ({reason})",
                         "predicted_s": out.total, "error": self.total_error,
                         "collective_us": {k: v * 1e6 for k, v in self.collective_s.items()}})
        fallback = self._quality.decided(step, self._decider, old, before)
        if fallback is None and self._trial.repeat(self._decider, self._quality.safe()):
            self.log.append({"step": step, "event": "trial: its measurement kept"})
        elif fallback is None:  # measured against 16 bits and uncompressed next
            self._trial.start(step, self._decider.phases(old))
        if fallback is not None:
            self.log.append({"step": step, "event": f"quality {fallback}"})
        if comm.rank == 0:  # every rank decides alike
            report.log_decision(log, step, reason, self.rows, out.total,
                                self._decider.rides(self._layout), old != self.decisions,
                                self.table())

    def _time_plan(self, comm: Any, step: int) -> None:
        """The trial's phase has its steps: time 16 bits next, or keep the faster (collective
        at the trial's end; every rank alike)."""
        outcome = self._trial.advance(comm, step, self._decider, self._quality.safe())
        self.log.append({"step": step, "event": f"trial: {outcome}",
                         **(self._trial.result or {})})
        if comm.rank == 0 and outcome in ("kept", "16 bits", "uncompressed"):
            r = self._trial.result or {}
            times = ", ".join(f"{r[k] * 1e3:.1f} ms {w}" for k, w in (
                ("plan_s", "under the plan"), ("sixteen_s", "at 16 bits"),
                ("none_s", "uncompressed")) if k in r)
            log.info("step %d: measured a step %s: %s kept", step, times,
                     "the plan" if outcome == "kept" else outcome)

    def _check_loss(self, comm: Any, step: int) -> None:
        """The window after a decision has ended: 16 bits if the loss fell behind
        (collective; every rank alike), logged once on rank 0."""
        fell = self._quality.fell(comm, step, self._decider)
        if fell is not None:
            self.log.append({"step": step, "event": "quality fell behind", **fell})
            if comm.rank == 0 and fell["held"]:
                log.warning("%s\n%s", report.fell_behind(step, fell, self._quality.safe()),
                            self.table())

    def _read_cache(self, comm: Any, step: int) -> None:
        record = self._cache.read(comm, self._layout)
        if record is None:
            self._probing.speeds = self._cache.speeds(comm)  # (this machine's, any model's)
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
        return self._layout, self._probing, self._costs, self._cache, self._decider, \
            self._quality, self._trial
