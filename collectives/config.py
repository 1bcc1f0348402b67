"""Process-wide defaults, read once from the environment and overridable per call."""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass
from typing import Any

_ACCEPTED = "a positive finite number of seconds"


def check_timeout(value: Any, name: str = "timeout") -> float | None:
    """``value`` if it is a valid deadline (a positive finite number of seconds, or None for
    ``collectives.defaults.timeout``); else a ValueError naming it and what is accepted."""
    if value is None:
        return None
    hint = (", or None for collectives.defaults.timeout (COMPCOLL_TIMEOUT)"
            if name == "timeout" else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {_ACCEPTED}{hint}; got {type(value).__name__} "
                        f"{value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={value!r} is not a deadline: use {_ACCEPTED}{hint}")
    return float(value)


def resolve_timeout(value: float | None) -> float:
    """The deadline a wait uses: ``value``, or ``defaults.timeout`` when None (both checked)."""
    if value is None:
        return defaults.timeout  # checked when it was set
    return check_timeout(value)  # type: ignore[return-value]


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={raw!r} is not a deadline: use {_ACCEPTED}")
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

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "timeout":  # None has no meaning here: this is what None resolves to
            if value is None:
                raise ValueError(f"collectives.defaults.timeout must be {_ACCEPTED}, not None")
            value = check_timeout(value, "collectives.defaults.timeout")
        super().__setattr__(name, value)


defaults = Defaults()
