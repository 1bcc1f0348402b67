"""Transports: the engines compcoll's algorithms run on."""

from __future__ import annotations

from typing import Any

from .base import Communicator, Request, wait_all

__all__ = ["Communicator", "Request", "as_communicator", "wait_all"]

_CACHE: dict[int, Communicator] = {}


def as_communicator(comm: Any = None) -> Communicator:
    """Wrap ``comm`` in a Communicator.

    Accepts None (MPI.COMM_WORLD), an ``mpi4py.MPI.Comm``, a ``torch.distributed``
    ProcessGroup, or a Communicator (returned as is). Wrappers are cached per engine object so
    the collective sequence numbers (message tags) stay consistent across calls.
    """
    if isinstance(comm, Communicator):
        return comm
    key = id(comm)
    cached = _CACHE.get(key)
    if cached is not None and (comm is None or getattr(cached, "_obj", None) is comm):
        return cached
    wrapped = _wrap(comm)
    wrapped._obj = comm  # keeps the engine object alive while cached  # type: ignore[attr-defined]
    _CACHE[key] = wrapped
    return wrapped


def _wrap(comm: Any) -> Communicator:
    if comm is None:
        from .mpi import MPICommunicator

        return MPICommunicator()
    mod = type(comm).__module__
    if mod.startswith("mpi4py"):
        from .mpi import MPICommunicator

        return MPICommunicator(comm)
    if mod.startswith("torch"):
        from .torch_dist import TorchCommunicator

        return TorchCommunicator(comm)
    raise TypeError(
        f"comm must be None (MPI.COMM_WORLD), an mpi4py.MPI.Comm, a torch.distributed "
        f"ProcessGroup or a collectives.Communicator; got {type(comm).__name__}"
    )
