"""Deciding for the automatic policy: when to decide, the decision, and each layer's pick.

Decisions after the first (every ``every`` steps, and at a regime change) price the same
measurements again with the live statistics the hook collects anyway (``signals``: each
bucket's share of the averaged gradient's norm, Accordion's regime signal): arithmetic, no
profiling and no pause. When no bucket's share moved by ``shift`` and the regime holds, the
plan is kept without even that. The decision itself is ``decide``'s.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

import compressors

from .. import costmodel
from . import report
from .config import AutoConfig
from .criterion import sixteen
from .decide import Outcome, Pricing, Table, decide, unmeasured
from .layers import Layer
from .layout import Layout
from .part import Part
from .signals import Signals

if TYPE_CHECKING:
    from ..transport import Communicator


class Decider(Part):
    """The standing decisions, their table, and the signals that say when to decide."""

    KEYS = {"decisions": "decisions", "rows": "rows", "total_error": "total_error",
            "collective_s": "collective_s", "_last_eval": "last", "_regime": "regime",
            "_live_used": "live_used", "_narrow": "narrow"}

    def __init__(self, config: AutoConfig) -> None:
        self.config = config
        #: the last decision's predicted communication seconds: (its plan, all uncompressed)
        self.predicted = (0.0, 0.0)
        self.decisions: dict[str, str] = {}
        self.rows: list[dict[str, Any]] = []  # the last decision's table (``report``)
        self.total_error = 0.0
        self.collective_s: dict[str, float] = {}  # fixed cost per candidate, last decision
        self.last: int | None = None  # the step of the last decision
        self.regime = False  # the gradient norm's regime changed since
        self.live_used: dict[Hashable, float] = {}  # the live norms it was priced with
        #: The layers the last decision sends in 16 bits that could go below 16 within the
        #: budget, and how (``decide.narrowed``): the trial times them so.
        self.narrow: dict[str, str] = {}
        self.signals = Signals(config.window, config.threshold)

    def choose(self, layer: Layer) -> str:
        if layer.name in self.decisions:
            return self.decisions[layer.name]
        return self.config.initial if layer.numel >= self.config.min_numel else "none"

    def choose_bucket(self, layers: list[Layer]) -> list[str]:
        """Each layer's decision, with the small layers (under ``min_numel``) of a bucket
        riding with its larger layers, never in more bytes than PyTorch's fp16 hook would
        send them where the plan compresses.

        Small layers never get a compressor of their own: a collective for a few kilobytes
        costs more than it saves. Where the bucket's larger layers all use one elementwise
        compressor they ride in that group (one collective over the bucket's own memory, no
        gather or scatter around them). Sparse and low-rank groups keep them out (a bias is
        not a matrix, and top-k would starve it), and under Adam so does a quantizer: a small
        layer is never profiled, so its error in Adam's space is not bounded (a norm scale's
        gradient quantized with a weight's range). Kept out, they join a group the bucket
        sends anyway: a 16-bit one, else ``none`` where a larger layer is sent uncompressed
        (the plan found 32 bits cheapest there: a fast link), else a group of their own in
        the 16-bit format of the start (``initial``: fp16), whose rounding is all the error
        they get; not float32, twice the bytes of the fp16 hook. A bucket of small layers alone
        sends them in 16 bits where the plan compresses any layer, else uncompressed.
        Decided on the bucket the hook has now (DDP rebuilds its buckets after the first
        step), the same on every rank."""
        specs = [self.choose(lay) for lay in layers]
        small = self.config.min_numel
        big = {s for s, lay in zip(specs, layers, strict=True) if lay.numel >= small}
        ride = self._ride(big)
        return [ride if lay.numel < small else s for s, lay in zip(specs, layers, strict=True)]

    def _ride(self, big: set[str]) -> str:
        """What the small layers of a bucket whose larger layers use ``big`` send."""
        initial = self.config.initial
        half = initial if initial != "none" and sixteen(initial) else None
        if not big:  # a bucket of small layers only
            planned = set(self.decisions.values()) or {initial}
            return half if half is not None and planned != {"none"} else "none"
        if len(big) == 1:
            spec = next(iter(big))
            caps = compressors.get(spec).capabilities
            if not (spec == "none" or caps.sparse or caps.allreduce_steps
                    or self.config.optimizer == "adam" and not sixteen(spec)):
                return spec
        sixteens = sorted(s for s in big if sixteen(s) and s != "none")
        if sixteens:  # the fewest bytes among the groups the bucket sends anyway
            return sixteens[0]
        return "none" if "none" in big else half or "none"

    def rides(self, layout: Layout) -> dict[str, str]:
        """The small layers that travel in their bucket's compressed group (by name)."""
        out = {}
        for layers in layout.buckets():
            for lay, spec in zip(layers, self.choose_bucket(layers), strict=True):
                if spec != self.decisions.get(lay.name, spec):
                    out[lay.name] = spec
        return out

    # -- when ----------------------------------------------------------------------------
    def close(self, step: int) -> float | None:
        """End a window of the signals at ``step``; the norm's change on a regime change."""
        change = self.signals.close(step)
        if change is not None:
            self.regime = True
        return change

    def due(self, step: int) -> bool:
        last = self.last
        return last is None or self.regime or step - last >= self.config.every

    def moved(self, shift: float) -> bool:
        """Whether a bucket's share of the live gradient norm moved by more than ``shift``
        since the last decision (identical on every rank: the averaged gradient's)."""
        def shares(live: Mapping[Hashable, float]) -> dict[Hashable, float]:
            total = sum(live.values())
            return {b: v / total for b, v in live.items()} if total > 0 else {}
        now, then = shares(self.signals.live), shares(self.live_used)
        return now.keys() != then.keys() or any(abs(now[b] - then[b]) > shift for b in now)

    def keep(self, step: int) -> None:
        """Nothing moved at ``step``: the standing plan counts as decided again."""
        self.last = step

    def why_now(self, cached: bool) -> str:
        """Why a decision is due (for the log)."""
        if self.last is None:
            return "first, from the cache" if cached else "first"
        return "regime change" if self.regime else f"every {self.config.every}"

    # -- what ----------------------------------------------------------------------------
    def begin(self, step: int) -> None:
        """A decision at ``step``: the signals it is priced with are these."""
        self.last, self.regime = step, False
        self.live_used = dict(self.signals.live)

    def decide(self, comm: Communicator, layout: Layout, measurements: Mapping[str, np.ndarray],
               cost: costmodel.CostParams, fixed: list[float], hierarchy: str = "auto"
               ) -> Outcome:
        """Decide every layer of ``layout`` (collective: ``plan.agreed``), its compressed
        calls crossing hosts as ``hierarchy`` has them."""
        cands = self.config.candidates
        names = sorted(layout.layers)
        layers = [layout.layers[n] for n in names]
        rows = np.stack([measurements[n] if n in measurements else unmeasured(lay, cands)
                         for n, lay in zip(names, layers, strict=True)])
        table = Table(layers, rows, [n in measurements for n in names],
                      [layout.bucket.get(n, n) for n in names])
        out = decide(comm, self.config, table, self.signals.live,
                     Pricing(cost, fixed, hierarchy), self.decisions)
        # A small layer's pick only priced where it may ride; what it sends is its bucket's
        # (``choose_bucket``), and its own decision stays "none".
        small = self.config.min_numel
        self.decisions = {lay.name: cands[c] if lay.numel >= small else "none"
                          for lay, c in zip(layers, out.pick, strict=True)}
        for row in out.rows:
            if row["numel"] < small and row["compressor"] != "none":
                row.update(compressor="none", bytes=4 * max(row["numel"], 1))
        self.narrow = {lay.name: cands[n] for lay, c, n in zip(layers, out.pick, out.narrow,
                                                                 strict=True)
                       if n != c and lay.numel >= small}
        self.collective_s = dict(zip(cands, fixed, strict=True))
        self.rows, self.total_error = out.rows, out.error
        self.predicted = (out.total, out.uncompressed)
        return out

    def narrower(self, old: Mapping[str, str]) -> bool:
        """Whether the decisions send some layer below 16 bits that ``old`` did not (a
        layer absent from ``old`` sent ``initial``)."""
        before = {n: old.get(n, self.config.initial) for n in self.decisions}
        return any(not sixteen(s) and sixteen(before[n]) for n, s in self.decisions.items())

    def phases(self, old: Mapping[str, str]) -> list[str]:
        """What the decisions are timed against (``trial``): 16 bits where they send some
        layer below 16 bits that ``old`` did not; below 16 bits where some layer they send in
        16 could go below within the budget (``narrow``); uncompressed where they compress a
        layer ``old`` sent whole, or on the first decision (``old`` empty) where they compress
        any: a link that makes even fp16's cast dear is found by measuring. Not uncompressed
        where the cost model prices it more than ``tunables.uncompressed_far`` times the plan's
        communication: the bytes' time is what the fitted link knows best, and on a slow link
        those steps would only cost (mlp-wide at 1 Gbit/s: 7 steps of 437 against 299 ms)."""
        out = ["sixteen"] if self.narrower(old) else []
        if self.narrow:
            out.append("narrow")
        plan_s, none_s = self.predicted
        if none_s > self.config.tunables.uncompressed_far * plan_s > 0:
            return out  # priced far slower: its steps would cost start-up, not inform
        if old:
            wider = any(s != "none" and old.get(n, "none") == "none"
                        for n, s in self.decisions.items())
        else:
            wider = any(s != "none" for s in self.decisions.values())
        return out + ["none"] if wider else out

    def hold(self, spec: str, why: str, wide: bool = False) -> list[str]:
        """Send ``spec`` for every layer decided below 16 bits (``wide``: every layer not
        already sent as ``spec``); their names."""
        held = sorted(n for n, s in self.decisions.items()
                      if (s != spec if wide else not sixteen(s)))
        self.send(dict.fromkeys(held, spec), why)
        return held

    def send(self, specs: Mapping[str, str], why: str) -> None:
        """Send each layer named in ``specs`` as it says, its row of the table too."""
        self.decisions.update(specs)
        for row in self.rows:
            spec = specs.get(row["layer"])
            if spec is not None:
                row.update(compressor=spec, why=why, bytes=int(
                    compressors.get(spec).payload_nbytes(row["numel"]) or row["bytes"]))

    def table(self, layout: Layout) -> str:
        """The last decision (``report.render``), or what is sent until the first."""
        cfg = self.config
        if not self.rows:
            return (f"(no decision yet: layers of at least {cfg.min_numel} elements "
                    f"use {cfg.initial}, smaller ones ride with them)")
        return report.render(self.rows, self.total_error, cfg.max_error, self.collective_s,
                             self.rides(layout))

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "signals": self.signals.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.signals = Signals(self.config.window, self.config.threshold)
        if "signals" in state:  # absent from older checkpoints
            self.signals.load_state_dict(state["signals"])
