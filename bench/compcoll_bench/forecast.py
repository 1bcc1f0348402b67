"""Forecasts from the cost model: the best algorithm, crossover sizes and compressed allreduce.

``collectives.costmodel`` prices one dense allreduce; this module asks it questions over many
sizes and node counts, and prices a compressor as the collective its payload needs:

* summable payloads (and the summable rounds of PowerSGD) go through the best allreduce of the
  payload's bytes, decoded once;
* other payloads of one size on all ranks are either allgathered (every rank receives the
  ``p - 1`` others: ``(p-1)*alpha + (p-1)*m*beta`` for ``m`` payload bytes, then decodes and
  sums ``p`` payloads) or, for dense ones, reduce-scattered and allgathered in compressed form
  (``2(p-1)*alpha + 2(p-1)/p*m*beta``, decoding, summing and re-encoding a ``1/p`` block at
  each of the ``p - 1`` reduce-scatter steps); the cheaper scheme is reported;
* encoding and decoding run at measured (or given) rates in bytes of float32 input per second;
  a sparse payload decodes in time proportional to its bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from collectives import costmodel
from collectives.costmodel import CostParams


def best(p: int, nbytes: float, c: CostParams, segment: int | None = None) -> tuple[str, float]:
    """The modeled algorithm with the least predicted time, and that time (ties: by name)."""
    times = {a: costmodel.predict(a, p, int(nbytes), c, segment) for a in costmodel.MODELED}
    name = min(times, key=lambda a: (times[a], a))
    return name, times[name]


def crossovers(p: int, c: CostParams, lo: int = 8, hi: int = 1 << 36,
               segment: int | None = None, steps_per_octave: int = 8) -> list[dict[str, Any]]:
    """Sizes where the best algorithm changes, from a log sweep refined by bisection.

    Returns ``[{"size": bytes, "from": algo, "to": algo}, ...]`` in increasing size; ``size``
    is the smallest whole byte count at which ``to`` is predicted faster.
    """
    n = int(math.log2(hi / lo) * steps_per_octave)
    grid = sorted({int(round(lo * 2 ** (i / steps_per_octave))) for i in range(n + 1)})
    out = []
    prev_size, prev = grid[0], best(p, grid[0], c, segment)[0]
    for size in grid[1:]:
        cur = best(p, size, c, segment)[0]
        if cur != prev:
            a, b = prev_size, size  # best(a) == prev, best(b) != prev
            while b - a > 1:
                mid = (a + b) // 2
                if best(p, mid, c, segment)[0] == prev:
                    a = mid
                else:
                    b = mid
            out.append({"size": b, "from": prev, "to": best(p, b, c, segment)[0]})
            prev = cur
        prev_size = size
    return out


@dataclass(frozen=True)
class CodecRates:
    """Bytes of float32 input per second that a compressor encodes and decodes."""

    compress: float
    decompress: float


def compressor_shape(spec: str, numel: int) -> int | tuple[int, int]:
    """The tensor shape a compressor sees: PowerSGD views a flat vector as rows of 1024."""
    if spec.split(":")[0] == "powersgd":
        return (max(1, math.ceil(numel / 1024)), 1024)
    return numel


def price_compressor(spec: str, p: int, nbytes: int, c: CostParams, rates: CodecRates,
                     segment: int | None = None) -> dict[str, Any]:
    """Predicted seconds of one compressed allreduce of ``nbytes`` of float32 over ``p`` ranks,
    through the cheapest scheme the compressor can use (the prices ``scheme="auto"`` uses:
    ``collectives.pricing``)."""
    import compressors
    from collectives import pricing
    from collectives.compressed import candidates

    comp = compressors.get(spec)
    numel = max(1, nbytes // 4)
    m = comp.payload_nbytes(compressor_shape(spec, numel))
    row: dict[str, Any] = {"compressor": spec, "nodes": p, "size": nbytes, "payload": m}
    if m is None:
        return {**row, "scheme": None, "time_s": None,
                "note": "wire size depends on the data (no fixed payload to price)"}
    # the identity twin is the dense path itself: nothing to encode or decode
    enc = 0.0 if comp.name == "none" else 1 / rates.compress
    dec = 0.0 if comp.name == "none" else 1 / rates.decompress
    # sparse payloads: (int32 index, float32 value) entries; others go by their non-zeros
    k = m // 8 if comp.capabilities.sparse else numel
    load = pricing.SchemeLoad.of_rates(p, numel, 4, m, enc, dec, k, segment)
    schemes = {s: pricing.scheme_costs(s, load, c) for s in candidates(comp)}
    scheme = min(schemes, key=lambda s: (sum(schemes[s]), s))
    comm, codec = schemes[scheme]
    return {**row, "scheme": scheme, "comm_s": comm, "codec_s": codec,
            "time_s": comm + codec}


def measure_codec(spec: str, numel: int = 1 << 20, reps: int = 3) -> CodecRates:
    """Encode/decode rates of ``spec`` on ``numel`` Gaussian floats here (median of ``reps``)."""
    import time

    import numpy as np

    import compressors

    comp = compressors.get(spec)
    x = np.random.default_rng(0).standard_normal(numel, dtype=np.float32)
    x = x.reshape(compressor_shape(spec, numel)) if spec.startswith("powersgd") else x
    payload = comp.compress(x, name="model", step=0)
    out = np.empty_like(x)
    enc, dec = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        comp.compress(x, name="model", step=0, out=payload)
        t1 = time.perf_counter()
        comp.decompress(payload, out=out)
        t2 = time.perf_counter()
        enc.append(t1 - t0)
        dec.append(t2 - t1)
    return CodecRates(x.nbytes / max(float(np.median(enc)), 1e-9),
                      x.nbytes / max(float(np.median(dec)), 1e-9))
