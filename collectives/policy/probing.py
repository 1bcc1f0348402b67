"""Profiling for the automatic policy: which layers a step profiles, and the table it leaves.

Each layer of at least ``min_numel`` elements is profiled once, for ``probe_steps`` steps
(``profile``: every candidate inside error feedback, on a sample of the layer's rows). The
work of a profiling step is bounded: its layers hold at most ``profile_elements_per_step``
gradient elements (each is copied to the host and read whole once), and their samples a
quarter of that (each sampled element is coded by every candidate), so a few steps cover most
models and very many layers are spread over more. Layers go in DDP bucket order, a bucket
whole where it fits; a layer larger than the bound goes alone. Layers the measurements lack
later (a model that grew) are profiled the same way. When the steps are over, every rank's
rows are combined (the same table on every rank) into ``measurements``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import machine
from .columns import width
from .config import AutoConfig
from .layers import Layer
from .layout import Layout
from .part import Part
from .profile import Profiler, combine, plain_first
from .tunables import DEFAULTS, Tunables

if TYPE_CHECKING:
    from ..transport import Communicator


class Probing(Part):
    """The profiling under way (if any) and the measurements taken or read so far."""

    KEYS = {"measurements": "measurements", "_ready": "ready", "_tried": "tried",
            "_schedule": "schedule", "_probe_start": "start", "_speeds": "speeds"}

    def __init__(self, config: AutoConfig) -> None:
        self.config = config
        #: Each profiled layer's row, combined over the ranks (see ``profile``).
        self.measurements: dict[str, np.ndarray] = {}
        self.ready = False  # measurements taken (or read): decisions can be priced
        self.tried: set[str] = set()  # layers profiled once already (measured or not)
        #: The layers to profile, one group of buckets at a time (None: all at once).
        self.schedule: list[list[str]] | None = None
        self.start: int | None = None  # the first step of the profiling under way
        #: This machine's codec speeds, where known before profiling (``machine``).
        self.speeds: dict[str, list[float]] = {}
        self.profiler = Profiler(config.candidates, tunables=config.tunables)

    @property
    def active(self) -> bool:
        """Whether profiling has begun and not yet been finished."""
        return self.start is not None

    def end(self) -> int:
        """The first step after the profiling under way."""
        assert self.start is not None
        n = 1 if self.schedule is None else len(self.schedule)
        return self.start + self.config.probe_steps * n

    def wants(self, step: int, layer: str | None = None) -> bool:
        """Whether ``step`` profiles (the layer named ``layer``, when given)."""
        s = self.start
        if s is None or not s <= step < self.end():
            return False
        return self.schedule is None or layer is None or \
            layer in self.schedule[(step - s) // self.config.probe_steps]

    def observe(self, step: int, layer: Layer, grad: np.ndarray, bucket: int | None) -> None:
        """Profile this rank's gradient of ``layer`` (on a step that :meth:`wants` it)."""
        self.profiler.observe(step, layer, grad, bucket)

    def todo(self, layout: Layout) -> list[str]:
        """The placed layers to profile that were never tried."""
        return [n for n in layout.place if layout.layers[n].numel >= self.config.min_numel
                and n not in self.measurements and n not in self.tried]

    def begin(self, step: int, todo: list[str], layout: Layout) -> None:
        """Profile ``todo`` from ``step`` on, ``profile_elements_per_step`` gradient elements
        a step at most (see the module doc; all at once without a layout)."""
        self.start, self.tried = step, self.tried | set(todo)
        if not self.profiler.stats:  # (a profiler under way keeps the speeds it began with)
            self.profiler.speeds = dict(self.speeds)
        if not layout.place:
            self.schedule = None
            return
        by: dict[int, list[str]] = {}
        for n in sorted(todo, key=lambda n: layout.place[n][:2]):
            by.setdefault(layout.place[n][0], []).append(n)
        self.schedule = schedule([by[b] for b in sorted(by)],
                                 {n: layout.layers[n].numel for n in todo},
                                 self.config.profile_elements_per_step, self.config.tunables)

    def finish(self, comm: Communicator) -> dict[str, list[float]]:
        """End the profiling: every rank's rows combined into ``measurements``
        (collective when anything was profiled: the same layers on every rank). Returns the
        codec speeds timed (``machine.rates``), for this machine's file."""
        cands, prof, timed = self.config.candidates, self.profiler, {}
        if prof.stats:
            layers, local = prof.table()
            rows = dict(zip([lay.name for lay in layers], combine(comm, local), strict=True))
            clocked = {s for s in cands if not prof.priced(s) and not
                       prof.comps[s].capabilities.sparse}
            timed = machine.rates(rows, {lay.name: lay.numel for lay in layers}, cands, clocked)
            self.measurements.update(zip(rows, plain_first(np.stack(list(rows.values())),
                                                           cands), strict=True))
        self.ready, self.start, self.schedule = True, None, None
        self.profiler = Profiler(cands, self.speeds, self.config.tunables)
        return timed

    def adopt(self, table: dict[str, np.ndarray]) -> None:
        """Measurements read from the cache: decisions can be priced at once."""
        self.measurements, self.ready = table, True

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "profiler": self.profiler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        # Rows of an older format (without the Adam-space columns) are measured again.
        wide = width(len(self.config.candidates))
        old = {n for n, row in self.measurements.items() if len(row) != wide}
        self.measurements = {n: r for n, r in self.measurements.items() if n not in old}
        self.tried = set(self.tried) - old
        self.profiler = Profiler(self.config.candidates, self.speeds, self.config.tunables)
        if "profiler" in state:
            self.profiler.load_state_dict(state["profiler"])


def schedule(buckets: list[list[str]], numel: dict[str, int], per_step: int,
             tunables: Tunables = DEFAULTS) -> list[list[str]]:
    """Groups of layers, one per probe period, each of at most ``per_step`` elements and
    ``per_step / tunables.coded`` sampled ones (a layer over either alone): ``buckets`` in
    order, a bucket whole where it fits in the group under way or in a fresh one, else split
    layer by layer."""
    coded, size = tunables.coded, tunables.sample

    def cost(names: list[str]) -> np.ndarray:
        return np.array([sum(numel[n] for n in names),
                         coded * sum(min(numel[n], size) for n in names)])

    groups: list[list[str]] = [[]]
    for names in buckets:
        if groups[-1] and (cost(groups[-1] + names) > per_step).any() and \
                (cost(names) <= per_step).all():
            groups.append([])
        for n in names:
            if groups[-1] and (cost(groups[-1] + [n]) > per_step).any():
                groups.append([])
            groups[-1].append(n)
    return [g for g in groups if g]
