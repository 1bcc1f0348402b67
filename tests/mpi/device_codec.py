"""Compressed allreduce of device arrays through a device codec: only payloads cross.

The "device" is host memory behind __cuda_array_interface__ (fake_cuda), the codec runs the
C++ kernels there, and the runtime counts the bytes copied each way. Every case compares the
device call with the same call on host numpy input (same seed, name and step): bit for bit.
Run: mpiexec -n P python tests/mpi/device_codec.py"""

from __future__ import annotations

import numpy as np

import collectives
import compressors
from collectives import device
from collectives.algorithms.common import partition
from collectives.compressed import feasible
from collectives.config import defaults
from compressors import ErrorFeedback, device_feedback
from compressors import providers as cdev

from common import WORLD, Checker
from fake_cuda import FakeDeviceArray, HostRuntime, fake_provider

P, R = WORLD.size, WORLD.rank
N = 6000
SPECS = ("uniform:bits=8", "uniform:bits=4", "sign", "topk:ratio=0.05")
SCHEMES = ("allgather", "reduce_scatter_allgather")


def data(step: int, n: int = N) -> np.ndarray:
    rng = np.random.default_rng(1000 * step + R)
    return (rng.standard_normal(n) * (1 + R)).astype(np.float32)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


def bounds(comp: compressors.Compressor, scheme: str, n: int) -> tuple[int, int]:
    """(bytes of the payloads this rank makes, bytes of the payloads it receives from the
    others), headers included: its own payloads are decoded where they are."""
    wire = comp.wire_nbytes
    if scheme == "allgather":
        return wire((n,)), (P - 1) * wire((n,))
    blocks = partition(n, P)
    lo, hi = blocks[R]
    sent = sum(wire((b - a,)) for a, b in blocks) + wire((hi - lo,))
    others = sum(wire((b - a,)) for j, (a, b) in enumerate(blocks) if j != R)
    return sent, (P - 1) * wire((hi - lo,)) + others


def matches_host(chk: Checker, rt: HostRuntime) -> None:
    """(a) bit-identical to host input, (b) PCIe bytes within the payloads', (c) same bits on
    every rank, with and without error feedback, over two steps."""
    for spec in SPECS:
        comp = compressors.get(spec)
        for scheme in (s for s in SCHEMES if s in feasible(comp)):
            for with_fb in (False, True):
                fb_dev = ErrorFeedback(comp) if with_fb else None
                fb_host = ErrorFeedback(comp) if with_fb else None
                label = f"{spec} {scheme} fb={with_fb}"
                for step in range(2):
                    x = data(step)
                    rt.d2h_bytes = rt.h2d_bytes = rt.synced = 0
                    stats: dict = {}
                    d = chk.run(label, collectives.allreduce, FakeDeviceArray(x),
                                compressor=spec, scheme=scheme, feedback=fb_dev, name="w",
                                step=step, stats=stats)
                    h = collectives.allreduce(x.copy(), compressor=spec, scheme=scheme,
                                              feedback=fb_host, name="w", step=step)
                    if d is None:
                        break
                    chk.check(stats.get("on_device") is True, f"{label}: not routed")
                    chk.check(np.array_equal(bits(d.host), bits(h)),
                              f"{label} step {step}: differs from the host input's result")
                    chk.identical(d.host, f"{label} step {step}")
                    sent, got = bounds(comp, scheme, N)
                    chk.check(0 < rt.d2h_bytes <= sent and rt.d2h_bytes < x.nbytes,
                              f"{label}: {rt.d2h_bytes} B device->host, payloads {sent} B, "
                              f"buffer {x.nbytes} B")
                    chk.check((0 < rt.h2d_bytes or P == 1) and rt.h2d_bytes <= got,
                              f"{label}: {rt.h2d_bytes} B host->device, received {got} B")
                    chk.check(rt.synced >= 1, f"{label}: stream never synchronized")
                if with_fb:
                    device_feedback.export_residuals(fb_dev)
                    chk.check(np.array_equal(bits(fb_dev.residuals["w"]),
                                             bits(fb_host.residuals["w"])),
                              f"{label}: device residual differs from the host's")


