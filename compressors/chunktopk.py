"""Chunked top-k with low-bit values: what SparseLoCo and Covenant-72B send as pseudo-gradients.

The flat tensor is cut into chunks of ``chunk`` elements (the last one shorter). Each chunk
keeps its k_c = max(1, round(ratio * len)) largest magnitudes (exact, ties to the lower index)
as uint16 offsets within the chunk, ascending; where a chunk has fewer than k_c non-zero
entries the rest are padding, an offset equal to the one before it, decoded as nothing (so a
zero is never sent as noise). Every chunk sends its k_c offsets, so every rank's payload has
the same size; a chunk's position is implied by the order.

Values: a float32 scale s per chunk (its largest kept magnitude) and ``bits`` per kept value,
sign and magnitude: magnitudes (m + 1) / L * s for m in 0..L-1, L = 2**(bits - 1) (2 bits:
+-s/2, +-s; 1 bit: +-s), no zero level since the kept entries are the chunk's largest, and s
itself exact. Round to nearest, deterministic: under error feedback the rounding error is
carried to the next step anyway, so unbiased rounding buys nothing and nearest halves the
error. Codes are sign << (bits - 1) | m, packed little-endian inside each byte.

NaN/Inf entries are not candidates: they travel exactly in a side list (``nf_idx``,
``nf_val``) that is empty for finite input. An all-zero chunk has s = 0 and decodes to zeros.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import kernels
from ._util import (
    check_nonfinite,
    check_range,
    decode_dense,
    nonfinite_layout,
    numel_of,
    split_nonfinite,
)
from .arrays import storage_dtype, to_f32
from .base import Capabilities, Compressor, Layout, register
from .errors import PayloadError
from .payload import Payload
from .topk import k_of

__all__ = ["ChunkTopK"]

U16, U8, F32 = np.dtype(np.uint16), np.dtype(np.uint8), np.dtype(np.float32)
_BLOCK = 1 << 18  # elements selected at a time: the temporaries stay in cache


@register("chunktopk")
@dataclass(frozen=True)
class ChunkTopK(Compressor):
    """Per-chunk top-k of ``ratio`` with ``bits``-bit values against a per-chunk scale.

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("chunktopk:ratio=0.02,bits=2,chunk=4096")
        >>> x = np.random.default_rng(0).standard_normal(1 << 16).astype(np.float32)
        >>> payload = comp.compress(x, name="w", step=0)
        >>> y = comp.decompress(payload)  # 82 values of each 4096-element chunk
        >>> assert np.count_nonzero(y) == 16 * 82 and 50 * payload.nbytes < x.nbytes
    """

    ratio: float = 0.02
    bits: int = 2
    chunk: int = 4096

    def __post_init__(self) -> None:
        check_range(self, "ratio", 0.0, 1.0, lo_open=True)
        if type(self.bits) is not int or self.bits not in (1, 2, 4, 8):
            raise ValueError(f"ChunkTopK: bits must be one of 1, 2, 4, 8, got {self.bits!r}")
        check_range(self, "chunk", 2, 65536, integer=True)  # offsets are uint16

    @property
    def capabilities(self) -> Capabilities:
        # Not (indices, values) of floats the sparse allreduces could merge: decoded, then summed.
        return Capabilities(summable=False, sparse=False, same_size_on_all_ranks=True,
                            needs_shared_seed=False)

    def _split(self, n: int) -> tuple[int, int, int, int]:
        """(full chunks, their k_c, tail length, its k_c) of an n-element tensor."""
        full, tail = divmod(n, self.chunk)
        return full, k_of(self.chunk, self.ratio), tail, k_of(tail, self.ratio)

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        full, k, tail, kt = self._split(numel_of(shape))
        kept = full * k + kt
        lay: Layout = {"indices": (U16, kept), "values": (U8, -(-kept * self.bits // 8)),
                       "scales": (F32, full + (tail > 0))}
        return nonfinite_layout(lay, storage_dtype(dtype))

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: dict[str, np.ndarray],
                **where: Any) -> None:
        x32 = to_f32(flat, dtype)
        with np.errstate(over="ignore", invalid="ignore"):  # one cheap pass tells if any
            bad = 0 if np.isfinite(np.add.reduce(x32)) else \
                flat.size - int(np.count_nonzero(np.isfinite(x32)))
        split_nonfinite(x32, flat, bad, bufs)
        if bad:  # NaN/Inf go in the side list; here they count as zeros
            x32 = np.where(np.isfinite(x32), x32, np.float32(0))
        full, k, tail, kt = self._split(flat.size)
        codes = np.empty(bufs["indices"].size, U8)
        rows = max(1, _BLOCK // self.chunk)
        parts = [(r, min(r + rows, full), self.chunk, k) for r in range(0, full, rows)]
        parts += [(full, full + 1, tail, kt)] if tail else []
        for r0, r1, size, kc in parts:
            at = slice(r0 * k, r0 * k + (r1 - r0) * kc)
            block = x32[r0 * self.chunk:r0 * self.chunk + (r1 - r0) * size].reshape(-1, size)
            offs, vals = _select(block, kc)
            bufs["indices"][at] = offs.reshape(-1)
            bufs["scales"][r0:r1] = scales = np.abs(vals).max(axis=1)
            codes[at] = _quantize(vals, scales, self.bits).reshape(-1)
        bufs["values"][...] = _pack(codes, self.bits)

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        decode_dense(payload, out, lambda x32: self._fill(payload, x32))

    def _fill(self, payload: Payload, out: np.ndarray) -> None:
        b = payload.buffers
        kept = b["indices"].size
        codes = _unpack(b["values"], self.bits, kept)
        per = np.repeat(b["scales"], self._counts(payload.numel))
        level = per * _levels(self.bits)[codes & ((1 << (self.bits - 1)) - 1)]
        vals = np.where(codes >> (self.bits - 1) == 1, -level, level)
        pos, real = self._positions(b["indices"], payload.numel)
        kernels.scatter_dense(out, pos[real], vals[real])

    def _counts(self, n: int) -> np.ndarray:
        """Entries each chunk sends."""
        full, k, tail, kt = self._split(n)
        return np.array([k] * full + ([kt] if tail else []), np.int64)

    def _positions(self, offs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Flat positions of the entries and whether each is real (not padding)."""
        counts = self._counts(n)
        pos = offs.astype(np.int64) + np.repeat(np.arange(counts.size) * self.chunk, counts)
        real = np.ones(offs.size, bool)
        real[1:] = offs[1:] != offs[:-1]
        real[np.cumsum(counts) - counts] = True  # a chunk's first entry is never padding
        return pos, real

    def _check(self, payload: Payload) -> None:
        check_nonfinite(payload)
        b = payload.buffers
        counts = self._counts(payload.numel)
        offs = b["indices"].astype(np.int64)
        lens = np.full(counts.size, self.chunk, np.int64)
        lens[-1:] = payload.numel - self.chunk * (counts.size - 1)
        back = np.diff(offs, prepend=0) < 0
        back[np.cumsum(counts) - counts] = False  # a new chunk starts again from 0
        if offs.size and (np.any(offs >= np.repeat(lens, counts)) or np.any(back)):
            raise PayloadError("indices: offsets must lie inside their chunk and not descend "
                               "within it")
        s = b["scales"]
        if not np.all(np.isfinite(s) & (s >= 0)):
            raise PayloadError("scales must be finite and >= 0")


