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
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import costmodel
from ..compressed.checks import known_hierarchy
from . import latency as latencies
from .actions import Journal, Now, Parts
from .base import Policy
from .cachefile import CacheFile
from .config import DEFAULT_CANDIDATES, AutoConfig
from .costs import Costs
from .decider import Decider
from .layers import Layer
from .layout import Layout
from .part import Kept, Part, Whole
from .phases import Machine, Phase
from .probing import Probing
from .quality import Quality
from .trial import Trial

if TYPE_CHECKING:
    from ..transport import Communicator

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

    # The state others read (and may set), kept by the parts.
    log, cached = Kept("_journal"), Kept("_journal")  # (``cached``: read from the cache)
    decisions, rows, total_error, collective_s = (Kept("_decider") for _ in range(4))
    cost, latency, measured, fitted = (Kept("_costs") for _ in range(4))
    measurements = Kept("_probing")

    def __init__(self, config: AutoConfig | None = None, *,
                 cost: costmodel.CostParams | None = None,
                 latency: str | float | Mapping[str, float] | None = None,
                 **options: Any) -> None:
        self.config = cfg = config or AutoConfig(**options)
        self._costs = Costs(cfg.candidates, cost, latencies.check(latency, cfg.candidates),
                            cfg.tunables)
        self._journal = Journal()  # the log, and whether the cache gave the measurements
        self._layout, self._probing = Layout(), Probing(cfg)
        self._cache, self._decider, self._quality = CacheFile(cfg), Decider(cfg), Quality(cfg)
        self._trial = Trial(cfg)
        self._machine = Machine(Parts(cfg, self._layout, self._probing, self._costs,
                                      self._cache, self._decider, self._quality, self._trial,
                                      self._journal))

    def choose(self, layer: Layer) -> str:
        return self._decider.choose(layer)

    def describe(self) -> str:
        """'auto' and its settings that are not the defaults (the cache's directory aside:
        it may be another on each host)."""
        cfg, base = self.config, AutoConfig()
        keep = [f"{f.name}={getattr(cfg, f.name)}" for f in dataclasses.fields(cfg)
                if f.name != "cache_dir" and getattr(cfg, f.name) != getattr(base, f.name)]
        return "auto:" + ",".join(keep) if keep else "auto"

    def choices(self) -> frozenset[str]:
        """The candidates (the start, ``initial``, is one of them)."""
        return frozenset(self.config.candidates)

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
        ``tunables.norm_every`` (a pass over every bucket on the critical path; the window's
        mean needs no more), and every step of the window before the first decision."""
        return step % self.config.tunables.norm_every == 0 or self._decider.last is None

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
    def update(self, comm: Communicator, step: int, *, plain: str | None = None,
               hierarchy: str = "auto") -> bool:
        """Read or finish the measurements, decide when due (see ``Policy.update``): one step
        of the phase machine (``phases``). Collective when it reads the cache, profiles or
        decides."""
        old = dict(self.decisions)
        known_hierarchy(hierarchy)
        self._machine.step(Now(comm, step, plain, hierarchy))
        return old != self.decisions

    # -- reporting and state -------------------------------------------------------------
    def table(self, layers: list[Layer] | None = None) -> str:
        """The last decision (see ``report``: per layer its compressor, bytes, part of the
        predicted step, error and why), or what is sent until the first; ``layers`` is not
        needed (the policy knows them from the hook)."""
        return self._decider.table(self._layout)

    @property
    def phase(self) -> str:
        """The main phase after the last step ("warm-up", "probing", "decided"; ``phases``)."""
        return Phase.of(self._machine.parts).name

    def _parts(self) -> tuple[Part, ...]:
        return self._layout, self._probing, self._costs, self._cache, self._decider, \
            self._quality, self._trial
