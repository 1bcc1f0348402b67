"""Helpers shared by the scripts that run under mpiexec: every rank checks, rank 0 reports."""

from __future__ import annotations

import sys
import traceback
import zlib

import numpy as np
from mpi4py import MPI

WORLD = MPI.COMM_WORLD


class Checker:
    """Collects failures on every rank; ``finish`` reports on rank 0 and sets the exit code."""

    def __init__(self, name: str, comm: MPI.Comm = WORLD) -> None:
        self.name = name
        self.comm = comm
        self.cases = 0
        self.failures: list[str] = []

    def check(self, cond: bool, what: str) -> None:
        self.cases += 1
        if not cond:
            self.failures.append(f"rank {self.comm.rank}: {what}")

    def run(self, what: str, fn, *args, **kwargs):
        """Run ``fn``; an exception counts as a failure of ``what`` (and is reported)."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, none is hidden
            self.cases += 1
            self.failures.append(f"rank {self.comm.rank}: {what}: {type(exc).__name__}: {exc}"
                                 f"\n{traceback.format_exc(limit=3)}")
            return None

    def raises(self, fn, words: str, what: str, exc: type[BaseException] = ValueError) -> None:
        """``fn()`` raises ``exc`` with ``words`` in its message."""
        try:
            fn()
        except exc as e:
            self.check(words in str(e), f"{what}: {type(e).__name__}: {e}")
            return
        self.check(False, f"{what}: nothing raised")

    def identical(self, arr: np.ndarray, what: str) -> None:
        """All ranks hold the same bytes."""
        crc = zlib.crc32(np.ascontiguousarray(arr).view(np.uint8).tobytes())
        crcs = self.comm.allgather(crc)
        self.check(len(set(crcs)) == 1, f"{what}: results differ between ranks (crc {crcs})")

    def finish(self) -> None:
        counts = self.comm.gather((self.cases, self.failures), root=0)
        total_bad = self.comm.allreduce(len(self.failures))
        if self.comm.rank == 0:
            cases = sum(c for c, _ in counts)
            for _, fails in counts:
                for f in fails[:20]:
                    print("FAIL", f)
            print(f"{self.name}: np={self.comm.size} cases={cases} FAILURES {total_bad}")
            sys.stdout.flush()
        sys.exit(1 if total_bad else 0)
