"""A measured crossover table for "auto": every modeled algorithm timed on the live
communicator at a few sizes, the fastest kept at each.

The alpha-beta-gamma model (``collectives.costmodel``) prices messages that cross a network.
Where ranks share memory and cores, an algorithm's time depends on caches, memory bandwidth
and scheduling that no fitted line holds, and the model's pick can take 1.3x the best
algorithm's time. ``collectives.tune`` (``collectives.tuner``) measures instead: at each
size, every algorithm of the registry with a cost formula runs ``reps`` times, interleaved
(so that a slow spell of the machine falls on all of them), each call timed on its own after
the engine's barrier; a call lasts until its slowest rank is done, and the median over the
calls decides, so every rank holds the same table (as ``compcoll bench allreduce`` times a row).

"auto" then picks by the table from its smallest size up and by the model below it: at the
measured size nearest the message (log scale), the model's pick runs unless the table times
it more than ``MARGIN`` (10%) slower than the winner there, in which case the winner runs.
A table is kept on the communicator and, unless ``save=False``, in
``<dir>/tuning/<key>.json``, where ``<dir>`` is ``$COMPCOLL_CACHE_DIR``, else
``$XDG_CACHE_HOME/compcoll`` (``~/.cache/compcoll``). The key hashes what the times depend
on: the world size, each rank's host, the engine and its library, the algorithms and
compcoll's version. On a communicator's first "auto" pick, rank 0 looks for that file and
every rank gets what it read (``COMPCOLL_TUNE=0``, set alike on every rank, skips the
look-up). Rank 0 validates what it read and shares the table, so every rank holds the same
one or none. A file that is not a small regular file (``files.read_small``), does not parse, is
of another key or holds a field of the wrong type or out of range is ignored with a warning
naming it and why: the model decides, as without a table.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import zlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from .algorithms import modeled
from .config import defaults
from .costmodel import params, predicted_best
from .files import ignored, integer, load_json, number, read_small
from .transport.base import Communicator, share_bytes

SCHEMA = 1
#: Sizes timed by default: 1 MB to 64 MB in factors of two (below 1 MB the model decides).
SIZES: tuple[int, ...] = tuple(1 << k for k in range(20, 27))
#: Untimed calls of every algorithm at each size before the timed ones.
WARMUP = 2
#: How much slower than the table's winner the model's pick may be timed and still run.
MARGIN = 0.10
#: The largest message size a table may hold (bytes; 2**53, exact in a float).
MAX_BYTES = 1 << 53
ENV_CACHE = "COMPCOLL_CACHE_DIR"

__all__ = ["MARGIN", "SIZES", "Crossovers", "choose", "load", "lookup", "path", "ready"]


@dataclass(frozen=True)
class Crossovers:
    """Seconds per call of each algorithm at each size (over the calls timed, the median of
    the slowest rank's time).

    Example::

        >>> from collectives.tuning import Crossovers
        >>> t = Crossovers((1 << 20, 4 << 20), {"ring": (2e-3, 5e-3), "tree": (1e-3, 9e-3)})
        >>> t.best()
        ('tree', 'ring')
        >>> t.pick(512 << 10), t.pick(1 << 20), t.pick(3 << 20), t.pick(1 << 30)
        (None, 'tree', 'ring', 'ring')
        >>> t.pick(1 << 20, model="ring"), t.pick(4 << 20, model="tree")  # 2x, 1.8x slower
        ('tree', 'ring')
    """

    sizes: tuple[int, ...]
    times: dict[str, tuple[float, ...]]

    def __post_init__(self) -> None:
        if not self.sizes or list(self.sizes) != sorted(set(self.sizes)) or self.sizes[0] <= 0:
            raise ValueError(f"sizes must be positive and increasing, got {self.sizes}")
        for name, ts in self.times.items():
            if len(ts) != len(self.sizes) or not all(math.isfinite(t) and t > 0 for t in ts):
                raise ValueError(f"{name}: need one finite positive time per size, got {ts}")
        if not self.times:
            raise ValueError("a crossover table needs at least one algorithm")

    def best(self) -> tuple[str, ...]:
        """The fastest algorithm at each size (ties: the first name in alphabetical order)."""
        return tuple(min(self.times, key=lambda a: (self.times[a][i], a))
                     for i in range(len(self.sizes)))

    def pick(self, nbytes: int, model: str | None = None) -> str | None:
        """What "auto" runs for ``nbytes``: at the measured size nearest it (log scale), the
        model's pick ``model`` unless the table times it more than ``MARGIN`` slower than the
        winner there, else the winner. None below the smallest size (the model decides).

        The margin keeps a near-tie to the model: a table of a few calls per algorithm on
        busy cores orders algorithms within ~10% of each other by chance, and overriding the
        model on such evidence moves the pick as often wrong as right."""
        if nbytes < self.sizes[0]:
            return None
        where = math.log2(nbytes)
        i = min(range(len(self.sizes)), key=lambda j: abs(math.log2(self.sizes[j]) - where))
        best = min(self.times, key=lambda a: (self.times[a][i], a))
        if model in self.times and self.times[model][i] <= (1 + MARGIN) * self.times[best][i]:
            return model
        return best

    def to_json(self, key: str) -> bytes:
        return json.dumps({"schema": SCHEMA, "key": key, "sizes": list(self.sizes),
                           "times": {a: list(ts) for a, ts in self.times.items()}},
                          indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, key: str) -> Crossovers:
        """The table in ``data``; ValueError (saying why) for anything else: not JSON, of
        another key or schema, naming algorithms other than the modeled ones, or holding a
        size that is not a positive integer or a time that is not a positive number."""
        record = load_json(data)
        schema = record.get("schema") if isinstance(record, dict) else None
        if isinstance(schema, bool) or not isinstance(schema, int) or schema != SCHEMA:
            raise ValueError(f"not a schema-{SCHEMA} crossover table")
        if record.get("key") != key:
            raise ValueError("measured on another machine, world size or library (key "
                             "differs)")
        sizes, times = record.get("sizes"), record.get("times")
        if not isinstance(sizes, list) or not isinstance(times, dict):
            raise ValueError("'sizes' must be a list and 'times' an object")
        names = {a.name for a in modeled()}
        if set(times) != names:
            raise ValueError(f"times for {sorted(times)}, the algorithms are {sorted(names)}")
        sizes = [integer(n, f"size {i}") for i, n in enumerate(sizes)]
        if any(not 0 < n <= MAX_BYTES for n in sizes):
            raise ValueError(f"a size is not a byte count in (0, {MAX_BYTES}]")
        out = {}
        for a, ts in times.items():
            if not isinstance(ts, list):
                raise ValueError(f"{a}: the times must be a list")
            out[a] = tuple(number(t, f"{a}'s time {i}") for i, t in enumerate(ts))
        return cls(tuple(sizes), out)


def _host_id() -> int:
    return zlib.crc32(socket.gethostname().encode())


def _library(comm: Communicator) -> str:
    if comm.engine == "mpi":
        from mpi4py import MPI

        return MPI.Get_library_version().splitlines()[0].strip()
    import torch

    return f"torch {torch.__version__}"


def key(comm: Communicator, *, timeout: float | None = None) -> str:
    """What the times depend on, hashed (collective: every rank's host is gathered)."""
    hosts = comm.allgather_ints(np.array([_host_id()]), collective="tuning key",
                                timeout=timeout)[:, 0].tolist()
    try:
        version = metadata.version("compcoll")
    except metadata.PackageNotFoundError:
        version = "unknown"
    what = {"schema": SCHEMA, "world": comm.size, "hosts": hosts, "engine": comm.engine,
            "library": _library(comm), "algorithms": [a.name for a in modeled()],
            "compcoll": version}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def path(k: str) -> Path:
    """The file of key ``k`` (see the module doc)."""
    base = os.environ.get(ENV_CACHE) or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "compcoll")
    return Path(base) / "tuning" / f"{k}.json"


def load(comm: Communicator, *, timeout: float | None = None) -> Crossovers | None:
    """The saved table of this communicator's key, read and validated by rank 0, on every rank
    (collective); None everywhere when there is none or it is unusable (a warning on rank 0
    says why)."""
    k = key(comm, timeout=timeout)
    data = _read(path(k), k) if comm.rank == 0 else None
    data = share_bytes(comm, data, collective="tuning table", timeout=timeout)
    return None if data is None else Crossovers.from_json(data, k)


def _read(file: Path, k: str) -> bytes | None:
    """The table in ``file`` as :meth:`Crossovers.to_json` writes it (what rank 0 shares, so
    every rank parses the same small, valid bytes); None when there is no file or it is
    unusable (a warning names it and why)."""
    try:
        data = read_small(file)
        return None if data is None else Crossovers.from_json(data, k).to_json(k)
    except ValueError as exc:
        ignored("crossover table", file, exc, "the cost model decides")
        return None


def lookup(comm: Communicator, *, timeout: float | None = None) -> Crossovers | None:
    """The communicator's table: the one :func:`tune` made, else the saved one, looked for
    once (collective on that first call; ``COMPCOLL_TUNE=0`` skips it)."""
    cache = comm.cache
    if not cache.crossovers_looked_up:
        cache.crossovers_looked_up = True
        if defaults.tune and comm.size > 1:
            cache.crossovers = load(comm, timeout=timeout)
    return cache.crossovers


def ready(comm: Communicator, *, timeout: float | None = None) -> None:
    """Fit the model and look for a saved crossover table now, collectively, where every
    rank is at the same call (not midway through a collective whose steps pick an
    algorithm)."""
    params(comm, timeout=timeout)
    lookup(comm, timeout=timeout)


def choose(comm: Communicator, nbytes: int, *, timeout: float | None = None) -> str:
    """The algorithm "auto" runs for ``nbytes`` (identical on all ranks): the least
    predicted time, overruled where the communicator's measured crossover table covers the
    size and times that pick clearly slower than its winner (:class:`Crossovers`). Fits the
    model, and looks for a saved table, on first use (collective), each wait bounded by
    ``timeout``."""
    model = predicted_best(comm.size, nbytes, params(comm, timeout=timeout))
    table = lookup(comm, timeout=timeout)
    measured = table.pick(nbytes, model) if table is not None else None
    return model if measured is None else measured
