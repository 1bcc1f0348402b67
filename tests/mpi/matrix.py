"""The allreduce matrix for one process count: algorithm x dtype x op x size x in/out of place.

Every case is checked on every rank against a numpy oracle and against MPI_Allreduce, exactly
when the inputs make any summation order exact (small integers, as nccl-tests does), and the
result must be bit-identical on all ranks. A second group feeds values where order matters
(BIG, -BIG, TINY at every pair of ranks, and Gaussian data) and checks bit-identity plus a
stated error bound. The algorithms come from the registry: compcoll's own, and the engine's own
for this communicator ("mpi"); each of compcoll's must send what its ``wire_bytes`` says.
Run: mpiexec -n P python tests/mpi/matrix.py [--large]
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from mpi4py import MPI

import collectives
from collectives.algorithms import REGISTRY

from common import WORLD, Checker

ENGINE = collectives.as_communicator().engine
OURS = [a.name for a in REGISTRY.values() if a.ours]
ALGOS = [*OURS, *(a.name for a in REGISTRY.values() if not a.ours and a.name == ENGINE)]
DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64"]
OPS = ["sum", "avg", "min", "max", "prod"]
MPI_OPS = {"sum": MPI.SUM, "avg": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}
P, R = WORLD.size, WORLD.rank


def values(n: int, dtype: str, op: str, rank: int, seed: int) -> np.ndarray:
    """Small integers (as float64) whose reduction is exact in every dtype and any order."""
    rng = np.random.default_rng([seed, rank])
    unsigned = dtype == "uint8"
    if op in ("sum", "avg"):
        return rng.integers(0 if unsigned else -4, 5, n).astype(np.float64)
    if op == "prod":
        return rng.choice([1, 2] if unsigned else [-1, 1, 2], n).astype(np.float64)
    return rng.integers(0 if unsigned else -50, 51, n).astype(np.float64)


def to_buffer(v: np.ndarray, dtype: str):
    """numpy array of the dtype, or a torch bfloat16 tensor (numpy has no bfloat16)."""
    if dtype == "bfloat16":
        return torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16)
    return v.astype(dtype)


def as_f64(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.float().numpy().astype(np.float64)
    return np.asarray(x).astype(np.float64)


def oracle(inputs: list[np.ndarray], dtype: str, op: str) -> np.ndarray:
    """Exact reduction computed in numpy in the dtype's own arithmetic (ints wrap)."""
    if dtype in ("bfloat16", "float16", "float32", "float64"):
        stack = np.stack(inputs)
        red = {"sum": np.sum, "avg": np.sum, "prod": np.prod, "min": np.min, "max": np.max}[op]
        out = red(stack, axis=0)
        if op == "avg":
            ft = np.float64 if dtype == "float64" else np.float32
            out = (out.astype(ft) * ft(1.0 / P)).astype(np.float64)
        return out
    acc = inputs[0].astype(dtype)
    for x in inputs[1:]:
        x = x.astype(dtype)
        acc = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}[op](acc, x)
    return acc.astype(np.float64)


def mpi_reference(buf, dtype: str, op: str) -> np.ndarray | None:
    """MPI_Allreduce of the same input (None for fp16/bf16, which MPI has no type for)."""
    if dtype in ("float16", "bfloat16"):
        return None
    out = np.empty_like(buf)
    WORLD.Allreduce(buf, out, MPI_OPS[op])
    res = out.astype(np.float64)
    if op == "avg":
        ft = np.float64 if dtype == "float64" else np.float32
        res = (out * ft(1.0 / P)).astype(np.float64)
    return res


def exact_case(chk: Checker, algo: str, dtype: str, op: str, n: int, inplace: bool,
               seed: int) -> None:
    what = f"{algo} {dtype} {op} n={n} {'in' if inplace else 'out-of'}-place"
    inputs = [values(n, dtype, op, r, seed) for r in range(P)]
    buf = to_buffer(inputs[R], dtype)
    before = buf.clone() if isinstance(buf, torch.Tensor) else buf.copy()
    res = chk.run(what, collectives.allreduce, buf, op=op, algorithm=algo,
                  out=buf if inplace else None)
    if res is None:
        return
    got = as_f64(res)
    if inplace:
        chk.check(res is buf, f"{what}: in place must return the input object")
    else:
        chk.check(as_f64(buf).tobytes() == as_f64(before).tobytes(),
                  f"{what}: out of place modified the input")
    chk.check(type(res) is type(buf) and tuple(res.shape) == tuple(buf.shape),
              f"{what}: result type/shape {type(res).__name__}{tuple(res.shape)}")
    expect = oracle(inputs, dtype, op)
    half_avg = op == "avg" and dtype in ("float16", "bfloat16")
    if half_avg:  # inputs are pre-divided by p (overflow safety): order-dependent rounding
        ok = np.allclose(got, expect, rtol=2e-2, atol=2e-2)
    else:
        ok = np.array_equal(got, expect)
    if not ok:
        bad = np.flatnonzero(~np.isclose(got, expect))[:5]
        chk.check(False, f"{what}: wrong at {bad.tolist()}: got {got[bad]}, want {expect[bad]}")
    else:
        chk.check(True, what)
    ref = mpi_reference(to_buffer(inputs[R], dtype), dtype, op)
    if ref is not None:
        chk.check(np.array_equal(got, ref), f"{what}: differs from MPI_Allreduce")
    raw = res.view(torch.int16).numpy() if isinstance(res, torch.Tensor) else res
    chk.identical(raw, what)


