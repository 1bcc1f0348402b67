"""Profiling for the automatic policy: which layers a step profiles, and the table it leaves.

Each layer of at least ``min_numel`` elements is profiled once, for ``probe_steps`` steps
(``profile``: every candidate inside error feedback, on a sample of the layer's rows). Whole
DDP buckets go together, as many per group of steps as ``per_step`` sampled elements allow
(about 10 ms of coding a step), so a few steps cover most models and very many layers are
spread over more. Layers the measurements lack later (a model that grew) are profiled the
same way. When the steps are over, every rank's rows are combined (the same table on every
rank) into ``measurements``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import profile as profiler
from .config import AutoConfig
from .layers import Layer
from .layout import Layout
from .part import Part
from .profile import Profiler, combine, plain_first


class Probing(Part):
    """The profiling under way (if any) and the measurements taken or read so far."""

    KEYS = {"measurements": "measurements", "_ready": "ready", "_tried": "tried",
            "_schedule": "schedule", "_probe_start": "start"}

    def __init__(self, config: AutoConfig) -> None:
        self.config = config
        #: Each profiled layer's row, combined over the ranks (see ``profile``).
        self.measurements: dict[str, np.ndarray] = {}
        self.ready = False  # measurements taken (or read): decisions can be priced
        self.tried: set[str] = set()  # layers profiled once already (measured or not)
        #: The layers to profile, one group of buckets at a time (None: all at once).
        self.schedule: list[list[str]] | None = None
        self.start: int | None = None  # the first step of the profiling under way
        self.profiler = Profiler(config.candidates)

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

    def begin(self, step: int, todo: list[str], layout: Layout, per_step: int) -> None:
        """Profile ``todo`` from ``step`` on: whole buckets together, as many a step as
        ``per_step`` sampled elements allow (all at once without a layout)."""
        self.start, self.tried = step, self.tried | set(todo)
        if not layout.place:
            self.schedule = None
            return
        by: dict[int, list[str]] = {}
        for n in todo:
            by.setdefault(layout.place[n][0], []).append(n)
        groups: list[list[str]] = []
        room = 0
        for b in sorted(by):
            cost = sum(min(layout.layers[n].numel, profiler.SAMPLE) for n in by[b])
            if not groups or room + cost > per_step:
                groups.append([])
                room = 0
            groups[-1] += sorted(by[b])
            room += cost
        self.schedule = groups

    def finish(self, comm: Any) -> None:
        """End the profiling: every rank's rows combined into ``measurements``
        (collective when anything was profiled: the same layers on every rank)."""
        if self.profiler.stats:
            layers, local = self.profiler.table()
            rows = plain_first(combine(comm, local), self.config.candidates)
            self.measurements.update({lay.name: row for lay, row in zip(layers, rows,
                                                                        strict=True)})
        self.ready, self.start, self.schedule = True, None, None
        self.profiler = Profiler(self.config.candidates)

    def adopt(self, table: dict[str, np.ndarray]) -> None:
        """Measurements read from the cache: decisions can be priced at once."""
        self.measurements, self.ready = table, True

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "profiler": self.profiler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.profiler = Profiler(self.config.candidates)
        if "profiler" in state:
            self.profiler.load_state_dict(state["profiler"])
