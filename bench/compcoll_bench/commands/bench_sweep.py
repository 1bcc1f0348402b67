"""The rows of ``compcoll bench allreduce``: one per (size, algorithm, compressor)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from collectives import costmodel, tuning
from collectives.algorithms import REGISTRY
from compressors import dtypes

from . import noise
from .bench_case import Case
from .bench_compressor import NONE, CompressedCase
from .benchlib import Timing, bus_bandwidth, time_calls


def _row(case: Case | CompressedCase, name: str, timing: Timing,
         cost: costmodel.CostParams) -> dict[str, Any]:
    comm, count = case.comm, len(case.send)
    nbytes = count * case.dtype.itemsize
    algbw = nbytes / timing.median / 1e9
    chosen = tuning.choose(comm, nbytes) if name == "auto" else None
    modeled = chosen or name
    model = costmodel.predict(modeled, comm.size, nbytes, cost) if modeled in costmodel.MODELED \
        else None
    return {"size": nbytes, "count": count, "type": case.dtype.name, "op": case.op,
            "algo": name, "compressor": NONE, "scheme": None, "auto_choice": chosen,
            "inplace": case.inplace, "time_us": timing.median * 1e6, "iters": timing.calls,
            "p25_us": timing.p25 * 1e6, "p50_us": timing.median * 1e6,
            "p75_us": timing.p75 * 1e6, "p90_us": timing.p90 * 1e6,
            "p99_us": timing.p99 * 1e6, "spread": timing.spread, "algbw_GBps": algbw,
            "busbw_GBps": bus_bandwidth(algbw, comm.size), "ratio_vs_mpi": None, "noisy": None,
            "model_us": None if model is None else model * 1e6, "wrong": 0, "ranks_agree": True,
            "bytes_sent": None, "compress_us": None, "comm_us": None, "decompress_us": None,
            "rel_error": None}


def _dense(case: Case, name: str, args: argparse.Namespace, cost: costmodel.CostParams
           ) -> dict[str, Any]:
    """The row of an uncompressed algorithm (bytes sent: only where our transport sends)."""
    from mpi4py import MPI

    before = case.comm.bytes_sent
    row = _row(case, name, time_calls(case.comm.comm, case.call(name), args.iters,
                                      args.warmup), cost)
    sent = (case.comm.bytes_sent - before) // (args.iters + args.warmup)
    sent = case.comm.comm.allreduce(sent, op=MPI.MAX)
    if name == "auto" or name in REGISTRY and REGISTRY[name].ours:
        row["bytes_sent"] = sent
    if args.check:
        row["wrong"], row["ranks_agree"] = case.check(name)
    return row


def _compressed(case: CompressedCase, name: str, spec: str, args: argparse.Namespace,
                cost: costmodel.CostParams) -> dict[str, Any]:
    """The row of ``name`` carrying compressor ``spec`` (bandwidths of the uncompressed bytes)."""
    call, log = case.caller(name, spec)
    timing, extra = case.time(call, log, args.iters, args.warmup)
    row = {**_row(case, name, timing, cost), **extra, "compressor": spec}
    if args.check:
        corrupt = os.environ.get("COMPCOLL_BENCH_CORRUPT") == f"{name}/{spec}"
        row["wrong"], row["ranks_agree"] = case.check(call, corrupt)
    row["rel_error"] = case.rel_error()
    return row


def places(inplace: bool | None) -> list[bool]:
    """The placements timed: out of place and in place (nccl-tests' two halves of a line),
    or the one asked for."""
    return [False, True] if inplace is None else [inplace]


def sweep(comm: Any, args: argparse.Namespace, dtype: dtypes.DType, op: str, sizes: list[int],
          pairs: list[tuple[str, str]], cost: costmodel.CostParams, bar: Any,
          emit: Callable[[list[dict[str, Any]]], None]) -> list[dict[str, Any]]:
    """Every row, size by size and placement by placement (a row per placement); ``emit``
    gets each (size, algorithm, compressor)'s rows, one per placement, once the size is
    done."""
    rows: list[dict[str, Any]] = []
    for size in sizes:
        count = size // dtype.itemsize
        halves = []
        for inplace in places(args.inplace):
            case = Case(comm, dtype, op, count, inplace)
            packed = None
            if any(spec != NONE for _, spec in pairs):
                packed = CompressedCase(comm, dtype, op, count, inplace, args.scheme,
                                        not args.no_feedback)
            group = []
            for name, spec in pairs:
                if spec == NONE:
                    group.append(_dense(case, name, args, cost))
                else:
                    assert packed is not None
                    group.append(_compressed(packed, name, spec, args, cost))
                if bar is not None:
                    bar.update()
            base = group[0]["busbw_GBps"]  # MPI_Allreduce's: the same bytes, a time ratio
            for row in group:
                row["ratio_vs_mpi"] = row["busbw_GBps"] / base if base > 0 else None
            marks = noise.flags([r["time_us"] for r in group], [r["spread"] for r in group])
            for row, noisy in zip(group, marks, strict=True):
                row["noisy"] = noisy
            halves.append(group)
            rows.extend(group)
        for same in zip(*halves, strict=True):
            emit(list(same))
    return rows
