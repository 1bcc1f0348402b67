"""What every bench command shares: byte sizes, the bus-bandwidth formula, per-iteration timing."""

from __future__ import annotations

import argparse
import re
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import noise
from .collective_table import COLLECTIVES

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes from ``text``: a number with an optional K, M or G suffix (powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kmgKMG]?)[iI]?[bB]?\s*", text)
    if m is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a byte size; use e.g. 1024, 1K, 64M")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


#: The widest line the commands print (their comments, and tables but bench allreduce's).
WIDTH = 120
#: The widest line of bench allreduce's table (both placements, each with its spread, side by
#: side at the sizes of ``make bench``): a wide terminal's 132 columns.
TABLE_WIDTH = 132


def comment(text: str, width: int = WIDTH) -> list[str]:
    """``text`` as ``# `` comment lines of at most ``width`` columns (broken between words)."""
    return textwrap.wrap(text, width, initial_indent="# ", subsequent_indent="#   ",
                         break_long_words=False, break_on_hyphens=False)


def size_sweep(lo: int, hi: int, factor: int) -> list[int]:
    """``lo, lo*factor, lo*factor**2, ...`` up to and including ``hi``."""
    if lo < 1 or hi < lo:
        raise ValueError(f"need 1 <= min bytes <= max bytes, got -b {lo} -e {hi}")
    if factor < 2:
        raise ValueError(f"the size factor -f must be >= 2, got {factor}")
    sizes = [lo]
    while sizes[-1] * factor <= hi:
        sizes.append(sizes[-1] * factor)
    return sizes


def bus_bandwidth(algbw: float, p: int) -> float:
    """Bus bandwidth of an allreduce over ``p`` ranks: ``algbw * 2(p-1)/p``.

    An optimal allreduce sends and receives 2(p-1)/p times the vector on every rank's link
    (reduce-scatter, then allgather), so busbw compares with the link's peak for any p
    (the definition of nccl-tests' PERFORMANCE.md; the other collectives' factors are in
    ``collective_table``).
    """
    return COLLECTIVES["allreduce"].busbw(algbw, p)


@dataclass(frozen=True)
class Timing:
    """Seconds per call over the timed iterations (each the slowest rank's time), how many
    calls were timed and how far they spread (``noise.spread``: the interquartile range over
    the median; None for one call)."""

    median: float
    p90: float
    p99: float
    p25: float
    p75: float
    calls: int
    spread: float | None

    @classmethod
    def of(cls, times: np.ndarray) -> Timing:
        p25, p50, p75, p90, p99 = (float(v) for v in np.percentile(times, [25, 50, 75, 90, 99]))
        return cls(p50, p90, p99, p25, p75, len(times), noise.spread(times))


def time_calls(comm, call: Callable[[], object], iters: int, warmup: int,
               setup: Callable[[], object] | None = None) -> Timing:
    """Time ``call`` ``iters`` times on every rank of the mpi4py ``comm`` (collective).

    Each iteration starts after a barrier and is timed on its own; an iteration lasts until its
    slowest rank is done, so the per-iteration maximum over ranks is what is summarized.
    ``setup`` (untimed) runs before every call, e.g. to restore an input a call overwrote.
    """
    from mpi4py import MPI

    for _ in range(warmup):
        if setup is not None:
            setup()
        call()
    times = np.empty(iters, dtype=np.float64)
    for i in range(iters):
        if setup is not None:
            setup()
        comm.Barrier()
        t0 = time.perf_counter()
        call()
        times[i] = time.perf_counter() - t0
    comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
    return Timing.of(times)