def order_case(chk: Checker, algo: str, dtype: str, n: int, seed: int) -> None:
    """Values where summation order matters: bit-identical on all ranks, within a bound."""
    what = f"{algo} {dtype} order-sensitive n={n}"
    rng = np.random.default_rng([seed, R])
    big = {"float16": 1e4, "bfloat16": 1e30, "float32": 1e30, "float64": 1e300}[dtype]
    x = rng.standard_normal(n)
    # MPICH's allred_float idea: BIG, -BIG and TINY at rank pairs make the sum order visible.
    sel = np.arange(n) % 3 == 0
    x[sel] = {0: big, 1: -big}.get(R % 3, 1e-3) if P > 1 else x[sel]
    buf = to_buffer(x, dtype)
    res = chk.run(what, collectives.allreduce, buf, op="sum", algorithm=algo)
    if res is None:
        return
    raw = res.view(torch.int16).numpy() if isinstance(res, torch.Tensor) else res
    chk.identical(raw, what)
    g = np.random.default_rng([seed, R, 1]).standard_normal(n)
    gb = to_buffer(g, dtype)
    gres = chk.run(what + " gaussian", collectives.allreduce, gb, op="sum", algorithm=algo)
    if gres is None:
        return
    total = np.sum(WORLD.allgather(as_f64(gb)), axis=0)
    eps = {"float16": 2 ** -10, "bfloat16": 2 ** -7, "float32": 2 ** -23, "float64": 2 ** -52}
    # Each of the p-1 additions rounds once: |error| <= (p-1) * eps * sum of |partial sums|.
    bound = (P - 1) * eps[dtype] * np.sum(np.abs(WORLD.allgather(as_f64(gb))), axis=0) + 1e-300
    err = np.abs(as_f64(gres) - total)
    chk.check(bool(np.all(err <= bound)), f"{what}: error {err.max():.3g} above bound")


def wire_case(chk: Checker, algo: str) -> None:
    """The busiest rank sends what the entry's ``wire_bytes`` says (n divisible by every
    block count, so the closed form is exact)."""
    comm = collectives.as_communicator()
    n = 840 * P  # divisible by P and by every power of two <= 8
    buf = np.ones(n, np.float32)
    before = comm.bytes_sent
    if chk.run(f"{algo} wire bytes", collectives.allreduce, buf, algorithm=algo, comm=comm,
               validate=False) is None:
        return
    busiest = max(WORLD.allgather(comm.bytes_sent - before))
    want = REGISTRY[algo].wire_bytes(P, buf.nbytes)
    chk.check(abs(busiest - want) <= 1e-9 * want, f"{algo}: busiest rank sent {busiest} B, "
              f"wire_bytes says {want}")


def main() -> None:
    large = "--large" in sys.argv
    chk = Checker("allreduce matrix")
    sizes = sorted({0, 1, max(P - 1, 0), P + 1, 1009})
    seed = 0
    for algo in ALGOS:
        for dtype in DTYPES:
            for op in OPS:
                if op == "avg" and dtype not in ("float16", "bfloat16", "float32", "float64"):
                    continue
                for n in sizes:
                    for inplace in (False, True):
                        seed += 1
                        exact_case(chk, algo, dtype, op, n, inplace, seed)
            if dtype in ("float16", "bfloat16", "float32", "float64"):
                order_case(chk, algo, dtype, 4099, seed)
    if large:  # >= 4M elements on a subset of the matrix
        n = (4 << 20) + 3
        for algo in ALGOS:
            exact_case(chk, algo, "float32", "sum", n, False, 7)
        for algo in ("ring", "rabenseifner"):
            exact_case(chk, algo, "bfloat16", "sum", n, True, 8)
    # The same matrix must hold for a non-default segment size (many segments per block).
    collectives.defaults.segment_bytes = 64
    for algo in OURS:
        wire_case(chk, algo)
        exact_case(chk, algo, "float32", "sum", 1009, False, 9)
        exact_case(chk, algo, "float16", "max", 1009, True, 10)
    chk.finish()


if __name__ == "__main__":
    main()
