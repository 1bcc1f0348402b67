"""Per-rank CPU time of top-k compressed allreduce with error feedback (the sparse scheme).

Times, in one process, what every rank computes in ``compcoll bench compressed`` for top-k
with error feedback: compress (residual = x + residual, exact top-k of it, payload, sent
entries zeroed) and decode (coalesce, then the recursive-doubling sparse allreduce of p ranks'
payloads as rank 0 runs it, its partners' messages replayed, then the dense result). Each step
runs as the code ran before the fused kernels ("old": numpy passes around ``TopK.compress``;
the merged set built, then ``fill(0)`` and a fancy-index write) and as the library runs it
now ("new"), interleaved within every repeat; medians.

Run: ``python -m compcoll_bench.topk_cpu [-n 16777216] [--ratio 0.01] [-p 4] [--repeats 7]``
(kernels on one thread, as one MPI rank per core runs them).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import compressors
from collectives.sparse import ssar
from collectives.sparse.common import SparseJob
from collectives.sparse.merge import coalesce, merge, pack
from compressors import kernels
from compressors.payload import Payload


def old_compress_feedback(comp: Any, x: np.ndarray, residual: np.ndarray) -> Payload:
    """Error feedback as four passes: add, top-k of the sum, zero what was sent, NaN check."""
    np.add(residual, x, out=residual)
    payload = comp.compress(residual.reshape(x.shape), name="g")
    residual[payload.buffers["indices"]] = 0
    if not np.isfinite(np.add.reduce(residual)):
        residual[~np.isfinite(residual)] = 0
    return payload


def new_compress_feedback(comp: Any, x: np.ndarray, residual: np.ndarray) -> Payload:
    return comp.compress_feedback(x, residual, name="g")


class ReplayComm:
    """Rank 0 of p as the recursive-doubling sparse allreduce sees it: sends go nowhere, each
    receive from a peer is answered with the next message recorded for that peer."""

    def __init__(self, size: int, messages: dict[int, list[np.ndarray]]) -> None:
        self.rank, self.size, self.messages = 0, size, messages
        self.pending: dict[int, list[np.ndarray]] = {}

    def reset(self) -> None:
        self.pending = {peer: list(m) for peer, m in self.messages.items()}

    def isend(self, buf: np.ndarray, dest: int, tag: int, what: str = "send") -> None:
        return None

    def irecv(self, buf: np.ndarray, source: int, tag: int, what: str = "recv") -> None:
        buf[...] = self.pending[source].pop(0)


def run_steps(gen: Any) -> Any:
    """Drive a generator of communication steps to its return value."""
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        return stop.value


def rank0_messages(payloads: list[Payload], n: int) -> dict[int, list[np.ndarray]]:
    """What rank 0's partners send it in recursive doubling: per round the partner's current
    set (count, then the packed set)."""
    acc = np.dtype(np.float32)
    sets = [coalesce(p.buffers["indices"], p.buffers["values"], n, acc) for p in payloads]
    out: dict[int, list[np.ndarray]] = {}
    width = 1
    while width < len(sets):
        theirs = merge(sets[width:2 * width], acc)
        buf = pack(*theirs, n)
        out[width] = [np.array([buf.size], np.int64), buf]
        width *= 2
    return out


def decode(comm: ReplayComm, own: Payload, n: int, out: np.ndarray, new: bool) -> None:
    """Rank 0's share of the sparse scheme after compressing: coalesce its payload, the
    recursive-doubling rounds (pack, unpack, merge), the dense result."""
    acc = np.dtype(np.float32)
    comm.reset()
    idx, val = coalesce(own.buffers["indices"], own.buffers["values"], n, acc)
    job = SparseJob(comm, 0, idx, val, n, acc)  # type: ignore[arg-type]
    if new:
        from collectives.sparse.merge import to_dense

        to_dense(run_steps(ssar.recursive_doubling_parts(job)), out, acc)
    else:
        ridx, rval = run_steps(ssar.recursive_doubling(job))
        out.fill(0)
        out[ridx] = rval


CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


def paired(fns: dict[str, Callable[[], Any]], repeats: int,
           setup: Callable[[], None] = lambda: None, clock: str = "cpu") -> dict[str, float]:
    """Median ms of each function, run in turn within every repeat (``setup`` untimed before
    each call), after one untimed warm-up call each."""
    now = CLOCKS[clock]
    times: dict[str, list[float]] = {key: [] for key in fns}
    for rep in range(repeats + 1):
        for key, fn in fns.items():
            setup()
            t0 = now()
            fn()
            if rep:
                times[key].append(now() - t0)
    return {key: 1e3 * float(np.median(t)) for key, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1 << 24, help="float32 elements (default 16M)")
    ap.add_argument("--ratio", type=float, default=0.01)
    ap.add_argument("-p", type=int, default=4, help="ranks whose payloads are merged (power of 2)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--approximate", action="store_true", help="sampled top-k")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                    help="cpu: this thread's CPU time (steady on a shared machine); wall")
    ap.add_argument("--old-only", action="store_true",
                    help="time the old paths alone: they also run on a build of the code "
                         "before the fused kernels, for its numbers next to these")
    args = ap.parse_args()
    kernels.set_num_threads(1)
    n, p = args.n, args.p
    comp = compressors.get("topk", ratio=args.ratio, approximate=args.approximate)
    rng = np.random.default_rng(0)

    # Gradient-like input: normal noise; the residual after a few steps of error feedback.
    xs = [rng.standard_normal(n, dtype=np.float32) for _ in range(p)]
    res0 = np.zeros(n, np.float32)
    for _ in range(3):
        old_compress_feedback(comp, rng.standard_normal(n, dtype=np.float32), res0)
    x = xs[0]
    res_old, res_new = np.empty_like(res0), np.empty_like(res0)

    def reset() -> None:
        np.copyto(res_old, res0)
        np.copyto(res_new, res0)

    kinds = ("old",) if args.old_only else ("old", "new")
    fns = {"old": lambda: old_compress_feedback(comp, x, res_old),
           "new": lambda: new_compress_feedback(comp, x, res_new)}
    comp_ms = paired({key: fns[key] for key in kinds}, args.repeats, reset, args.clock)
    reset()
    po = old_compress_feedback(comp, x, res_old)
    same = True
    if not args.old_only:
        pn = new_compress_feedback(comp, x, res_new)
        same = po.to_bytes() == pn.to_bytes() and np.array_equal(res_old, res_new)

    payloads = [comp.compress(xi + res0, name="g") for xi in xs]
    comm = ReplayComm(p, rank0_messages(payloads, n))
    out_old, out_new = np.empty(n, np.float32), np.empty(n, np.float32)
    fns = {"old": lambda: decode(comm, payloads[0], n, out_old, new=False),
           "new": lambda: decode(comm, payloads[0], n, out_new, new=True)}
    decode_ms = paired({key: fns[key] for key in kinds}, args.repeats, clock=args.clock)
    if not args.old_only:
        same = same and out_old.tobytes() == out_new.tobytes()
    nnz = int(np.count_nonzero(out_old))

    k = po.buffers["indices"].size
    print(f"top-k ratio {args.ratio}{' (sampled)' if args.approximate else ''}: n = {n}, "
          f"k = {k}, {p} ranks' payloads merged ({nnz} non-zeros), kernels on 1 thread, "
          f"median of {args.repeats}, {args.clock} time")
    rows = [("compress + error feedback", comp_ms),
            ("sparse allreduce + dense result", decode_ms)]
    total = {key: sum(r[key] for _, r in rows) for key in kinds}
    if args.old_only:
        print(f"{'step (ms per rank)':<34}{'old':>9}")
        for name, r in [*rows, ("total", total)]:
            print(f"{name:<34}{r['old']:9.2f}")
        return
    print(f"{'step (ms per rank)':<34}{'old':>9}{'new':>9}{'old/new':>9}")
    for name, r in [*rows, ("total", total)]:
        print(f"{name:<34}{r['old']:9.2f}{r['new']:9.2f}{r['old'] / r['new']:9.2f}")
    print(f"payloads, residuals and dense outputs bit-identical: {same}")


if __name__ == "__main__":
    main()
