"""compcoll: the library under the distribution's name.

A thin front for ``collectives`` and ``compressors``: every name of ``collectives.__all__``
is here (``compcoll.allreduce`` is ``collectives.allreduce``), and so are the subpackages
``compressors``, ``ddp``, ``fsdp``, ``backend``, ``lightning``, ``policy`` and ``optim``. The
torch integrations (``ddp``, ``fsdp``, ``backend``, ``lightning``, ``optim``) load on first use, so
``import compcoll`` works without torch.

Example::

    import numpy as np, compcoll
    y = compcoll.allreduce(np.ones(1 << 20, np.float32), compressor="uniform:bits=8")
    comp = compcoll.compressors.get("topk:ratio=0.01")
    state = compcoll.ddp.CompressionState(policy="auto").bind(model)  # loads torch
"""

from __future__ import annotations

import importlib
from types import ModuleType

import compressors
from collectives import (
    CollectiveTimeout,
    CommunicationError,
    Communicator,
    CommunicatorUnusable,
    CompcollError,
    Compression,
    Handle,
    MismatchError,
    Session,
    TransportError,
    __version__,
    algorithms,
    allgather,
    allreduce,
    as_communicator,
    broadcast,
    defaults,
    iallreduce,
    isparse_allreduce,
    reduce_scatter,
    schemes,
    sparse_allreduce,
    tune,
)

#: Subpackages loaded on first use (the torch integrations need torch), by attribute name.
LAZY = {"ddp": "collectives.ddp", "fsdp": "collectives.fsdp", "backend": "collectives.backend",
        "lightning": "collectives.lightning", "policy": "collectives.policy",
        "optim": "collectives.optim"}

__all__ = [
    "__version__",
    "CollectiveTimeout", "CommunicationError", "CommunicatorUnusable", "CompcollError",
    "Communicator", "Compression", "Handle",
    "MismatchError", "Session", "TransportError", "algorithms", "allgather", "allreduce",
    "as_communicator", "broadcast", "defaults", "iallreduce", "isparse_allreduce",
    "reduce_scatter", "schemes", "sparse_allreduce", "tune",
    "compressors", "ddp", "fsdp", "backend", "lightning", "policy", "optim",
]


def __getattr__(name: str) -> ModuleType:
    if name in LAZY:
        module = importlib.import_module(LAZY[name])
        globals()[name] = module  # found directly from now on
        return module
    raise AttributeError(f"module 'compcoll' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *LAZY})
