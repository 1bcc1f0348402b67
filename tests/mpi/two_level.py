"""Two-level allreduce on hosts emulated through COMPCOLL_HOST, one communicator per layout.

Each LAYOUT names the host of every rank: "2x3" (2 hosts of 3 consecutive ranks), "3+1"
(hosts of 3 and 1 consecutive ranks), "0,1,0,1" (the host of each rank). Checked on every
rank: the agreed topology and sub-communicators; every dtype and op on odd sizes, in and out
of place, against numpy, MPI_Allreduce and the flat ring (exact inputs); bit-identity of
order-sensitive sums within a stated bound; several calls in flight; each flat algorithm as
the cross-host step; pipelined chunks; what the busiest rank sends; a timeout inside a
sub-communicator.
Run: mpiexec -n P python tests/mpi/two_level.py [full:]LAYOUT... [--torch] [--timeout]
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

import collectives
from collectives.algorithms import two_level
from collectives.config import defaults
from collectives.errors import CollectiveTimeout, CommunicatorUnusable
from collectives.topology import topology

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank
ALGO = "two_level"
DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64"]
FLOATS = ("float16", "bfloat16", "float32", "float64")
OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}
MPI_OPS = {"sum": MPI.SUM, "avg": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}


def host_labels(layout: str) -> list[int]:
    """The host of each rank for a layout string (see the module's docstring)."""
    if "x" in layout:
        hosts, per = map(int, layout.split("x"))
        labels = [r // per for r in range(hosts * per)]
    elif "+" in layout:
        labels = [h for h, n in enumerate(map(int, layout.split("+"))) for _ in range(n)]
    else:
        labels = [int(x) for x in layout.split(",")]
    assert len(labels) == P, f"layout {layout} is for {len(labels)} ranks, not {P}"
    return labels


def emulate(layout: str) -> collectives.Communicator:
    """A fresh communicator whose ranks believe they sit on the layout's hosts."""
    os.environ["COMPCOLL_HOST"] = f"{layout}/host{host_labels(layout)[R]}"
    return collectives.as_communicator(WORLD.Dup())


def check_topology(chk: Checker, comm, layout: str) -> None:
    labels = host_labels(layout)
    order = list(dict.fromkeys(labels))  # hosts by their lowest rank
    hosts = tuple(tuple(r for r in range(P) if labels[r] == h) for h in order)
    mine = hosts[order.index(labels[R])]
    t = chk.run(f"{layout} topology", topology, comm)
    if t is None:
        return
    want = (hosts, tuple(order.index(x) for x in labels), order.index(labels[R]),
            mine.index(R), len(mine), len(hosts), len({len(h) for h in hosts}) == 1,
            all(list(h) == list(range(h[0], h[0] + len(h))) for h in hosts))
    got = (t.hosts, t.host_of_rank, t.host_index, t.local_rank, t.local_size, t.n_hosts,
           t.uniform, t.contiguous)
    chk.check(got == want, f"{layout} topology {got}, want {want}")


def check_subcomms(chk: Checker, comm, layout: str) -> None:
    """After a call: the sub-communicators exist only where the algorithm needs them."""
    t, subs = topology(comm), comm.cache.host_comms
    if t.n_hosts in (1, P):
        chk.check(subs is None, f"{layout}: sub-communicators made where none is needed")
        return
    same = tuple(sorted(h[t.local_rank] for h in t.hosts if len(h) > t.local_rank))
    chk.check(subs is not None and subs.intra.parent_ranks == t.hosts[t.host_index]
              and subs.cross.parent_ranks == same and subs.intra.parent is comm,
              f"{layout}: sub-communicators {subs}")


def values(n: int, dtype: str, op: str, rank: int, seed: int) -> np.ndarray:
    """Small integers whose reduction is exact in every dtype and any order."""
    rng = np.random.default_rng([seed, rank])
    low = 0 if dtype == "uint8" else -4
    if op in ("sum", "avg"):
        return rng.integers(low, 5, n).astype(np.float64)
    if op == "prod":
        return rng.choice([1, 2] if dtype == "uint8" else [-1, 1, 2], n).astype(np.float64)
    return rng.integers(low * 12, 51, n).astype(np.float64)


def to_buffer(v: np.ndarray, dtype: str):
    if dtype == "bfloat16":  # numpy has no bfloat16
        return torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16)
    return v.astype(dtype)


def as_f64(x) -> np.ndarray:
    return x.double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, np.float64)


