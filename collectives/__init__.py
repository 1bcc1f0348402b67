"""compcoll collectives: allreduce algorithms on MPI and torch.distributed.

Public API::

    allreduce, iallreduce, reduce_scatter, allgather, broadcast, algorithms,
    Communicator, Handle, defaults, and the errors CompcollError, CommunicationError,
    CollectiveTimeout, MismatchError, TransportError.
"""

from __future__ import annotations

from . import algorithms as _algorithms
from .api import allgather, allreduce, broadcast, iallreduce, reduce_scatter
from .config import defaults
from .errors import (
    CollectiveTimeout,
    CommunicationError,
    CompcollError,
    MismatchError,
    TransportError,
)
from .progress import Handle
from .transport import Communicator, as_communicator


def algorithms() -> list[str]:
    """Names of the registered allreduce algorithms ("auto" picks among ours)."""
    return _algorithms.names()


__all__ = [
    "CollectiveTimeout", "CommunicationError", "CompcollError", "Communicator", "Handle",
    "MismatchError", "TransportError", "algorithms", "allgather", "allreduce",
    "as_communicator", "broadcast", "defaults", "iallreduce", "reduce_scatter",
]
