"""``compcoll doctor``: what compcoll found on this machine, and how to fix what is missing."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass

from compressors import kernels

from ..registry import command


@dataclass(frozen=True)
class Finding:
    """One line of the report: ``ok`` is None for an optional feature that is absent, and
    ``gives`` then says what it would add."""

    ok: bool | None
    detail: str
    fix: str = ""
    gives: str = ""


CHECKS: dict[str, Callable[[], Finding]] = {}


def check(name: str) -> Callable[[Callable[[], Finding]], Callable[[], Finding]]:
    def register(fn: Callable[[], Finding]) -> Callable[[], Finding]:
        CHECKS[name] = fn
        return fn
    return register


@check("MPI library")
def _mpi() -> Finding:
    from mpi4py import MPI

    major, minor = MPI.Get_version()
    lib = " ".join(MPI.Get_library_version().splitlines()[0].split())
    return Finding(True, f"{lib} (MPI {major}.{minor})")


@check("mpiexec")
def _mpiexec() -> Finding:
    from .launch import find_mpiexec

    path = find_mpiexec()
    if path is None:
        return Finding(False, "not found beside this Python nor on PATH",
                       "pip install mpich (or install your system MPI and put mpiexec on PATH)")
    return Finding(True, path)


@check("mpi4py")
def _mpi4py() -> Finding:
    import mpi4py

    return Finding(True, mpi4py.__version__)


@check("CUDA-aware MPI")
def _cuda_aware() -> Finding:
    from collectives.device import mpi_is_cuda_aware

    if mpi_is_cuda_aware():
        return Finding(True, "yes: algorithm='mpi' hands device buffers to MPI directly")
    return Finding(None, "not available",
                   "an MPI built with CUDA support; COMPCOLL_CUDA_AWARE_MPI=1 if yours is and "
                   "the query misses it",
                   "would hand GPU buffers to MPI directly, where now they are staged "
                   "through pinned host memory")


@check("C++ extension")
def _extension() -> Finding:
    try:
        ext = kernels.load()
    except ImportError as exc:
        return Finding(False, f"cannot import _compcoll ({exc.__cause__ or exc})",
                       "pip install --no-build-isolation -e . (needs a C++17 compiler and CMake)")
    return Finding(True, f"{ext.__file__}")


@check("OpenMP")
def _openmp() -> Finding:
    try:
        ext = kernels.load()
    except ImportError:
        return Finding(False, "extension not built", "build the C++ extension first")
    if ext.openmp:
        return Finding(True, "reduction kernels use several threads")
    return Finding(None, "not compiled in",
                   "install an OpenMP runtime (e.g. libomp-dev / libgomp) and rebuild",
                   "would run the reduction kernels on several threads, where now one")


def _module(name: str, fix: str, gives: str) -> Callable[[], Finding]:
    def probe() -> Finding:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            return Finding(None, "not installed", fix, gives)
        return Finding(True, getattr(mod, "__version__", "installed"))
    return probe


check("torch")(_module(
    "torch", "pip install torch, the CPU build with --index-url "
    "https://download.pytorch.org/whl/cpu",
    "would add the DDP hook, FSDP2, the 'compcoll' backend and the training benchmarks"))
check("cupy")(_module("cupy", "pip install 'compcoll[cupy]', on a CUDA machine",
                      "would compress CUDA arrays on the GPU"))

_MARK = {True: "ok", False: "MISSING", None: "optional"}


def line(name: str, found: Finding) -> str:
    """One line of the report: the mark, the part and what was found; for an absent optional
    part, what it would give and how to get it; for a missing one, the fix."""
    if found.ok is None:
        gives = f": {found.gives}" if found.gives else ""
        fix = f" (to get it: {found.fix})" if found.fix else ""
        return f"{_MARK[None]:<8} {name:<15} {found.detail}{gives}{fix}"
    fix = f"  (fix: {found.fix})" if found.fix and not found.ok else ""
    return f"{_MARK[found.ok]:<8} {name:<15} {found.detail}{fix}"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("ok: found and working; MISSING: compcoll needs it (the exit code is "
                     "then non-zero); optional: an optional part that is absent, with what it "
                     "would give: compcoll works without it.")


@command("doctor", arguments=_arguments)
def run(args: argparse.Namespace) -> int:
    needed_missing = False
    for name, probe in CHECKS.items():
        try:
            found = probe()
        except Exception as exc:  # a broken install must not stop the rest of the report
            found = Finding(False, f"{type(exc).__name__}: {exc}")
        needed_missing |= found.ok is False
        print(line(name, found))
    return 1 if needed_missing else 0
