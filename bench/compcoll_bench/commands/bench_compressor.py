"""Compressed rows of ``compcoll bench allreduce``: compressor specs, and one compressed size.

A compressed row times ``allreduce(x, compressor=..., feedback=ErrorFeedback(...))`` on
Gaussian inputs (seeded by rank) whose exact sum, in float64, MPI_Allreduce computes once per
size. Its bandwidths count the uncompressed bytes (effective bandwidth), its time is split
into compress / communicate / decompress, and its check cannot demand the exact sum: it counts
the elements whose bits differ from rank 0's result, plus the non-finite ones, and reports the
relative error ``||ours - exact|| / ||exact||`` beside them. With error feedback a call also
carries the residual of the calls before it (the same input every call), so a sparsifier's
error per call can exceed 1; ``--no-feedback`` shows one call's compression error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import numpy as np

from collectives import allreduce
from collectives.algorithms import REGISTRY
from compressors import dtypes

from ..registry import UsageError
from . import bench_data as data
from .bench_case import BASELINE
from .benchlib import Timing, time_calls

NONE = "none"  # the identity: the row is the plain dense algorithm's


def split_specs(values: Iterable[str] | None) -> list[str]:
    """Compressor specs from ``--compressor`` values, each a comma-separated list of specs.

    A spec's own parameters are comma-separated too, so a comma starts a new spec only when the
    token after it does: one with a ``:`` or without ``=`` (a bare name such as ``fp16``).
    ``key=value`` tokens continue the spec before them. Duplicates are dropped; default
    ``["none"]``.
    """
    specs: list[str] = []
    for value in values or [NONE]:
        for token in filter(None, (t.strip() for t in value.split(","))):
            if ":" in token or "=" not in token:
                specs.append(token)
            elif not specs:
                raise ValueError(f"compressor option {token!r} in {value!r} follows no "
                                 f"compressor name; write e.g. topk:ratio=0.01,approximate=true")
            else:
                specs[-1] += ("," if ":" in specs[-1] else ":") + token
    return list(dict.fromkeys(specs))


def usage_error(message: str) -> NoReturn:
    """Refuse the run: ``compcoll: error: message``, exit status 2 (as argparse's)."""
    raise UsageError(message)


def check_specs(specs: list[str], dtype: dtypes.DType, op: str, scheme: str) -> None:
    """Refuse, before any rank starts, compressors the run could not honour."""
    real = [s for s in specs if s != NONE]
    if not real:
        return
    import compressors  # here, not at import: ``compcoll doctor`` runs without the extension
    from collectives.compressed import check_scheme

    for spec in real:
        try:
            check_scheme(scheme, compressors.get(spec))
        except ValueError as exc:
            usage_error(f"--compressor {spec}: {exc}")
    if not dtype.is_float:
        floats = ", ".join(d for d in dtypes.SUPPORTED if dtypes.lookup(d).is_float)
        usage_error(f"--compressor {','.join(real)} needs a floating-point --dtype, got "
                    f"{dtype.name}: compressors only encode float tensors. Use --dtype {floats}, "
                    f"or --compressor none to time {dtype.name} uncompressed")
    if op not in ("sum", "avg"):
        usage_error(f"--compressor {','.join(real)} sums: it needs --op sum or avg, got {op}")


def combos(names: list[str], specs: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """(algorithm, compressor) pairs to run, and those skipped.

    The MPI_Allreduce row always runs, uncompressed: every row is compared with it. The
    engines' own allreduces (mpi, torch) run uncompressed only: they reduce the caller's
    values and cannot carry a compressor's payload.
    """
    run, skipped = [], []
    for name in names:
        if name == BASELINE:
            run.append((name, NONE))
            continue
        ours = name == "auto" or REGISTRY[name].ours
        for spec in specs:
            if ours or spec == NONE:
                run.append((name, spec))
            else:
                skipped.append(f"{name} with {spec}")
    return run, skipped


class CompressedCase:
    """One message size for compressed rows: Gaussian inputs, their exact sum, timed calls."""

    def __init__(self, comm: Any, dtype: dtypes.DType, op: str, count: int, inplace: bool,
                 scheme: str, feedback: bool):
        from mpi4py import MPI

        self.comm, self.dtype, self.op, self.inplace = comm, dtype, op, inplace
        self.scheme, self.feedback = scheme, feedback
        self.values = np.random.default_rng(comm.rank).standard_normal(count)
        self.send = data.empty(dtype, count)
        self.recv = self.send if inplace else data.empty(dtype, count)
        self.restore()
        # The exact sum of the inputs as they are held (rounded to the dtype), in float64.
        self.exact = data.as_float64(self.send)
        comm.comm.Allreduce(MPI.IN_PLACE, self.exact, op=MPI.SUM)
        if op == "avg":
            self.exact /= comm.size

    def restore(self) -> None:
        """Write this rank's input into the send buffer (an in-place call overwrote it)."""
        data.assign(self.send, self.values)

    def caller(self, algo: str, spec: str) -> tuple[Callable[[], None], list[dict[str, Any]]]:
        """A call of the compressed allreduce with fresh error feedback, and the list its
        calls append their stats to (compress/decompress seconds, bytes sent, scheme)."""
        import compressors
        from collectives.compressed.select import measure

        comp = compressors.get(spec)
        fb = compressors.ErrorFeedback(comp) if self.feedback else None
        if self.scheme == "auto":
            measure(self.comm, comp)  # the scheme choice's one-off probe: collective, untimed
        name, log, step = f"bench{len(self.values) * self.dtype.itemsize}", [], [0]

        def call() -> None:
            step[0] += 1
            stats: dict[str, Any] = {}
            allreduce(self.send, op=self.op, algorithm=algo, comm=self.comm, out=self.recv,
                      validate=False, compressor=comp, feedback=fb, scheme=self.scheme,
                      name=name, step=step[0], stats=stats)
            log.append(stats)

        return call, log

    def time(self, call: Callable[[], None], log: list[dict[str, Any]], iters: int,
             warmup: int) -> tuple[Timing, dict[str, Any]]:
        """Timing of ``call`` and the row's compressed fields: the median over the timed calls
        of each call's slowest-rank compress and decompress time and bytes sent. In place, the
        input is restored (untimed) before every call, so every call reduces the same values."""
        from mpi4py import MPI

        timing = time_calls(self.comm.comm, call, iters, warmup,
                            setup=self.restore if self.inplace else None)
        split = np.array([[s["compress_s"], s["decompress_s"], s["bytes_sent"]]
                          for s in log[-iters:]], dtype=np.float64)
        self.comm.comm.Allreduce(MPI.IN_PLACE, split, op=MPI.MAX)
        compress, decompress, sent = np.median(split, axis=0)
        return timing, {"scheme": log[-1]["scheme"], "auto_choice": None, "model_us": None,
                        "compress_us": compress * 1e6, "decompress_us": decompress * 1e6,
                        "comm_us": max(timing.median - compress - decompress, 0.0) * 1e6,
                        "bytes_sent": int(sent)}

    def check(self, call: Callable[[], None], corrupt: bool) -> tuple[int, bool]:
        """(#wrong over all ranks, all ranks hold the same bits) of one call on restored input.

        A compressed sum is not exact, so an element is wrong when its bits differ from rank 0's
        result or when it is not finite; ``corrupt`` flips element 0 on rank 0 (test hook).
        """
        self.restore()
        call()
        if corrupt and self.comm.rank == 0:
            data.corrupt(self.recv)
        raw = data.bits(self.recv)
        mine = raw.view(np.dtype(f"u{raw.itemsize}"))
        ref = mine.copy()
        world = self.comm.comm
        world.Bcast(ref, root=0)
        bad = (mine != ref) | ~np.isfinite(data.as_float64(self.recv))
        sums = world.allgather(data.checksum(self.recv))
        return world.allreduce(int(np.count_nonzero(bad))), len(set(sums)) == 1

    def rel_error(self) -> float:
        """``||result - exact|| / ||exact||`` of the last call's result on this rank."""
        got = data.as_float64(self.recv)
        return float(np.linalg.norm(got - self.exact) / np.linalg.norm(self.exact))
