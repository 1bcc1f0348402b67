"""Automatic per-layer compressor choice: least predicted step time under an error budget.

The measurements are taken once: each layer of at least ``min_numel`` elements is profiled
for ``probe_steps`` steps, whole DDP buckets together up to ``PROBE_ELEMENTS`` sampled
elements a step (relative error and residual growth of every candidate inside error feedback,
compress and decompress time on this machine; until the first decision such layers send
``initial``, fp16), and the fixed cost of
one collective per candidate is timed through this stack (``latency.measure``: milliseconds
with Python, message rounds and shared cores, where the model's alpha says microseconds).
Both are kept on disk (``cache``): a later run of the same model, world size and link
decides at step ``first`` without profiling. Each layer's allreduce is priced with the fitted
cost model (``pricing.predict_scheme`` over the schemes the compressor can use), and layers
are chosen by dynamic programming over the discretised budget (L-GreCo, Markov et al.
2024); layers of a bucket sharing a compressor are fused into one collective, so each
(bucket, compressor) pair pays one fixed cost.

Later decisions (every ``every`` steps, and at a regime change) price the same measurements
again with the live statistics the hook collects anyway (``signals``: each bucket's share of
the averaged gradient's norm, Accordion's regime signal): arithmetic, no profiling and no
pause; when no bucket's share moved by ``SHIFT`` and the regime holds, the plan is kept
without even that. Layers the measurements lack (a model that grew) are profiled alone, one
bucket per step.

The budget bounds the total relative error of the step, sqrt(sum_l w_l r_l^2) <= max_error,
with w_l the layer's share of the squared gradient norm and r_l its relative error. Every
rank reaches the same decision: measurements are combined across ranks (or read by rank 0
and broadcast), the live norms are of the averaged gradient, identical on every rank, and
rank 0's plan is taken by all (``plan.agreed``). Timing noise does not flip decisions: a
candidate of more error is taken only when predicted faster by ``margin`` (10%) and
``min_gain``, over a plan of less error and over the standing decision (hysteresis); the
identity twin is never priced above a compressor for the work they share (``plain_first``).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

import compressors

from .. import costmodel
from . import cache, plan
from . import latency as latencies
from . import profile as profiler
from .base import Policy
from .config import DEFAULT_CANDIDATES, AutoConfig
from .decide import decide, render, unmeasured
from .layers import Layer
from .profile import Profiler, combine, plain_first
from .signals import Signals

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

    def __init__(self, config: AutoConfig | None = None, *,
                 cost: costmodel.CostParams | None = None,
                 latency: str | float | Mapping[str, float] | None = None,
                 **options: Any) -> None:
        self.config = config or AutoConfig(**options)
        self.cost = cost
        self.latency = latencies.check(latency, self.config.candidates)
        #: What ``latency.measure`` found: ranks, seconds and overhead per candidate.
        self.measured: dict[str, Any] | None = None
        self.collective_s: dict[str, float] = {}  # fixed cost per candidate, last decision
        self.decisions: dict[str, str] = {}
        self.rows: list[dict[str, Any]] = []
        self.log: list[dict[str, Any]] = []
        self.total_error = 0.0
        #: The cost model of the link, fitted at the first decision or read with the
        #: measurements: a later fit on busy cores differs, and would flip decisions.
        self.fitted: costmodel.CostParams | None = None
        #: Each profiled layer's row, combined over the ranks (see ``profile``).
        self.measurements: dict[str, np.ndarray] = {}
        self.cached = False  # the measurements came from the cache
        self._ready = False  # measurements taken (or read): decisions can be priced
        self._called = False  # update has run (on this communicator)
        self._unsaved = False  # measurements the cache does not hold yet
        self._rounds: list[np.ndarray] = []  # this rank's latency rounds so far (seconds)
        self._layers: dict[str, Layer] = {}
        self._bucket: dict[str, Hashable] = {}
        self._layout: dict[str, tuple[int, int, str]] = {}  # name: bucket, position, dtype
        self._tried: set[str] = set()
        #: The layers to profile, one bucket's at a time (None: all at once).
        self._schedule: list[list[str]] | None = None
        self._file: cache.Located | None = None
        self._probe_start: int | None = None
        self._last_eval: int | None = None
        self._regime = False
        self._live_used: dict[Hashable, float] = {}  # the live norms of the last decision
        self._signals = Signals(self.config.window, self.config.threshold)
        self._profiler = Profiler(self.config.candidates)

    def choose(self, layer: Layer) -> str:
        if layer.name in self.decisions:
            return self.decisions[layer.name]
        return self.config.initial if layer.numel >= self.config.min_numel else "none"

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
        specs = [self.choose(lay) for lay in layers]
        big = {s for s, lay in zip(specs, layers, strict=True)
               if lay.numel >= self.config.min_numel}
        if len(big) != 1:
            return specs
        spec = big.pop()
        caps = compressors.get(spec).capabilities
        if spec == "none" or caps.sparse or caps.allreduce_steps:
            return specs
        return [spec if lay.numel < self.config.min_numel else s
                for s, lay in zip(specs, layers, strict=True)]

    # -- what the hook reports ---------------------------------------------------------
    def see_bucket(self, bucket: int, layers: list[Layer], dtypes: list[str]) -> None:
        """The layers of DDP bucket ``bucket`` in its order, with their dtypes (the layout)."""
        for j, (lay, dtype) in enumerate(zip(layers, dtypes, strict=True)):
            self._layers[lay.name], self._bucket[lay.name] = lay, bucket
            self._layout[lay.name] = (bucket, j, dtype)

    def wants_profile(self, step: int, layer: str | None = None) -> bool:
        """Whether ``step`` profiles (the layer named ``layer``, when given)."""
        s = self._probe_start
        if s is None or not s <= step < self._probe_end():
            return False
        return self._schedule is None or layer is None or \
            layer in self._schedule[(step - s) // self.config.probe_steps]

    def observe(self, step: int, layer: Layer, grad: np.ndarray,
                bucket: int | None = None) -> None:
        """This rank's gradient of ``layer`` (in DDP bucket ``bucket``) before compression,
        on profiling steps."""
        self._layers.setdefault(layer.name, layer)
        if bucket is not None:
            self._bucket.setdefault(layer.name, bucket)
        if layer.numel >= self.config.min_numel and self.wants_profile(step, layer.name):
            self._profiler.observe(step, layer, grad, bucket)

    def wants_norm(self, step: int) -> bool:
        """Whether the hook should report ``step``'s gradient norms: one step in
        ``NORM_EVERY`` (a pass over every bucket on the critical path; the window's mean needs
        no more), and every step of the window before the first decision."""
        return step % self.NORM_EVERY == 0 or self._last_eval is None  # (adaptive)

    def observe_norm(self, step: int, sq_norm: float, bucket: Hashable | None = None) -> None:
        """Squared norm of (part of, bucket ``bucket``) the averaged gradient of ``step``."""
        self._signals.add(step, sq_norm, bucket)

    # -- deciding ------------------------------------------------------------------------
    def update(self, comm: Any, step: int, *, plain: str | None = None) -> bool:
        """At the start of ``step`` (nothing in flight): read or finish the measurements,
        decide when due. Collective when it reads the cache, profiles or decides. True if
        the decisions changed. ``plain``: the algorithm of uncompressed groups (None: the
        communicator's engine)."""
        cfg, old = self.config, dict(self.decisions)
        if not self._called:  # the first step pays the one-time costs: the link's fit too
            self._called = True
            if self.cost is None or self.latency is None or cfg.cache and not cfg.link:
                costmodel.params(comm)  # (collective on first use; kept on the communicator)
        change = self._signals.close(step)
        if change is not None:
            self._regime = True
            self.log.append({"step": step, "event": "regime change", "norm_change": change})
        if self._probe_start is None and step >= cfg.first:
            if not self._ready and self._last_eval is None:
                self._read_cache(comm, step)
            todo = self._unmeasured()
            if not self._ready or todo:
                self._start(step, todo)
        if self._probe_start is not None and step >= self._probe_end():
            self._finish(comm)
            self._decide(comm, step, plain, "measured" if self._last_eval is None
                         else "new layers measured")
        elif self._probe_start is not None:
            self._latency_round(comm, plain)  # spread over the profiling steps
        elif self._probe_start is None and self._ready and self._due(step):
            if self._last_eval is not None and not self._regime and not self._moved():
                # The prices depend on nothing else that moves: the same plan, at no cost.
                self._last_eval = step
                self.log.append({"step": step, "event": "kept (live shares unchanged)"})
                return False
            reason = ("first, from the cache" if self.cached else "first") \
                if self._last_eval is None else \
                ("regime change" if self._regime else f"every {cfg.every}")
            self._decide(comm, step, plain, reason)
        if self._unsaved:  # measured something new: keep it for the next run
            self._write_cache(comm)
            self._unsaved = False
        return old != self.decisions

    def _moved(self) -> bool:
        """Whether a bucket's share of the live gradient norm moved by more than ``SHIFT``
        since the last decision (identical on every rank: the averaged gradient's)."""
        def shares(live: Mapping[Hashable, float]) -> dict[Hashable, float]:
            total = sum(live.values())
            return {b: v / total for b, v in live.items()} if total > 0 else {}
        now, then = shares(self._signals.live), shares(self._live_used)
        return now.keys() != then.keys() or \
            any(abs(now[b] - then[b]) > self.SHIFT for b in now)

    def _due(self, step: int) -> bool:
        last = self._last_eval
        return last is None or self._regime or step - last >= self.config.every

    def _unmeasured(self) -> list[str]:
        return [n for n in self._layout if self._layers[n].numel >= self.config.min_numel
                and n not in self.measurements and n not in self._tried]

    def _start(self, step: int, todo: list[str]) -> None:
        self._probe_start, self._tried = step, self._tried | set(todo)
        by: dict[int, list[str]] = {}
        for n in todo:
            by.setdefault(self._layout[n][0], []).append(n)
        if not self._layout:
            self._schedule = None
            return
        # Whole buckets together, as many per group as ``PROBE_ELEMENTS`` sampled elements
        # allow: a few steps for most models, spread over more for very many layers.
        groups: list[list[str]] = []
        room = 0
        for b in sorted(by):
            cost = sum(min(self._layers[n].numel, profiler.SAMPLE) for n in by[b])
            if not groups or room + cost > self.PROBE_ELEMENTS:
                groups.append([])
                room = 0
            groups[-1] += sorted(by[b])
            room += cost
        self._schedule = groups

    def _probe_end(self) -> int:
        assert self._probe_start is not None
        n = 1 if self._schedule is None else len(self._schedule)
        return self._probe_start + self.config.probe_steps * n

    def _finish(self, comm: Any) -> None:
        if self._profiler.stats:  # the same layers on every rank (DDP's buckets)
            layers, local = self._profiler.table()
            rows = plain_first(combine(comm, local), self.config.candidates)
            self.measurements.update({lay.name: row for lay, row in zip(layers, rows,
                                                                        strict=True)})
        self._ready, self._probe_start, self._schedule = True, None, None
        self._unsaved = True
        self._profiler = Profiler(self.config.candidates)

    def _decide(self, comm: Any, step: int, plain: str | None, reason: str) -> None:
        self._last_eval, self._regime = step, False
        self._live_used = dict(self._signals.live)
        names = sorted(self._layers)
        if not names:  # no gradient was seen (the same on every rank)
            self.log.append({"step": step, "event": "nothing profiled; decisions kept"})
            return
        cands = self.config.candidates
        layers = [self._layers[n] for n in names]
        rows = np.stack([self.measurements[n] if n in self.measurements else
                         unmeasured(lay, cands) for n, lay in zip(names, layers, strict=True)])
        if self.fitted is None and (self.cost is None or self.latency is None):
            self.fitted = costmodel.params(comm)  # (collective on first use)
        cost = self.cost or self.fitted
        assert cost is not None
        fixed = self._fixed(comm, step, cost, plain)
        out = decide(comm, self.config, layers, rows, [n in self.measurements for n in names],
                     [self._bucket.get(n, n) for n in names], self._signals.live, cost, fixed,
                     self.decisions)
        self.decisions = {lay.name: cands[c] for lay, c in zip(layers, out.pick, strict=True)}
        self.collective_s = dict(zip(cands, fixed, strict=True))
        self.rows, self.total_error = out.rows, out.error
        self.log.append({"step": step, "event": f"decided ({reason})",
                         "predicted_s": out.total, "error": self.total_error,
                         "collective_us": {k: v * 1e6 for k, v in self.collective_s.items()}})
        if comm.rank == 0 and log.isEnabledFor(logging.INFO):  # every rank decides alike
            log.info("step %d: decided (%s), predicted %.2f ms a step\n%s", step, reason,
                     out.total * 1e3, self.table())

    def _fixed(self, comm: Any, step: int, cost: costmodel.CostParams,
               plain: str | None) -> list[float]:
        """Seconds of one collective per candidate (see the class doc); measures once."""
        cands, p = self.config.candidates, comm.size
        if self.latency == "model":
            return [plan.latency(p, spec, cost) for spec in cands]
        if isinstance(self.latency, Mapping):
            return [self.latency[spec] for spec in cands]
        if self.latency is not None:
            return [float(self.latency)] * len(cands)
        m = self.measured
        if self._latency_needed(p):
            while len(self._rounds) < latencies.REPEATS + 1:
                self._latency_round(comm, plain)
            mine = latencies.nanoseconds(np.stack(self._rounds))
            seconds = latencies.plain_first(latencies.slowest(comm, cands, mine))
            self._rounds = []
            here = self.fitted or costmodel.params(comm)
            m = self.measured = {"ranks": p, "seconds": seconds,
                                 "overhead_s": latencies.overhead(p, seconds, here)}
            self._unsaved = True
            self.log.append({"step": step, "event": "collective latency measured",
                             "latency_us": {k: v * 1e6 for k, v in seconds.items()}})
        return latencies.fixed(p, cands, m["overhead_s"], cost)

    def _latency_needed(self, p: int) -> bool:
        m = self.measured
        return self.latency is None and (m is None or m["ranks"] != p
                                         or set(m["overhead_s"]) != set(self.config.candidates))

    def _latency_round(self, comm: Any, plain: str | None) -> None:
        """One timed call per candidate (collective), when the latencies are still wanted:
        ``REPEATS + 1`` rounds, one per profiling step, the rest at the decision."""
        if self._latency_needed(comm.size) and len(self._rounds) <= latencies.REPEATS:
            self._rounds.append(latencies.one_round(comm, self.config.candidates, plain,
                                                    len(self._rounds)))

    # -- the cache -----------------------------------------------------------------------
    def _located(self, comm: Any) -> cache.Located | None:
        """This model's cache file; None without a layout (the hook reports it) or with
        the cache off. Collective on first use (the cost model's fit names the link)."""
        cfg = self.config
        if not cfg.cache or not self._layout:
            return None
        order = sorted(self._layout.items(), key=lambda kv: kv[1][:2])
        layout = [[b, n, list(self._layers[n].shape), dt] for n, (b, _, dt) in order]
        link = cfg.link or cache.link(comm.engine, costmodel.params(comm))
        return cache.locate(layout, comm.size, link, cfg)

    def _read_cache(self, comm: Any, step: int) -> None:
        found = self._file = self._located(comm)
        if found is None:
            return
        record = cache.fetch(comm, found, self.config.candidates)
        if record is None:
            return
        self.measurements = record["table"]
        if record["measured"] is not None:
            self.measured = record["measured"]
        if record["fit"] is not None:
            self.fitted = costmodel.CostParams(**record["fit"])
        self._ready = self.cached = True
        self.log.append({"step": step, "event": "measurements read", "file": str(found.path)})

    def _write_cache(self, comm: Any) -> None:
        found = self._file  # the key read at the first decision, as the next run reads it
        if found is None or {row[1] for row in found.layout} != set(self._layout):
            found = self._located(comm)  # (a model that grew: its new layout)
        if found is not None and comm.rank == 0:
            fit = None if self.fitted is None else dataclasses.asdict(self.fitted)
            cache.store(found, self.config.candidates, self.measurements, self.measured, fit)

    # -- reporting and state -------------------------------------------------------------
    def table(self, layers: list[Layer] | None = None) -> str:
        """The last decision: layer, numel, compressor, bytes, predicted time, error."""
        if not self.rows:
            return (f"(no decision yet: layers of at least {self.config.min_numel} elements "
                    f"use {self.config.initial}, smaller ones none)")
        return render(self.rows, self.total_error, self.config.max_error, self.collective_s)

    KEEP = ("decisions", "rows", "log", "total_error", "measured", "fitted", "collective_s",
            "measurements", "cached", "_ready", "_layers", "_bucket", "_layout", "_tried",
            "_schedule", "_file", "_probe_start", "_last_eval", "_regime", "_live_used")

    def state_dict(self) -> dict[str, Any]:
        state = {k: getattr(self, k) for k in self.KEEP}
        state["signals"] = self._signals.state_dict()
        state["profiler"] = self._profiler.state_dict()
        return copy.deepcopy(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = copy.deepcopy(state)
        self._profiler = Profiler(self.config.candidates)
        self._profiler.load_state_dict(state.pop("profiler"))
        self._signals = Signals(self.config.window, self.config.threshold)
        signals = state.pop("signals", None)  # absent from older checkpoints
        if signals is not None:
            self._signals.load_state_dict(signals)
        for k, v in state.items():
            if k in self.KEEP:
                setattr(self, k, v)
