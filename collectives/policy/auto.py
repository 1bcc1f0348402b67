"""Automatic per-layer compressor choice: least predicted step time under an error budget.

Every ``every`` steps, or when the gradient regime changes, the policy profiles each layer for
``probe_steps`` steps (relative error of every candidate inside error feedback, compress and
decompress time on this machine), prices each layer's allreduce with the fitted cost model
(``pricing.predict_scheme`` over the schemes the compressor can use) and picks per layer by
dynamic programming over the discretised budget (L-GreCo, Markov et al. 2024). Layers of a
DDP bucket that share a compressor are fused into one collective, so each (bucket,
compressor) pair pays the fixed cost of one collective, measured at the first decision by
timing real calls through this stack (``latency.measure``): milliseconds with Python, several
message rounds and ranks sharing cores, where the model's alpha says microseconds. The regime
signal is Accordion's (Agarwal et al. 2021): the relative change of the averaged gradient's
norm between consecutive windows of ``window`` steps above ``threshold``.

The budget bounds the total relative error of the step, sqrt(sum_l w_l r_l^2) <= max_error,
with w_l the layer's share of the squared gradient norm and r_l its relative error. Every
rank reaches the same decision: measurements are combined across ranks before deciding, the
regime signal uses the averaged gradient, which is identical on every rank, and rank 0's plan
is taken by all (``plan.agreed``).

Timing noise does not flip decisions: a candidate of more error is taken only when predicted
faster by ``margin`` (10%) and ``min_gain``, over a plan of less error and over the standing
decision when deciding again (hysteresis); and the identity twin is never priced above a
compressor for the work they share (``plain_first``: it does no coding).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import costmodel
from . import latency as latencies
from . import plan
from .base import Policy, canonical, short
from .layers import Layer
from .profile import PER_CANDIDATE, Profiler, combine, plain_first

DEFAULT_CANDIDATES = ("none", "fp16", "uniform:bits=8", "uniform:bits=4", "topk:ratio=0.01")


@dataclass(frozen=True)
class AutoConfig:
    """Hyperparameters of :class:`AutoPolicy` (validated)."""

    candidates: tuple[str, ...] = DEFAULT_CANDIDATES
    max_error: float = 0.25
    every: int = 100
    first: int = 2
    probe_steps: int = 2
    window: int = 25
    threshold: float = 0.5
    bins: int = 256
    initial: str = "none"
    #: Seconds below which a predicted gain is timing noise: a layer's option must beat
    #: every option of lower error by more than this to be considered (on a tie the lower
    #: error wins), and regrouping a bucket must save more than this.
    min_gain: float = 2e-6
    #: The share of the time a candidate of more error must save to be taken (over a plan of
    #: less error, and over the last decision when deciding again): timing on shared cores
    #: varies by tens of percent from run to run, and a smaller gain would flip decisions.
    margin: float = 0.1
    #: Layers smaller than this are sent uncompressed: they cannot save bandwidth worth the
    #: error (biases, norm scales), whatever a few microseconds of timing noise suggest.
    min_numel: int = 0

    def __post_init__(self) -> None:
        if not self.candidates:
            raise ValueError("AutoPolicy needs at least one candidate compressor")
        object.__setattr__(self, "candidates", tuple(canonical(c) for c in self.candidates))
        object.__setattr__(self, "initial", canonical(self.initial))
        if "none" not in self.candidates:
            raise ValueError("AutoPolicy's candidates must include 'none' (the error-free "
                             "choice that keeps every budget feasible)")
        if not (0 <= self.max_error < math.inf):
            raise ValueError(f"max_error must be a finite number >= 0, got {self.max_error}")
        if not (isinstance(self.min_numel, int) and self.min_numel >= 0):
            raise ValueError(f"min_numel must be an integer >= 0, got {self.min_numel!r}")
        for key in ("every", "probe_steps", "window", "bins"):
            if not (isinstance(getattr(self, key), int) and getattr(self, key) >= 1):
                raise ValueError(f"{key} must be an integer >= 1, got {getattr(self, key)!r}")
        if not (isinstance(self.first, int) and self.first >= 0):
            raise ValueError(f"first must be an integer >= 0, got {self.first!r}")
        if not self.min_gain >= 0:
            raise ValueError(f"min_gain must be >= 0 seconds, got {self.min_gain}")
        if not 0 <= self.margin < 1:
            raise ValueError(f"margin must be a share in [0, 1), got {self.margin}")
        if not self.threshold > 0:
            raise ValueError(f"threshold must be > 0, got {self.threshold}")


class AutoPolicy(Policy):
    """Profiles, prices and decides per layer; see the module doc.

    ``cost`` overrides the cost model fitted on the communicator (to plan for a network that
    is not this one). ``latency`` is the fixed cost of one collective per candidate: None
    measures it at the first decision and keeps it (in ``state_dict`` too, so a resumed run
    prices alike); with ``cost`` given, the measured overhead of this stack over this
    machine's modelled latency is added to the model's latency under ``cost``, since the same
    code on the same cores still runs each collective (``latency.fixed``). "model" uses the
    model's one-element price alone; a number or {spec: seconds} is used as it is.
    """

    adaptive = True

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
        self._probe_start: int | None = None
        self._reason = ""
        self._last_eval: int | None = None
        self._norms: dict[int, float] = {}
        self._prev_window: float | None = None
        self._regime = False
        self._profiler = Profiler(self.config.candidates)

    def choose(self, layer: Layer) -> str:
        return self.decisions.get(layer.name, self.config.initial)

    def wants_profile(self, step: int) -> bool:
        s = self._probe_start
        return s is not None and s <= step < s + self.config.probe_steps

    def observe(self, step: int, layer: Layer, grad: np.ndarray,
                bucket: int | None = None) -> None:
        """This rank's gradient of ``layer`` (in DDP bucket ``bucket``) before compression,
        on profiling steps."""
        self._profiler.observe(step, layer, grad, bucket)

    def observe_norm(self, step: int, sq_norm: float) -> None:
        """Squared norm of (part of) the averaged gradient of ``step``."""
        self._norms[step] = self._norms.get(step, 0.0) + float(sq_norm)

    def update(self, comm: Any, step: int, *, plain: str | None = None) -> bool:
        """At the start of ``step`` (nothing in flight): decide if a profile is complete,
        schedule the next one if due. Collective when it decides. True if decisions changed.
        ``plain`` is the algorithm of uncompressed groups (None: the communicator's engine)."""
        cfg, changed = self.config, False
        self._check_regime(step)
        if self._probe_start is not None and step >= self._probe_start + cfg.probe_steps:
            old = dict(self.decisions)
            self._decide(comm, step, plain)
            changed = old != self.decisions
            self._probe_start, self._profiler = None, Profiler(cfg.candidates)
        if self._probe_start is None:
            due = self._last_eval is None and step >= cfg.first
            due = due or (self._last_eval is not None and step - self._last_eval >= cfg.every)
            if due or self._regime:
                self._reason = "regime change" if self._regime and not due else \
                    ("first" if self._last_eval is None else f"every {cfg.every}")
                self._probe_start, self._regime, self._last_eval = step, False, step
        return changed

    def _check_regime(self, step: int) -> None:
        w = self.config.window
        if step == 0 or step % w:
            return
        norms = [math.sqrt(self._norms[s]) for s in range(step - w, step) if s in self._norms]
        self._norms = {s: v for s, v in self._norms.items() if s >= step}
        if not norms:
            return
        cur = float(np.mean(norms))
        prev, self._prev_window = self._prev_window, cur
        if prev is not None and prev > 0 and abs(cur - prev) / prev > self.config.threshold:
            self._regime = True
            self.log.append({"step": step, "event": "regime change",
                             "norm_change": abs(cur - prev) / prev})

    def _decide(self, comm: Any, step: int, plain: str | None) -> None:
        if not self._profiler.stats:  # no gradient was seen (the same on every rank)
            self.log.append({"step": step, "event": "nothing profiled; decisions kept"})
            return
        layers, local = self._profiler.table()
        rows = plain_first(combine(comm, local), self.config.candidates)
        cost = self.cost or costmodel.params(comm)
        cands = self.config.candidates
        share = rows[:, 0] / max(float(rows[:, 0].sum()), 1e-300)
        times, errors, rel = [], [], []
        for layer, row, w in zip(layers, rows, share, strict=True):
            cols = row[1:].reshape(len(cands), PER_CANDIDATE)
            r = np.sqrt(cols[:, 0] / np.maximum(cols[:, 1], 1e-300))
            small = layer.numel < self.config.min_numel
            times.append([math.inf if small and spec != "none" else
                          plan.price(comm.size, layer, spec, col, cost)
                          for spec, col in zip(cands, cols, strict=True)])
            errors.append([float(w * x * x) for x in r])
            rel.append(r)
        body = plan.bodies(comm.size, cands, times, cost)
        fixed = self._fixed(comm, step, cost, plain)
        buckets = [self._profiler.buckets.get(lay.name, lay.name) for lay in layers]
        cfg = self.config
        pick, total = plan.plan(cands, body, errors, cfg.max_error ** 2, cfg.bins, fixed,
                                buckets, cfg.min_gain, cfg.margin)
        old = self._previous(layers, errors, cfg.max_error ** 2)
        if old is not None:  # hysteresis: a new plan must clearly beat the standing one
            old_total = plan.step_time(old, body, fixed, buckets)
            if not plan.clear(total, old_total, cfg.min_gain, cfg.margin):
                pick, total = old, old_total
        pick = plan.agreed(comm, pick)
        total = plan.step_time(pick, body, fixed, buckets)
        self.decisions = {lay.name: cands[c] for lay, c in zip(layers, pick, strict=True)}
        self.collective_s = dict(zip(cands, fixed, strict=True))
        self.rows = [{"layer": lay.name, "numel": lay.numel, "kind": lay.kind,
                      "compressor": cands[c], "bytes": int(row[1:].reshape(-1, PER_CANDIDATE)
                                                           [c, 4]),
                      "predicted_us": (body[i][c] + fixed[c]) * 1e6, "error": float(rel[i][c])}
                     for i, (lay, c, row) in enumerate(zip(layers, pick, rows, strict=True))]
        self.total_error = math.sqrt(sum(errors[i][c] for i, c in enumerate(pick)))
        self.log.append({"step": step, "event": f"decided ({self._reason})",
                         "predicted_s": total, "error": self.total_error,
                         "collective_us": {k: v * 1e6 for k, v in self.collective_s.items()}})

    def _previous(self, layers: list[Layer], errors: list[list[float]],
                  budget: float) -> list[int] | None:
        """The standing decisions as a plan of these layers, if they cover them all and
        still meet the budget under the new profile."""
        cands = self.config.candidates
        if not self.decisions or {lay.name for lay in layers} != set(self.decisions) \
                or not set(self.decisions.values()) <= set(cands):
            return None
        old = [cands.index(self.decisions[lay.name]) for lay in layers]
        return old if sum(errors[i][c] for i, c in enumerate(old)) <= budget else None

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
        if m is None or m["ranks"] != p or set(m["overhead_s"]) != set(cands):
            seconds = latencies.measure(comm, cands, plain)
            here = costmodel.params(comm)
            m = self.measured = {"ranks": p, "seconds": seconds,
                                 "overhead_s": latencies.overhead(p, seconds, here)}
            self.log.append({"step": step, "event": "collective latency measured",
                             "latency_us": {k: v * 1e6 for k, v in seconds.items()}})
        return latencies.fixed(p, cands, m["overhead_s"], cost)

    def table(self, layers: list[Layer] | None = None) -> str:
        """The last decision: layer, numel, compressor, bytes, predicted time, error."""
        if not self.rows:
            return "(no decision yet: every layer uses " + self.config.initial + ")"
        width = max(len(r["layer"]) for r in self.rows)
        lines = [f"{'layer':<{width}} {'numel':>9} {'compressor':<16} {'bytes':>9} "
                 f"{'pred_us':>9} {'error':>7}"]
        lines += [f"{r['layer']:<{width}} {r['numel']:>9} {short(r['compressor']):<16} "
                  f"{r['bytes']:>9} {r['predicted_us']:>9.1f} {r['error']:>7.4f}"
                  for r in self.rows]
        lines.append(f"total relative error {self.total_error:.4f} (budget "
                     f"{self.config.max_error})")
        if self.collective_s:
            lines.append("one collective (us): " + ", ".join(
                f"{short(k)} {v * 1e6:.0f}" for k, v in self.collective_s.items()))
        return "\n".join(lines)

    def state_dict(self) -> dict[str, Any]:
        keep = ("decisions", "rows", "log", "total_error", "measured", "collective_s",
                "_probe_start", "_reason",
                "_last_eval", "_norms", "_prev_window", "_regime")
        state = {k: getattr(self, k) for k in keep}
        state["profiler"] = self._profiler.state_dict()
        return copy.deepcopy(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = copy.deepcopy(state)
        self._profiler = Profiler(self.config.candidates)
        self._profiler.load_state_dict(state.pop("profiler"))
        for k, v in state.items():
            setattr(self, k, v)

