"""Re-run a command under ``mpiexec`` when it asks for more ranks than this process has."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..registry import UsageError
from .checks import positive_int

# Set by process managers (Hydra/PMI, PMIx, Open MPI) in every rank they start.
LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE")


def find_mpiexec() -> str | None:
    """The mpiexec beside this Python (the venv's MPI), else the first one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("mpiexec")


def without_np(argv: list[str]) -> list[str]:
    """``argv`` with its ``-np N`` / ``-np=N`` removed."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "-np":
            skip = True
        elif not arg.startswith("-np="):
            out.append(arg)
    return out


def add_np_argument(p: argparse.ArgumentParser) -> None:
    """``-np N``: the ranks a command runs on, re-launching itself under mpiexec (see
    :func:`relaunch`)."""
    p.add_argument("-np", dest="np", type=positive_int, metavar="N",
                   help="run on N ranks, re-launching under mpiexec if needed")


def relaunch(nprocs: int | None, argv: list[str]) -> int | None:
    """Run ``python -m compcoll_bench argv`` on ``nprocs`` ranks and return its exit code.

    Returns None when this process should run the command itself: no ``-np``, ``-np 1`` in a
    single process, or already one of ``nprocs`` ranks started by a launcher.
    """
    if nprocs is None:
        return None
    if nprocs < 1:
        raise UsageError(f"-np must be >= 1, got {nprocs}")
    from mpi4py import MPI

    size = MPI.COMM_WORLD.Get_size()
    if size > 1 or any(v in os.environ for v in LAUNCHER_VARS):
        if size != nprocs:
            raise UsageError(f"-np {nprocs} asked, but this job already runs {size} rank(s); "
                             f"drop -np or launch with mpiexec -n {nprocs}")
        return None
    if nprocs == 1:
        return None
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise SystemExit("compcoll: -np needs mpiexec, found neither beside "
                         f"{sys.executable} nor on PATH; pip install mpich, or launch with your "
                         "MPI's launcher yourself")
    proc = subprocess.Popen([mpiexec, "-n", str(nprocs), sys.executable, "-m", "compcoll_bench",
                             *without_np(argv)])
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()
