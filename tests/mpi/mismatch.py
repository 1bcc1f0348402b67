"""Ranks that disagree: for each argument that changes what ranks exchange, the last rank
passes another value and every rank must raise MismatchError (never hang, never differ).
Every call has a short deadline, so a hang fails fast as a CollectiveTimeout.
Run: mpiexec -n P python tests/mpi/mismatch.py [--torch]  (P >= 2; --torch: on a
torch.distributed gloo group initialized from the MPI ranks)"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import collectives
import compressors
from collectives import MismatchError

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank
ODD = R == P - 1  # the rank that passes the other value
T = 20.0  # seconds: a rank left waiting fails fast
ON: dict[str, Any] = {"comm": None}  # the communicator every call runs on


def x32(n: int = 64) -> np.ndarray:
    return np.linspace(-1.0, 1.0, n, dtype=np.float32) * (R + 1)


def allreduce(**kw: Any) -> Callable[[], Any]:
    kw.setdefault("algorithm", "ring")
    buf = kw.pop("buf", None)
    return lambda: collectives.allreduce(x32() if buf is None else buf, timeout=T, **ON, **kw)


def compressed(spec: str, **kw: Any) -> Callable[[], Any]:
    kw.setdefault("algorithm", "ring")
    kw.setdefault("name", "w")
    return allreduce(compressor=spec, **kw)


def sparse(**kw: Any) -> Callable[[], Any]:
    kw.setdefault("algorithm", "ssar_split_allgather")
    size = kw.pop("size", 64)
    idx = np.array([R, 10 + R, 20], np.int64)
    return lambda: collectives.sparse_allreduce(idx, np.ones(3, np.float32), size, timeout=T,
                                                **ON, **kw)


def without_checksum(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` with payload checksums off on this rank only (payloads are then shorter)."""
    def run() -> Any:
        compressors.set_checksum(False)
        try:
            return call()
        finally:
            compressors.set_checksum(True)
    return run


def _ef(cls: type, spec: str) -> compressors.ErrorFeedback:
    return cls(compressors.get(spec))


