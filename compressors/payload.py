"""What goes over the wire: a payload (metadata + numpy buffers) and its byte format.

Byte format, version 2, little-endian throughout::

    b"CCPL" | u8 version | u8 flags | str8 compressor | u8 dtype | u8 ndim | u64 shape[ndim]
    | u8 nparams | (str8 key | u8 tag | value)* | u8 nbuffers | (str8 name | u8 dtype | u64 len)*
    | u8 npad | npad zero bytes | raw buffer bytes, in header order | u32 crc32c (flag bit 0)

str8 is a u8 length then ASCII; a parameter value is i64 (tag b"i"), f64 (b"f"), u8 (b"b",
bool) or str8 (b"s"). The padding makes the header a multiple of 8 bytes, so the first buffer of
a payload received into aligned memory is aligned. With flag bit 0 (the default) the payload
ends with the CRC-32C (Castagnoli) of every byte before it, so damage anywhere raises
PayloadError. It costs a pass over the bytes on each side (several GB/s on one core with the
CPU's crc32 instruction: about a tenth of 8-bit quantization's compress time); where that
matters, ``set_checksum(False)`` stops writing it (a payload without it still decodes).

Decoding checks every field against the bytes that follow before it allocates anything, so a
payload can never claim more memory than it brings, and hands every buffer over aligned for
its dtype (a misaligned one is copied once). Version 1 (no flags, no padding, no checksum) is
refused.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ._wire import CHECKSUM_NBYTES, Reader, checksum, params_bytes, read_params, str8
from .arrays import ArrayInfo
from .errors import PayloadError

__all__ = ["FORMAT_VERSION", "Payload", "checksum_enabled", "header_bytes", "set_checksum"]

MAGIC = b"CCPL"
FORMAT_VERSION = 2
FLAG_CHECKSUM = 1
MAX_NDIM = 16
_DTYPES = ["float16", "bfloat16", "float32", "float64"]
_BUFFER_DTYPES = [np.dtype(t) for t in ("u1", "i1", "<u2", "<i2", "<i4", "<i8", "<f2", "<f4",
                                        "<f8", "<u4", "<u8")]
_checksum = True

Param = int | float | bool | str


def set_checksum(enabled: bool) -> None:
    """Whether payloads written from now on end with a CRC-32C (default True). Set it the same
    in every process before communicating: wire sizes count the checksum.

    Example::

        >>> import numpy as np, compressors
        >>> compressors.set_checksum(False)  # every rank alike: the ranks check that they agree
        >>> compressors.set_checksum(True)
    """
    global _checksum
    if not isinstance(enabled, bool):
        raise ValueError(f"set_checksum: enabled must be a bool, got {enabled!r}")
    _checksum = enabled


def checksum_enabled() -> bool:
    """Whether payloads are written with a CRC-32C (see ``set_checksum``)."""
    return _checksum


def header_bytes(compressor: str, dtype: str, shape: tuple[int, ...],
                 params: Mapping[str, Param], specs: list[tuple[str, np.dtype, int]]) -> bytes:
    """The header of a payload whose buffers are (name, little-endian dtype, length), in wire
    order, padding included (for buffers that live elsewhere, e.g. in device memory)."""
    out = [MAGIC, struct.pack("<BB", FORMAT_VERSION, FLAG_CHECKSUM if _checksum else 0),
           str8(compressor), struct.pack("<BB", _DTYPES.index(dtype), len(shape)),
           struct.pack(f"<{len(shape)}Q", *shape), params_bytes(params),
           struct.pack("<B", len(specs))]
    for name, dt, size in specs:
        out += [str8(name), struct.pack("<BQ", _BUFFER_DTYPES.index(np.dtype(dt)), size)]
    head = b"".join(out)
    npad = -(len(head) + 1) % 8
    return head + struct.pack("<B", npad) + bytes(npad)


@dataclass
class Payload:
    """Wire buffers of one compressed tensor plus the metadata needed to decode them.

    ``origin`` records the caller's array type for ``decompress``; it stays local and is not
    part of the bytes.

    Example::

        >>> import numpy as np, compressors
        >>> x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
        >>> payload = compressors.get("uniform:bits=8").compress(x, name="w", step=0)
        >>> wire = payload.to_bytes()  # header, buffers, CRC-32C: what goes on the network
        >>> back = compressors.Payload.from_bytes(wire)
        >>> assert np.array_equal(compressors.decompress(back), compressors.decompress(payload))
    """

    compressor: str
    dtype: str
    shape: tuple[int, ...]
    params: Mapping[str, Param]
    buffers: dict[str, np.ndarray]
    origin: ArrayInfo | None = field(default=None, compare=False, repr=False)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the wire buffers (the header is extra and small)."""
        return sum(int(b.nbytes) for b in self.buffers.values())

    def to_bytes(self) -> bytes:
        """Serialize to the versioned byte format."""
        return self.to_array().tobytes()

    def _header(self) -> tuple[bytes, list[np.ndarray]]:
        """The header bytes (padding included) and the buffers' raw bytes, in wire order."""
        specs, raw = [], []
        for name, buf in self.buffers.items():
            dt = buf.dtype.newbyteorder("<") if buf.dtype.byteorder == ">" else buf.dtype
            specs.append((name, np.dtype(dt), buf.size))
            raw.append(np.ascontiguousarray(buf, dtype=dt).reshape(-1).view(np.uint8))
        return header_bytes(self.compressor, self.dtype, self.shape, self.params, specs), raw

    def header_nbytes(self) -> int:
        """Wire bytes besides the buffers: header and checksum (the wire size is this plus
        ``nbytes``)."""
        return len(self._header()[0]) + (CHECKSUM_NBYTES if _checksum else 0)

    def to_array(self) -> np.ndarray:
        """The same bytes as ``to_bytes`` in a uint8 array, each buffer copied once."""
        head, raw = self._header()
        tail = CHECKSUM_NBYTES if _checksum else 0
        wire = np.empty(len(head) + sum(r.size for r in raw) + tail, dtype=np.uint8)
        wire[:len(head)] = np.frombuffer(head, dtype=np.uint8)
        pos = len(head)
        for r in raw:
            wire[pos:pos + r.size] = r
            pos += r.size
        if tail:
            wire[pos:] = np.frombuffer(struct.pack("<I", checksum(wire[:pos])), np.uint8)
        return wire

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, *, copy: bool = True) -> Payload:
        """Parse bytes made by ``to_bytes``; raise PayloadError on anything else.

        ``copy=False`` makes the buffers read-only views of ``data`` (no copy of the payload)
        where they are aligned for their dtype, for a caller that decodes them before ``data``
        is reused; a misaligned buffer is copied.
        """
        mv = memoryview(data).cast("B")
        r = Reader(mv)
        if r.take(4) != MAGIC:
            raise PayloadError("not a compcoll payload (bad magic)")
        version, flags = r.unpack("<B"), r.unpack("<B")
        if version != FORMAT_VERSION:
            raise PayloadError(f"payload format version {version}, this build reads only "
                               f"{FORMAT_VERSION}: encode it again with this version")
        if flags & ~FLAG_CHECKSUM:
            raise PayloadError(f"unknown payload flags {flags:#04x}")
        if flags & FLAG_CHECKSUM:
            r.verify_checksum()
        compressor = r.str8()
        dcode, ndim = r.unpack("<BB")
        if dcode >= len(_DTYPES) or ndim > MAX_NDIM:
            raise PayloadError(f"bad dtype code {dcode} or ndim {ndim}")
        shape = tuple(int(s) for s in struct.unpack(f"<{ndim}Q", r.take(8 * ndim)))
        if math.prod(shape) >= 2**62:
            raise PayloadError(f"shape {shape} holds too many elements")
        params = read_params(r)
        specs = []
        for _ in range(r.unpack("<B")):
            name = r.str8()
            code, length = r.unpack("<BQ")
            if code >= len(_BUFFER_DTYPES):
                raise PayloadError(f"unknown buffer dtype code {code}")
            if name in (s[0] for s in specs):
                raise PayloadError(f"buffer {name!r} appears twice")
            specs.append((name, _BUFFER_DTYPES[code], length))
        npad = r.unpack("<B")
        if any(r.take(npad)) or r.pos % 8:
            raise PayloadError("bad header padding")
        need = sum(dt.itemsize * n for _, dt, n in specs)
        if need != r.left:
            raise PayloadError(f"buffers declare {need} bytes but {r.left} follow the header")
        buffers = {}
        for name, dt, n in specs:
            view = np.frombuffer(r.take(dt.itemsize * n), dtype=dt)
            buffers[name] = view.copy() if copy or not view.flags.aligned else view
        return cls(compressor, _DTYPES[dcode], shape, params, buffers)