def variants(chk: Checker, rt: HostRuntime) -> None:
    """Average, in place, NaN/Inf side lists, and a mix of device and host ranks."""
    spec = "uniform:bits=8"
    x = data(0)
    d = collectives.allreduce(FakeDeviceArray(x), compressor=spec, op="avg", scheme="allgather")
    h = collectives.allreduce(x.copy(), compressor=spec, op="avg", scheme="allgather")
    chk.check(np.array_equal(bits(d.host), bits(h)), "avg differs from the host's")
    inplace = FakeDeviceArray(x.copy())
    collectives.allreduce(inplace, compressor=spec, out=inplace,
                          scheme="reduce_scatter_allgather")
    want = collectives.allreduce(x.copy(), compressor=spec, scheme="reduce_scatter_allgather")
    chk.check(np.array_equal(bits(inplace.host), bits(want)), "in place differs")
    bad = x.copy()
    if R == P - 1:
        bad[[3, 4000]] = [np.nan, np.inf]
    for s in ("uniform:bits=4", "sign"):
        for scheme in SCHEMES:
            d = collectives.allreduce(FakeDeviceArray(bad), compressor=s, scheme=scheme)
            h = collectives.allreduce(bad.copy(), compressor=s, scheme=scheme)
            chk.check(np.array_equal(bits(d.host), bits(h)), f"NaN/Inf {s} {scheme} differs")
    # rank 0 holds host memory, the others device memory: the same wire bytes either way
    for scheme in SCHEMES:
        buf = x.copy() if R == 0 else FakeDeviceArray(x)
        mixed = collectives.allreduce(buf, compressor=spec, scheme=scheme, name="m")
        host = collectives.allreduce(x.copy(), compressor=spec, scheme=scheme, name="m")
        mixed = mixed if R == 0 else mixed.host
        chk.check(np.array_equal(bits(mixed), bits(host)), f"mixed host/device {scheme}")


def segments_and_state(chk: Checker) -> None:
    """Pipelined segments sharing one device residual, and a residual loaded from a saved
    state (copied to the device once) carrying on as the host's does."""
    spec, scheme = "uniform:bits=4", "reduce_scatter_allgather"
    comp = compressors.get(spec)
    saved = defaults.compressed_segment_bytes
    defaults.compressed_segment_bytes = 4096  # 24000 B of input: 4 segments
    try:
        fb_dev, fb_host = ErrorFeedback(comp), ErrorFeedback(comp)
        for step in range(2):
            x = data(step)
            d = collectives.allreduce(FakeDeviceArray(x), compressor=spec, scheme=scheme,
                                      feedback=fb_dev, name="s", step=step)
            h = collectives.allreduce(x.copy(), compressor=spec, scheme=scheme,
                                      feedback=fb_host, name="s", step=step)
            chk.check(np.array_equal(bits(d.host), bits(h)), f"segments step {step} differ")
    finally:
        defaults.compressed_segment_bytes = saved
    fb_dev, fb_host = ErrorFeedback(comp), ErrorFeedback(comp)
    state = {"beta": 1.0, "gamma": 1.0, "residuals": {"w": data(7) * np.float32(0.01)}}
    fb_dev.load_state_dict(state)
    fb_host.load_state_dict(state)
    for step in range(2):
        x = data(step)
        d = collectives.allreduce(FakeDeviceArray(x), compressor=spec, scheme="allgather",
                                  feedback=fb_dev, name="w", step=step)
        h = collectives.allreduce(x.copy(), compressor=spec, scheme="allgather",
                                  feedback=fb_host, name="w", step=step)
        chk.check(np.array_equal(bits(d.host), bits(h)), f"loaded state step {step} differs")
    device_feedback.export_residuals(fb_dev)
    chk.check(np.array_equal(bits(fb_dev.state_dict()["residuals"]["w"]),
                             bits(fb_host.state_dict()["residuals"]["w"])),
              "exported device residual differs from the host's")


def fallback(chk: Checker, rt: HostRuntime) -> None:
    """(d) compressors without a device twin stage the whole buffer, as before."""
    for spec, shape, scheme in (("qsgd", (N,), "allgather"),
                                ("powersgd:rank=2", (60, 100), "dense"),
                                ("uniform:bits=8", (N,), "sparse")):
        x = data(0).reshape(shape)
        rt.d2h_bytes = rt.h2d_bytes = 0
        stats: dict = {}
        d = chk.run(spec, collectives.allreduce, FakeDeviceArray(x), compressor=spec,
                    scheme=scheme, name="f", stats=stats)
        h = collectives.allreduce(x.copy(), compressor=spec, scheme=scheme, name="f")
        if d is None:
            continue
        chk.check("on_device" not in stats, f"{spec} {scheme}: routed to a device codec")
        chk.check(rt.d2h_bytes == x.nbytes and rt.h2d_bytes == x.nbytes,
                  f"{spec} {scheme}: staged {rt.d2h_bytes}/{rt.h2d_bytes} B, not {x.nbytes}")
        chk.check(np.array_equal(bits(d.host), bits(h)), f"{spec} {scheme}: differs")


def main() -> None:
    chk = Checker("device codec")
    rt = HostRuntime()
    device.set_runtime(rt)
    cdev.register_provider(fake_provider)
    try:
        matches_host(chk, rt)
        variants(chk, rt)
        segments_and_state(chk)
        fallback(chk, rt)
    finally:
        cdev.unregister_provider(fake_provider)
        device.set_runtime(None)
    chk.finish()


if __name__ == "__main__":
    main()
