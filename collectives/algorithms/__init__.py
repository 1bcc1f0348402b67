"""Registry of allreduce algorithms by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import native, rabenseifner, recursive_doubling, ring, tree
from .common import Job, Steps


@dataclass(frozen=True)
class Algorithm:
    """A named allreduce algorithm: a generator over a Job (see algorithms.common)."""

    name: str
    run: Callable[[Job], Steps]
    summary: str
    ours: bool = True  # False for the engines' own implementations (baselines)


REGISTRY: dict[str, Algorithm] = {}


def register(name: str, run: Callable[[Job], Steps], summary: str, ours: bool = True) -> None:
    if name in REGISTRY:
        raise ValueError(f"algorithm {name!r} is already registered")
    REGISTRY[name] = Algorithm(name, run, summary, ours)


register("ring", ring.allreduce, "segmented, pipelined ring reduce-scatter + allgather")
register("tree", tree.allreduce, "segmented binomial reduce + binomial broadcast")
register("recursive_doubling", recursive_doubling.allreduce, "log p full-vector exchanges")
register("rabenseifner", rabenseifner.allreduce,
         "recursive-halving reduce-scatter + recursive-doubling allgather")
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
