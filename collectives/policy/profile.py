"""Profiling a layer's gradient under every candidate compressor, with error feedback.

Each candidate keeps a shadow residual per layer, so the error measured over the probe steps
is the error the compressor would make inside error feedback, not on a raw gradient. Times
are this machine's compress and decompress times, on the layer's real size or scaled from a
sample of a large layer (``tunables.sample`` elements: random rows, the same on every rank
and step). The codecs are linear in the elements, and an elementwise, blockwise or top-k
coder's relative error is the sample's (a low-rank one's too, closely: a submatrix drawn from
a low-rank matrix keeps its rank), so profiling costs about the same for any layer size.

Error feedback converges when its residual stays bounded: what a compressor holds back is
sent a few steps later. A compressor whose residual keeps growing against the gradient
(top-k on a dense layer, low rank on an embedding table) delays more and more of the update,
however small its per-step error looks. So the table also keeps, per candidate, the residual's
squared norm over the step's gradient's at the last probe step (``RESIDUAL``): the number of
steps of gradient the compressor holds back, which the policy bounds. Each is also measured
as an Adam-type optimizer sees it (``moments``).

Where this machine's codec speeds are known (``machine``: a line in the elements, from an
earlier profile of any model), a dense codec is not timed again: its times are the line's at
the layer's size. A sparse one still is, since its cost follows the data.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

import numpy as np

import compressors
from compressors.dtypes import lookup

from .. import ops
from . import columns as col
from .columns import PER_CANDIDATE, RESIDUAL, combine, plain_first
from .layers import Layer
from .machine import seconds
from .moments import Moments
from .tunables import DEFAULTS, Tunables

__all__ = ["PER_CANDIDATE", "RESIDUAL", "Profiler", "combine", "plain_first",
           "sample"]

F32, F64 = lookup("float32"), lookup("float64")



def _factors(comp: Any, shape: tuple[int, ...]) -> int:
    """Bytes of a low-rank compressor's buffers for a tensor of ``shape``."""
    return sum(np.dtype(dt).itemsize * int(n) for dt, n in comp.layout(shape, "float32").values())


