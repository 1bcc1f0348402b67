"""Everything around the matrix: sub-communicators, torch views, nonblocking, the building
blocks (reduce_scatter, allgather, broadcast), device staging, auto, and bad input.
Run: mpiexec -n P python tests/mpi/features.py"""

from __future__ import annotations

import os

import numpy as np
import torch

import collectives
from collectives import MismatchError, device

from common import WORLD, Checker
from fake_cuda import FakeDeviceArray, HostRuntime

P, R = WORLD.size, WORLD.rank
OURS = ["ring", "tree", "recursive_doubling", "rabenseifner"]


def sub_communicators(chk: Checker) -> None:
    halves = WORLD.Split(R % 2, R)
    reverse = WORLD.Split(0, P - R)
    for name, comm in (("halves", halves), ("reversed", reverse)):
        for algo in OURS + ["mpi"]:
            x = np.full(101, comm.rank + 1, dtype=np.int64)
            y = chk.run(f"{name} {algo}", collectives.allreduce, x, algorithm=algo, comm=comm)
            want = comm.size * (comm.size + 1) // 2
            ok = y is not None and bool((y == want).all())
            chk.check(ok, f"{name} {algo}: {None if y is None else y[:3]}")
    # Interleaving collectives on WORLD and on a sub-communicator keeps their messages apart.
    a = collectives.iallreduce(np.ones(1000, np.float32), algorithm="ring")
    b = collectives.iallreduce(np.ones(1000, np.float32), algorithm="ring", comm=halves)
    chk.check(bool((b.wait() == halves.size).all()) and bool((a.wait() == P).all()), "interleaved")


def torch_views(chk: Checker) -> None:
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10) + R
    view = base[:, ::3]  # non-contiguous
    want = (torch.arange(60, dtype=torch.float32).reshape(6, 10) * P + P * (P - 1) / 2)[:, ::3]
    for algo in OURS:
        out = chk.run(f"noncontig view {algo}", collectives.allreduce, view, algorithm=algo)
        chk.check(out is not None and torch.equal(out, want), f"noncontig out-of-place {algo}")
    v2 = base.clone()[:, ::3]
    holder = base.clone()
    inplace_view = holder[:, ::3]
    collectives.allreduce(inplace_view, algorithm="ring", out=inplace_view)
    chk.check(torch.equal(holder[:, ::3], want), "noncontig in place writes through the view")
    chk.check(torch.equal(holder[:, 1::3], base[:, 1::3]), "in place leaves other elements")
    del v2
    t = torch.ones(7, 3, dtype=torch.bfloat16, requires_grad=False)
    chk.check(torch.equal(collectives.allreduce(t), t * P), "bf16 tensor")


def nonblocking(chk: Checker) -> None:
    bufs = [np.full(5000 + i, i + R, dtype=np.float64) for i in range(6)]
    handles = [collectives.iallreduce(b, algorithm=OURS[i % 4]) for i, b in enumerate(bufs)]
    for _ in range(1000):
        if all(h.test() for h in handles):
            break
    res = [h.wait() for h in reversed(handles)][::-1]
    for i, r in enumerate(res):
        chk.check(bool((r == i * P + P * (P - 1) / 2).all()), f"iallreduce #{i}")


