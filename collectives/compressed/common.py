"""The per-call state of a compressed allreduce and the conversions every scheme needs."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compressors import Compressor, ErrorFeedback, Payload
from compressors.arrays import host_f32, is_torch, to_f32
from compressors.dtypes import DType

from ..transport.base import Communicator


@dataclass
class Ctx:
    """One compressed allreduce: what to compress, with what, and where the sum goes."""

    comm: Communicator
    tag: int
    comp: Compressor
    fb: ErrorFeedback | None
    name: str
    step: int
    x: Any  # the compressor's input: numpy array, or a torch tensor for bfloat16
    dtype: DType
    acc: np.dtype  # float32, or float64 for float64 buffers
    algorithm: str = "auto"  # dense algorithm for the dense scheme
    sparse_algorithm: str = "auto"
    k: int | None = None  # result size of a global top-k sparse allreduce
    #: where the sum goes (flat, acc dtype): the caller's buffer itself when its dtype is the
    #: accumulation dtype, else a reused workspace array
    out: np.ndarray | None = None
    stats: dict[str, float] = field(default_factory=lambda: {"compress_s": 0.0,
                                                             "decompress_s": 0.0})
    #: tags drawn for the call before its first message, for a scheme that starts midway
    #: through a call (a two-level call's cross-host step); None: draw from ``comm``
    tags: list[int] | None = None

    def next_tag(self) -> int:
        """A tag for another message stream of this call, the same on every rank."""
        return self.comm.next_tag() if self.tags is None else self.tags.pop(0)

    @contextmanager
    def timed(self, key: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.stats[key] += time.perf_counter() - t0

    def buffer(self, role: str, n: int, dtype: np.dtype | None = None) -> np.ndarray:
        """A flat scratch array kept on the communicator for this tensor and role, so the
        same memory serves every step (freshly mapped memory costs page faults: decoding
        into it is 2-4x slower than into memory touched before)."""
        return workspace(self.comm, (self.name, role), n, dtype or self.acc)

    def compensate(self, x: Any, name: str | None = None) -> Any:
        """x plus the error-feedback residual of ``name`` (x itself without feedback)."""
        if self.fb is None:
            return x
        key = name or self.name
        return self.fb.compensate(x, key, out=self.buffer(f"compensated:{key}",
                                                          int(np.prod(x.shape)), self.acc))

    def compress(self, x: Any, name: str) -> Payload:
        # The rank seeds independent draws (stochastic rounding), so the ranks' rounding
        # errors average out in the sum; shared choices ignore it (Compressor.draw_seed).
        with self.timed("compress_s"):
            return self.comp.compress(x, name=name, step=self.step, rank=self.comm.rank)

    def decode(self, payload: Payload) -> np.ndarray:
        """Decompress to a flat array of the accumulation dtype."""
        with self.timed("decompress_s"):
            return to_acc(self.comp.decompress(payload), self.acc)

    def decode_into(self, payload: Payload, out: np.ndarray) -> None:
        """Decompress into ``out`` (flat, acc dtype): straight in when the dtypes match, which
        saves a temporary and a copy of the full tensor per payload."""
        if out.size != payload.numel:
            raise ValueError(f"payload of {payload.numel} elements for {out.size} places")
        with self.timed("decompress_s"):
            if out.dtype.name == payload.dtype:
                self.comp.decompress(payload, out=out.reshape(payload.shape))
            else:
                out[...] = to_acc(self.comp.decompress(payload), self.acc)

    def decode_bytes_into(self, data: np.ndarray, out: np.ndarray, own: Any = None) -> None:
        """Decode a peer's wire bytes (validated: a foreign or damaged payload raises).
        ``own``: this rank's payload when the bytes are its own (the host decodes the bytes
        all the same; a device context decodes ``own`` where it is, without a copy)."""
        self.decode_into(Payload.from_bytes(memoryview(data), copy=False), out)

    def fused(self, x: Any) -> bool:
        """Whether ``compress_compensated`` takes the one-pass kernel for x."""
        return self.comp.fuses_feedback and host_f32(x) and \
            (self.fb is None or self.fb.fusable(x))

    def compress_compensated(self, x: Any, key: str, blocks: list[tuple[int, int]] | None = None,
                             names: list[str] | None = None, *, base: int = 0,
                             total: int | None = None) -> list[Payload]:
        """Compensate ``x`` with the residual ``key``, compress it (each flat block under its
        name, or x whole under ``key``) and keep what was not sent as the next residual.

        ``base``/``total``: x is elements [base, base + x.size) of a residual of ``total``
        elements (pipelined segments of one tensor; fused path only). Plain error feedback on
        float32 goes through the compressor's fused kernel where it has one (one pass over the
        data instead of four); otherwise the general compensate / compress / decode / update
        path runs."""
        fb = self.fb
        n = int(np.prod(x.shape))
        parts = list(zip(blocks, names, strict=True)) if blocks is not None \
            else [((0, n), key)]
        flat = x.reshape(-1)
        if fb is None:
            return [self.compress(flat[a:b] if blocks is not None else x, nm)
                    for (a, b), nm in parts]
        if self.fused(x):
            res = fb.residual_for(key, total or n)[base:base + n]
            with self.timed("compress_s"):
                out = [self.comp.compress_feedback(flat[a:b] if blocks is not None else x,
                                                   res[a:b], name=nm, step=self.step,
                                                   rank=self.comm.rank)
                       for (a, b), nm in parts]
            return out  # type: ignore[return-value]
        if (base, total or n) != (0, n):
            raise ValueError("segments of a residual need the fused kernel")
        xc = self.compensate(x, key)
        if blocks is None:
            payload = self.compress(xc, key)
            self.feedback_update(key, xc, payload)
            return [payload]
        flat = xc.reshape(-1)
        payloads = [self.compress(flat[a:b], nm) for (a, b), nm in parts]
        sent = self.buffer(f"sent:{key}", n)
        for pl, ((a, b), _) in zip(payloads, parts, strict=True):
            self.decode_into(pl, sent[a:b])
        fb.update_sent(key, xc, sent)
        return payloads

    def decode_bytes_add(self, data: np.ndarray, out: np.ndarray, own: Any = None) -> None:
        """``out += `` a peer's decoded payload: in the compressor's kernel where it has one,
        else through a scratch array (the same sum either way). ``own`` as in
        ``decode_bytes_into``."""
        payload = Payload.from_bytes(memoryview(data), copy=False)
        if out.size != payload.numel:
            raise ValueError(f"payload of {payload.numel} elements for {out.size} places")
        with self.timed("decompress_s"):
            if out.dtype.name == payload.dtype and self.comp.decompress_add(payload, out):
                return
        scratch = self.buffer("scratch", out.size)
        self.decode_into(payload, scratch)
        out += scratch

    def wire(self, payload: Payload) -> np.ndarray:
        """A payload's wire bytes (uint8) for the transport."""
        return wire(payload)

    def feedback_update(self, name: str, compensated: Any, payload: Payload) -> None:
        """residual[name] = compensated - decoded payload, decoding into reused memory."""
        if self.fb is not None:
            sent = self.buffer(f"sent:{name}", payload.numel)
            self.decode_into(payload, sent)
            self.fb.update_sent(name, compensated, sent)


