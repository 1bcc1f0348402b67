"""The prepared check of compcoll on one GPU: codecs, codec speed, top-k, ranks sharing it, NCCL.

Five sections, each printing lines ``name: value VERDICT (target ...)``:

1. codecs: every device codec (``compressors.providers.codec_for``) against its CPU twin, the
   compressor's own compress/decompress: three steps with and without error feedback, NaN/Inf
   included; the wire bytes, residual and decoded values bit for bit, and the decoded error
   against the compressor's documented bound;
2. speed: each codec's encode and decode throughput as a fraction of the device-to-device copy
   rate (64 MB float32, CUDA events, medians; target: 8-bit encode+decode >= 0.40);
3. topk: exact top-k of 1% of 16M floats (``compressors.cuda.topk``) against ``torch.topk``
   (target >= 5x), the index set against the C++ core's;
4. ranks: 4 processes sharing the GPU over gloo with CUDA tensors: the 8-bit compressed
   allreduce of 64 MB against ``dist.all_reduce``, and the DDP hook on a small transformer,
   its final loss against DDP's without a hook;
5. nccl: one rank on an NCCL process group through the whole DDP hook.

``--cpu`` runs the same on the host: a host-memory fake device with a codec that runs the C++
kernels (``tests/mpi/fake_cuda.py``), the C++ top-k, CPU tensors and an 8 MB allreduce; speed
targets are named but not applicable. The fake codec is the compressor's own host path, so
its bits against its CPU twin compare the compressor with itself: printed, never counted as
a check (the decoded error against the documented bound, computed here in numpy, still is).
``--quick``: tiny sizes, 2 processes, 5 steps.

Writes ``bench/results/gpu/gpu_check_<device>.{txt,json}`` (``--out``: another folder) with
the command line first. Exit status 1 when a correctness check failed (not for speed misses).

Run: ``bash scripts/gpu_check.sh [--cpu] [--quick]`` (builds the extension where it is missing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "mpi")]  # the source tree; the fake device

import compressors  # noqa: E402
from compressors import kernels  # noqa: E402
from compressors import providers as cdev  # noqa: E402
from compressors.device import DeviceArray, DeviceCodec, DevicePayload, seal, wire_nbytes  # noqa: E402

SPEC8 = "uniform:bits=8"
#: Targets on the GPU. Speed: 8-bit encode+decode throughput over the device copy rate, and
#: torch.topk's time over ours. Correctness: the 8-bit allreduce's relative L2 error (each
#: value is rounded to a grid of ~range/254 per bucket; the sum of 4 ranks lies near 0.01),
#: and the DDP hook's final loss relative to DDP's without a hook.
COPY_FRACTION, TOPK_SPEEDUP, ALLREDUCE_REL = 0.40, 5.0, 0.05
#: "none" adds the same terms as DDP in another order (or, at one rank, none at all): what is
#: left is the order and CUDA's non-deterministic kernels over the steps.
LOSS_REL = {SPEC8: 0.05, "none": 1e-4}
#: Every compressor configuration asked for a device codec (those without one are staged).
CANDIDATES = ("none", "fp16", "bf16", "uniform:bits=8", "uniform:bits=8,stochastic=False",
              "uniform:bits=4", "uniform:bits=2", "uniform:bits=1", "qsgd", "terngrad", "sign",
              "topk:ratio=0.01", "threshold:tau=1", "randomk:ratio=0.05", "powersgd:rank=2")


@dataclass(frozen=True)
class Sizes:
    """How large each section runs."""

    codec_n: int  # values of the codec comparison (not a multiple of any bucket)
    copy_mb: int  # the speed section's buffer
    topk_n: int
    ranks: int
    allreduce_mb: int
    steps: int  # DDP training steps
    model: tuple[int, int, int, int]  # vocabulary, width, layers, sequence length
    repeats: int  # timed repeats (medians)
    worker_s: float  # how long the processes of section 4 may take (section 5: at most 120)


SIZES = {"gpu": Sizes((1 << 20) + 3, 64, 16 << 20, 4, 64, 30, (256, 128, 2, 64), 20, 180),
         "cpu": Sizes((1 << 20) + 3, 64, 16 << 20, 4, 8, 30, (64, 64, 2, 32), 5, 300),
         "quick": Sizes(4099, 1, 1 << 20, 2, 1, 5, (32, 32, 1, 16), 3, 150)}


# ---------------------------------------------------------------------------------------------
# the report


@dataclass
class Line:
    """One result: ``name: value VERDICT (target ...)``."""

    name: str
    value: str
    verdict: str = ""  # PASS, FAIL, "not applicable on CPU", or "" (a measurement)
    target: str = ""
    correctness: bool = False  # a FAIL here makes the exit status 1

    def text(self) -> str:
        tail = f" {self.verdict}" if self.verdict else ""
        return f"{self.name}: {self.value}{tail}" + (f" (target {self.target})"
                                                      if self.target else "")


@dataclass
class Report:
    """Lines printed as they come and kept for the result files."""

    cpu: bool
    text: list[str] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.text.append(text)

    def add(self, line: Line) -> None:
        self.lines.append(line)
        self.say(line.text())

    def check(self, name: str, ok: bool, value: str, target: str) -> None:
        self.add(Line(name, value, "PASS" if ok else "FAIL", target, correctness=True))

    def twin(self, name: str, ok: bool, value: str, target: str) -> None:
        """A device codec against its CPU twin: a check on the GPU. On the host the fake
        device's codec runs the twin's own code, so the comparison is printed, not counted."""
        if self.cpu:
            self.info(name, f"{value}; not a check on CPU (the fake device's codec is the "
                            f"compressor's own host path)")
        else:
            self.check(name, ok, value, target)

    def speed(self, name: str, ok: bool, value: str, target: str) -> None:
        """A speed target: judged on the GPU only, never in the exit status."""
        if self.cpu:
            self.add(Line(name, value, "not applicable on CPU", f"{target} on the GPU"))
        else:
            self.add(Line(name, value, "PASS" if ok else "FAIL", target))

    def info(self, name: str, value: str) -> None:
        self.add(Line(name, value))

    def crash(self, name: str, exc: BaseException) -> None:
        traceback.print_exc()
        self.check(name, False, f"crashed: {type(exc).__name__}: {exc}", "no exception")

    def failed(self) -> list[Line]:
        return [ln for ln in self.lines if ln.correctness and ln.verdict == "FAIL"]


# ---------------------------------------------------------------------------------------------
# the device: CuPy arrays and CUDA events, or host memory behind __cuda_array_interface__


def median_ms(times: list[float]) -> float:
    return float(np.median(times))


class CudaDevice:
    """CuPy arrays on the current GPU, timed with CUDA events on the default stream (CuPy's
    and torch's work both queue there)."""

    def __init__(self) -> None:
        import cupy

        self.cp = cupy
        self.name = f"{torch.cuda.get_device_name(0)}, cupy {cupy.__version__}"

    def put(self, host: np.ndarray) -> Any:
        return self.cp.asarray(host)

    def time_ms(self, fn: Callable[[], Any], repeats: int) -> float:
        fn()  # warm-up: compilation, memory pools
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return median_ms(times)

    def copier(self, nbytes: int) -> Callable[[], Any]:
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)


