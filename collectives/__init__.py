"""compcoll collectives: allreduce algorithms on MPI and torch.distributed.

Public API::

    allreduce, iallreduce, reduce_scatter, allgather, broadcast, algorithms,
    sparse_allreduce, isparse_allreduce, schemes, Compression, Session,
    Communicator, Handle, defaults, and the errors CompcollError, CommunicationError,
    CollectiveTimeout, CommunicatorUnusable, MismatchError, TransportError.

``allreduce(buf, compress=Compression("uniform:bits=8", feedback=..., name=...))``, or the
same fields as keywords (``allreduce(buf, compressor=..., feedback=...)``), compresses on the
way: the collective scheme follows the compressor's capabilities. ``collectives.core`` shows
the whole data path in one file: read it first. ``Session`` is what the torch front doors
(the DDP hook, FSDP's reduce-scatter, the backend, the optimizers) share: the policy, the
compressors, one residual store, ``min_numel`` and validate-once.
"""

from __future__ import annotations

from . import algorithms as _algorithms
from .api import allgather, allreduce, broadcast, iallreduce, reduce_scatter
from .compressed.compression import Compression
from .config import defaults
from .errors import (
    CollectiveTimeout,
    CommunicationError,
    CommunicatorUnusable,
    CompcollError,
    MismatchError,
    TransportError,
)
from .progress import Handle
from .session import Session
from .sparse import isparse_allreduce, sparse_allreduce
from .transport import Communicator, as_communicator
from .tuner import tune
from .version import __version__


def schemes() -> list[str]:
    """Names of the compressed-allreduce schemes ("auto" prices them).

    Example::

        >>> import collectives
        >>> assert "reduce_scatter_allgather" in collectives.schemes()
    """
    from .compressed import SCHEMES

    return list(SCHEMES)


def algorithms() -> list[str]:
    """Names of the registered allreduce algorithms ("auto" picks among ours).

    Example::

        >>> import collectives
        >>> assert {"ring", "rabenseifner", "mpi"} <= set(collectives.algorithms())
    """
    return _algorithms.names()


__all__ = [
    "__version__",
    "CollectiveTimeout", "CommunicationError", "CommunicatorUnusable", "CompcollError",
    "Communicator", "Compression", "Handle",
    "MismatchError", "Session", "TransportError", "algorithms", "allgather", "allreduce",
    "as_communicator", "broadcast", "defaults", "iallreduce", "isparse_allreduce",
    "reduce_scatter", "schemes", "sparse_allreduce", "tune",
]
