"""The automatic policy's cache file: this model's measurements, read once and kept.

The file (``cache``) is keyed by the model's layout as the hook reports it, the world size
and the link: a later run of the same model decides at its first step without profiling.
It is found at the first decision (collective: the link's name comes from the fitted cost
model), read by rank 0 and shared, and written by rank 0 whenever something new was measured.
Where it is empty, this machine's codec speeds (``machine``, kept for any model) spare the
profiler from timing the codecs it has timed before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import costmodel
from ..costparams import Link
from . import cache, machine
from .config import AutoConfig
from .layout import Layout
from .part import Part

if TYPE_CHECKING:
    from ..transport import Communicator


class CacheFile(Part):
    """Where this model's measurements live on disk (``found``, once looked for)."""

    KEYS = {"_file": "found"}

    def __init__(self, config: AutoConfig) -> None:
        self.config = config
        self.found: cache.Located | None = None

    def locate(self, comm: Communicator, layout: Layout) -> cache.Located | None:
        """This model's cache file; None without a layout (the hook reports it) or with
        the cache off. Collective on first use (the cost model's fit names the link)."""
        cfg = self.config
        if not cfg.cache or not layout.place:
            return None
        link = cfg.link or cache.link(comm.engine, costmodel.params(comm))
        return cache.locate(layout.key(), comm.size, link, cfg)

    def read(self, comm: Communicator, layout: Layout) -> dict[str, Any] | None:
        """The file's table, measured latencies and fit on every rank (collective), or None
        when there is no file, or no usable one."""
        found = self.found = self.locate(comm, layout)
        return None if found is None else cache.fetch(comm, found, self.config.candidates)

    def write(self, comm: Communicator, layout: Layout, measurements: Mapping[str, np.ndarray],
              measured: Mapping[str, Any] | None,
              fitted: costmodel.CostParams | None) -> None:
        """Keep the measurements for the next run (rank 0 writes; the others only locate)."""
        found = self.found  # the key read at the first decision, as the next run reads it
        if found is None or {row[1] for row in found.layout} != set(layout.place):
            found = self.locate(comm, layout)  # (a model that grew: its new layout)
        if found is not None and comm.rank == 0:
            fit = None if fitted is None else saved_fit(fitted)
            cache.store(found, self.config.candidates, measurements, measured, fit)

    def speeds(self, comm: Communicator) -> dict[str, list[float]]:
        """This machine's known codec speeds of the candidates, on every rank ({} with the
        cache off; collective otherwise)."""
        cfg = self.config
        return machine.fetch(comm, cfg.cache_dir, cfg.candidates) if cfg.cache else {}

    def keep_speeds(self, comm: Communicator, speeds: Mapping[str, list[float]]) -> None:
        """Add the codec speeds timed here to this machine's file (rank 0 writes)."""
        if self.config.cache and speeds and comm.rank == 0:
            machine.store(self.config.cache_dir, speeds)


def saved_fit(c: costmodel.CostParams) -> dict[str, Any]:
    """A fit as the cache keeps it: the flat link and gamma, the link classes ([alpha, beta]
    or None) and the hosts it was fitted on."""
    return {**dataclasses.asdict(c),
            **{k: None if link is None else [link.alpha, link.beta]
               for k, link in (("intra", c.intra), ("cross", c.cross))},
            "hosts": list(c.hosts)}


def loaded_fit(fit: Mapping[str, Any]) -> costmodel.CostParams:
    """The inverse of :func:`saved_fit` (a fit saved before the link classes had only
    alpha, beta and gamma)."""
    links = {k: Link(*fit[k]) for k in ("intra", "cross") if fit.get(k) is not None}
    return costmodel.CostParams(fit["alpha"], fit["beta"], fit["gamma"], **links,
                                hosts=tuple(fit.get("hosts", ())))