class HostDevice:
    """Host memory seen only through __cuda_array_interface__, with the codec that runs the
    C++ kernels behind its pointers (the test suite's fake device)."""

    name = "cpu: a host-memory fake device (no CUDA)"

    def __init__(self) -> None:
        from fake_cuda import fake_provider

        cdev.register_provider(fake_provider)

    def put(self, host: np.ndarray) -> Any:
        from fake_cuda import FakeDeviceArray

        return FakeDeviceArray(host.copy())

    def time_ms(self, fn: Callable[[], Any], repeats: int) -> float:
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return median_ms(times)

    def copier(self, nbytes: int) -> Callable[[], Any]:
        src, dst = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
        return lambda: np.copyto(dst, src)


Device = CudaDevice | HostDevice


@dataclass
class Context:
    cpu: bool
    sizes: Sizes
    report: Report
    device: Device
    codecs: list[tuple[str, DeviceCodec]] = field(default_factory=list)


SECTIONS: dict[str, tuple[str, Callable[[Context], None]]] = {}


def section(key: str, title: str) -> Callable[[Callable[[Context], None]], Callable]:
    """Register a section under ``key`` (run in registration order)."""

    def deco(fn: Callable[[Context], None]) -> Callable[[Context], None]:
        SECTIONS[key] = (title, fn)
        return fn

    return deco


# ---------------------------------------------------------------------------------------------
# 1. device codecs against their CPU twins

NAME, RANK = "layer.weight", 1  # rank 1: stochastic rounding's seed has the rank in it


