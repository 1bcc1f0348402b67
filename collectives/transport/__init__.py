"""Transports: the engines compcoll's algorithms run on."""

from __future__ import annotations

import atexit
import sys
import weakref
from typing import Any

from ..errors import CommunicationError
from .base import CommCache, Communicator, Request, wait_all
from .launcher import check_not_alone

__all__ = ["CommCache", "Communicator", "Request", "as_communicator", "default_engine", "engine_of",
           "wait_all"]

_CACHE: dict[int, Communicator] = {}


@atexit.register
def _release() -> None:
    """Let go of the wrapped engine objects while the interpreter is still whole: a
    torch.distributed group kept alive here until finalization (one destroyed earlier, say)
    would otherwise be torn down with the modules, and gloo can abort the process then."""
    _CACHE.clear()


def as_communicator(comm: Any = None) -> Communicator:
    """Wrap ``comm`` in a Communicator.

    Accepts None (the job this process is in, see :func:`default_engine`), an
    ``mpi4py.MPI.Comm``, a ``torch.distributed`` ProcessGroup, or a Communicator (returned as
    is). Wrappers are cached per engine object so the collective sequence numbers (message
    tags) stay consistent across calls. A communicator that failed (a timeout, an engine
    error) raises CommunicatorUnusable here, so every collective refuses it from the start.

    Example::

        >>> import numpy as np, collectives
        >>> from mpi4py import MPI
        >>> half = MPI.COMM_WORLD.Split(MPI.COMM_WORLD.rank % 2)
        >>> c = collectives.as_communicator(half)
        >>> assert collectives.allreduce(np.ones(4), comm=c)[0] == c.size
    """
    if isinstance(comm, Communicator):
        comm.check_usable()
        return comm
    if comm is None:
        comm = default_engine()
    key = id(comm)
    cached = _CACHE.get(key)
    if cached is not None and _held(cached.cache.engine_object) is comm:
        cached.check_usable()
        return cached
    wrapped = _wrap(comm)
    # An MPI communicator is kept alive while cached; a torch.distributed group only weakly
    # (destroy_process_group must free it: see TorchCommunicator), so a new group at a
    # reused address gets a new wrapper.
    wrapped.cache.engine_object = comm if wrapped.engine == "mpi" else weakref.ref(comm)
    _CACHE[key] = wrapped
    return wrapped


def engine_of(comm: Communicator) -> Any:
    """The engine object ``comm`` wraps (an mpi4py communicator, a torch.distributed group),
    or None where it is gone or was never recorded."""
    return _held(comm.cache.engine_object)


def _held(obj: Any) -> Any:
    """The engine object a cache slot holds (strongly, or through a weak reference)."""
    return obj() if isinstance(obj, weakref.ref) else obj


def default_engine() -> Any:
    """What ``comm=None`` means, decided anew at each call: ``MPI.COMM_WORLD`` under an MPI
    launcher; the default ``torch.distributed`` group when that is initialized and the MPI
    world is a single process (torchrun, or any launcher that starts no MPI job).

    Raises CommunicationError when both are set up with different sizes: which job the
    caller means is then ambiguous, so it must pass ``comm=`` explicitly. Raises it too when
    the one found has a single rank while the launcher started more (``WORLD_SIZE``,
    ``PMI_SIZE`` or ``OMPI_COMM_WORLD_SIZE`` above 1: torchrun without
    ``init_process_group``, say), where every rank would otherwise compute alone; see
    :mod:`collectives.transport.launcher`.
    """
    group = _torch_default_group()
    if group is None:
        from mpi4py import MPI

        check_not_alone(MPI.COMM_WORLD.Get_size(), "MPI.COMM_WORLD (torch.distributed is "
                        "not initialized)")
        return MPI.COMM_WORLD
    import torch.distributed as dist

    torch_size = dist.get_world_size(group)
    mpi_world = _mpi_world()
    if mpi_world is None or mpi_world.Get_size() == 1:
        check_not_alone(torch_size, "the torch.distributed default group")
        return group
    if mpi_world.Get_size() == torch_size:
        return mpi_world  # the same job seen by both engines (e.g. init_from_mpi)
    raise CommunicationError(
        f"comm=None is ambiguous: the MPI world has {mpi_world.Get_size()} ranks but the "
        f"initialized torch.distributed default group has {torch_size}; pass comm= explicitly "
        f"(an mpi4py communicator or a torch.distributed ProcessGroup)"
    )


def _torch_default_group() -> Any:
    """The default torch.distributed group if torch.distributed is initialized, else None
    (without importing torch: if it was never imported it cannot be initialized)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.group.WORLD


def _mpi_world() -> Any:
    try:
        from mpi4py import MPI
    except ImportError:  # torch.distributed alone, no MPI installed
        return None
    return MPI.COMM_WORLD


def _wrap(comm: Any) -> Communicator:
    mod = type(comm).__module__
    if mod.startswith("mpi4py"):
        from .mpi import MPICommunicator

        return MPICommunicator(comm)
    if mod.startswith("torch"):
        from .torch_dist import TorchCommunicator

        return TorchCommunicator(comm)
    raise TypeError(
        f"comm must be None (the job: MPI.COMM_WORLD or torch.distributed's default group), "
        f"an mpi4py.MPI.Comm, a torch.distributed "
        f"ProcessGroup or a collectives.Communicator; got {type(comm).__name__}"
    )
