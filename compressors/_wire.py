"""Low-level pieces of the payload byte format: names, parameters, a bounds-checked reader."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import kernels
from .errors import PayloadError

CHECKSUM_NBYTES = 4


def checksum(data: Any) -> int:
    """CRC-32C of the bytes (any buffer), in C++: the crc32 instruction where the CPU has it."""
    return kernels.crc32c(np.frombuffer(data, np.uint8), 0)


def str8(s: str) -> bytes:
    """A u8 length, then the ASCII bytes."""
    b = s.encode("ascii")
    if len(b) > 255:
        raise ValueError(f"name too long for the wire format: {s[:40]!r}...")
    return struct.pack("<B", len(b)) + b


def params_bytes(params: Mapping[str, Any]) -> bytes:
    """u8 count, then per parameter its str8 key, a type tag and the value."""
    out = [struct.pack("<B", len(params))]
    for key, value in params.items():
        out.append(str8(key))
        if isinstance(value, bool):
            out.append(b"b" + struct.pack("<B", value))
        elif isinstance(value, int):
            out.append(b"i" + struct.pack("<q", value))
        elif isinstance(value, float):
            out.append(b"f" + struct.pack("<d", value))
        else:
            out.append(b"s" + str8(str(value)))
    return b"".join(out)


class Reader:
    """Bounds-checked cursor over the input bytes; ``end`` excludes a verified checksum."""

    def __init__(self, mv: memoryview) -> None:
        self.mv, self.pos, self.end = mv, 0, len(mv)

    @property
    def left(self) -> int:
        return self.end - self.pos

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

    def verify_checksum(self) -> None:
        """Check the trailing CRC-32C of everything before it and stop reading before it."""
        if self.end < CHECKSUM_NBYTES:
            raise PayloadError("truncated payload: no room for its checksum")
        body = self.end - CHECKSUM_NBYTES
        (want,) = struct.unpack("<I", self.mv[body:self.end])
        if checksum(self.mv[:body]) != want:
            raise PayloadError("payload checksum mismatch: the bytes were damaged or cut")
        self.end = body


def read_params(r: Reader) -> dict[str, Any]:
    """Parameters as ``params_bytes`` wrote them; repeated keys and unknown tags raise."""
    params: dict[str, Any] = {}
    for _ in range(r.unpack("<B")):
        key = r.str8()
        if key in params:
            raise PayloadError(f"parameter {key!r} appears twice")
        tag = bytes(r.take(1))
        if tag == b"b":
            v = r.unpack("<B")
            if v > 1:
                raise PayloadError(f"bad boolean parameter {key!r}")
            params[key] = bool(v)
        elif tag == b"i":
            params[key] = r.unpack("<q")
        elif tag == b"f":
            params[key] = r.unpack("<d")
        elif tag == b"s":
            params[key] = r.str8()
        else:
            raise PayloadError(f"unknown parameter tag {tag!r}")
    return params
