"""Registry of allreduce algorithms by name: each entry holds how the algorithm runs, what
it costs in the alpha-beta-gamma model (``collectives.costmodel``) and what it sends.

Adding an algorithm is one module (its ``allreduce`` generator, ``cost`` and ``wire_bytes``)
and one ``register(...)`` call below; "auto", the cost model, the pricing of compressed
schemes and the test matrix all iterate this registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import native, rabenseifner, recursive_doubling, ring, tree, two_level
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


register("ring", ring.allreduce, "segmented, pipelined ring reduce-scatter + allgather",
         cost=ring.cost, wire_bytes=ring.wire_bytes)
register("tree", tree.allreduce, "segmented binomial reduce + binomial broadcast",
         cost=tree.cost, wire_bytes=tree.wire_bytes)
register("recursive_doubling", recursive_doubling.allreduce, "log p full-vector exchanges",
         cost=recursive_doubling.cost, wire_bytes=recursive_doubling.wire_bytes)
register("rabenseifner", rabenseifner.allreduce,
         "recursive-halving reduce-scatter + recursive-doubling allgather",
         cost=rabenseifner.cost, wire_bytes=rabenseifner.wire_bytes)
# Priced per link class on the hosts the cost parameters describe; on one host it ties with
# the ring it runs there, and "auto" keeps the ring.
register("two_level", two_level.allreduce,
         "reduce-scatter inside hosts, shards allreduced across hosts, allgather inside hosts",
         cost=two_level.cost, wire_bytes=two_level.wire_bytes)
register("mpi", native.mpi, "the MPI library's MPI_Allreduce (baseline)", ours=False)
register("torch", native.torch, "torch.distributed.all_reduce (baseline)", ours=False)


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
