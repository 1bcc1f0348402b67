"""The CuPy device codec: ``uniform``, ``sign`` and exact ``topk`` compressed and decoded on
the GPU.

Each step is the CUDA twin of the C++ kernel the host path runs (same codes, minima, steps and
scales for the same seed), followed by the same float32 arithmetic the host does around it, so
the payload's bytes equal the CPU compressor's and the residual keeps the same bits:

- uniform with error feedback is the fused host kernel: c = x + residual; quantize(c);
  residual = c - decoded where c is finite, 0 where it is not (NaN/Inf travel in the side list);
- sign with error feedback is the general host path: c = x (+ residual unless it is fresh);
  residual = c - decoded, 0 where that is not finite.

- exact top-k is the host's fused feedback: residual += x; the k largest |residual| through
  ``compressors.cuda.topk`` (the C++ kernel's index set), sent as they are; the sent entries
  and any NaN/Inf left zeroed in the residual.

Work is queued on the input's CAI stream. The other sparsifiers have no twin here: DGC's
sampled top-k and threshold make payloads of sizes that differ by rank, which go through the
sparse allreduce, on the host.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from .. import cuda
from .._util import index_dtype
from ..base import Compressor
from ..device import DeviceArray, DeviceCodec, DevicePayload
from ..sign import Sign
from ..topk import TopK, k_of
from ..uniform import Uniform
from . import topk as cuda_topk

__all__ = ["CupyCodec", "provider"]

F32 = np.dtype(np.float32)


def provider(compressor: Compressor, array: Any) -> DeviceCodec | None:
    """A CupyCodec for uniform (8, 4, 2 bits), sign and exact top-k on float32 CUDA memory,
    else None."""
    ok = (isinstance(compressor, Uniform) and compressor.bits in (2, 4, 8)) or \
        isinstance(compressor, Sign) or (isinstance(compressor, TopK) and
                                         not compressor.approximate)
    cai = array.__cuda_array_interface__
    if not ok or np.dtype(cai["typestr"]) != F32:
        return None
    try:
        import cupy

        runtime = cupy.cuda.runtime
        if runtime.getDeviceCount() < 1:
            return None
        # device or managed memory only: an array that merely claims the interface over host
        # memory (a test double) would make the kernels fault
        if cai["data"][0] and runtime.pointerGetAttributes(cai["data"][0]).type not in (2, 3):
            return None
    except Exception:  # no CuPy, no driver or GPU behind it, or a pointer CUDA does not know
        return None
    return CupyCodec(compressor)


def _sign(comp: Compressor) -> Sign:
    if not isinstance(comp, Sign):
        raise TypeError(f"CupyCodec has no device twin of {comp.name}")
    return comp


class CupyCodec:
    """Device codec on CuPy arrays; see the module docstring for the exact arithmetic."""

    def __init__(self, compressor: Compressor) -> None:
        import cupy

        self.compressor = compressor
        self.cp = cupy

    def _stream(self, stream: int | None) -> AbstractContextManager:
        cs = self.cp.cuda.Stream
        if stream in (None, 1):
            return cs.null
        return cs.ptds if stream == 2 else self.cp.cuda.ExternalStream(stream)

    def _view(self, a: DeviceArray) -> Any:
        return self.cp.asarray(a)

    def _wrap(self, a: Any) -> DeviceArray:
        a = self.cp.ascontiguousarray(a).reshape(-1)
        return DeviceArray(a, a.data.ptr, a.size, a.dtype)

    def empty(self, n: int, dtype: np.dtype, stream: int | None = None) -> DeviceArray:
        with self._stream(stream):
            return self._wrap(self.cp.empty(n, dtype))

    def zeros(self, n: int) -> DeviceArray:
        return self._wrap(self.cp.zeros(n, F32))

    def upload(self, host: np.ndarray) -> DeviceArray:
        return self._wrap(self.cp.asarray(host))

    def download(self, arr: DeviceArray) -> np.ndarray:
        return self.cp.asnumpy(self._view(arr))

    def payload_nbytes(self, numel: int) -> int | None:
        return self.compressor.payload_nbytes(numel)

    def _encode(self, c: Any, name: str, step: int, rank: int) -> tuple[dict[str, Any], Any]:
        """The fixed buffers of c's payload and a function decoding them."""
        comp, n = self.compressor, c.size
        if isinstance(comp, Uniform):
            seed = comp.draw_seed(name, step, rank)  # the host's seed: the host's codes
            codes, mins, scales = cuda.quantize(c, comp.bits, comp.bucket_size, seed,
                                                comp.stochastic)
            return {"codes": codes, "mins": mins, "scales": scales}, lambda: cuda.dequantize(
                codes, mins, scales, n, comp.bits, comp.bucket_size)
        sign = _sign(comp)
        bits, scales = cuda.sign_pack(c, sign.bucket_size)
        return {"bits": bits, "scales": scales}, lambda: cuda.sign_unpack(
            bits, scales, n, sign.bucket_size)

    def _topk(self, xv: Any, res: Any) -> dict[str, Any]:
        """Top-k's buffers, as the host's fused feedback makes them: residual += x; the k
        largest |residual| (exact, ties to the lower index, NaN/Inf first) sent as they are;
        the sent entries, and any NaN/Inf left, zeroed in the residual."""
        cp, comp, n = self.cp, self.compressor, xv.size
        if res is not None:
            res += xv
        c = xv if res is None else res
        idx = cuda_topk.topk(c, k_of(n, comp.ratio))  # type: ignore[attr-defined]
        values = c[idx]
        if res is not None:
            res[idx] = 0
            res[...] = cp.where(cp.isfinite(res), res, cp.float32(0))
        return {"indices": idx.astype(index_dtype(n)), "values": values}

    def compress(self, x: DeviceArray, *, name: str, step: int,
                 residual: DeviceArray | None = None, fresh: bool = False,
                 rank: int = 0) -> DevicePayload:
        cp, fused = self.cp, isinstance(self.compressor, Uniform)
        if isinstance(self.compressor, TopK):
            with self._stream(x.stream):
                bufs = self._topk(self._view(x),
                                  None if residual is None else self._view(residual))
            return self._payload(x.size, bufs)
        with self._stream(x.stream):
            xv = self._view(x)
            res = None if residual is None else self._view(residual)
            c = xv if res is None or (fresh and not fused) else xv + res
            bufs, decoded = self._encode(c, name, step, rank)
            finite = cp.isfinite(c)
            nf_idx = cp.flatnonzero(~finite)
            bufs["nf_idx"], bufs["nf_val"] = nf_idx, c[nf_idx]
            if res is not None and fused:
                res[...] = cp.where(finite, c - decoded(), cp.float32(0))
            elif res is not None:
                sent = decoded()
                sent[nf_idx] = bufs["nf_val"]
                d = c - sent
                res[...] = cp.where(cp.isfinite(d), d, cp.float32(0))
        return self._payload(x.size, bufs)

    def _payload(self, n: int, bufs: dict[str, Any]) -> DevicePayload:
        comp = self.compressor
        return DevicePayload(comp.name, "float32", (n,), comp.params,
                             {k: self._wrap(v) for k, v in bufs.items()})

    def _decoded(self, p: DevicePayload) -> Any:
        b = {k: self._view(v) for k, v in p.buffers.items()}
        comp, n = self.compressor, p.numel
        if isinstance(comp, TopK):
            d = self.cp.zeros(n, F32)
            d[b["indices"]] = b["values"]
            return d
        if isinstance(comp, Uniform):
            d = cuda.dequantize(b["codes"], b["mins"], b["scales"], n, comp.bits,
                                comp.bucket_size)
        else:
            d = cuda.sign_unpack(b["bits"], b["scales"], n, _sign(comp).bucket_size)
        if b["nf_idx"].size:
            d[b["nf_idx"]] = b["nf_val"]
        return d

    def decode_into(self, payload: DevicePayload, out: DeviceArray) -> None:
        with self._stream(out.stream):
            self._view(out)[...] = self._decoded(payload)

    def decode_add(self, payload: DevicePayload, out: DeviceArray) -> None:
        with self._stream(out.stream):
            if isinstance(self.compressor, TopK):  # only the sent entries (unique indices)
                b = payload.buffers
                self._view(out)[self._view(b["indices"])] += self._view(b["values"])
                return
            self._view(out)[...] += self._decoded(payload)

    def scale(self, out: DeviceArray, factor: float) -> None:
        with self._stream(out.stream):
            self._view(out)[...] *= np.float32(factor)
