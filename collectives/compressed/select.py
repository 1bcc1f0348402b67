"""``scheme="auto"``: price every feasible scheme and take the cheapest.

A compressor's speed and payload size are measured once per communicator on 256K Gaussian
floats; the per-rank measurements are combined (maximum) so every rank prices alike.
"""

from __future__ import annotations

import time

import numpy as np

from compressors import Compressor

from .. import costmodel
from ..costmodel import SchemeLoad
from ..costparams import CostParams
from ..transport.base import Communicator
from . import predict_scheme

_PROBE = 1 << 18


def measure(comm: Communicator, comp: Compressor) -> tuple[float, float, float, float]:
    """(compress s/B, decompress s/B, payload bytes per element, kept fraction) of ``comp``,
    identical on every rank (collective on first use per compressor)."""
    cache: dict = comm.cache.compressor_speed
    key = (comp.name, tuple(sorted(comp.params.items())))
    if key not in cache:
        x = np.random.default_rng(0).standard_normal(_PROBE).astype(np.float32)
        if comp.capabilities.allreduce_steps:  # low-rank methods compress matrices only
            x = x.reshape(512, _PROBE // 512)
        tc, td = [], []
        for rep in range(3):
            t0 = time.perf_counter()
            payload = comp.compress(x, name="probe", step=rep)
            t1 = time.perf_counter()
            comp.decompress(payload)
            tc.append(t1 - t0)
            td.append(time.perf_counter() - t1)
        kept = payload.buffers["values"].size / _PROBE if comp.capabilities.sparse else 1.0
        mine = np.array([np.median(tc) / x.nbytes, np.median(td) / x.nbytes,
                         payload.nbytes / _PROBE, kept], dtype=np.float64)
        table = comm.allgather_ints(mine.view(np.int64), collective="compressor probe")
        cache[key] = tuple(float(v) for v in table.view(np.float64).max(axis=0))
    return cache[key]


def choose(comm: Communicator, comp: Compressor, numel: int, value_bytes: int,
           schemes: list[str], *, p: int | None = None, cost: CostParams | None = None) -> str:
    """The scheme of least predicted time among ``schemes`` for ``numel`` elements over ``p``
    ranks (default: ``comm``'s) linked as ``cost`` says (default: ``comm``'s fit); the
    compressor is measured on ``comm``."""
    c = cost or costmodel.params(comm)
    cs, ds, per_elem, kept = measure(comm, comp)
    payload = int(per_elem * numel)
    k = int(kept * numel)
    ranks = comm.size if p is None else p

    load = SchemeLoad.of_rates(ranks, numel, value_bytes, payload, cs, ds, k)
    return min(schemes, key=lambda s: (predict_scheme(s, load, c), s))