def raw(x) -> np.ndarray:
    return x.view(torch.int16).numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def oracle(inputs: list[np.ndarray], dtype: str, op: str) -> np.ndarray:
    """The exact reduction in numpy (integers wrap in their own width)."""
    acc = inputs[0].astype(np.float64 if dtype in FLOATS else dtype)
    for x in inputs[1:]:
        acc = OPS["sum" if op == "avg" else op](acc, x.astype(acc.dtype))
    if op == "avg":
        ft = np.float64 if dtype == "float64" else np.float32
        acc = acc.astype(ft) * ft(1.0 / P)
    return acc.astype(np.float64)


def exact_case(chk: Checker, comm, what: str, dtype: str, op: str, n: int, inplace: bool,
               seed: int, ring: bool) -> None:
    inputs = [values(n, dtype, op, r, seed) for r in range(P)]
    buf = to_buffer(inputs[R], dtype)
    before = as_f64(buf).copy()
    what = f"{what} {dtype} {op} n={n} {'in' if inplace else 'out-of'}-place"
    res = chk.run(what, collectives.allreduce, buf, op=op, algorithm=ALGO, comm=comm,
                  out=buf if inplace else None)
    if res is None:
        return
    got = as_f64(res)
    chk.check(res is buf if inplace else np.array_equal(as_f64(buf), before),
              f"{what}: in place returns the input, out of place leaves it alone")
    chk.check(type(res) is type(buf) and tuple(res.shape) == (n,), f"{what}: result type")
    want = oracle(inputs, dtype, op)
    if op == "avg" and dtype in ("float16", "bfloat16"):  # inputs pre-divided by p: rounding
        chk.check(np.allclose(got, want, rtol=2e-2, atol=2e-2), f"{what}: wrong")
        ring = False  # the order of the rounded partial sums shows
    else:
        chk.check(np.array_equal(got, want), f"{what}: wrong: {got[:6]} want {want[:6]}")
        if dtype not in ("float16", "bfloat16"):
            ref = np.empty(n, dtype)
            WORLD.Allreduce(inputs[R].astype(dtype), ref, MPI_OPS[op])
            ref = ref * (ref.dtype.type(1.0 / P)) if op == "avg" else ref
            chk.check(np.array_equal(got, ref.astype(np.float64)),
                      f"{what}: differs from MPI_Allreduce")
    if ring:
        flat = collectives.allreduce(to_buffer(inputs[R], dtype), op=op, algorithm="ring",
                                     comm=comm)
        chk.check(raw(flat).tobytes() == raw(res).tobytes(), f"{what}: differs from ring")
    chk.identical(raw(res), what)


def order_case(chk: Checker, comm, what: str, dtype: str, n: int, seed: int) -> None:
    """BIG, -BIG and TINY at rank triples, then Gaussian data: identical bits on every rank
    and an error within (p-1) eps * sum |x| (each of the p-1 additions rounds once)."""
    x = np.random.default_rng([seed, R]).standard_normal(n)
    big = {"float16": 1e4, "bfloat16": 1e30, "float32": 1e30, "float64": 1e300}[dtype]
    x[np.arange(n) % 3 == 0] = {0: big, 1: -big}.get(R % 3, 1e-3)
    res = chk.run(f"{what} {dtype} order", collectives.allreduce, to_buffer(x, dtype),
                  algorithm=ALGO, comm=comm)
    if res is not None:
        chk.identical(raw(res), f"{what} {dtype} order-sensitive")
    g = as_f64(to_buffer(np.random.default_rng([seed, R, 1]).standard_normal(n), dtype))
    res = chk.run(f"{what} {dtype} gaussian", collectives.allreduce, to_buffer(g, dtype),
                  algorithm=ALGO, comm=comm)
    if res is None:
        return
    chk.identical(raw(res), f"{what} {dtype} gaussian")
    every = np.stack(WORLD.allgather(g))
    eps = {"float16": 2 ** -10, "bfloat16": 2 ** -7, "float32": 2 ** -23, "float64": 2 ** -52}
    bound = (P - 1) * eps[dtype] * np.abs(every).sum(axis=0) + 1e-300
    err = np.abs(as_f64(res) - every.sum(axis=0))
    chk.check(bool(np.all(err <= bound)), f"{what} {dtype}: error {err.max():.3g} > bound")


