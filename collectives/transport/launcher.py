"""The job size a launcher announces, checked against the communicator ``comm=None`` finds.

A process started by torchrun, by MPICH's Hydra or by Open MPI's mpirun is told how many ranks
its job has (``WORLD_SIZE``, ``PMI_SIZE``, ``OMPI_COMM_WORLD_SIZE``). If ``comm=None`` then
finds a world of one (torchrun without ``init_process_group``, or an mpi4py built against
another MPI than the launcher's), every rank would compute alone and return its own data as
the "sum": this module turns that into an error. Slurm's ``SLURM_NTASKS`` is not read: a
batch allocation of several tasks may well run one process that uses one rank.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import CommunicationError

#: The variable each launcher sets to the number of ranks it started, and who sets it.
LAUNCHER_SIZES: dict[str, str] = {
    "WORLD_SIZE": "torchrun",
    "PMI_SIZE": "MPICH/Hydra mpiexec",
    "OMPI_COMM_WORLD_SIZE": "Open MPI mpirun",
}


def launcher_size(env: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """The first launcher variable of ``env`` (default ``os.environ``) that announces more
    than one rank, with that count; None where none does (or none is a number).

    Example::

        >>> from collectives.transport.launcher import launcher_size
        >>> assert launcher_size({"WORLD_SIZE": "4"}) == ("WORLD_SIZE", 4)
        >>> assert launcher_size({"PMI_SIZE": "1"}) is None
    """
    env = os.environ if env is None else env
    for name in LAUNCHER_SIZES:
        value = env.get(name, "").strip()
        if value.isdigit() and int(value) > 1:
            return name, int(value)
    return None


def check_not_alone(size: int, what: str, env: Mapping[str, str] | None = None) -> None:
    """Raise CommunicationError when ``comm=None`` found a communicator of ``size`` 1 (``what``
    names it) while the launcher announced more ranks.

    An explicit communicator of one (``MPI.COMM_SELF``, a sub-communicator) is never checked:
    only what ``comm=None`` would pick.

    Example::

        >>> import pytest
        >>> from collectives import CommunicationError
        >>> from collectives.transport.launcher import check_not_alone
        >>> check_not_alone(1, "MPI.COMM_WORLD", {})
        >>> with pytest.raises(CommunicationError, match="init_process_group"):
        ...     check_not_alone(1, "MPI.COMM_WORLD", {"WORLD_SIZE": "2"})
    """
    announced = launcher_size(env)
    if size != 1 or announced is None:
        return
    name, count = announced
    raise CommunicationError(
        f"comm=None found {what} with 1 rank, but {LAUNCHER_SIZES[name]} started {count} "
        f"({name}={count}): every rank would compute alone. Under torchrun call "
        f"torch.distributed.init_process_group(...) first; under mpiexec use an mpi4py built "
        f"against that mpiexec's MPI (python -c 'from mpi4py import MPI; "
        f"print(MPI.Get_library_version())'); to run this rank alone on purpose pass "
        f"comm=MPI.COMM_SELF"
    )
