"""Sparse allreduce on every algorithm: exact against the dense sum of the scattered inputs
(integer-valued floats), identical on all ranks, for overlapping, disjoint, empty, duplicate
and all-dense inputs; global top-k keeps exactly the k largest of the true sum.
Run: mpiexec -n P python tests/mpi/sparse.py"""

from __future__ import annotations

import numpy as np
import torch

from collectives import MismatchError, as_communicator
from collectives.progress import Handle
from collectives.sparse import ALGORITHMS, PARTS, sparse_allreduce
from collectives.sparse.common import SparseJob
from collectives.sparse.gtopk import top_k
from collectives.sparse.merge import coalesce, merge, to_dense

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank
SIZE = 1000


def inputs(case: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([R, len(case)])
    idx = {
        "overlapping": lambda: rng.choice(SIZE, 60, replace=False),
        "disjoint": lambda: np.arange(R, SIZE, P)[:40],
        "empty ranks": lambda: (np.zeros(0, np.int64) if R % 2 == 0
                                else rng.choice(SIZE, 30, replace=False)),
        "all empty": lambda: np.zeros(0, np.int64),
        "all dense": lambda: np.arange(SIZE),
        "duplicates": lambda: rng.integers(0, SIZE, 90),
        "clustered": lambda: rng.choice(50, 20, replace=False),  # mass in a few ranges
    }[case]()
    return idx, rng.integers(-5, 6, idx.size).astype(np.float32)


def dense_sum(case: str) -> np.ndarray:
    total = np.zeros(SIZE, np.float64)
    for i, v in WORLD.allgather(inputs(case)):
        np.add.at(total, i, v)
    return total


def as_parts(algo: str, idx: np.ndarray, val: np.ndarray) -> list:
    """The result of ``algo`` as the sets its parts variant hands over."""
    comm = as_communicator(None)
    acc = np.dtype(np.float32)
    ci, cv = coalesce(idx, val, SIZE, acc)
    job = SparseJob(comm, comm.next_tag(), ci, cv, SIZE, acc)
    got: dict = {}

    def steps():
        got["parts"] = yield from PARTS[algo](job)

    Handle(steps(), lambda: None, f"sparse allreduce parts[{algo}]", None).wait()
    return got["parts"]


def main() -> None:
    chk = Checker("sparse allreduce")
    for case in ("overlapping", "disjoint", "empty ranks", "all empty", "all dense",
                 "duplicates", "clustered"):
        idx, val = inputs(case)
        want = dense_sum(case)
        for algo in [a for a in ALGORITHMS if a != "gtopk"] + ["auto"]:
            what = f"{algo} {case}"
            got = chk.run(what, sparse_allreduce, idx, val, SIZE, algorithm=algo)
            if got is None:
                continue
            chk.check(np.array_equal(got, want.astype(np.float32)), f"{what}: wrong sum")
            chk.identical(got, what)
            si, sv = sparse_allreduce(idx, val, SIZE, algorithm=algo, dense=False)
            chk.check(bool((np.diff(si) > 0).all()) and np.array_equal(want[si], sv) and
                      not np.any(np.delete(want, si)), f"{what}: sparse form")
            if algo in PARTS:  # handed over in parts: merged, or written dense, the same
                parts = chk.run(what + " parts", as_parts, algo, idx, val)
                if parts is None:
                    continue
                pi, pv = merge(parts, np.dtype(np.float32))
                chk.check(np.array_equal(pi, si) and pv.tobytes() == sv.tobytes(),
                          f"{what}: merged parts")
                out = np.full(SIZE, 9, np.float32)
                to_dense(parts, out, np.dtype(np.float32))
                chk.check(out.tobytes() == got.tobytes(), f"{what}: parts to dense")
        for k in (1, 7, 50):  # k=0 is refused (below)
            what = f"gtopk k={k} {case}"
            si, sv = chk.run(what, sparse_allreduce, idx, val, SIZE, algorithm=f"gtopk:k={k}",
                             dense=False) or (None, None)
            if si is None:
                continue
            nz = np.flatnonzero(want)
            ti, tv = top_k(nz, want[nz].astype(np.float32), k)
            # Equal magnitudes may tie at the cut: compare the kept magnitudes, then indices.
            chk.check(si.size == ti.size and np.array_equal(np.sort(np.abs(sv)),
                                                            np.sort(np.abs(tv))),
                      f"{what}: not the k largest ({si.size} vs {ti.size})")
            chk.check(np.array_equal(want[si].astype(np.float32), sv), f"{what}: values")
            chk.identical(np.concatenate([si.view(np.uint8), sv.view(np.uint8)]), what)
    if P > 1:  # DSAR sends a dense range once that is cheaper: fewer bytes on dense input
        comm = as_communicator(None)
        idx, val = inputs("all dense")
        sent = {}
        for algo in ("ssar_split_allgather", "dsar"):
            before = comm.bytes_sent
            sparse_allreduce(idx, val, SIZE, algorithm=algo)
            sent[algo] = comm.bytes_sent - before
        # the reduce-scatter half is sparse in both; the allgather half halves (8 B -> 4 B)
        chk.check(sent["dsar"] < 0.8 * sent["ssar_split_allgather"], f"dsar bytes {sent}")
    t = sparse_allreduce(torch.tensor([1, 1, 2]), torch.ones(3, dtype=torch.bfloat16), 4)
    chk.check(isinstance(t, torch.Tensor) and t.tolist() == [0, 2 * P, P, 0], "torch in/out")
    si, sv = sparse_allreduce(torch.tensor([3, 1]), torch.ones(2), 4, dense=False)
    chk.check(isinstance(si, torch.Tensor) and si.tolist() == [1, 3] and sv.tolist() == [P, P],
              "torch in, sparse torch out")
    for bad, needle in ((lambda: sparse_allreduce([5], [1.0], 4), "[0, 4)"),
                        (lambda: sparse_allreduce([1, 2], [1.0], 4), "2 indices but 1"),
                        (lambda: sparse_allreduce([1], [1], 4), "floating point"),
                        (lambda: sparse_allreduce([1], [1.0], 4, algorithm="gtopk"), "gtopk:k="),
                        (lambda: sparse_allreduce([1], [1.0], 4, algorithm="gtopk:k=-2"),
                         "k must be an integer from 1"),
                        (lambda: sparse_allreduce([1], [1.0], 4, algorithm="gtopk:k=0"),
                         "k=0 keeps none"),
                        (lambda: sparse_allreduce([1], [1.0], 4, algorithm="dsar:k=2"),
                         "only gtopk takes"),
                        (lambda: sparse_allreduce([1], [1.0], 4, algorithm="x"), "available")):
        try:
            bad()
            chk.check(False, f"accepted: {needle}")
        except ValueError as exc:
            chk.check(needle in str(exc), f"{needle!r} not in {exc}")
    if P > 1:
        try:
            sparse_allreduce([0], [1.0], 4 + (R == 0))
            chk.check(False, "size mismatch accepted")
        except MismatchError as exc:
            chk.check("size" in str(exc), str(exc))
    chk.finish()


if __name__ == "__main__":
    main()
