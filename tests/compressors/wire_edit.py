"""Editing payload bytes in tests: re-sealing the checksum and finding header fields."""

from __future__ import annotations

import struct

from compressors._wire import checksum
from compressors.payload import FLAG_CHECKSUM


def has_checksum(raw: bytes | bytearray) -> bool:
    return len(raw) > 5 and bool(raw[5] & FLAG_CHECKSUM)


def reseal(raw: bytes | bytearray) -> bytes:
    """The bytes with their trailing CRC-32C made valid again (after an edit of the body)."""
    if not has_checksum(raw) or len(raw) < 4:
        return bytes(raw)
    body = bytes(raw[:-4])
    return body + struct.pack("<I", checksum(body))


def data_offset(raw: bytes, nbytes: int) -> int:
    """Where the buffers start in a payload whose buffers hold ``nbytes``."""
    return len(raw) - nbytes - (4 if has_checksum(raw) else 0)