def _select(block: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of the k largest |values| of each row, ascending, ties to the lower
    index; a row with fewer than k non-zeros sends its non-zeros, then padding (the last
    offset repeated, value 0)."""
    r, size = block.shape
    keys = block.view(np.uint32) & np.uint32(0x7FFFFFFF)  # orders finite magnitudes
    th = np.partition(keys, size - k, axis=1)[:, size - k:size - k + 1]
    sel = np.flatnonzero(keys >= th)  # k per row, more where the k-th magnitude ties
    if sel.size > r * k:  # ties at the threshold: the lowest indices first
        row = sel // size
        above = keys.reshape(-1)[sel] > th[row, 0]
        need = k - np.bincount(row[above], minlength=r)
        tie = (~above).astype(np.int64)
        seen = np.cumsum(tie) - tie  # ties before each entry; its row's ties come in index
        rank = seen - seen[np.searchsorted(row, row)]  # order, so minus those before the row
        sel = sel[above | (rank < need[row])]
    vals = block.reshape(-1)[sel].reshape(r, k)
    offs = (sel.reshape(r, k) - (np.arange(r) * size)[:, None]).astype(U16)
    sparse = np.flatnonzero(th[:, 0] == 0)
    if sparse.size:  # non-zeros first, then padding: kept zeros would decode as noise
        v, o = vals[sparse], offs[sparse]
        order = np.argsort(v == 0, axis=1, kind="stable")
        v, o = np.take_along_axis(v, order, 1), np.take_along_axis(o, order, 1)
        nz = np.count_nonzero(v, axis=1)
        last = o[np.arange(o.shape[0]), np.maximum(nz - 1, 0)]
        pad = np.arange(k)[None, :] >= np.maximum(nz, 1)[:, None]
        o[pad] = np.broadcast_to(last[:, None], o.shape)[pad]
        vals[sparse], offs[sparse] = np.where(pad, 0, v), o
    return offs, vals


def _levels(bits: int) -> np.ndarray:
    """The magnitudes (m + 1) / L of the codes' low bits, L = 2**(bits - 1) (exact floats)."""
    top = 1 << (bits - 1)
    return (np.arange(1, top + 1, dtype=np.float32) / np.float32(top)).astype(F32)


def _quantize(vals: np.ndarray, scales: np.ndarray, bits: int) -> np.ndarray:
    """Codes sign << (bits - 1) | m of a (rows, k) block, m the nearest magnitude level."""
    top = 1 << (bits - 1)
    safe = np.where(scales > 0, scales, np.float32(1))[:, None]  # a zero chunk: codes of 0
    t = np.abs(vals) / safe * np.float32(top)  # in [0, L]; level m + 1 nearest to t
    m = np.clip(np.floor(t + np.float32(0.5)), 1, top).astype(U8) - np.uint8(1)
    return (np.signbit(vals).astype(U8) << np.uint8(bits - 1)) | m


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """bits-wide codes packed little-endian inside each byte."""
    if bits == 8:
        return codes
    per = 8 // bits
    c = np.zeros(-(-codes.size // per) * per, U8)
    c[:codes.size] = codes
    shifts = (np.arange(per) * bits).astype(U8)
    return np.bitwise_or.reduce(c.reshape(-1, per) << shifts, axis=1).astype(U8)


def _unpack(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    if bits == 8:
        return packed
    shifts = (np.arange(8 // bits) * bits).astype(U8)
    return ((packed[:, None] >> shifts) & np.uint8((1 << bits) - 1)).reshape(-1)[:n]
