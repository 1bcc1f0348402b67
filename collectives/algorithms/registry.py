"""The registry of allreduce algorithms by name (``collectives.algorithms`` fills it): each
entry holds how the algorithm runs, its cost formula and what it sends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .common import Job, Steps

if TYPE_CHECKING:
    from ..costparams import CostParams

#: cost(p, n, c, s): seconds for n bytes over p ranks, parameters c, pipeline segment s bytes.
CostFormula = Callable[[int, float, "CostParams", float], float]


@dataclass(frozen=True)
class Algorithm:
    """A named allreduce algorithm: a generator over a Job (see algorithms.common), its cost
    formula and the bytes its busiest rank sends (None for the engines' own, unmodeled)."""

    name: str
    run: Callable[[Job], Steps]
    summary: str
    ours: bool = True  # False for the engines' own implementations (baselines)
    cost: CostFormula | None = None
    wire_bytes: Callable[[int, int], float] | None = None  # (p, nbytes) -> bytes sent


REGISTRY: dict[str, Algorithm] = {}


def register(name: str, run: Callable[[Job], Steps], summary: str, ours: bool = True, *,
             cost: CostFormula | None = None,
             wire_bytes: Callable[[int, int], float] | None = None) -> None:
    """Add an algorithm under ``name``; one with a ``cost`` is a candidate of "auto"."""
    if name in REGISTRY:
        raise ValueError(f"algorithm {name!r} is already registered")
    REGISTRY[name] = Algorithm(name, run, summary, ours, cost, wire_bytes)


def get(name: str) -> Algorithm:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown algorithm {name!r}; available: auto, {', '.join(REGISTRY)}"
        ) from None


def names() -> list[str]:
    return list(REGISTRY)


def modeled() -> list[Algorithm]:
    """The algorithms with a cost formula, in registration order ("auto" picks among them)."""
    return [a for a in REGISTRY.values() if a.cost is not None]
