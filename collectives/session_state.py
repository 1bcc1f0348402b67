"""A :class:`collectives.Session`'s saved state, checked whole before any of it is applied.

``Session.load_state_dict`` calls :func:`check` first: every field, every residual and every
warm start is validated here, on objects of its own, and the saved compressors are compared
with the ones the session's policy can use. Only a state that passes is applied, so a refused
load changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import compressors

VERSION = 1
KEYS = ("version", "steps", "policy", "warm_starts", "feedback")


@dataclass(frozen=True)
class Saved:
    """A checked state: what ``Session.load_state_dict`` applies."""

    steps: dict[str, int]
    policy: dict[str, Any]
    #: the warm starts by spec, as their compressor took them (non-finite ones dropped)
    warm: dict[str, dict[str, np.ndarray]]
    #: each error feedback's saved state by (spec, scope), and whether any holds a residual
    feedback: dict[tuple[str, str], Any]
    residuals: bool


def check(state: Any, specs: frozenset[str] | None) -> Saved:
    """Validate ``state`` whole against a session whose policy can use ``specs`` (None: any
    compressor); ValueError or TypeError naming the field, or the compressors."""
    if not isinstance(state, Mapping) or state.get("version") != VERSION:
        raise ValueError(f"not a Session state_dict of version {VERSION}")
    missing = [k for k in KEYS if k not in state]
    if missing:
        raise ValueError(f"Session state_dict: missing {missing}")
    for field in ("policy", "warm_starts", "feedback"):
        if not isinstance(state[field], Mapping):
            raise TypeError(f"Session state_dict: {field} must be a dict, got "
                            f"{type(state[field]).__name__}")
    steps = _steps(state["steps"])
    feedback = _feedback_keys(state["feedback"])
    _same_compressors({spec for spec, _ in feedback} | set(state["warm_starts"]), specs)
    residuals = False
    for (spec, _), saved in feedback.items():
        fb = compressors.ErrorFeedback(compressors.get(spec))
        fb.load_state_dict(saved)  # validated: ValueError naming the field
        residuals = residuals or bool(fb.residuals)
    return Saved(steps, dict(state["policy"]), _warm(state["warm_starts"]), feedback, residuals)


def _steps(steps: Any) -> dict[str, int]:
    if not isinstance(steps, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int | np.integer) and not isinstance(
                v, bool) and v >= 0 for k, v in steps.items()):
        raise ValueError(f"Session state_dict: steps must map call names to integers "
                         f">= 0, got {steps!r:.200}")
    return {k: int(v) for k, v in steps.items()}


def _feedback_keys(feedback: Mapping[Any, Any]) -> dict[tuple[str, str], Any]:
    out = {}
    for key, saved in feedback.items():
        spec, bar, scope = str(key).partition("|")
        if not bar:
            raise ValueError(f"Session state_dict: feedback keys are 'spec|scope', got "
                             f"{key!r}")
        out[(spec, scope)] = saved
    return out


def _same_compressors(saved: set[str], specs: frozenset[str] | None) -> None:
    """Refuse residuals or warm starts of a compressor the session never uses: parked under
    their spec, they would never be read."""
    other = sorted(saved - specs) if specs is not None else []
    if other:
        raise ValueError(
            f"Session state_dict: saved under the compressor {', '.join(map(repr, other))}, "
            f"but this session's policy uses {', '.join(map(repr, sorted(specs or ())))}: its "
            f"residuals and warm starts would never be used. Load it into a Session of the "
            f"compressor it was saved with, or start this one without it")


def _warm(warm: Mapping[Any, Any]) -> dict[str, dict[str, np.ndarray]]:
    """Each spec's warm starts as a compressor of its own took them (checked, non-finite ones
    dropped with the compressor's warning)."""
    out = {}
    for spec, qs in warm.items():
        trial = compressors.get(str(spec))
        if not hasattr(trial, "load_warm_state"):
            raise ValueError(f"Session state_dict: warm_starts[{spec!r}]: {spec} keeps "
                             f"no warm start")
        trial.load_warm_state(qs)  # ValueError or TypeError naming the tensor
        out[str(spec)] = trial.warm_state()
    return out
