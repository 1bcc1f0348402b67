"""GPU smoke test: CuPy arrays and torch CUDA tensors through every algorithm and compressor.

Every rank checks and rank 0 prints one line per section and a final count of failures:

* dense allreduce: each algorithm (ring, tree, recursive doubling, Rabenseifner, MPI; the
  torch.distributed one on the gloo engine), CuPy / torch CUDA / bare ``__cuda_array_interface__``
  buffers, every dtype, sum/max/min, sizes 0, 1, 7, 1009, 65537, in place and out of place,
  against a numpy oracle and bit-identical on all ranks;
* compressed allreduce: each compressor through each scheme it allows, three steps with error
  feedback: the device result equals the host (numpy) result bit for bit;
* sparse allreduce of device indices/values, each sparse algorithm;
* DDP with a CUDA model on gloo: the hook with ``none`` equals DDP without a hook;
* compressors.cuda (the CUDA twins of the C++ kernels, through CuPy) against the C++ kernels.

Run: ``mpiexec -n 3 python scripts/gpu_smoke.py`` (``--cpu``: host arrays and a host-memory fake
device, to check the script itself on a machine without a GPU); ``mpiexec -n 1 python
scripts/gpu_smoke.py --only nccl``: one rank on an NCCL process group.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import zlib
from pathlib import Path

import numpy as np
from mpi4py import MPI

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "mpi"))  # fake device (--cpu), gloo set-up

import collectives  # noqa: E402
import compressors  # noqa: E402
from collectives import device  # noqa: E402
from collectives.compressed import feasible  # noqa: E402

WORLD = MPI.COMM_WORLD
P, R = WORLD.size, WORLD.rank
SIZES = (0, 1, 7, 1009, 65537)
COMPRESSORS = ("none", "fp16", "bf16", "uniform:bits=8", "uniform:bits=4", "qsgd", "terngrad",
               "sign", "topk:ratio=0.01", "topk:ratio=0.01,approximate=True", "threshold:tau=1",
               "randomk:ratio=0.05", "powersgd:rank=2")


class Report:
    """Failures on every rank, counted and printed on rank 0 per section."""

    def __init__(self) -> None:
        self.cases = 0
        self.failures: list[str] = []
        self.t0 = time.perf_counter()

    def check(self, cond: bool, what: str) -> None:
        self.cases += 1
        if not cond:
            self.failures.append(f"rank {R}: {what}")

    def crash(self, what: str, exc: BaseException) -> None:
        self.cases += 1
        self.failures.append(f"rank {R}: {what}: {type(exc).__name__}: {exc}\n"
                             f"{traceback.format_exc(limit=4)}")

    def identical(self, raw: np.ndarray, what: str) -> None:
        crcs = WORLD.allgather(zlib.crc32(np.ascontiguousarray(raw).view(np.uint8).tobytes()))
        self.check(len(set(crcs)) == 1, f"{what}: ranks differ (crc {crcs})")

    def section(self, name: str, before: tuple[int, int], extra: str = "") -> None:
        cases = WORLD.allreduce(self.cases - before[0])
        bad = WORLD.allreduce(len(self.failures) - before[1])
        if R == 0:
            print(f"[{time.perf_counter() - self.t0:7.1f}s] {name}: {cases} checks, "
                  f"{bad} failed{extra}", flush=True)

    def mark(self) -> tuple[int, int]:
        return self.cases, len(self.failures)


# ---------------------------------------------------------------------------------------------
# buffers of each kind, and their host copies


class CAIOnly:
    """A device array seen only through __cuda_array_interface__ (the libcudart path)."""

    def __init__(self, dev) -> None:
        self.dev = dev

    @property
    def __cuda_array_interface__(self) -> dict:
        return self.dev.__cuda_array_interface__

    @staticmethod
    def __compcoll_empty_like__(other: CAIOnly) -> CAIOnly:
        import cupy

        return CAIOnly(cupy.empty_like(other.dev))


class Kinds:
    """Make a buffer of a kind from host data, and read one back to the host."""

    def __init__(self, cpu: bool) -> None:
        self.cpu = cpu
        if cpu:
            from fake_cuda import FakeDeviceArray, HostRuntime

            device.set_runtime(HostRuntime())
            self.fake = FakeDeviceArray
            self.names = ("numpy", "torch-cpu", "cai")
        else:
            import cupy  # noqa: F401
            import torch

            torch.cuda.set_device(0)
            self.names = ("cupy", "torch-cuda", "cai")

    def make(self, kind: str, host: np.ndarray, dtype: str):
        import torch

        if dtype == "bfloat16":
            t = torch.from_numpy(host.astype(np.float32)).to(torch.bfloat16)
            return t if self.cpu else t.cuda()
        if kind == "numpy":
            return host.astype(dtype)
        if kind.startswith("torch"):
            t = torch.from_numpy(host.astype(dtype))
            return t if self.cpu else t.cuda()
        if kind == "cai" and self.cpu:
            return self.fake(host.astype(dtype))
        import cupy

        dev = cupy.asarray(host.astype(dtype))
        return CAIOnly(dev) if kind == "cai" else dev

    def host(self, x) -> np.ndarray:
        """float64 (floats) or int64 copy of any buffer."""
        if type(x).__module__.startswith("torch"):
            t = x.detach().cpu()
            return t.double().numpy() if t.is_floating_point() else t.long().numpy()
        if isinstance(x, CAIOnly):
            x = x.dev
        if hasattr(x, "host") and not isinstance(x, np.ndarray):
            x = x.host
        if type(x).__module__.startswith("cupy"):
            x = x.get()
        a = np.asarray(x)
        return a.astype(np.float64 if a.dtype.kind == "f" else np.int64)

    def same_kind(self, y, x) -> bool:
        if type(y) is not type(x):
            return False
        if hasattr(x, "device") and hasattr(y, "device"):
            return str(y.device) == str(x.device)
        return True


def rank_data(n: int, rank: int, dtype: str) -> np.ndarray:
    """Small integers: every sum is exact in every dtype (fp16 and bf16 included)."""
    v = (np.arange(n, dtype=np.int64) * (rank + 3) + 5 * rank) % 11 - 5
    return v.astype(np.float64 if dtype in ("float16", "bfloat16", "float32", "float64")
                    else np.int64)


def oracle(n: int, dtype: str, op: str) -> np.ndarray:
    stack = np.stack([rank_data(n, r, dtype) for r in range(P)]) if n else np.zeros((P, 0))
    return {"sum": stack.sum(0), "max": stack.max(0), "min": stack.min(0)}[op]


# ---------------------------------------------------------------------------------------------
# sections


def dense(rep: Report, kinds: Kinds, algos: list[str], comm, engine: str) -> None:
    dtypes = ("float16", "float32", "float64", "int32", "int64", "bfloat16")
    mark = rep.mark()
    for algo in algos:
        for kind in kinds.names:
            for dtype in dtypes:
                if dtype == "bfloat16" and not kind.startswith("torch"):
                    continue
                for n in SIZES:
                    for op in ("sum", "max", "min"):
                        if op == "min" and n != 1009:
                            continue
                        want = oracle(n, dtype, op)
                        what = f"{engine} {algo} {kind} {dtype} n={n} {op}"
                        try:
                            x = kinds.make(kind, rank_data(n, R, dtype), dtype)
                            y = collectives.allreduce(x, op=op, algorithm=algo, comm=comm)
                            rep.check(kinds.same_kind(y, x), f"{what}: result type/device")
                            got = kinds.host(y)
                            rep.check(np.array_equal(got, want), f"{what}: out of place")
                            rep.check(np.array_equal(kinds.host(x), rank_data(n, R, dtype)),
                                      f"{what}: input modified")
                            rep.identical(got, what)
                            z = collectives.allreduce(x, op=op, algorithm=algo, comm=comm, out=x)
                            rep.check(z is x and np.array_equal(kinds.host(x), want),
                                      f"{what}: in place")
                        except Exception as exc:  # noqa: BLE001 - reported, not hidden
                            rep.crash(what, exc)
    rep.section(f"dense allreduce [{engine}] {', '.join(algos)} x {', '.join(kinds.names)}", mark)


def normal(n: int, rank: int, shape=None) -> np.ndarray:
    v = np.random.default_rng(1000 + rank).standard_normal(n).astype(np.float32)
    return v.reshape(shape) if shape else v


def compressed(rep: Report, kinds: Kinds, comm, engine: str) -> None:
    mark = rep.mark()
    errors: dict[str, float] = {}
    for spec in COMPRESSORS:
        comp = compressors.get(spec)
        shape = (129, 257) if spec.startswith("powersgd") else (65537,)
        n = int(np.prod(shape))
        exact = sum(normal(n, r, shape).astype(np.float64) for r in range(P))
        for scheme in feasible(comp):
            dtypes = ("float32", "float16") if spec in ("uniform:bits=8", "none") else ("float32",)
            for dtype in dtypes:
                # a compressor of its own per buffer kind: PowerSGD keeps its Q per tensor name
                comps = {k: compressors.get(spec) for k in ("host",) + kinds.names}
                fbs = {k: compressors.ErrorFeedback(c) for k, c in comps.items()}
                for step in range(3):
                    host = normal(n, R, shape)
                    what = f"{engine} {spec} {scheme} {dtype} step {step}"
                    try:
                        kw = dict(scheme=scheme, name="g", step=step, comm=comm)
                        ref = collectives.allreduce(host.astype(dtype), compressor=comps["host"],
                                                    feedback=fbs["host"], **kw)
                        refh = np.asarray(ref, np.float64)
                        rep.identical(refh, what)
                        if step == 0:
                            err = np.linalg.norm(refh - exact) / max(np.linalg.norm(exact), 1e-30)
                            errors[f"{spec}/{scheme}"] = float(err)
                            if spec == "none":
                                rep.check(err < 1e-6 if dtype == "float32" else err < 1e-3,
                                          f"{what}: relative error {err:.3g}")
                        for kind in kinds.names:
                            x = kinds.make(kind, host, dtype)
                            y = collectives.allreduce(x, compressor=comps[kind],
                                                      feedback=fbs[kind], **kw)
                            rep.check(kinds.same_kind(y, x), f"{what} {kind}: result type")
                            got = kinds.host(y)
                            rep.check(np.array_equal(got, refh),
                                      f"{what} {kind}: differs from the host result by "
                                      f"{np.abs(got - refh).max() if got.size else 0:.3g}")
                    except Exception as exc:  # noqa: BLE001
                        rep.crash(what, exc)
    worst = ", ".join(f"{k} {v:.3f}" for k, v in sorted(errors.items()))
    rep.section(f"compressed allreduce [{engine}]", mark,
                f"\n    relative error vs exact sum (step 0): {worst}")


def sparse(rep: Report, kinds: Kinds, comm, engine: str) -> None:
    mark = rep.mark()
    size = 100003
    for algo in ("ssar_recursive_doubling", "ssar_split_allgather", "dsar", "gtopk:k=700"):
        rng = np.random.default_rng(R)
        idx = rng.choice(size, 500 * (R + 1), replace=False).astype(np.int64)
        val = rng.integers(-8, 8, idx.size).astype(np.float32)
        dense_ref = collectives.sparse_allreduce(idx, val, size, algorithm=algo, comm=comm)
        for kind in kinds.names:
            if kind == "cai":
                continue
            what = f"{engine} sparse {algo} {kind}"
            try:
                i_d = kinds.make(kind, idx, "int64")
                v_d = kinds.make(kind, val, "float32")
                y = collectives.sparse_allreduce(i_d, v_d, size, algorithm=algo, comm=comm)
                rep.check(kinds.same_kind(y, v_d), f"{what}: result type/device")
                got = kinds.host(y)
                rep.check(np.array_equal(got, np.asarray(dense_ref, np.float64)), what)
                rep.identical(got, what)
            except Exception as exc:  # noqa: BLE001
                rep.crash(what, exc)
        if not algo.startswith("gtopk"):
            full = np.zeros(size)
            for r in range(P):
                g = np.random.default_rng(r)
                ii = g.choice(size, 500 * (r + 1), replace=False)
                np.add.at(full, ii, g.integers(-8, 8, ii.size))
            rep.check(np.array_equal(np.asarray(dense_ref, np.float64), full),
                      f"sparse {algo}: equals the dense sum")
    rep.section(f"sparse allreduce [{engine}]", mark)


def ddp(rep: Report, cpu: bool) -> None:
    import torch
    from torch import nn

    import collectives.ddp as cddp

    mark = rep.mark()
    dev = torch.device("cpu" if cpu else "cuda")

    def model() -> nn.Module:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 10)).to(dev)
        return nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.1)

    def grads(m: nn.Module, step: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(97 * step + R)
        x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
        m.zero_grad()
        nn.functional.cross_entropy(m(x.to(dev)), y.to(dev)).backward()
        return {k: p.grad.detach().cpu().clone() for k, p in m.named_parameters()}

    from collectives.policy import Rules

    plain = model()
    # The last policy makes a span group (top-k over its bucket span, the biases zeroed holes
    # sent uncompressed): keeping everything, it equals DDP.
    span = Rules([("kind=1d", "none"), ("*", "topk:ratio=1.0")])
    for policy, rtol, atol in (("none", 1e-5, 0.0), ("fp16", 1e-3, 1e-3),
                               ("uniform:bits=8", None, None), (span, 1e-5, 1e-6)):
        try:
            hooked = model()
            state = cddp.CompressionState(policy=policy).bind(hooked)
            hooked.register_comm_hook(state, cddp.compression_hook)
            for step in range(3):
                a, b = grads(plain, step), grads(hooked, step)
                for k in a:
                    rep.check(b[k].is_floating_point() and bool(torch.isfinite(b[k]).all()),
                              f"ddp {policy} {k}: finite")
                    rep.identical(b[k].numpy(), f"ddp {policy} {k} step {step}")
                    if rtol is not None:
                        # atol scaled to the gradient: sums of ~0 entries differ in order
                        tol = atol + 1e-6 * float(a[k].abs().max())
                        rep.check(torch.allclose(a[k], b[k], rtol=rtol, atol=tol),
                                  f"ddp {policy} {k} step {step}: differs by "
                                  f"{float((a[k] - b[k]).abs().max()):.3g}")
                    else:
                        rel = float((a[k] - b[k]).norm() / a[k].norm().clamp_min(1e-12))
                        rep.check(rel < 0.05, f"ddp {policy} {k}: relative error {rel:.3g}")
            rep.check(next(hooked.parameters()).device.type == dev.type, "ddp model device")
            if policy is span:
                rep.check(any(g.holes for _, gs in state._groups.values() for g in gs),
                          "ddp span group formed")
        except Exception as exc:  # noqa: BLE001
            rep.crash(f"ddp {policy}", exc)
    rep.section(f"DDP hook on gloo, model on {dev.type} (none, fp16, uniform 8-bit, top-k "
                "span)", mark)


def nccl(rep: Report) -> None:
    """One rank on an NCCL process group (one GPU allows no more): the transport stages
    messages through device tensors and the DDP hook starts collectives in order."""
    import torch
    import torch.distributed as dist
    from torch import nn

    import collectives.ddp as cddp

    mark = rep.mark()
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
        dist.init_process_group("nccl", rank=0, world_size=1,
                                device_id=torch.device("cuda", 0))
        g = dist.group.WORLD
        c = collectives.as_communicator(g)
        rep.check(c.stage_device is not None and not c.matches_by_tag,
                  f"nccl transport stages on {c.stage_device}, matches by order")
        x = torch.arange(1009, dtype=torch.float32, device="cuda") - 500
        for algo in ("ring", "tree", "recursive_doubling", "rabenseifner", "torch"):
            y = collectives.allreduce(x, algorithm=algo, comm=g)
            rep.check(y.is_cuda and torch.equal(y, x), f"nccl {algo}")
        for spec in ("uniform:bits=8", "topk:ratio=0.1", "powersgd:rank=2"):
            y = collectives.allreduce(x.reshape(1009, 1) if spec.startswith("p") else x,
                                      compressor=spec, comm=g)
            rep.check(y.is_cuda and bool(torch.isfinite(y).all()), f"nccl compressed {spec}")
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).cuda()
        ref = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).cuda()
        ref.load_state_dict(net.state_dict())
        model = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.01)
        state = cddp.CompressionState(policy="none").bind(model)
        model.register_comm_hook(state, cddp.compression_hook)
        inp = torch.randn(16, 32, device="cuda")
        model(inp).square().sum().backward()
        ref(inp).square().sum().backward()
        for (k, a), b in zip(model.module.named_parameters(), ref.parameters(), strict=True):
            rep.check(torch.equal(a.grad, b.grad), f"nccl ddp hook {k}")
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001
        rep.crash("nccl", exc)
    rep.section("NCCL process group, one rank (staging, hook)", mark)


def cuda_kernels(rep: Report) -> None:
    """compressors.cuda (the CUDA twins, through CuPy) against the C++ kernels (rank 0)."""
    import cupy

    from compressors import cuda, kernels

    mark = rep.mark()
    if R == 0:
        try:
            rng = np.random.default_rng(5)
            for n in (1, 7, 100003):
                x = rng.standard_normal(n).astype(np.float32)
                if n > 1000:
                    x[[3, 777, 50000]] = [np.nan, np.inf, -np.inf]
                xd = cupy.asarray(x)
                for bits in (1, 2, 4, 8):
                    for stochastic in (False, True):
                        bucket = 512
                        nb = -(-n // bucket)
                        codes = np.zeros(-(-n * bits // 8), np.uint8)
                        mins, scales = np.zeros(nb, np.float32), np.zeros(nb, np.float32)
                        kernels.quantize(x, codes, mins, scales, bits, bucket, 42, stochastic)
                        dc, dm, ds = cuda.quantize(xd, bits, bucket, 42, stochastic)
                        what = f"cuda quantize n={n} bits={bits} stochastic={stochastic}"
                        rep.check(np.array_equal(dc.get(), codes), f"{what}: codes")
                        rep.check(np.array_equal(dm.get(), mins) and
                                  np.array_equal(ds.get(), scales), f"{what}: mins/scales")
                        out = np.zeros(n, np.float32)
                        kernels.dequantize(codes, mins, scales, out, bits, bucket)
                        dout = cuda.dequantize(dc, dm, ds, n, bits, bucket)
                        rep.check(np.array_equal(dout.get(), out), f"{what}: dequantize")
                sb = 2048
                sbits = np.zeros(-(-n // 8), np.uint8)
                sscales = np.zeros(-(-n // sb), np.float32)
                kernels.sign_pack(x, sbits, sscales, sb)
                db, dsc = cuda.sign_pack(xd, sb)
                rep.check(np.array_equal(db.get(), sbits), f"cuda sign bits n={n}")
                rel = np.max(np.abs(dsc.get() / sscales - 1))
                rep.check(rel < 1e-5, f"cuda sign scales n={n} (rel diff {rel:.2g}: the GPU sums "
                          "in a tree, the CPU in order)")
                su = np.zeros(n, np.float32)
                kernels.sign_unpack(sbits, sscales, su, sb)
                rep.check(np.array_equal(cuda.sign_unpack(db, cupy.asarray(sscales), n,
                                                          sb).get(), su), f"cuda sign unpack {n}")
                for tau in (0.0, 1.5, 100.0):
                    got = cuda.select_above(xd, tau).get()
                    want = np.nonzero((x.view(np.uint32) & 0x7FFFFFFF) >=
                                      np.float32(tau).view(np.uint32))[0]
                    rep.check(np.array_equal(got, want), f"cuda select_above n={n} tau={tau}")
                    vals = cuda.gather(xd, cupy.asarray(got))
                    rep.check(np.array_equal(vals.get(), x[got], equal_nan=True),
                              f"cuda gather n={n}")
                    dst = cupy.zeros(n, cupy.float32)
                    cuda.scatter(dst, cupy.asarray(got), vals)
                    ref = np.zeros(n, np.float32)
                    ref[got] = x[got]
                    rep.check(np.array_equal(dst.get(), ref, equal_nan=True),
                              f"cuda scatter n={n}")
            from compressors.cuda import topk as cuda_topk

            for n, ties in ((1, False), (1000, True), (100003, False), (1 << 22, True)):
                x = rng.standard_normal(n).astype(np.float32)
                if ties:  # mostly zeros and repeated values: the tie rule decides
                    x[rng.random(n) < 0.9] = 0.0
                    x[::7] = 2.0
                for k in {0, 1, max(1, n // 1000), max(1, n // 100), n}:
                    got = cuda_topk.topk(cupy.asarray(x), k).get()
                    rep.check(np.array_equal(got, kernels.topk_indices(x, k)),
                              f"cuda exact top-k n={n} k={k} ties={ties}")
            big = cupy.asarray(rng.standard_normal(64 << 20).astype(np.float32))
            t = []
            for _ in range(6):
                cupy.cuda.runtime.deviceSynchronize()
                t0 = time.perf_counter()
                cuda.quantize(big, 8, 512, 1, True)
                cupy.cuda.runtime.deviceSynchronize()
                t.append(time.perf_counter() - t0)
            host = big.get()
            hc, hm, hs = (np.empty(host.size, np.uint8), np.empty(host.size // 512, np.float32),
                          np.empty(host.size // 512, np.float32))
            t0 = time.perf_counter()
            kernels.quantize(host, hc, hm, hs, 8, 512, 1, True)
            cpu = time.perf_counter() - t0
            print(f"  8-bit stochastic quantize of 256 MB: GPU {np.median(t[1:]) * 1e3:.2f} ms, "
                  f"one CPU core {cpu * 1e3:.0f} ms", flush=True)
        except Exception as exc:  # noqa: BLE001
            rep.crash("cuda kernels", exc)
    rep.section("compressors.cuda kernels (CuPy) vs C++ kernels", mark)


def timings(kinds: Kinds, comm) -> None:
    """Medians of 5 on 64 MB float32 device buffers: where the time goes (printed only)."""
    if kinds.cpu:
        return
    n = 16 << 20
    rows = []
    for label, kw in (("mpi", dict(algorithm="mpi")), ("ring", dict(algorithm="ring")),
                      ("rabenseifner", dict(algorithm="rabenseifner")),
                      ("uniform 8-bit", dict(compressor="uniform:bits=8", name="t")),
                      ("topk 1%", dict(compressor="topk:ratio=0.01", name="t"))):
        for kind in ("cupy", "torch-cuda"):
            x = kinds.make(kind, normal(n, R), "float32")
            ts = []
            for _ in range(6):
                WORLD.Barrier()
                t0 = time.perf_counter()
                collectives.allreduce(x, comm=comm, **kw)
                ts.append(time.perf_counter() - t0)
            rows.append(f"{label:>14} {kind:>10}: {np.median(ts[1:]) * 1e3:8.1f} ms")
    if R == 0:
        print(f"  64 MB float32, device buffers staged through pinned host memory, np={P}:")
        print("\n".join("   " + r for r in rows), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="host arrays and a fake device")
    ap.add_argument("--only", default="", help="comma-separated sections to run")
    args = ap.parse_args()
    kinds = Kinds(args.cpu)
    rep = Report()
    want = set(filter(None, args.only.split(",")))

    def on(name: str) -> bool:
        return not want or name in want

    if R == 0:
        import torch

        info = "cpu (fake device)" if args.cpu else torch.cuda.get_device_name(0)
        print(f"gpu smoke: np={P}, device {info}, torch {torch.__version__}, "
              f"MPI {MPI.Get_library_version().splitlines()[0][:60]}", flush=True)
        if not args.cpu:
            import cupy

            print(f"  cupy {cupy.__version__}, runtime for bare CUDA arrays: "
                  f"{device.runtime().name}, CUDA-aware MPI: {device.mpi_is_cuda_aware()}",
                  flush=True)
    algos = ["ring", "tree", "recursive_doubling", "rabenseifner", "mpi"]
    if on("dense"):
        dense(rep, kinds, algos, None, "mpi")
    if on("compressed"):
        compressed(rep, kinds, None, "mpi")
    if on("sparse"):
        sparse(rep, kinds, None, "mpi")
    if on("kernels") and not args.cpu:
        cuda_kernels(rep)
    if want == {"nccl"} and P == 1 and not args.cpu:
        nccl(rep)
    elif on("torch") or on("ddp"):
        import torch.distributed as dist
        from ddp_common import init_gloo  # tests/mpi: gloo on localhost, port shared by MPI

        init_gloo()
        if on("torch"):
            g = dist.group.WORLD
            dense(rep, kinds, algos[:-1] + ["torch"], g, "gloo")
            compressed(rep, kinds, g, "gloo")
        if on("ddp"):
            ddp(rep, args.cpu)
    if on("timings"):
        timings(kinds, None)
    fails = WORLD.gather(rep.failures, root=0)
    total = WORLD.allreduce(len(rep.failures))
    cases = WORLD.allreduce(rep.cases)
    if R == 0:
        shown = [f for fl in fails for f in fl][:25]
        for f in shown:
            print("FAIL", f)
        print(f"gpu smoke: {cases} checks on {P} ranks, {total} failed", flush=True)
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