def codec_input(n: int, step: int) -> np.ndarray:
    """Gaussian values, a bucket of zeros and a constant one; NaN and +-Inf at step 1."""
    x = (np.random.default_rng(100 + step).standard_normal(n) * (1 + step)).astype(np.float32)
    x[:512], x[512:1024] = 0.0, 1.5
    if step == 1:
        x[[7, n // 2, n - 1]] = [np.nan, np.inf, -np.inf]
    return x


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit, NaN payloads aside (a NaN's sign and payload bits are the hardware's)."""
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and
                np.array_equal(a[~na].view(np.uint32), b[~nb].view(np.uint32)))


def download(codec: DeviceCodec, arr: DeviceArray) -> np.ndarray:
    """A host copy of a device array (an empty one may have no memory behind it)."""
    return codec.download(arr) if arr.size else np.empty(0, arr.dtype)


def wire_bytes(codec: DeviceCodec, p: DevicePayload) -> bytes:
    """The bytes a rank sends for a device payload: header, buffers, checksum."""
    wire = np.zeros(wire_nbytes(p), np.uint8)
    head = np.frombuffer(p.header(), np.uint8)
    wire[:head.size], pos = head, head.size
    for b in p.buffers.values():
        wire[pos:pos + b.nbytes] = download(codec, b).view(np.uint8)
        pos += b.nbytes
    seal(wire)
    return wire.tobytes()


def cpu_feedback(comp: compressors.Compressor, x: np.ndarray, res: np.ndarray,
                 step: int) -> compressors.Payload:
    """The compressor's own error feedback: its fused kernel, else compensate, compress,
    update (residual = what was not sent, 0 where that is not finite)."""
    if comp.fuses_feedback:
        out = comp.compress_feedback(x, res, name=NAME, step=step, rank=RANK)
        assert out is not None
        return out
    c = x + res
    p = comp.compress(c, name=NAME, step=step, rank=RANK)
    with np.errstate(invalid="ignore", over="ignore"):
        np.subtract(c, comp.decompress(p), out=res)
    res[~np.isfinite(res)] = 0
    return p


def device_decodes(codec: DeviceCodec, p: DevicePayload, n: int) -> list[np.ndarray]:
    """decode_into, then decode_add, then scale by 1/3, as the collective runs them."""
    out, got = codec.zeros(n), []
    codec.decode_into(p, out)
    got.append(codec.download(out))
    codec.decode_add(p, out)
    got.append(codec.download(out))
    codec.scale(out, 1 / 3)
    return [*got, codec.download(out)]


def cpu_decodes(comp: compressors.Compressor, p: compressors.Payload, n: int) -> list[np.ndarray]:
    out = np.zeros(n, np.float32)
    comp.decompress(p, out=out)
    got = [out.copy()]
    if not comp.decompress_add(p, out):
        out += comp.decompress(p, out=np.empty_like(out))
    got.append(out.copy())
    out *= np.float32(1 / 3)
    return [*got, out.copy()]


def relative_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b| over the finite values, relative to the largest |b|."""
    fin = np.isfinite(a) & np.isfinite(b)
    scale = max(float(np.abs(b[fin]).max(initial=0.0)), 1e-30)
    return float(np.abs(a[fin].astype(np.float64) - b[fin]).max(initial=0.0)) / scale


@dataclass
class TwinRun:
    """Where a device codec's bits left its CPU twin's, over every compared case."""

    cases: int = 0
    differ: dict[str, int] = field(default_factory=dict)
    decoded_diff: float = 0.0  # largest |device - cpu| of a decoded value over max |cpu|
    finite: list[tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]] = field(
        default_factory=list)  # (input, device payload buffers, device decoded) of finite steps

    def compare(self, part: str, same: bool) -> None:
        self.cases += 1
        if not same:
            self.differ[part] = self.differ.get(part, 0) + 1


def twin_run(comp: compressors.Compressor, codec: DeviceCodec, dev: Device, n: int) -> TwinRun:
    run = TwinRun()
    res_d, res_h = codec.zeros(n), np.zeros(n, np.float32)
    for step in range(3):
        x = codec_input(n, step)
        xd = DeviceArray.of(dev.put(x))
        for ef in (True, False):
            if ef:
                pd = codec.compress(xd, name=NAME, step=step, residual=res_d, fresh=step == 0,
                                    rank=RANK)
                ph = cpu_feedback(comp, x, res_h, step)
                run.compare("residual", codec.download(res_d).tobytes() == res_h.tobytes())
            else:
                pd = codec.compress(xd, name=NAME, step=step, rank=RANK)
                ph = comp.compress(x, name=NAME, step=step, rank=RANK)
            run.compare("payload", wire_bytes(codec, pd) == ph.to_bytes())
            got, want = device_decodes(codec, pd, n), cpu_decodes(comp, ph, n)
            for part, a, b in zip(("decode", "decode_add", "scale"), got, want, strict=True):
                run.compare(part, same_values(a, b))
                run.decoded_diff = max(run.decoded_diff, relative_diff(a, b))
            if not ef and step != 1:
                bufs = {k: download(codec, v) for k, v in pd.buffers.items()}
                run.finite.append((x, bufs, got[0]))
    return run


Bound = Callable[[Any, np.ndarray, dict[str, np.ndarray], np.ndarray], float]
#: compressor name -> (the documented bound in words, the worst error over that bound)
BOUNDS: dict[str, tuple[str, Bound]] = {}


def bound(name: str, words: str) -> Callable[[Bound], Bound]:
    def deco(fn: Bound) -> Bound:
        BOUNDS[name] = (words, fn)
        return fn

    return deco


@bound("uniform", "|decoded - x| <= the bucket's step (+4 ulp of x)")
def uniform_bound(comp: Any, x: np.ndarray, bufs: dict[str, np.ndarray],
                  decoded: np.ndarray) -> float:
    """Rounding (stochastic or nearest) to a grid of the bucket's step: within one step; the
    float rounding of min + code * step adds a few ulp."""
    steps = np.repeat(bufs["scales"].astype(np.float64), comp.bucket_size)[:x.size]
    allowed = steps + 4 * np.spacing(np.abs(x)).astype(np.float64)
    return float(np.max(np.abs(decoded.astype(np.float64) - x) / allowed))


@bound("sign", "decoded = sign(x) * the bucket's mean |x|, that mean within 1e-5 relative")
def sign_bound(comp: Any, x: np.ndarray, bufs: dict[str, np.ndarray],
               decoded: np.ndarray) -> float:
    """The sign exact (zeros positive), the scale the bucket's mean |x| (the kernels sum in
    16 lanes and a tree, this check in float64): 1e-5 relative."""
    b, n = comp.bucket_size, x.size
    mags = np.zeros(-(-n // b) * b)
    mags[:n] = np.abs(x)
    means = np.repeat(mags.reshape(-1, b).sum(1) / np.minimum(b, n - np.arange(0, n, b)), b)[:n]
    want = np.where(x < 0, -means, means)
    if not np.array_equal(np.signbit(decoded) & (means > 0), (x < 0) & (means > 0)):
        return float("inf")
    err = np.abs(decoded.astype(np.float64) - want) / np.where(means > 0, means, 1.0)
    return float(np.max(err)) / 1e-5


@bound("topk", "the k largest |x| sent exactly, zeros elsewhere")
def topk_bound(comp: Any, x: np.ndarray, bufs: dict[str, np.ndarray],
               decoded: np.ndarray) -> float:
    """The sent values are x's own; every |x| left out is at most the smallest sent (the
    largest left out over the smallest sent, or inf where a value or a zero is wrong)."""
    idx = bufs["indices"].astype(np.int64)
    if not np.array_equal(decoded[idx], x[idx]) or np.count_nonzero(np.delete(decoded, idx)):
        return float("inf")
    rest = np.abs(np.delete(x, idx))
    if not idx.size or not rest.size:
        return 0.0
    floor = float(np.min(np.abs(x[idx])))
    return float(np.max(rest)) / floor if floor > 0 else float(np.max(rest) > 0) * np.inf


def find_codecs(ctx: Context) -> None:
    probe = ctx.device.put(np.zeros(8, np.float32))
    staged = []
    for spec in CANDIDATES:
        codec = cdev.codec_for(compressors.get(spec), probe)
        if codec is None:
            staged.append(spec)
        else:
            ctx.codecs.append((spec, codec))
    kinds = sorted({type(c).__name__ for _, c in ctx.codecs})
    ctx.report.check("codecs found", bool(ctx.codecs),
                     f"{', '.join(s for s, _ in ctx.codecs)} ({', '.join(kinds)}); staged "
                     f"through host memory: {', '.join(staged)}", "at least one device codec")


@section("codecs", "device codecs against their CPU twins (the compressors' own path)")
def codecs(ctx: Context) -> None:
    find_codecs(ctx)
    n = ctx.sizes.codec_n
    for spec, codec in ctx.codecs:
        comp = compressors.get(spec)
        run = twin_run(comp, codec, ctx.device, n)
        what = (f"{run.cases} comparisons of {n} values: wire bytes, residual, decode, "
                "decode_add, scale; 3 steps with and without error feedback, NaN/Inf")
        if run.differ:
            parts = ", ".join(f"{k} {v}" for k, v in run.differ.items())
            what = (f"differ in {sum(run.differ.values())} of {what} ({parts}); decoded "
                    f"values at most {run.decoded_diff:.3g} of the largest |decoded| apart")
        else:
            what = f"identical in {what}"
        ctx.report.twin(f"codec {spec} bits", not run.differ, what, "identical bits")
        if comp.name not in BOUNDS:
            ctx.report.check(f"codec {spec} error", False,
                             f"no documented bound registered for {comp.name}", "a bound")
            continue
        words, fn = BOUNDS[comp.name]
        worst = max(fn(comp, x, bufs, dec) for x, bufs, dec in run.finite)
        ctx.report.check(f"codec {spec} error", worst <= 1.0,
                         f"worst {worst:.3f} of the bound ({words})", "<= 1")


# ---------------------------------------------------------------------------------------------
# 2. encode and decode throughput against the device copy rate


@section("speed", "encode and decode throughput over the device-to-device copy rate")
def speed(ctx: Context) -> None:
    if not ctx.codecs:
        find_codecs(ctx)
    mb, reps = ctx.sizes.copy_mb, ctx.sizes.repeats
    nbytes = mb << 20
    copy = ctx.device.time_ms(ctx.device.copier(nbytes), reps)
    where = "host memcpy" if ctx.cpu else "device-to-device copy"
    ctx.report.info("speed copy", f"{mb} MB {where} {copy:.3f} ms ({nbytes / copy / 1e6:.1f} "
                    f"GB/s), median of {reps}")
    x = np.random.default_rng(9).standard_normal(nbytes // 4).astype(np.float32)
    for spec, codec in ctx.codecs:
        xd = DeviceArray.of(ctx.device.put(x))
        res, out = codec.zeros(xd.size), codec.zeros(xd.size)
        p = codec.compress(xd, name="speed", step=0, residual=res)

        def encode(xd: DeviceArray = xd, res: DeviceArray = res, codec: Any = codec) -> Any:
            return codec.compress(xd, name="speed", step=0, residual=res)

        enc = ctx.device.time_ms(encode, reps)
        dec = ctx.device.time_ms(lambda codec=codec, p=p, out=out: codec.decode_into(p, out),
                                 reps)
        frac = copy / (enc + dec)
        value = (f"{frac:.2f} of the copy rate (encode with error feedback {enc:.3f} ms = "
                 f"{copy / enc:.2f}, decode {dec:.3f} ms = {copy / dec:.2f})")
        if spec == SPEC8:
            ctx.report.speed(f"speed {spec} encode+decode", frac >= COPY_FRACTION, value,
                             f">= {COPY_FRACTION:.2f}")
        else:
            ctx.report.info(f"speed {spec} encode+decode", value + ", no target")


# ---------------------------------------------------------------------------------------------
# 3. exact top-k against torch.topk


def topk_device(ctx: Context, n: int, k: int) -> tuple[float, float, np.ndarray, np.ndarray,
                                                        float]:
    """(ours ms, torch ms, our indices, the input on the host, torch's k-th largest |x|)."""
    if ctx.cpu:
        x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
        t = torch.from_numpy(x)
        ours = ctx.device.time_ms(lambda: kernels.topk_indices(x, k), ctx.sizes.repeats)
        theirs = ctx.device.time_ms(lambda: torch.topk(t.abs(), k, sorted=False),
                                    ctx.sizes.repeats)
        kth = float(torch.topk(t.abs(), k, sorted=False).values.min())
        return ours, theirs, kernels.topk_indices(x, k), x, kth
    import cupy

    from compressors.cuda import topk as cuda_topk

    t = torch.randn(n, device="cuda", generator=torch.Generator(device="cuda").manual_seed(3))
    xc = cupy.asarray(t)  # the same memory
    ours = ctx.device.time_ms(lambda: cuda_topk.topk(xc, k), ctx.sizes.repeats)
    theirs = ctx.device.time_ms(lambda: torch.topk(t.abs(), k, sorted=False), ctx.sizes.repeats)
    kth = float(torch.topk(t.abs(), k, sorted=False).values.min())
    return ours, theirs, cupy.asnumpy(cuda_topk.topk(xc, k)), t.cpu().numpy(), kth


@section("topk", "exact top-k of 1% against torch.topk")
def topk(ctx: Context) -> None:
    n = ctx.sizes.topk_n
    k = n // 100
    ours, theirs, idx, x, kth = topk_device(ctx, n, k)
    who = "C++ core top-k" if ctx.cpu else "compressors.cuda.topk"
    ctx.report.speed(f"topk 1% of {n}", theirs / ours >= TOPK_SPEEDUP,
                     f"{who} {ours:.2f} ms, torch.topk(|x|) {theirs:.2f} ms: "
                     f"{theirs / ours:.1f}x", f">= {TOPK_SPEEDUP:.0f}x")
    if ctx.cpu:  # the device algorithm's steps, run on the host with its kernels' twins
        from compressors.cuda import topk as cuda_topk

        idx = cuda_topk.exact_topk(np, x, k, cuda_topk.host_histogram,
                                   cuda_topk.host_select_above)
        who = "the device algorithm on host twins"
    same = bool(np.array_equal(idx, kernels.topk_indices(x, k)))
    ctx.report.check("topk index set", same, f"{who}: {'' if same else 'NOT '}identical to the "
                     f"C++ core's (k = {k}, ties to the lower index)", "identical")
    mine = float(np.abs(x[idx]).min()) if idx.size else float("nan")
    ctx.report.check("topk k-th largest |x|", mine == kth,
                     f"{mine:.6g}, torch.topk's {kth:.6g}", "equal")


# ---------------------------------------------------------------------------------------------
# 4 and 5. processes on one device: workers started from this script


class TinyGPT(nn.Module):
    """A small causal transformer language model."""

    def __init__(self, vocab: int, width: int, layers: int, seq: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(seq, width))
        layer = nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)
        return self.head(self.body(self.emb(tokens) + self.pos[:n], mask=mask, is_causal=True))


def tokens(vocab: int, seq: int, batch: int, seed: int) -> torch.Tensor:
    """Walks on a fixed random chain (4 successors per token): something to learn. The chain
    is the same on every rank; ``seed`` draws the walks."""
    succ = torch.randint(0, vocab, (vocab, 4), generator=torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(seed)
    walk = [torch.randint(0, vocab, (batch,), generator=g)]
    choice = torch.randint(0, 4, (batch, seq), generator=g)
    for t in range(seq):
        walk.append(succ[walk[-1], choice[:, t]])
    return torch.stack(walk, 1)


def lm_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       batch[:, 1:].reshape(-1))


def same_on_all_ranks(t: torch.Tensor) -> bool:
    import torch.distributed as dist

    crcs: list[int] = [0] * dist.get_world_size()
    dist.all_gather_object(crcs, zlib.crc32(t.detach().cpu().numpy().tobytes()))
    return len(set(crcs)) == 1


def train(spec: dict[str, Any], dev: torch.device, policy: str | None) -> dict[str, Any]:
    """``steps`` of Adam under DDP (with the compression hook of ``policy``); the loss on a
    fixed batch before and after, and whether every rank holds the same parameters."""
    import torch.distributed as dist

    import collectives.ddp as cddp

    vocab, width, layers, seq = spec["model"]
    with torch.random.fork_rng(devices=[]):  # the same initial weights on every rank
        torch.manual_seed(0)
        net = TinyGPT(vocab, width, layers, seq).to(dev)
    model = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.25)
    state = None
    if policy is not None:
        state = cddp.CompressionState(policy=policy).bind(model)
        model.register_comm_hook(state, cddp.compression_hook)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    held_out = tokens(vocab, seq, 32, compressors.derive_seed(0, "held out", 0)).to(dev)
    with torch.no_grad():
        initial = float(lm_loss(net, held_out))
    rank = dist.get_rank()
    for step in range(spec["steps"]):
        batch = tokens(vocab, seq, 16, compressors.derive_seed(0, f"batch {rank}", step))
        opt.zero_grad()
        lm_loss(model, batch.to(dev)).backward()
        opt.step()
    with torch.no_grad():
        final = float(lm_loss(net, held_out))
    same = same_on_all_ranks(torch.cat([p.reshape(-1) for p in net.parameters()]))
    if state is not None:
        state.close()
    return {"initial": initial, "final": final, "same_params": same}


def ddp_task(spec: dict[str, Any], dev: torch.device) -> dict[str, Any]:
    return {"no hook": train(spec, dev, None),
            **{policy: train(spec, dev, policy) for policy in spec["policies"]}}


def timed_ms(fn: Callable[[int], Any], repeats: int, dev: torch.device) -> float:
    """Median over repeats of the slowest rank's time (ranks start together)."""
    import torch.distributed as dist

    times = []
    for i in range(repeats + 1):  # the first is a warm-up
        dist.barrier()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(i)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    worst = torch.tensor(times[1:], dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return float(worst.median()) * 1e3


def allreduce_task(spec: dict[str, Any], dev: torch.device) -> dict[str, Any]:
    """compcoll's 8-bit allreduce (comm=None: the default process group) against gloo's."""
    import torch.distributed as dist

    import collectives

    rank = dist.get_rank()
    x = torch.randn(spec["numel"], generator=torch.Generator().manual_seed(1000 + rank)).to(dev)
    exact = x.clone()
    dist.all_reduce(exact)
    y = collectives.allreduce(x, compressor=SPEC8, comm=None, name="x", step=0)
    rel = float((y.double() - exact.double()).norm() / exact.double().norm())
    ours = timed_ms(lambda i: collectives.allreduce(x, compressor=SPEC8, comm=None, name="x",
                                                    step=i + 1), spec["repeats"], dev)
    buf = x.clone()

    def gloo(i: int) -> None:
        dist.all_reduce(buf)

    theirs = timed_ms(gloo, spec["repeats"], dev)
    return {"rel_error": rel, "same_bits": same_on_all_ranks(y), "device": str(y.device),
            "ours_ms": ours, "gloo_ms": theirs}


TASKS: dict[str, Callable[[dict[str, Any], torch.device], dict[str, Any]]] = {
    "allreduce": allreduce_task, "ddp": ddp_task}


def worker(spec: dict[str, Any]) -> None:
    """One rank: the process group, then each task; rank 0 writes the results."""
    import torch.distributed as dist

    torch.set_num_threads(spec["threads"])
    dev = torch.device(spec["device"])
    extra: dict[str, Any] = {}
    if dev.type == "cuda":
        torch.cuda.set_device(0)
        torch.use_deterministic_algorithms(True, warn_only=True)
        if spec["backend"] == "nccl":
            extra["device_id"] = torch.device("cuda", 0)
    dist.init_process_group(spec["backend"], init_method=f"tcp://127.0.0.1:{spec['port']}",
                            rank=spec["rank"], world_size=spec["world"],
                            timeout=timedelta(seconds=spec["timeout"]), **extra)
    results = {task: TASKS[task](spec, dev) for task in spec["tasks"]}
    dist.barrier()
    dist.destroy_process_group()
    if spec["rank"] == 0:
        Path(spec["out"]).write_text(json.dumps(results))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(spec: dict[str, Any], world: int, timeout: float) -> dict[str, Any]:
    """Run ``world`` workers of ``spec`` to the end; rank 0's results."""
    threads = max(1, (os.cpu_count() or 1) // world)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    with tempfile.TemporaryDirectory() as tmp:
        base = {**spec, "world": world, "port": free_port(), "threads": threads,
                "timeout": timeout, "out": str(Path(tmp) / "results.json")}
        logs = [Path(tmp) / f"rank{r}.log" for r in range(world)]
        procs = []
        for r, log in enumerate(logs):
            with log.open("w") as f:
                cmd = [sys.executable, __file__, "--worker", json.dumps({**base, "rank": r})]
                procs.append(subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout
        try:
            for p in procs:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        bad = [r for r, p in enumerate(procs) if p.returncode != 0]
        if bad:
            tail = logs[bad[0]].read_text(errors="replace").strip().splitlines()[-12:]
            raise RuntimeError(f"ranks {bad} of {world} ended with status "
                               f"{[procs[r].returncode for r in bad]} (killed after {timeout:.0f}"
                               f" s if negative); rank {bad[0]}'s last lines:\n" + "\n".join(tail))
        return json.loads(Path(base["out"]).read_text())


def report_ddp(ctx: Context, prefix: str, runs: dict[str, Any], steps: int) -> None:
    plain = runs["no hook"]
    ctx.report.info(f"{prefix} ddp without hook", f"final loss {plain['final']:.4f} after "
                    f"{steps} steps (initial {plain['initial']:.4f})")
    for policy, bound_rel in LOSS_REL.items():
        run = runs[policy]
        rel = abs(run["final"] - plain["final"]) / abs(plain["final"])
        ctx.report.check(f"{prefix} ddp hook {policy}", rel <= bound_rel and run["same_params"],
                         f"final loss {run['final']:.4f}, {rel:.2e} relative to no hook; every "
                         f"rank the same parameters: {run['same_params']}",
                         f"<= {bound_rel:g} relative, the same parameters")


@section("ranks", "processes sharing the device over gloo: allreduce and the DDP hook")
def ranks(ctx: Context) -> None:
    if not ctx.cpu:  # the workers need the memory this process's pools hold
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()
    s, dev = ctx.sizes, "cpu" if ctx.cpu else "cuda"
    spec = {"backend": "gloo", "device": dev, "tasks": ["allreduce", "ddp"],
            "numel": s.allreduce_mb << 18, "repeats": min(s.repeats, 10), "steps": s.steps,
            "model": s.model, "policies": list(LOSS_REL)}
    out = spawn(spec, s.ranks, timeout=s.worker_s)
    ar = out["allreduce"]
    where = f"{s.ranks} ranks on one {'CPU' if ctx.cpu else 'GPU'} (gloo, {dev} tensors)"
    ctx.report.info(f"ranks allreduce {s.allreduce_mb} MB", f"{where}: compcoll {SPEC8} "
                    f"{ar['ours_ms']:.1f} ms, dist.all_reduce {ar['gloo_ms']:.1f} ms: gloo/ours "
                    f"{ar['gloo_ms'] / ar['ours_ms']:.2f}x (no target: one machine, loopback)")
    ok = ar["rel_error"] <= ALLREDUCE_REL and ar["same_bits"] and ar["device"].startswith(dev)
    ctx.report.check("ranks allreduce 8-bit error", ok,
                     f"{ar['rel_error']:.4f} relative L2 to gloo's sum; the same bits on every "
                     f"rank: {ar['same_bits']}; result on {ar['device']}",
                     f"<= {ALLREDUCE_REL} on the caller's device, the same bits")
    report_ddp(ctx, "ranks", out["ddp"], s.steps)


@section("nccl", "one rank on an NCCL process group through the DDP hook")
def nccl(ctx: Context) -> None:
    if ctx.cpu:
        ctx.report.info("nccl", "skipped: no CUDA")
        return
    s = ctx.sizes
    spec = {"backend": "nccl", "device": "cuda", "tasks": ["ddp"], "steps": s.steps,
            "model": s.model, "policies": list(LOSS_REL)}
    report_ddp(ctx, "nccl", spawn(spec, 1, timeout=min(s.worker_s, 120.0))["ddp"], s.steps)


# ---------------------------------------------------------------------------------------------
# the run


def device_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100', else the name's words."""
    words = re.findall(r"\b[a-z]+\d+[a-z]*\b", name.lower().replace("nvidia", ""))
    return words[0] if words else re.sub(r"\W+", "_", name.lower()).strip("_") or "gpu"


def header(ctx: Context, command: str, date: str) -> list[str]:
    s = ctx.sizes
    return [f"# command: {command}",
            f"# date: {date}; device: {ctx.device.name}; torch {torch.__version__}; python "
            f"{platform.python_version()}; {os.cpu_count()} cores",
            f"# sizes: codecs {s.codec_n} values, speed {s.copy_mb} MB, top-k of {s.topk_n}, "
            f"{s.ranks} ranks, allreduce {s.allreduce_mb} MB, {s.steps} DDP steps, "
            f"medians of {s.repeats}"]


def write(ctx: Context, out: Path, stem: str, command: str, date: str, seconds: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.txt").write_text("\n".join(ctx.report.text) + "\n")
    data = {"command": command, "date": date,
            "device": ctx.device.name, "sizes": asdict(ctx.sizes), "seconds": round(seconds, 1),
            "lines": [asdict(ln) for ln in ctx.report.lines],
            "correctness_failed": len(ctx.report.failed())}
    (out / f"{stem}.json").write_text(json.dumps(data, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="host memory, a fake device, CPU tensors")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 2 processes, 5 steps")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        # Out without running destructors: a gloo thread still joinable at interpreter exit
        # aborts the process ("terminate called without an active exception") after the
        # work is done and written.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    if not args.cpu and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device; run with --cpu", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    sizes = SIZES["quick" if args.quick else "cpu" if args.cpu else "gpu"]
    ctx = Context(args.cpu, sizes, Report(args.cpu), HostDevice() if args.cpu else CudaDevice())
    command = os.environ.get("GPU_CHECK_COMMAND") or "python " + shlex.join(
        [os.path.relpath(__file__, ROOT), *sys.argv[1:]])
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    for text in header(ctx, command, date):
        ctx.report.say(text)
    for i, (key, (title, fn)) in enumerate(SECTIONS.items(), 1):
        ctx.report.say(f"# {i}. {key}: {title}")
        try:
            fn(ctx)
        except Exception as exc:  # noqa: BLE001 - a crashed section is a failed check
            ctx.report.crash(key, exc)
    failed = ctx.report.failed()
    checks = sum(ln.correctness for ln in ctx.report.lines)
    speeds = [ln for ln in ctx.report.lines if ln.verdict and not ln.correctness]
    missed = sum(ln.verdict == "FAIL" for ln in speeds)
    speed = "not applicable on CPU" if args.cpu else f"{len(speeds)} targets, {missed} missed"
    seconds = time.perf_counter() - t0
    ctx.report.say(f"# result: {checks} correctness checks, {len(failed)} failed; speed "
                   f"targets: {speed}; {seconds:.0f} s")
    mode = "cpu" if args.cpu else device_slug(torch.cuda.get_device_name(0))
    write(ctx, args.out, f"gpu_check_{mode}" + ("_quick" if args.quick else ""), command, date,
          seconds)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
