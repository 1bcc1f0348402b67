"""Soak: thousands of checked collectives in one job, mixed as a training run would mix them.

A seeded schedule (the same on every rank) draws each case: blocking or several nonblocking
allreduces in flight at once, an algorithm (ours, "auto", MPI's own), a size (0, 1, primes,
~4 MB), a dtype, an op, in place or not, sometimes a compressor, sometimes a sparse allreduce.
Inputs are small integers (multiples of the world size where averaged), so every exact result
has one right answer whatever the order of summing: it must equal a numpy oracle computed from
every rank's input (regenerated locally from the seed), and MPI_Allreduce where MPI has the
dtype. Lossy compressors must stay within a bound of the exact sum. Every result must be
bit-identical on all ranks. Resident memory is read at the start and the end.

Run: ``mpiexec -n 4 python scripts/soak.py`` (writes bench/results/reliability/soak_np4.txt,
with this command line inside).
"""

from __future__ import annotations

import argparse
import collections
import shlex
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

import collectives
from collectives.algorithms import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
WORLD = MPI.COMM_WORLD
P, R = WORLD.size, WORLD.rank
ALGORITHMS = [*(a.name for a in REGISTRY.values() if a.ours), "mpi", "auto"]
SIZES = [0, 1, 2, 3, 5, 7, 13, 31, 97, 251, 1021, 4099, 65537, 262147, 1048583]
WEIGHTS = np.array([4, 4, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1.5, 0.5, 0.15])
DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8"]
NP_DTYPE = {"bfloat16": np.float32}  # values generated as float32, carried as torch bf16
MPI_OPS = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX, "prod": MPI.PROD}
# (spec, bound on |error| / sum of the inputs' norms): how far a lossy sum may be from exact
COMPRESSORS = [("none", 0.0), ("fp16", 1e-3), ("bf16", 1e-2), ("uniform:bits=8", 0.05),
               ("uniform:bits=4", 0.5), ("qsgd", 4.0), ("topk:ratio=0.01", 1.0),
               ("randomk:ratio=0.1", 10.0), ("sign", 2.0), ("terngrad", 4.0)]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def inputs(seed: int, n: int, dtype: str, op: str) -> list[np.ndarray]:
    """Every rank's input for one case (each rank regenerates all of them for its oracle)."""
    out = []
    for r in range(P):
        g = np.random.default_rng([seed, r])
        if op == "prod":  # at most 2**P: exact in every dtype
            v = g.choice(np.array([1, 1, 2] if dtype == "uint8" else [-1, 1, 1, 2]), n)
        elif dtype == "uint8":
            v = g.integers(0, 60 // P + 1, n)
        elif dtype == "int8":
            v = g.integers(-30 // P, 30 // P + 1, n)
        else:
            v = g.integers(-8, 9, n) * (P if op == "avg" else 1)
        out.append(v.astype(NP_DTYPE.get(dtype, dtype)))
    return out


def oracle(xs: list[np.ndarray], op: str) -> np.ndarray:
    stack = np.stack(xs).astype(np.float64)
    res = {"sum": stack.sum(0), "avg": stack.sum(0) / P, "min": stack.min(0),
           "max": stack.max(0), "prod": stack.prod(0)}[op]
    return res


def as_buffer(x: np.ndarray, dtype: str) -> Any:
    return torch.from_numpy(x.copy()).to(torch.bfloat16) if dtype == "bfloat16" else x.copy()


def as_numpy(y: Any) -> np.ndarray:
    if isinstance(y, torch.Tensor):
        return y.float().numpy() if y.dtype == torch.bfloat16 else y.numpy()
    return np.asarray(y)


def raw_bytes(y: Any) -> bytes:
    if isinstance(y, torch.Tensor):
        return y.contiguous().view(torch.uint8).numpy().tobytes() if y.numel() else b""
    return np.ascontiguousarray(y).tobytes()


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = np.random.default_rng(args.seed)  # the schedule: the same on every rank
        self.done = 0
        self.kinds: collections.Counter[str] = collections.Counter()
        self.mix: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter)  # dense cases by algorithm, dtype, op, size
        self.failures: list[str] = []
        self.crcs: list[int] = []
        self.rss_warm = float("nan")  # after the first tenth: caches, pools and fits are set

    def fail(self, what: str) -> None:
        self.failures.append(f"rank {R}: {what}")

    def draw(self) -> dict[str, Any]:
        g = self.rng
        dtype = str(g.choice(DTYPES))
        ops = ["sum", "min", "max", "prod"] + (["avg"] if dtype.startswith(("float", "bf"))
                                               else [])
        n = int(g.choice(SIZES, p=WEIGHTS / WEIGHTS.sum()))
        return {"seed": int(g.integers(1 << 30)), "n": n, "dtype": dtype,
                "op": str(g.choice(ops)), "algorithm": str(g.choice(ALGORITHMS)),
                "in_place": bool(g.integers(2))}

    def start(self, case: dict[str, Any]) -> tuple[Any, list[np.ndarray], Any]:
        xs = inputs(case["seed"], case["n"], case["dtype"], case["op"])
        buf = as_buffer(xs[R], case["dtype"])
        h = collectives.iallreduce(buf, op=case["op"], algorithm=case["algorithm"],
                                   out=buf if case["in_place"] else None,
                                   timeout=self.args.timeout)
        return h, xs, buf

    def check_dense(self, case: dict[str, Any], y: Any, xs: list[np.ndarray]) -> None:
        what = " ".join(f"{k}={v}" for k, v in case.items())
        got = as_numpy(y).astype(np.float64)
        want = oracle(xs, case["op"])
        if not np.array_equal(got, want):
            self.fail(f"{what}: differs from numpy (first {got[:4]} vs {want[:4]})")
        dt = case["dtype"]
        if case["op"] in MPI_OPS and dt in ("float32", "float64", "int32", "int64"):
            ref = np.empty_like(xs[R])
            WORLD.Allreduce(xs[R], ref, MPI_OPS[case["op"]])
            if not np.array_equal(as_numpy(y), ref):
                self.fail(f"{what}: differs from MPI_Allreduce")
        self.crcs.append(zlib.crc32(raw_bytes(y)))

    def dense_batch(self) -> None:
        """1 blocking, or 2-4 nonblocking allreduces in flight together."""
        k = 1 if self.rng.random() < 0.5 else int(self.rng.integers(2, 5))
        cases = [self.draw() for _ in range(k)]
        started = [self.start(c) for c in cases]
        order = range(k) if self.rng.random() < 0.5 else reversed(range(k))
        results = {i: started[i][0].wait() for i in order}
        for i, c in enumerate(cases):
            y, (_, xs, buf) = results[i], started[i]
            if c["in_place"] and y is not buf:
                self.fail(f"in place: the result is not the caller's buffer ({c})")
            self.check_dense(c, y, xs)
            for key in ("algorithm", "dtype", "op", "n"):
                self.mix[key][str(c[key])] += 1
            self.kinds["nonblocking" if k > 1 else "blocking"] += 1
        self.done += k

    def compressed(self) -> None:
        spec, bound = COMPRESSORS[int(self.rng.integers(len(COMPRESSORS)))]
        n = int(self.rng.choice([1, 7, 97, 1021, 4099, 65537, 262147]))
        seed = int(self.rng.integers(1 << 30))
        xs = [np.random.default_rng([seed, r]).standard_normal(n).astype(np.float32)
              for r in range(P)]
        pinned = {"scheme": "dense", "algorithm": "ring"} if spec == "none" else {}
        y = collectives.allreduce(xs[R], compressor=spec, name=f"t{n}", step=self.done,
                                  timeout=self.args.timeout, **pinned)
        exact = np.stack(xs).astype(np.float64).sum(0)
        err = float(np.linalg.norm(np.asarray(y, np.float64) - exact))
        scale = sum(float(np.linalg.norm(x)) for x in xs)
        if spec == "none":  # the identity twin: the plain allreduce, bit for bit
            ok = np.array_equal(y, collectives.allreduce(xs[R], algorithm="ring",
                                                         timeout=self.args.timeout))
            self.done += 1
        else:
            ok = bool(np.isfinite(y).all()) and err <= bound * scale
        if not ok:
            self.fail(f"{spec} n={n}: error {err:.3g} past {bound} x {scale:.3g}")
        self.crcs.append(zlib.crc32(np.ascontiguousarray(y).tobytes()))
        self.kinds[f"compressed {spec}"] += 1
        self.done += 1

    def sparse(self) -> None:
        size = int(self.rng.choice([1, 97, 4099, 65537]))
        seed = int(self.rng.integers(1 << 30))
        want = np.zeros(size)
        mine = None
        for r in range(P):
            g = np.random.default_rng([seed, r])
            idx = g.integers(0, size, int(g.integers(0, min(size, 300) + 1)))
            val = g.integers(-5, 6, idx.size).astype(np.float32)
            np.add.at(want, idx, val)
            if r == R:
                mine = (idx, val)
        assert mine is not None
        y = collectives.sparse_allreduce(*mine, size, timeout=self.args.timeout)
        if not np.array_equal(np.asarray(y, np.float64), want):
            self.fail(f"sparse size={size}: differs from numpy")
        self.crcs.append(zlib.crc32(np.ascontiguousarray(y).tobytes()))
        self.kinds["sparse"] += 1
        self.done += 1

    def compare_across_ranks(self) -> None:
        digest = zlib.crc32(np.array(self.crcs, np.uint64).tobytes())
        digests = WORLD.allgather((digest, len(self.crcs)))
        if len(set(digests)) != 1:
            self.fail(f"results differ between ranks among the last {len(self.crcs)} "
                      f"collectives ({digests})")
        self.crcs.clear()

    def run(self) -> None:
        while self.done < self.args.count:
            u = self.rng.random()
            if u < 0.7:
                self.dense_batch()
            elif u < 0.9:
                self.compressed()
            else:
                self.sparse()
            if len(self.crcs) >= 50:
                self.compare_across_ranks()
            if np.isnan(self.rss_warm) and self.done >= self.args.count // 10:
                self.rss_warm = rss_mb()
        self.compare_across_ranks()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=2000, help="collectives to run (2000)")
    p.add_argument("--seed", type=int, default=0, help="the schedule's seed (0)")
    p.add_argument("--timeout", type=float, default=120.0, help="deadline per wait (120 s)")
    p.add_argument("--out", type=Path, default=None,
                   help="result file (bench/results/reliability/soak_np<P>.txt)")
    args = p.parse_args()
    out = args.out or ROOT / "bench" / "results" / "reliability" / f"soak_np{P}.txt"
    rss0 = rss_mb()
    t0 = time.perf_counter()
    soak = Soak(args)
    soak.run()
    seconds = time.perf_counter() - t0
    rss = WORLD.gather((rss0, soak.rss_warm, rss_mb()), root=0)
    failures = WORLD.gather(soak.failures, root=0)
    if R != 0:
        return 0 if not WORLD.bcast(None) else 1
    bad = [f for fs in failures for f in fs]
    lines = [
        "# compcoll soak: checked collectives in one job",
        f"# command: mpiexec -n {P} {shlex.join([Path(sys.executable).name] + sys.argv)}",
        f"# date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"ranks: {P}",
        f"collectives: {soak.done} in {seconds:.1f} s",
        *(f"  {k}: {v}" for k, v in sorted(soak.kinds.items())),
        *(f"dense by {key}: " + ", ".join(f"{k} {v}" for k, v in sorted(
            c.items(), key=lambda kv: (len(kv[0]), kv[0]))) for key, c in soak.mix.items()),
        *(f"rss MB rank {r}: start {a:.1f}, after the first tenth {w:.1f}, end {b:.1f} "
          f"({b - w:+.1f} since the first tenth)" for r, (a, w, b) in enumerate(rss)),
        f"failures: {len(bad)}",
        *(f"  {f}" for f in bad[:50]),
    ]
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text, end="")
    WORLD.bcast(bool(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
