"""Several scripts of this folder, one after another, in one process per rank: the ranks start
(python, numpy, torch, mpi4py) once instead of once per script.

Each script runs as ``__main__`` with its own ``sys.argv``, from what a new process would have:
the environment as the launch gave it, ``collectives.defaults`` unread, no cached communicator
(a new wrapper of MPI.COMM_WORLD, sequence numbers from 0), no torch.distributed group. Rank 0
frames each script's output with ``BATCH START <label>`` and ``BATCH END <label> exit=<code>``,
the code the worst over the ranks (tests/mpirun.py's ``Batch`` reads them). An exception that
leaves a script (the scripts catch theirs) ends the launch, as it would the script's own.
Run: mpiexec -n P python tests/mpi/batch.py script.py [args] -- script.py [args] ...
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from mpi4py import MPI

import collectives
from collectives import transport

HERE = Path(__file__).resolve().parent
WORLD = MPI.COMM_WORLD


def fresh(environ: dict[str, str]) -> None:
    """Library and process state as a new process starts with."""
    if "torch.distributed" in sys.modules:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    os.environ.clear()
    os.environ.update(environ)
    # Tests may reach into the library's private state: settings are read anew from the
    # environment, and comm=None wraps the world afresh (a script's tuning, topology and
    # sequence numbers do not carry into the next one).
    collectives.defaults._values.clear()
    collectives.defaults._in_code.clear()
    transport._CACHE.clear()


def exit_code(exc: SystemExit) -> int:
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)  # sys.exit("message") prints it and exits 1
    return 1


def main() -> None:
    environ = dict(os.environ)
    runs: list[list[str]] = [[]]
    for word in sys.argv[1:]:
        if word == "--":
            runs.append([])
        else:
            runs[-1].append(word)
    for script, *args in runs:
        label = " ".join([script, *args])
        fresh(environ)
        WORLD.Barrier()
        if WORLD.rank == 0:
            print(f"BATCH START {label}", flush=True)
        sys.argv = [str(HERE / script), *args]
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exit_code(exc)
        sys.stdout.flush()
        sys.stderr.flush()
        worst = max(WORLD.allgather(code), key=abs)
        if WORLD.rank == 0:
            print(f"BATCH END {label} exit={worst}", flush=True)
    fresh(environ)


if __name__ == "__main__":
    main()