def cases() -> list[tuple[str, str | tuple[str, ...], Callable[[], Any]]]:
    """(what differs, the words the error must name, the call this rank makes)."""
    odd = ODD
    topk = "topk:ratio=0.25"
    return [
        # the plain path
        ("count", "element count", allreduce(buf=x32(65 if odd else 64))),
        ("dtype", ("dtype", "float64", "float32"),
         allreduce(buf=x32().astype(np.float64 if odd else np.float32))),
        ("op", ("op", "'max'", "'sum'"), allreduce(op="max" if odd else "sum")),
        ("algorithm", ("algorithm", "'tree'", "'ring'"),
         allreduce(algorithm="tree" if odd else "ring")),
        # one rank plain, the others compressed (both ways round)
        ("plain vs compressed", "different calls",
         allreduce() if odd else compressed("uniform:bits=8", scheme="allgather")),
        ("plain auto vs compressed", "different calls",  # before any cost-model fit
         allreduce(algorithm="auto") if odd else compressed("topk:ratio=0.25", scheme="auto",
                                                            algorithm="auto")),
        ("compressed vs plain", "different calls",
         compressed("fp16", scheme="dense") if odd else allreduce()),
        # the compressed path
        ("compressor", ("compressor", "'uniform:bits=4,", "'uniform:bits=8,"),
         compressed("uniform:bits=4" if odd else "uniform:bits=8", scheme="allgather")),
        ("compressor kind", ("compressor", "'fp16'", "'bf16'"),
         compressed("fp16" if odd else "bf16", scheme="dense")),
        ("compressor family", ("compressor", "'uniform:bits=8,", "'topk:"),
         compressed("topk:ratio=0.25" if odd else "uniform:bits=8", scheme="allgather")),
        ("scheme", ("scheme", "'allgather'", "'reduce_scatter_allgather'"),
         compressed("uniform:bits=8", scheme="allgather" if odd else
                    "reduce_scatter_allgather")),
        ("op, compressed", "op", compressed("fp16", scheme="dense", op="avg" if odd else "sum")),
        ("count, compressed", "element count",
         compressed("fp16", scheme="dense", buf=x32(65 if odd else 64))),
        ("algorithm, compressed", ("algorithm", "'tree'", "'ring'"),
         compressed("fp16", scheme="dense", algorithm="tree" if odd else "ring")),
        ("sparse_algorithm, compressed", ("sparse_algorithm", "'dsar'"),
         compressed(topk, scheme="sparse",
                    sparse_algorithm="dsar" if odd else "ssar_split_allgather")),
        ("k, compressed gtopk", "k",
         compressed(topk, scheme="sparse", sparse_algorithm="gtopk:k=3" if odd else "gtopk:k=2")),
        ("randomk name", ("name", "'v'", "'w'"),
         compressed("randomk:ratio=0.25", scheme="dense", name="v" if odd else "w")),
        ("randomk step", "step",
         compressed("randomk:ratio=0.25", scheme="dense", step=1 if odd else 0)),
        ("feedback on/off", ("feedback", "'none'", "'ErrorFeedback(beta=1.0"),
         compressed(topk, scheme="allgather",
                    feedback=None if odd else _ef(compressors.ErrorFeedback, topk))),
        ("feedback kind", "feedback",
         compressed(topk, scheme="allgather",
                    feedback=_ef(compressors.NoErrorFeedback if odd else
                                 compressors.ErrorFeedback, topk))),
        ("feedback settings", ("feedback", "beta=0.5", "beta=1.0"),
         compressed("uniform:bits=8", scheme="reduce_scatter_allgather",
                    feedback=compressors.ErrorFeedback(compressors.get("uniform:bits=8"),
                                                       beta=0.5 if odd else 1.0))),
        ("payload checksum", "checksum",
         (without_checksum if odd else lambda call: call)(
             compressed("uniform:bits=8", scheme="allgather"))),
        # sparse_allreduce
        ("sparse size", "size", sparse(size=65 if odd else 64)),
        ("sparse algorithm", ("algorithm", "'dsar'"), sparse(algorithm="dsar" if odd else
                                                 "ssar_split_allgather")),
        ("sparse gtopk k", "k", sparse(algorithm="gtopk:k=3" if odd else "gtopk:k=2")),
        ("sparse vs allreduce", "different calls", sparse() if odd else allreduce()),
        # the building blocks
        ("reduce_scatter counts", "counts",
         lambda: collectives.reduce_scatter(x32(), timeout=T, **ON,
                                            counts=[64 - P + 1] + [1] * (P - 1) if odd
                                            else [64 // P] * (P - 1) + [64 - 64 // P * (P - 1)])),
        ("broadcast root", "root",
         lambda: collectives.broadcast(x32(), root=1 if odd else 0, timeout=T, **ON)),
        ("allgather dtype", ("dtype", "float64", "float32"),
         lambda: collectives.allgather(x32().astype(np.float64 if odd else np.float32),
                                       timeout=T, **ON)),
        ("barrier vs allreduce", "different calls",
         (lambda: collectives.as_communicator(ON.get("comm")).barrier(timeout=T)) if odd
         else allreduce()),
        ("allgather vs allreduce", "different calls",
         (lambda: collectives.allgather(x32(), timeout=T, **ON)) if odd else allreduce()),
    ]


def main() -> None:
    chk = Checker("mismatch")
    if "--torch" in sys.argv:
        import torch.distributed as dist

        from collectives.ddp import init_from_mpi

        init_from_mpi(WORLD, "gloo", timeout=60)
        ON["comm"] = dist.group.WORLD
    for what, words, call in cases():
        try:
            call()
        except MismatchError as exc:
            for word in (words,) if isinstance(words, str) else words:
                chk.check(word in str(exc), f"{what}: the error does not name {word!r}: {exc}")
            # settings are named in words, never as the fingerprints the ranks compare
            chk.check(re.search(r"\d{7,}", str(exc)) is None,
                      f"{what}: the error shows a fingerprint, not the setting: {exc}")
        except Exception as exc:  # noqa: BLE001 - any other outcome is the failure reported
            chk.check(False, f"{what}: {type(exc).__name__} instead of MismatchError: {exc}")
        else:
            chk.check(False, f"{what}: no error (the ranks disagree)")
    # After all of that the communicator is still in step: an agreeing call works.
    y = chk.run("agreeing call", collectives.allreduce, np.full(8, R + 1, np.int64),
                algorithm="ring", timeout=T, **ON)
    chk.check(y is not None and bool((y == P * (P + 1) // 2).all()), "agreeing call after")
    chk.finish()


if __name__ == "__main__":
    main()
