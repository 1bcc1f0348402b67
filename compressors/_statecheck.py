"""Checks of what ``load_state_dict`` is given: each raises naming the field, the value and
what is accepted."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def factor(owner: str, key: str, v: Any, lo: float = 0.0, hi: float = 1e6) -> float:
    """A validated scale factor: a finite number in [lo, hi]."""
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating) or \
            not math.isfinite(v) or not lo <= v <= hi:
        raise ValueError(f"{owner}: {key} must be a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


def arrays(owner: str, key: str, value: Any) -> dict[str, np.ndarray]:
    """Validated flat copies of a name -> float32/float64 array dict from a state dict."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{owner}: {key} must be a dict of tensor name -> array, "
                        f"got {type(value).__name__}")
    out: dict[str, np.ndarray] = {}
    for name, v in value.items():
        if not isinstance(name, str):
            raise TypeError(f"{owner}: {key} keys must be tensor names (str), got {name!r}")
        arr = np.asarray(v)
        if arr.dtype not in (np.float32, np.float64):
            raise ValueError(f"{owner}: {key}[{name!r}] must be a float32 or float64 array, "
                             f"got {arr.dtype}{list(arr.shape)}")
        if not np.isfinite(arr).all():
            raise ValueError(f"{owner}: {key}[{name!r}] holds NaN/Inf; a saved state never does "
                             f"(non-finite values are dropped at each step)")
        out[name] = arr.reshape(-1).copy()
    return out


def require(owner: str, state: Any, keys: tuple[str, ...]) -> None:
    """A state dict must be a dict holding every one of ``keys``."""
    if not isinstance(state, Mapping):
        raise TypeError(f"{owner}.load_state_dict: expected the dict state_dict() returns, "
                        f"got {type(state).__name__}")
    missing = [k for k in keys if k not in state]
    if missing:
        raise ValueError(f"{owner}.load_state_dict: missing {missing}; a state_dict() of "
                         f"{owner} has {list(keys)}")