def sample(g: np.ndarray, name: str = "", size: int = DEFAULTS.sample,
           min_rows: int = DEFAULTS.min_rows) -> np.ndarray:
    """A fixed random set of about 1/s of the rows of ``g`` (of its elements when it has
    fewer rows than s), in order, at most about ``size`` elements; ``g`` itself when it is
    that small. Where that leaves fewer than ``min_rows`` rows of a wide matrix, it takes
    ``min_rows`` rows and a random set of columns instead (the same number of elements). The
    set depends only on ``name`` and the shape, so every rank and every step sees the same
    elements (a shadow residual follows them). Random, not every s-th: a strided sample
    aliases with hashed or periodic layouts (an embedding table indexed by a multiplicative
    hash puts a handful of common tokens on every 16th row)."""
    s = -(-g.size // size)
    if s <= 1:
        return g
    rows = g.ndim >= 2 and g.shape[0] >= s
    n = g.shape[0] if rows else g.size
    rng = np.random.default_rng(zlib.crc32(f"{name}{g.shape}".encode()))
    k = max(n // s, min(n, min_rows)) if rows else n // s
    pick = np.sort(rng.choice(n, k, replace=False))
    if not rows:
        return np.ascontiguousarray(g.reshape(-1)[pick])
    part = g[pick].reshape(k, -1)
    m = part.shape[1]
    if k * m > size and m > 1:  # too few rows: fewer columns of more of them
        cols = np.sort(rng.choice(m, max(1, size // k), replace=False))
        part = part[:, cols]
    return np.ascontiguousarray(part.reshape(k, *g.shape[1:]) if part.shape[1] == m
                                else part)


class Profiler:
    """Measures each layer under each candidate; ``table`` lays it out for an allgather."""

    def __init__(self, candidates: tuple[str, ...],
                 speeds: dict[str, list[float]] | None = None,
                 tunables: Tunables = DEFAULTS) -> None:
        self.candidates, self.tunables = candidates, tunables
        #: This machine's compress and decompress lines by candidate, where known.
        self.speeds = dict(speeds or {})
        self.moments = Moments(tunables.beta2, tunables.eps)
        self.comps = {s: compressors.get(s) for s in candidates}
        self.feedback = {s: compressors.ErrorFeedback(c) for s, c in self.comps.items()}
        self.layers: dict[str, Layer] = {}
        self.buckets: dict[str, int] = {}  # layers of a bucket fuse; unknown: the layer alone
        self.stats: dict[str, np.ndarray] = {}
        self.whole: set[str] = set()  # sampled layers whose times were taken on all of them

    def observe(self, step: int, layer: Layer, grad: np.ndarray,
                bucket: int | None = None) -> None:
        if bucket is not None:
            self.buckets[layer.name] = bucket
        g = np.ascontiguousarray(grad, dtype=np.float32).reshape(layer.shape)
        row = self.stats.get(layer.name)
        part = sample(g, layer.name, self.tunables.sample, self.tunables.min_rows)
        if row is None:
            row = np.zeros(col.width(len(self.candidates)))
            col.per_candidate(row)[:, col.TIMES] = np.inf
            self.layers[layer.name], self.stats[layer.name] = layer, row
            if part is not g:
                self._time_whole(layer, g, col.per_candidate(row))
        # One single-threaded pass in double (no BLAS thread team, no float64 copy).
        row[col.NORM] += ops.sum_squares(g.reshape(-1), F32)
        cols = col.per_candidate(row)
        timed = part is not g and layer.name in self.whole
        norms: dict[int, float] = {}  # the squared norm of each input coded (part, or g)
        for c, spec in enumerate(self.candidates):
            comp, ef = self.comps[spec], self.feedback[spec]
            low_rank = bool(comp.capabilities.allreduce_steps)
            src = g if low_rank and part.ndim != g.ndim else part  # low rank: a matrix
            scale = g.size / src.size
            if id(src) not in norms:
                norms[id(src)] = ops.sum_squares(src.reshape(-1), F32)
            key = Moments.key(layer.name, src)
            self.moments.add(key, src, step)
            priced = self.priced(spec)
            x = ef.compensate(src, layer.name)
            fused = comp.fuses_feedback and ef.fusable(src)
            tc = td = np.inf
            # Small layers are timed several times (their time is noisy), but a warm-started
            # method once: each call is a power iteration, and repeats would refine it.
            repeats = 1 if priced or layer.numel >= 1 << 16 or \
                comp.capabilities.allreduce_steps else self.tunables.repeats
            for _ in range(repeats):
                # Timed as the hook runs it: the one-pass kernel where the compressor has one
                # (it also updates the residual), else compensate-then-compress.
                work = ef.residual_for(layer.name, src.size).copy() if fused else None
                t0 = time.perf_counter()
                payload = comp.compress_feedback(src, work, name=layer.name,
                                                 step=step) if fused else None
                if payload is None:
                    payload = comp.compress(x, name=layer.name, step=step)
                t1 = time.perf_counter()
                y = comp.decompress(payload)
                tc, td = min(tc, t1 - t0), min(td, time.perf_counter() - t1)
            ef.update_sent(layer.name, x, y)
            # Each array in double once: what was sent, the input, and d, their difference.
            y64 = np.asarray(y, np.float64).reshape(-1)
            xs = np.asarray(x, np.float64).reshape(-1)
            d = xs - y64
            # (the one-pass kernel, single-threaded: no BLAS thread team, no temporaries)
            dd, xx = ops.sum_squares(d, F64), ops.sum_squares(xs, F64)
            ok = np.isfinite(dd)
            cols[c, col.ERR] += scale * dd if ok else 0.0
            cols[c, col.SQ] += scale * xx if np.isfinite(xx) else 0.0
            # The residual is now d (x less what was sent): its size in steps of gradient.
            gs = norms[id(src)]
            cols[c, RESIDUAL] = dd / gs if gs > 0 and ok else 0.0
            if priced:
                cols[c, col.TIMES] = seconds(self.speeds[spec], layer.numel)
            elif not (timed and comp.capabilities.sparse) or low_rank:
                # (a sampled layer keeps the times a sparse coder took on all of it)
                cols[c, col.COMPRESS] = min(cols[c, col.COMPRESS], scale * tc)
                cols[c, col.DECOMPRESS] = min(cols[c, col.DECOMPRESS], scale * td)
            # A low-rank payload grows with the rows (P), not the columns (Q): the layer's own.
            nbytes = payload.nbytes + _factors(comp, g.shape) - _factors(comp, src.shape) \
                if low_rank else scale * payload.nbytes
            cols[c, col.BYTES] = max(cols[c, col.BYTES], nbytes)
            kept = scale * payload.buffers["values"].size if comp.capabilities.sparse \
                else layer.numel
            cols[c, col.KEPT] = max(cols[c, col.KEPT], min(kept, layer.numel))
            err, sq, res, unbounded = self.moments.measure(key, y64, d)
            # At the last probe step, with v over all of them (``moments``).
            cols[c, col.ADAM_ERR], cols[c, col.ADAM_SQ] = scale * err, scale * sq
            cols[c, col.ADAM_RESIDUAL] = res
            cols[c, col.UNBOUNDED] += unbounded

    def priced(self, spec: str) -> bool:
        """Whether ``spec``'s times come from this machine's known speeds (not timed)."""
        return spec in self.speeds and not self.comps[spec].capabilities.sparse

    def _time_whole(self, layer: Layer, g: np.ndarray, cols: np.ndarray) -> None:
        """Compress and decompress times of the sparse candidates on the whole of a sampled
        layer, once, on its first gradient. A sample's times scaled by the size are right for
        a codec linear in the elements (a dense one: those are taken on the sample, at a
        fraction of the cost), but not for one whose cost follows the data: exact top-k of a
        gradient sparser than k takes every nonzero in one merge (1.3 ms on a 4.2M-row
        embedding table), while 64 calls on 1/64 samples cost 14 ms."""
        for c, spec in enumerate(self.candidates):
            comp = self.comps[spec]
            if not comp.capabilities.sparse or comp.capabilities.allreduce_steps or \
                    self.priced(spec):  # (low rank: timed on its sample's rows)
                continue
            for _ in range(2):  # the first call also pays for fresh output memory
                t0 = time.perf_counter()
                payload = comp.compress(g, name=layer.name, step=0)
                t1 = time.perf_counter()
                comp.decompress(payload)
                cols[c, col.COMPRESS] = min(cols[c, col.COMPRESS], t1 - t0)
                cols[c, col.DECOMPRESS] = min(cols[c, col.DECOMPRESS], time.perf_counter() - t1)
        self.whole.add(layer.name)

    def table(self) -> tuple[list[Layer], np.ndarray]:
        """Layers sorted by name and their rows (one per layer)."""
        names = sorted(self.stats)
        return [self.layers[n] for n in names], np.stack([self.stats[n] for n in names])

    def state_dict(self) -> dict[str, Any]:
        return {"layers": dict(self.layers), "buckets": dict(self.buckets),
                "stats": {k: v.copy() for k, v in self.stats.items()},
                "whole": sorted(self.whole), "moments": self.moments.state_dict(),
                "feedback": {s: ef.state_dict() for s, ef in self.feedback.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        wide = col.width(len(self.candidates))  # (an older format's rows: dropped)
        self.stats = {k: np.array(v) for k, v in state["stats"].items() if len(v) == wide}
        self.layers = {k: v for k, v in state["layers"].items() if k in self.stats}
        self.buckets = dict(state["buckets"])
        if "moments" in state:
            self.moments.load_state_dict(state["moments"])
        self.whole = set(state.get("whole", ()))
        for s, st in state["feedback"].items():
            if s in self.feedback:
                self.feedback[s].load_state_dict(st)
