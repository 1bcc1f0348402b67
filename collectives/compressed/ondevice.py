"""Compressed allreduce of a device buffer through its compressor's device twin.

When the input is a device array and ``compressors.providers.codec_for`` has a codec for it, the
allgather and reduce-scatter/allgather schemes run their codec steps on the device: only
payloads cross PCIe. A payload is copied device->host into pinned staging (its header is
written on the host, its checksum computed there), exchanged, and each received payload is
copied host->device (through pinned staging, one copy per payload) and decoded on the device
into the device output. The full-precision buffer never crosses. Codec work is queued on the
caller's stream, which is synchronized only where a blocking copy must follow queued work:
before staged payload bytes are read, and before a received payload is copied into device
memory that queued decodes may still be reading. The result is left queued on the stream.

Anything else (no twin, another dtype, DGC or scaled error feedback, the dense and sparse
schemes) stages the whole buffer through host memory as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compressors import ErrorFeedback, Payload, device_feedback
from compressors import device as dev
from compressors.arrays import device_empty_like
from compressors.device import DeviceArray, DeviceCodec, DevicePayload
from compressors.dtypes import lookup
from compressors.errors import PayloadError
from compressors.feedback import NoErrorFeedback

from .. import device
from ..progress import Handle
from ..transport.base import Communicator
from . import SCHEMES as RUN
from .common import Ctx
from .compression import Compression
from .routing import SCHEMES, plain_array, route, stream_of

__all__ = ["SCHEMES", "DeviceCtx", "make", "route", "start"]

F32 = np.dtype(np.float32)
_ALIGN = 8  # device buffers of a received payload start 8-byte aligned in its arena


@dataclass
class DeviceCtx(Ctx):
    """A Ctx whose input, output and scratch are device arrays and whose codec steps run on
    the device; payloads cross to the host only in ``wire`` and back in the decodes."""

    codec: Any = None  # DeviceCodec
    runtime: Any = None  # collectives.device.DeviceRuntime
    stream: int | None = None
    staged: list[np.ndarray] = field(default_factory=list)  # pinned wire bytes in flight
    pending: bool = False  # codec work queued since the last stream synchronization

    def buffer(self, role: str, n: int, dtype: np.dtype | None = None) -> Any:
        store: dict = self.comm.cache.device_workspace
        key = (type(self.codec), self.name, role)
        want = np.dtype(dtype or F32)
        buf = store.get(key)
        if buf is None or buf.dtype != want or buf.size < n:
            buf = store[key] = self.codec.empty(n, want, self.stream)
        return DeviceArray(buf.owner, buf.ptr, n, want, self.stream)

    def fused(self, x: Any) -> bool:
        """As on the host: segments share a residual only under the fused kernel."""
        fb = self.fb
        return self.comp.fuses_feedback and (fb is None or type(fb) is ErrorFeedback)

    def compress_compensated(self, x: Any, key: str, blocks: list[tuple[int, int]] | None = None,
                             names: list[str] | None = None, *, base: int = 0,
                             total: int | None = None) -> list[Any]:
        n = x.size
        parts = list(zip(blocks, names, strict=True)) if blocks is not None else [((0, n), key)]
        res, fresh = None, False
        if self.fb is not None and type(self.fb) is not NoErrorFeedback:
            if (base, total or n) != (0, n) and not self.fused(x):
                raise ValueError("segments of a residual need the fused kernel")
            whole, fresh = device_feedback.device_residual(self.codec, self.fb, key, total or n)
            res = whole[base:base + n]
        with self.timed("compress_s"):
            out = [self.codec.compress(x[a:b], name=nm, step=self.step, fresh=fresh,
                                       residual=None if res is None else res[a:b],
                                       rank=self.comm.rank)
                   for (a, b), nm in parts]
        self.pending = True
        return out

    def settle(self) -> None:
        """Wait for the work queued on the caller's stream, if any: before the host reads
        what the device wrote, and before a blocking copy writes device memory that queued
        work may still read (the copies are not ordered on the caller's stream)."""
        if self.pending:
            self.runtime.stream_synchronize(self.stream)
            self.pending = False

    def wire(self, payload: Any) -> np.ndarray:
        """The payload's wire bytes in pinned host memory: only its buffers cross."""
        self.settle()
        head = np.frombuffer(payload.header(), np.uint8)
        total = dev.wire_nbytes(payload)
        pinned = device.acquire_pinned(total)
        self.staged.append(pinned)
        w = pinned[:total]
        w[:head.size] = head
        pos = head.size
        for b in payload.buffers.values():
            if b.nbytes:
                self.runtime.memcpy_d2h(w[pos:pos + b.nbytes], b.ptr, b.nbytes)
            pos += b.nbytes
        dev.seal(w)
        return w

    def upload(self, data: np.ndarray, numel: int) -> DevicePayload:
        """A peer's wire bytes, validated on the host, as a device payload (one copy)."""
        payload = Payload.from_bytes(memoryview(data), copy=False)
        self.comp.check(payload, expect=numel)
        if payload.dtype != "float32":
            raise PayloadError(f"a {payload.dtype} payload for a float32 device buffer")
        offsets, pos = [], 0
        for b in payload.buffers.values():
            pos += -pos % _ALIGN
            offsets.append(pos)
            pos += b.nbytes
        arena = self.codec.empty(pos, np.dtype(np.uint8), self.stream)
        pinned = device.acquire_pinned(pos)
        try:
            for off, b in zip(offsets, payload.buffers.values(), strict=True):
                pinned[off:off + b.nbytes] = b.reshape(-1).view(np.uint8)
            if pos:  # from pinned memory the copy is complete when the call returns
                self.settle()
                self.runtime.memcpy_h2d(arena.ptr, pinned, pos)
        finally:
            device.release_pinned(pinned)
        bufs = {k: DeviceArray(arena.owner, arena.ptr + off, b.size, b.dtype.newbyteorder("="))
                for off, (k, b) in zip(offsets, payload.buffers.items(), strict=True)}
        return DevicePayload(payload.compressor, payload.dtype, payload.shape, payload.params,
                             bufs)

    def decode_bytes_into(self, data: np.ndarray, out: Any, own: Any = None) -> None:
        payload = own if own is not None else self.upload(data, out.size)
        with self.timed("decompress_s"):
            self.codec.decode_into(payload, out)
        self.pending = True

    def decode_bytes_add(self, data: np.ndarray, out: Any, own: Any = None) -> None:
        payload = own if own is not None else self.upload(data, out.size)
        with self.timed("decompress_s"):
            self.codec.decode_add(payload, out)
        self.pending = True

    def release(self) -> None:
        """Give the staged wire buffers back to the pinned pool (the exchange is over)."""
        for buf in self.staged:
            device.release_pinned(buf)
        self.staged.clear()


def make(comm: Communicator, tag: int, call: Compression, buf: Any, result: Any,
         codec: DeviceCodec, algorithm: str = "auto") -> DeviceCtx:
    """The DeviceCtx of a call: flat device views of the (float32) input and of the
    result."""
    stream = stream_of(buf)
    x = DeviceArray.of(plain_array(buf))
    out = DeviceArray.of(plain_array(result))
    ctx = DeviceCtx(comm, tag, call.compressor, call.feedback, call.key, call.step,
                    DeviceArray(x.owner, x.ptr, x.size, x.dtype, stream), lookup("float32"),
                    F32, algorithm=algorithm, sparse_algorithm=call.sparse[0], k=call.sparse[1],
                    codec=codec, runtime=device.runtime(), stream=stream)
    ctx.out = DeviceArray(out.owner, out.ptr, out.size, out.dtype, stream)
    return ctx


def start(c: Communicator, buf: Any, out: Any, call: Compression, op: str,
          codec: DeviceCodec, algorithm: str, timeout: float | None) -> Handle:
    """Start ``call.scheme`` with its codec steps on the device (see the module doc); float32
    sums in place in the result, averaged after summing as on the host."""
    result = out if out is not None else device_empty_like(buf)
    ctx = make(c, c.next_tag(), call, buf, result, codec, algorithm)
    sent_before = c.bytes_sent

    def finish() -> Any:
        ctx.release()
        if op == "avg" and c.size > 1 and ctx.x.size:
            codec.scale(ctx.out, 1.0 / c.size)
        if call.stats is not None:
            call.stats.update(ctx.stats, scheme=call.scheme,
                              bytes_sent=c.bytes_sent - sent_before, on_device=True)
        return result

    return Handle(RUN[call.scheme].run(ctx), finish,
                  f"compressed allreduce[{call.scheme}, device]", timeout)