def wire_sizes(comp: Compressor, shapes: list[tuple[int, ...]], dtype: str) -> list[int] | None:
    """The wire size of each payload every rank will send for these shapes when the input is
    finite (so exchanges need not trade sizes first), or None for data-dependent sizes."""
    sizes = [_wire_nbytes(comp, tuple(shape), dtype) for shape in shapes]
    return None if any(n is None for n in sizes) else [int(n) for n in sizes]


@functools.lru_cache(maxsize=256)
def _wire_nbytes(comp: Compressor, shape: tuple[int, ...], dtype: str) -> int | None:
    return comp.wire_nbytes(shape, dtype)  # compressors are frozen: the size is theirs


def workspace(comm: Communicator, key: tuple, n: int, dtype: np.dtype) -> np.ndarray:
    """A reusable flat array of ``n`` elements of ``dtype`` stored on ``comm`` under ``key``."""
    store: dict = comm.cache.workspace
    buf = store.get(key)
    if buf is None or buf.dtype != dtype or buf.size < n:
        buf = np.empty(n, dtype)
        store[key] = buf
    return buf[:n]


def to_acc(x: Any, acc: np.dtype) -> np.ndarray:
    """Flat numpy copy of a decoded array (numpy or torch, any float dtype) in ``acc``."""
    if is_torch(x):
        x = x.detach().reshape(-1).float().cpu().numpy()
    x = np.asarray(x).reshape(-1)
    if x.dtype == np.uint16:  # a decoded bfloat16 payload from the wire: bit patterns
        x = to_f32(x, "bfloat16")
    return x.astype(acc)


def wire(payload: Payload) -> np.ndarray:
    """A payload's wire bytes as a uint8 array."""
    return payload.to_array()