def building_blocks(chk: Checker) -> None:
    n = 37
    x = np.arange(n, dtype=np.float32) + R
    full = np.arange(n, dtype=np.float32) * P + P * (P - 1) / 2
    mine = collectives.reduce_scatter(x)
    base, extra = divmod(n, P)
    lo = R * base + min(R, extra)
    chk.check(np.array_equal(mine, full[lo:lo + base + (R < extra)]), "reduce_scatter balanced")
    counts = [0] * P
    counts[-1] = n
    mine = collectives.reduce_scatter(x, counts=counts, op="max")
    want = np.arange(n, dtype=np.float32) + P - 1 if R == P - 1 else np.zeros(0, np.float32)
    chk.check(np.array_equal(mine, want), "reduce_scatter with counts, empty blocks")
    t = torch.full((R + 1, 2), float(R))
    g = collectives.allgather(t)
    want = torch.cat([torch.full((2 * (r + 1),), float(r)) for r in range(P)])
    chk.check(isinstance(g, torch.Tensor) and torch.equal(g, want), "allgather variable sizes")
    chk.check(collectives.allgather(np.zeros(0, np.int8)).size == 0, "allgather all empty")
    for root in {0, P - 1, P // 2}:
        b = np.full(3001, R, dtype=np.int32)
        collectives.broadcast(b, root=root)
        chk.check(bool((b == root).all()), f"broadcast root {root}")


def device_staging(chk: Checker) -> None:
    rt = HostRuntime()
    device.set_runtime(rt)
    try:
        for algo in ("ring", "mpi"):
            d = FakeDeviceArray(np.full(1000, R + 1.0, dtype=np.float32))
            out = collectives.allreduce(d, algorithm=algo)
            chk.check(isinstance(out, FakeDeviceArray), f"device result type {algo}")
            chk.check(bool((out.host == P * (P + 1) / 2).all()), f"device values {algo}")
            chk.check((d.host == R + 1.0).all(), f"device input untouched {algo}")
            collectives.allreduce(d, algorithm=algo, out=d)
            chk.check(bool((d.host == P * (P + 1) / 2).all()), f"device in place {algo}")
        chk.check(rt.synced >= 2 and rt.d2h >= 2 and rt.h2d >= 2,
                  f"stream synchronized and staged (sync {rt.synced}, d2h {rt.d2h}, h2d {rt.h2d})")
        chk.check(rt.allocs == 1, f"pinned staging buffer reused ({rt.allocs} allocations)")
        swapped = FakeDeviceArray(np.ones(8, np.dtype(np.float32).newbyteorder("S")))
        try:
            collectives.allreduce(swapped, algorithm="ring")
            chk.check(False, "device array of the other byte order accepted")
        except ValueError as exc:
            chk.check("byte order" in str(exc), f"device byte order: {exc}")
    finally:
        device.set_runtime(None)


def device_compressed(chk: Checker) -> None:
    """Compressed and sparse allreduce of arrays seen only through __cuda_array_interface__."""
    device.set_runtime(HostRuntime())
    try:
        for spec in ("none", "uniform:bits=8", "topk:ratio=0.5"):
            d = FakeDeviceArray(np.full((31, 7), R + 1.0, dtype=np.float32))
            out = collectives.allreduce(d, compressor=spec)
            chk.check(isinstance(out, FakeDeviceArray) and out.host.shape == (31, 7),
                      f"compressed {spec}: a device array of the input's shape back")
            want = np.full((31, 7), P * (P + 1) / 2, np.float32)
            chk.check(np.allclose(out.host, want, rtol=0.02) if spec != "topk:ratio=0.5" else
                      bool(np.isfinite(out.host).all()), f"compressed {spec}: values")
            collectives.allreduce(d, compressor=spec, out=d)
            chk.check(np.array_equal(d.host, out.host), f"compressed {spec}: in place")
    finally:
        device.set_runtime(None)


def device_direct(chk: Checker) -> None:
    """With CUDA-aware MPI, algorithm="mpi" hands device memory to MPI without staging.

    The fake device memory is host memory, so MPICH can really reduce it."""
    rt = HostRuntime()
    device.set_runtime(rt)
    os.environ["COMPCOLL_CUDA_AWARE_MPI"] = "1"
    try:
        d = FakeDeviceArray(np.full(1001, R + 1, dtype=np.int64))
        out = collectives.allreduce(d, algorithm="mpi")
        chk.check(isinstance(out, FakeDeviceArray) and bool((out.host == P * (P + 1) // 2).all()),
                  "direct out of place")
        chk.check(bool((d.host == R + 1).all()), "direct leaves the input alone")
        collectives.allreduce(d, algorithm="mpi", op="max", out=d)
        chk.check(bool((d.host == P).all()), "direct in place")
        chk.check(rt.d2h == 0 and rt.h2d == 0 and rt.synced >= 2,
                  f"direct: no staging copies (d2h {rt.d2h}, h2d {rt.h2d}), streams synced")
        h = FakeDeviceArray(np.ones(17, dtype=np.float16))  # MPI has no fp16: staged
        res = collectives.allreduce(h, algorithm="mpi")
        chk.check(rt.d2h == 1 and bool((res.host == P).all()), "fp16 falls back to staging")
        r = collectives.allreduce(FakeDeviceArray(np.ones(5, np.float32)), algorithm="ring")
        chk.check(rt.d2h == 2 and bool((r.host == P).all()), "our algorithms stage")
    finally:
        del os.environ["COMPCOLL_CUDA_AWARE_MPI"]
        device.set_runtime(None)


def auto_and_errors(chk: Checker) -> None:
    for n in (1, 1000, 1 << 20):
        x = np.ones(n, dtype=np.float32)
        chk.check(bool((collectives.allreduce(x) == P).all()), f"auto n={n}")
    from collectives import as_communicator, tuning

    names = WORLD.allgather([tuning.choose(as_communicator(None), n) for n in
                             (8, 1 << 16, 1 << 24)])
    chk.check(all(nm == names[0] for nm in names), f"auto picks the same everywhere: {names}")
    if P > 1:
        n = 10 + (R == P - 1)
        try:
            collectives.allreduce(np.ones(n, np.float32), algorithm="ring")
            chk.check(False, "mismatched counts not detected")
        except MismatchError as exc:
            chk.check("element count" in str(exc) and f"rank {P - 1}: 11" in str(exc), str(exc))
        dt = np.float64 if R == 0 else np.float32
        try:
            collectives.allreduce(np.ones(4, dt))
            chk.check(False, "mismatched dtypes not detected")
        except MismatchError as exc:
            chk.check("dtype" in str(exc), str(exc))
    for bad, needle in ((dict(op="xor"), "supported: sum"), (dict(algorithm="bogus"), "available"),
                        (dict(op="avg", buf=np.ones(3, np.int32)), "floating-point")):
        buf = bad.pop("buf", np.ones(3, np.float32))
        try:
            collectives.allreduce(buf, **bad)
            chk.check(False, f"{bad} accepted")
        except ValueError as exc:
            chk.check(needle in str(exc), f"{bad}: {exc}")
    try:
        collectives.allreduce(np.ones(3, np.complex64))
        chk.check(False, "complex accepted")
    except ValueError as exc:
        chk.check("complex64" in str(exc) and "float32" in str(exc), str(exc))
    try:
        collectives.allreduce(np.ones(3, np.float32), out=np.ones(4, np.float32))
        chk.check(False, "bad out accepted")
    except ValueError as exc:
        chk.check("shape" in str(exc), str(exc))
    # The job is still usable after all those errors: ranks stayed in step.
    chk.check(bool((collectives.allreduce(np.ones(9, np.int8)) == P).all()), "usable after errors")


def bad_input(chk: Checker) -> None:
    """The building blocks reject bad arguments with errors that say what would work."""
    x = np.ones(10, np.float32)
    cases = [
        (lambda: collectives.reduce_scatter(x, counts=[10] + [0] * P), "counts must hold"),
        (lambda: collectives.reduce_scatter(x, counts=[11] + [0] * (P - 1)), "summing to 10"),
        (lambda: collectives.reduce_scatter(np.ones(3, np.int8), op="avg"), "floating"),
        (lambda: collectives.broadcast(x, root=P), f"root must be a rank in [0, {P})"),
        (lambda: collectives.broadcast(x, root=-1), "root must be a rank"),
        (lambda: collectives.allgather([1, 2]), "unsupported buffer type"),
    ]
    for fn, needle in cases:
        try:
            fn()
            chk.check(False, f"accepted: {needle}")
        except (ValueError, TypeError) as exc:
            chk.check(needle in str(exc), f"{needle!r} not in {exc}")
    if P > 1:
        try:
            collectives.allgather(np.ones(3, np.float64 if R == 0 else np.float32))
            chk.check(False, "allgather dtype mismatch accepted")
        except MismatchError as exc:
            chk.check("dtype" in str(exc), str(exc))
        try:
            collectives.broadcast(np.ones(4 + (R == 0), np.int32))
            chk.check(False, "broadcast count mismatch accepted")
        except MismatchError as exc:
            chk.check("element count" in str(exc), str(exc))
    chk.check(bool((collectives.broadcast(np.full(3, R), root=0) == 0).all()), "usable after")


def _same(chk: Checker, got: object, want: np.ndarray, dtype: np.dtype, what: str) -> None:
    ok = isinstance(got, np.ndarray) and got.dtype == dtype and np.array_equal(got, want)
    chk.check(ok, f"{what}: got {getattr(got, 'dtype', got)} "
                  f"{np.asarray(got).reshape(-1)[:4] if got is not None else None}, "
                  f"want {dtype} {want.reshape(-1)[:4]}")


def byte_order(chk: Checker) -> None:
    """Arrays of the other byte order are reduced by value and handed back in that order."""
    for code in ("f4", "f8", "i4", "f2"):
        native = np.dtype(code)
        other = native.newbyteorder("S")
        x = (np.arange(12) % 5 + R + 1).astype(other)  # small integers: exact sums
        want = sum((np.arange(12) % 5 + r + 1) for r in range(P)).astype(native)
        for algo in OURS + ["mpi"]:
            y = chk.run(f"{code} {algo}", collectives.allreduce, x, algorithm=algo)
            _same(chk, y, want, other, f"{other.str} allreduce {algo}")
        out = np.empty_like(x)
        y = chk.run(f"{code} out", collectives.allreduce, x, algorithm="ring", out=out)
        _same(chk, out, want, other, f"{other.str} allreduce into out")
        inplace = x.copy()
        chk.run(f"{code} in place", collectives.allreduce, inplace, algorithm="ring",
                out=inplace)
        _same(chk, inplace, want, other, f"{other.str} allreduce in place")
        mine = collectives.reduce_scatter(x, counts=[12] + [0] * (P - 1))
        _same(chk, mine, want if R == 0 else want[:0], other, f"{other.str} reduce_scatter")
        gathered = np.concatenate([(np.arange(12) % 5 + r + 1) for r in range(P)])
        _same(chk, collectives.allgather(x), gathered.astype(native), other,
              f"{other.str} allgather")
        b = x.copy()
        collectives.broadcast(b, root=0)
        _same(chk, b, (np.arange(12) % 5 + 1).astype(native), other, f"{other.str} broadcast")
        if native.kind != "f":
            continue
        for spec in ("none", "fp16", "uniform:bits=8", "topk:ratio=1.0"):
            y = chk.run(f"{code} {spec}", collectives.allreduce, x, compressor=spec,
                        algorithm="ring", sparse_algorithm="ssar_split_allgather",
                        scheme="sparse" if spec.startswith("topk") else "allgather")
            close = y is not None and y.dtype == other and np.allclose(
                y.astype(np.float64), want.astype(np.float64), rtol=0.05, atol=0.05 * P)
            chk.check(close, f"{other.str} compressed {spec}: {y}")
    idx = np.array([1, 3], np.dtype("i8").newbyteorder("S"))
    y = collectives.sparse_allreduce(idx, np.ones(2, np.dtype("f4").newbyteorder("S")), 5)
    chk.check(np.array_equal(y, [0, P, 0, P, 0]), f"sparse_allreduce of the other order: {y}")


def read_only(chk: Checker) -> None:
    """Inputs that are only read may be read-only; a read-only destination is refused."""
    x = np.full(10, R + 1, np.float32)
    x.setflags(write=False)
    want = np.full(10, P * (P + 1) / 2, np.float32)
    _same(chk, chk.run("read-only plain", collectives.allreduce, x, algorithm="ring"), want,
          np.dtype(np.float32), "read-only input, plain")
    for spec in ("none", "fp16", "uniform:bits=8", "topk:ratio=1.0"):
        y = chk.run(f"read-only {spec}", collectives.allreduce, x, compressor=spec,
                    algorithm="ring", sparse_algorithm="ssar_split_allgather")
        chk.check(y is not None and np.allclose(y, want, rtol=0.05), f"read-only {spec}: {y}")
    for what, call in (("out", lambda: collectives.allreduce(np.ones(10, np.float32), out=x)),
                       ("in place", lambda: collectives.allreduce(x, out=x))):
        try:
            call()
            chk.check(False, f"read-only {what} accepted")
        except ValueError as exc:
            chk.check("read-only" in str(exc), f"read-only {what}: {exc}")


def main() -> None:
    chk = Checker("features")
    for part in (sub_communicators, torch_views, nonblocking, building_blocks, device_staging,
                 device_compressed, device_direct, auto_and_errors, bad_input, byte_order,
                 read_only):
        chk.run(part.__name__, part, chk)
    chk.finish()


if __name__ == "__main__":
    main()
