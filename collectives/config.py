"""Process-wide defaults, read once from the environment and overridable per call."""

from __future__ import annotations

import os
from dataclasses import dataclass


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ValueError(f"{name}={raw!r} is not a number of seconds") from exc
    if value <= 0:
        raise ValueError(f"{name}={raw!r} must be > 0 seconds")
    return value


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={raw!r}: use 1/0, true/false, yes/no or on/off")


@dataclass
class Defaults:
    """Defaults used when a call does not pass its own value.

    timeout: seconds a blocking wait may go without completing before CollectiveTimeout.
    validate: check count/dtype/op agree on all ranks before a collective (one small allgather).
    segment_bytes: pipeline segment of the ring and tree algorithms.
    compressed_segment_bytes: the smallest segment (input bytes) of a pipelined compressed
    allreduce; a call is cut into up to ``rsag.MAX_SEGMENTS`` (4) segments of at least this
    size, which overlap one's encoding and decoding with the others' messages; 0 turns it off.
    """

    timeout: float = _env_float("COMPCOLL_TIMEOUT", 300.0)
    validate: bool = _env_bool("COMPCOLL_VALIDATE", True)
    segment_bytes: int = int(os.environ.get("COMPCOLL_SEGMENT_BYTES", 1 << 20))
    compressed_segment_bytes: int = int(os.environ.get("COMPCOLL_COMPRESSED_SEGMENT_BYTES",
                                                       4 << 20))


defaults = Defaults()
