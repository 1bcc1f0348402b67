"""Process-wide defaults, read once from the environment and overridable per call."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_ACCEPTED = "a positive finite number of seconds"

#: Tensors of fewer elements go uncompressed through every torch front door (the DDP policy,
#: FSDP's reduce-scatter, the ``compcoll`` backend): 16384 float32 elements are 64 KiB, under
#: a millisecond at 1 Gbit/s, so compressing them saves less than the codec and the timing
#: noise cost, and their few bytes ride in an uncompressed collective.
MIN_NUMEL = 16384


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


def _parse_timeout(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"not a deadline: use {_ACCEPTED}")
    return value


def _parse_bool(raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError("use 1/0, true/false, yes/no or on/off")


def _parse_bytes(minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"use a whole number of bytes >= {minimum}") from None
        return _check_bytes(value, minimum)
    return parse


def _check_bytes(value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"use a whole number of bytes >= {minimum}, "
                        f"not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{value} is too small: use a whole number of bytes >= {minimum}")
    return int(value)


@dataclass(frozen=True)
class _Setting:
    env: str
    default: Any
    parse: Callable[[str], Any]  # the environment's text -> value (ValueError: why not)
    check: Callable[[Any], Any]  # a value set in code -> value (TypeError/ValueError: why not)


def _check_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"use True or False, not {type(value).__name__} {value!r}")
    return value


_SETTINGS = {
    "timeout": _Setting("COMPCOLL_TIMEOUT", 300.0, _parse_timeout,
                        lambda v: check_timeout(v, "collectives.defaults.timeout")),
    "validate": _Setting("COMPCOLL_VALIDATE", True, _parse_bool, _check_bool),
    "segment_bytes": _Setting("COMPCOLL_SEGMENT_BYTES", 1 << 20, _parse_bytes(1),
                              lambda v: _check_bytes(v, 1)),
    "tune": _Setting("COMPCOLL_TUNE", True, _parse_bool, _check_bool),
    "compressed_segment_bytes": _Setting("COMPCOLL_COMPRESSED_SEGMENT_BYTES", 4 << 20,
                                         _parse_bytes(0), lambda v: _check_bytes(v, 0)),
    "result_pool_bytes": _Setting("COMPCOLL_RESULT_POOL_BYTES", 1 << 30, _parse_bytes(0),
                                  lambda v: _check_bytes(v, 0)),
}


class Defaults:
    """Defaults used when a call does not pass its own value.

    timeout: seconds a blocking wait may go without completing before CollectiveTimeout
    (``COMPCOLL_TIMEOUT``, 300).
    validate: check count/dtype/op agree on all ranks before a collective, one small
    allgather (``COMPCOLL_VALIDATE``, on).
    segment_bytes: pipeline segment of the ring and tree algorithms, at least 1
    (``COMPCOLL_SEGMENT_BYTES``, 1 MiB).
    compressed_segment_bytes: the smallest segment (input bytes) of a pipelined compressed
    allreduce; a call is cut into up to ``rsag.MAX_SEGMENTS`` (8) segments of at least this
    size, which overlap one's encoding and decoding with the others' messages; 0 turns it off
    (``COMPCOLL_COMPRESSED_SEGMENT_BYTES``, 4 MiB).
    result_pool_bytes: host memory kept for the results of calls without ``out=`` once their
    arrays are dropped, so the next result of the same size lands in pages already mapped
    instead of faulting in new ones (``resultpool``); 0 turns it off
    (``COMPCOLL_RESULT_POOL_BYTES``, 1 GiB).
    tune: look for a saved crossover table (``compcoll tune``) on a communicator's first
    "auto" call (``COMPCOLL_TUNE``, on).

    Each value is read from its environment variable on first use, not at import (a bad value
    must not break ``import torch``, which loads the backend's entry point): the first
    collective raises a ValueError naming the variable. Values set in code are checked too.
    """

    __slots__ = ("_values", "_in_code")

    def __init__(self) -> None:
        object.__setattr__(self, "_values", {})
        object.__setattr__(self, "_in_code", set())

    def chosen(self, name: str) -> bool:
        """Whether ``name`` was chosen, in code or by its environment variable, rather than
        left at its default (a process group's own timeout yields to a chosen one)."""
        raw = os.environ.get(_SETTINGS[name].env, "")
        return name in self._in_code or bool(raw.strip())

    def __getattr__(self, name: str) -> Any:
        setting = _SETTINGS.get(name)
        if setting is None:
            raise AttributeError(f"collectives.defaults has no setting {name!r}; "
                                 f"there are {', '.join(_SETTINGS)}")
        values = object.__getattribute__(self, "_values")
        if name not in values:
            values[name] = from_env(name)
        return values[name]

    def __setattr__(self, name: str, value: Any) -> None:
        setting = _SETTINGS.get(name)
        if setting is None:
            raise AttributeError(f"collectives.defaults has no setting {name!r}; "
                                 f"there are {', '.join(_SETTINGS)}")
        if name == "timeout" and value is None:  # None is what this resolves to
            raise ValueError(f"collectives.defaults.timeout must be {_ACCEPTED}, not None")
        try:
            checked = setting.check(value)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"collectives.defaults.{name}={value!r}: {exc}") from None
        self._values[name] = checked
        self._in_code.add(name)

    def __repr__(self) -> str:
        return "Defaults(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in _SETTINGS) + ")"


def from_env(name: str) -> Any:
    """The setting ``name`` as the environment gives it (its default when unset or empty);
    a ValueError naming the variable when its value is not accepted."""
    setting = _SETTINGS[name]
    raw = os.environ.get(setting.env)
    if raw is None or raw.strip() == "":
        return setting.default
    try:
        return setting.parse(raw.strip())
    except ValueError as exc:
        raise ValueError(f"{setting.env}={raw!r}: {exc}") from None


def shaping() -> dict[str, int]:
    """The settings that shape messages, by the variable (and attribute) that sets them:
    compared across ranks before a communicator's first message (ranks that disagree would
    exchange differently cut messages and wait for each other until the timeout)."""
    return {f"{s.env} (collectives.defaults.{n})": int(getattr(defaults, n))
            for n, s in _SETTINGS.items() if n != "timeout"}


defaults = Defaults()
