"""What goes over the wire: a payload (metadata + numpy buffers) and its byte format.

Byte format, version 1, little-endian throughout::

    b"CCPL" | u8 version | str8 compressor | u8 dtype | u8 ndim | u64 shape[ndim]
    | u8 nparams | (str8 key | u8 tag | value)* | u8 nbuffers | (str8 name | u8 dtype | u64 len)*
    | raw buffer bytes, in header order, nothing after

str8 is a u8 length then ASCII; a parameter value is i64 (tag b"i"), f64 (b"f"), u8 (b"b",
bool) or str8 (b"s"). Decoding checks every field against the bytes that follow before it
allocates anything, so a payload can never claim more memory than it brings.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .arrays import ArrayInfo
from .errors import PayloadError

__all__ = ["FORMAT_VERSION", "Payload"]

MAGIC = b"CCPL"
FORMAT_VERSION = 1
MAX_NDIM = 16
_DTYPES = ["float16", "bfloat16", "float32", "float64"]
_BUFFER_DTYPES = [np.dtype(t) for t in ("u1", "i1", "<u2", "<i2", "<i4", "<i8", "<f2", "<f4",
                                        "<f8", "<u4", "<u8")]

Param = int | float | bool | str


@dataclass
class Payload:
    """Wire buffers of one compressed tensor plus the metadata needed to decode them.

    ``origin`` records the caller's array type for ``decompress``; it stays local and is not
    part of the bytes.
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
        """The header bytes and the buffers' raw bytes, in wire order."""
        out = [MAGIC, struct.pack("<B", FORMAT_VERSION), _str8(self.compressor),
               struct.pack("<BB", _DTYPES.index(self.dtype), len(self.shape)),
               struct.pack(f"<{len(self.shape)}Q", *self.shape),
               struct.pack("<B", len(self.params))]
        for key, value in self.params.items():
            out.append(_str8(key))
            if isinstance(value, bool):
                out.append(b"b" + struct.pack("<B", value))
            elif isinstance(value, int):
                out.append(b"i" + struct.pack("<q", value))
            elif isinstance(value, float):
                out.append(b"f" + struct.pack("<d", value))
            else:
                out.append(b"s" + _str8(str(value)))
        out.append(struct.pack("<B", len(self.buffers)))
        raw = []
        for name, buf in self.buffers.items():
            dt = buf.dtype.newbyteorder("<") if buf.dtype.byteorder == ">" else buf.dtype
            out += [_str8(name), struct.pack("<BQ", _BUFFER_DTYPES.index(np.dtype(dt)), buf.size)]
            raw.append(np.ascontiguousarray(buf, dtype=dt).reshape(-1).view(np.uint8))
        return b"".join(out), raw

    def header_nbytes(self) -> int:
        """Bytes of the wire header (the wire size is this plus ``nbytes``)."""
        return len(self._header()[0])

    def to_array(self) -> np.ndarray:
        """The same bytes as ``to_bytes`` in a uint8 array, each buffer copied once."""
        head, raw = self._header()
        wire = np.empty(len(head) + sum(r.size for r in raw), dtype=np.uint8)
        wire[:len(head)] = np.frombuffer(head, dtype=np.uint8)
        pos = len(head)
        for r in raw:
            wire[pos:pos + r.size] = r
            pos += r.size
        return wire

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, *, copy: bool = True) -> Payload:
        """Parse bytes made by ``to_bytes``; raise PayloadError on anything else.

        ``copy=False`` makes the buffers read-only views of ``data`` (no copy of the payload),
        for a caller that decodes them before ``data`` is reused.
        """
        r = _Reader(memoryview(data).cast("B"))
        if r.take(4) != MAGIC:
            raise PayloadError("not a compcoll payload (bad magic)")
        version = r.unpack("<B")
        if version != FORMAT_VERSION:
            raise PayloadError(f"payload format version {version}, "
                               f"this build reads {FORMAT_VERSION}")
        compressor = r.str8()
        dcode, ndim = r.unpack("<BB")
        if dcode >= len(_DTYPES) or ndim > MAX_NDIM:
            raise PayloadError(f"bad dtype code {dcode} or ndim {ndim}")
        shape = tuple(int(s) for s in struct.unpack(f"<{ndim}Q", r.take(8 * ndim)))
        if math.prod(shape) >= 2**62:
            raise PayloadError(f"shape {shape} holds too many elements")
        params: dict[str, Param] = {}
        for _ in range(r.unpack("<B")):
            key = r.str8()
            tag = r.take(1)
            if tag == b"b":
                v = r.unpack("<B")
                if v > 1:
                    raise PayloadError("bad boolean parameter")
                params[key] = bool(v)
            elif tag == b"i":
                params[key] = r.unpack("<q")
            elif tag == b"f":
                params[key] = r.unpack("<d")
            elif tag == b"s":
                params[key] = r.str8()
            else:
                raise PayloadError(f"unknown parameter tag {bytes(tag)!r}")
        specs = []
        for _ in range(r.unpack("<B")):
            name = r.str8()
            code, length = r.unpack("<BQ")
            if code >= len(_BUFFER_DTYPES):
                raise PayloadError(f"unknown buffer dtype code {code}")
            specs.append((name, _BUFFER_DTYPES[code], length))
        need = sum(dt.itemsize * n for _, dt, n in specs)
        if need != r.left:
            raise PayloadError(f"buffers declare {need} bytes but {r.left} follow the header")
        buffers = {}
        for name, dt, n in specs:
            view = np.frombuffer(r.take(dt.itemsize * n), dtype=dt)
            buffers[name] = view.copy() if copy else view
        return cls(compressor, _DTYPES[dcode], shape, params, buffers)


def _str8(s: str) -> bytes:
    b = s.encode("ascii")
    if len(b) > 255:
        raise ValueError(f"name too long for the wire format: {s[:40]!r}...")
    return struct.pack("<B", len(b)) + b


class _Reader:
    """Bounds-checked cursor over the input bytes."""

    def __init__(self, mv: memoryview) -> None:
        self.mv, self.pos = mv, 0

    @property
    def left(self) -> int:
        return len(self.mv) - self.pos

    def take(self, n: int) -> memoryview:
        if n > self.left:
            raise PayloadError(f"truncated payload: need {n} bytes at offset {self.pos}, "
                               f"{self.left} left")
        self.pos += n
        return self.mv[self.pos - n:self.pos]

    def unpack(self, fmt: str) -> Any:
        vals = struct.unpack(fmt, self.take(struct.calcsize(fmt)))
        return vals[0] if len(vals) == 1 else vals

    def str8(self) -> str:
        try:
            return bytes(self.take(self.unpack("<B"))).decode("ascii")
        except UnicodeDecodeError:
            raise PayloadError("non-ASCII name in payload") from None