def in_flight(chk: Checker, comm, what: str) -> None:
    """Two two-level calls and a ring in flight at once, finished in reverse order."""
    a = np.arange(1009, dtype=np.float32) + R
    b = np.full(P + 2, R, np.int32)
    c = np.ones(7, np.float64)
    h1 = collectives.iallreduce(a, algorithm=ALGO, comm=comm)
    h2 = collectives.iallreduce(b, op="max", algorithm=ALGO, comm=comm)
    h3 = collectives.iallreduce(c, algorithm="ring", comm=comm)
    while not h2.test():
        pass
    z, y, x = h3.wait(), h2.wait(), h1.wait()
    chk.check(np.array_equal(x, np.arange(1009) * P + P * (P - 1) // 2), f"{what}: first")
    chk.check(bool((y == P - 1).all()) and bool((z == P).all()), f"{what}: second, third")
    chk.identical(x, f"{what} in flight")


def cross_algorithms(chk: Checker, comm, what: str) -> None:
    """Each flat algorithm as the cross-host step (and a many-segment pipeline)."""
    for cross in ("rabenseifner", "tree", "recursive_doubling", "mpi"):
        two_level.CROSS = cross
        try:
            exact_case(chk, comm, f"{what} cross={cross}", "float32", "sum", 1009, False, 3,
                       ring=False)
            exact_case(chk, comm, f"{what} cross={cross}", "bfloat16", "max", P + 1, True, 4,
                       ring=False)
        finally:
            two_level.CROSS = "ring"
    saved = defaults.segment_bytes
    defaults.segment_bytes = 64
    try:
        exact_case(chk, comm, f"{what} 64 B segments", "int64", "sum", 1009, True, 5, ring=True)
    finally:
        defaults.segment_bytes = saved


def pipelined(chk: Checker, comm, layout: str) -> None:
    """Chunks of 64 bytes (up to ``PIECES`` of them): the cross-host step of one chunk in
    flight with the host's allgather of the one before and reduce-scatter of the next."""
    saved = two_level.PIECE_BYTES
    two_level.PIECE_BYTES = 64
    try:
        for i, (dtype, op, n) in enumerate([("float32", "sum", 1009), ("int64", "max", 1009),
                                            ("bfloat16", "sum", 4 * P + 3),
                                            ("float64", "prod", 97), ("int8", "min", 263)]):
            for inplace in (False, True):
                exact_case(chk, comm, f"{layout} pipelined", dtype, op, n, inplace, 40 + i,
                           ring=inplace)
        order_case(chk, comm, f"{layout} pipelined", "float32", 4099, 9)
        in_flight(chk, comm, f"{layout} pipelined")
        wire(chk, comm, f"{layout} pipelined")
    finally:
        two_level.PIECE_BYTES = saved


def wire(chk: Checker, comm, layout: str) -> None:
    """On uniform hosts the busiest rank sends what ``wire_bytes`` says (n divisible by p)."""
    if not topology(comm).uniform:
        return
    buf = np.ones(840 * P, np.float32)
    before = comm.bytes_sent
    collectives.allreduce(buf, algorithm=ALGO, comm=comm, validate=False)
    busiest = max(WORLD.allgather(comm.bytes_sent - before))
    want = two_level.wire_bytes(P, buf.nbytes)
    chk.check(abs(busiest - want) <= 1e-9 * want, f"{layout}: sent {busiest} B, want {want}")


def timeout_case(chk: Checker, layout: str) -> None:
    """The last rank stays away: every other rank times out inside a sub-communicator,
    naming a rank of the communicator it called on, and that communicator refuses after."""
    comm = emulate(layout)
    collectives.allreduce(np.ones(64, np.float32), algorithm=ALGO, comm=comm)  # set up
    WORLD.Barrier()
    if R == P - 1:
        time.sleep(3.0)
        return
    try:
        collectives.allreduce(np.ones(64, np.float32), algorithm=ALGO, comm=comm, timeout=1.0,
                              validate=False)
        chk.check(False, f"{layout}: no timeout without rank {P - 1}")
    except CollectiveTimeout as exc:
        chk.check("host" in exc.step and exc.peer is not None and 0 <= exc.peer < P,
                  f"{layout}: timeout names step {exc.step!r} and peer {exc.peer}")
    try:
        collectives.allreduce(np.ones(4), algorithm="ring", comm=comm)
        chk.check(False, f"{layout}: communicator usable after a sub-communicator timeout")
    except CommunicatorUnusable:
        chk.check(True, "refused")


def on_torch(chk: Checker, layouts: list[str]) -> None:
    """The same on the default torch.distributed (gloo) group: new_group for every host."""
    import torch.distributed as dist

    from collectives.ddp import init_from_mpi

    init_from_mpi(WORLD, "gloo", timeout=60)
    for layout in layouts:
        os.environ["COMPCOLL_HOST"] = f"torch {layout}/host{host_labels(layout)[R]}"
        c = collectives.as_communicator(dist.new_group(list(range(P))))
        check_topology(chk, c, layout)
        for dtype in ("float32", "bfloat16", "int64"):
            exact_case(chk, c, f"torch {layout}", dtype, "sum", 1009, False, 6, ring=True)
            exact_case(chk, c, f"torch {layout}", dtype, "max", P - 1, True, 7, ring=True)
        check_subcomms(chk, c, layout)
    dist.barrier()
    dist.destroy_process_group()


def matrix(chk: Checker, comm, layout: str, full: bool) -> None:
    """Every dtype and op at odd sizes (``full``), or a cross-section of them."""
    dtypes = DTYPES if full else ["bfloat16", "float32", "int8", "int64"]
    sizes = sorted({0, 1, P - 1, P + 1, 1009} if full else {0, P + 1, 1009})
    seed = 0
    for i, dtype in enumerate(dtypes):
        for op in ("sum", "avg", "min", "max", "prod") if full else ("sum", "avg", "max"):
            if op == "avg" and dtype not in FLOATS:
                continue
            for n in sizes:
                for inplace in (False, True):
                    seed += 1
                    exact_case(chk, comm, layout, dtype, op, n, inplace, seed,
                               ring=n >= P + 1 and inplace)
        if dtype in FLOATS:
            order_case(chk, comm, layout, dtype, 4099, i)


def main() -> None:
    """Arguments: layouts ("full:" first for the whole matrix), --torch (the first two
    layouts on torch.distributed too), --timeout (on the first layout)."""
    args = sys.argv[1:]
    layouts = [a for a in args if not a.startswith("--")]
    chk = Checker("two-level")
    for spec in layouts:
        full, layout = spec.startswith("full:"), spec.removeprefix("full:")
        comm = emulate(layout)
        check_topology(chk, comm, layout)
        matrix(chk, comm, layout, full)
        check_subcomms(chk, comm, layout)
        in_flight(chk, comm, layout)
        if full:
            cross_algorithms(chk, comm, layout)
            pipelined(chk, comm, layout)
        wire(chk, comm, layout)
    plain = [spec.removeprefix("full:") for spec in layouts]
    if "--torch" in args:
        on_torch(chk, plain[:2])
    if "--timeout" in args:
        timeout_case(chk, plain[0])
    chk.finish()


if __name__ == "__main__":
    main()
