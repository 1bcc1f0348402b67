"""Measuring "auto"'s crossover table: :func:`tune` times every modeled algorithm through
the public allreduce on the live communicator and keeps the result as the communicator's
table (``collectives.tuning`` holds the table, its file and the choice it drives).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .algorithms import modeled
from .api import allreduce
from .config import check_timeout, defaults
from .files import write_atomic
from .transport import as_communicator
from .transport.base import Communicator
from .tuning import SIZES, WARMUP, Crossovers, key, path

__all__ = ["tune"]


def _sync(comm: Communicator, timeout: float | None) -> None:
    """Start every rank's call together: the engine's own barrier, whose ranks leave within
    microseconds of each other (compcoll's polls with a back-off of up to 0.5 ms, which
    would be timed as part of the call)."""
    if comm.engine == "mpi":
        comm.comm.Barrier()  # type: ignore[attr-defined]
    else:
        comm.barrier(timeout=timeout)


def _time_all(comm: Communicator, sizes: tuple[int, ...], reps: int,
              timeout: float | None) -> np.ndarray:
    """This rank's seconds for every call, [algorithm, size, repeat], as ``compcoll bench
    allreduce`` times them: the engine's barrier, then one call."""
    names = [a.name for a in modeled()]
    times = np.zeros((len(names), len(sizes), reps))
    for j, n in enumerate(sizes):
        buf = np.ones(max(n // 4, 1), np.float32)
        out = np.empty_like(buf)
        for _ in range(WARMUP):  # first touch of the buffers, the algorithms' workspaces
            for a in names:
                allreduce(buf, out=out, algorithm=a, comm=comm, timeout=timeout)
        for r in range(reps):
            for a in names[r % len(names):] + names[:r % len(names)]:  # rotate the order
                _sync(comm, timeout)
                t0 = time.perf_counter()
                allreduce(buf, out=out, algorithm=a, comm=comm, timeout=timeout)
                times[names.index(a), j, r] = time.perf_counter() - t0
    return times


def tune(comm: Any = None, *, sizes: tuple[int, ...] = SIZES, reps: int = 9,
         save: bool = True, timeout: float | None = None) -> Crossovers:
    """Time every modeled algorithm at ``sizes`` (bytes of float32) on ``comm`` and make the
    result "auto"'s table from ``sizes[0]`` up (collective; see the module doc).

    Example::

        >>> import collectives
        >>> from collectives import costmodel, tuning
        >>> t = collectives.tune(sizes=(1 << 20,), reps=1, save=False)
        >>> c = collectives.as_communicator()
        >>> model = costmodel.predicted_best(c.size, 4 << 20, costmodel.params(c))
        >>> assert tuning.choose(c, 4 << 20) == t.pick(4 << 20, model)
    """
    check_timeout(timeout)  # every argument checked before the first message
    sizes = tuple(int(s) for s in sizes)
    if not sizes or sizes[0] <= 0 or list(sizes) != sorted(set(sizes)):
        raise ValueError(f"sizes must be positive byte counts in increasing order, got {sizes}")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    c = as_communicator(comm)
    table_of_names = [a.name for a in modeled()]
    saved, defaults.validate = defaults.validate, False  # no per-call metadata allgather
    try:
        mine = _time_all(c, sizes, reps, timeout)
    finally:
        defaults.validate = saved
    every = c.allgather_ints(mine.reshape(-1).view(np.int64), collective="tuning",
                             timeout=timeout)
    # each call lasts until its slowest rank is done; the median over the calls decides
    slowest = every.view(np.float64).max(axis=0).reshape(mine.shape)
    med = np.median(slowest, axis=2)
    table = Crossovers(sizes, {a: tuple(map(float, med[i]))
                               for i, a in enumerate(table_of_names)})
    c.cache.crossovers, c.cache.crossovers_looked_up = table, True
    if save:
        k = key(c, timeout=timeout)
        if c.rank == 0:
            write_atomic(path(k), table.to_json(k), "crossover table")
    return table
