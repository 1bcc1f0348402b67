"""Compressed allreduce: schemes against the plain allreduce, error feedback over steps (both
levels), PowerSGD end to end, mismatches and refusals. Run: mpiexec -n P python compressed.py"""

from __future__ import annotations

import numpy as np
import torch

import collectives
import compressors
from collectives import MismatchError
from collectives.compressed import SCHEMES, feasible, rsag

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank
SPECS = ["none", "fp16", "bf16", "uniform:bits=8", "uniform:bits=2", "qsgd", "terngrad", "sign",
         "topk:ratio=0.05", "topk:ratio=0.05,approximate=true", "randomk:ratio=0.2",
         "threshold:tau=2", "powersgd:rank=2"]


def ints(n: int, dtype: str, seed: int):
    # Multiples of p: an average divides them exactly, so any order of summing is exact.
    x = np.random.default_rng([seed, R]).integers(-4, 5, n).astype(np.float32) * P
    return torch.from_numpy(x).to(torch.bfloat16) if dtype == "bfloat16" else x.astype(dtype)


def none_equals_plain(chk: Checker) -> None:
    """With the identity compressor every scheme is the plain allreduce, bit for bit."""
    for dtype in ("float32", "float64", "float16", "bfloat16"):
        for n in (0, 1, P + 1, 1009):
            x = ints(n, dtype, n)
            plain = collectives.allreduce(x, algorithm="ring")
            for scheme in list(SCHEMES) + ["auto"]:
                for op in ("sum", "avg"):
                    what = f"none {scheme} {dtype} n={n} {op}"
                    y = chk.run(what, collectives.allreduce, x, compressor="none",
                                scheme=scheme, op=op)
                    want = plain if op == "sum" else collectives.allreduce(x, op="avg",
                                                                           algorithm="ring")
                    same = y is not None and type(y) is type(x) and (
                        torch.equal(y, want) if isinstance(y, torch.Tensor)
                        else np.array_equal(y, want))
                    chk.check(same, what)


def every_compressor_every_scheme(chk: Checker) -> None:
    x = np.random.default_rng([1, R]).standard_normal((32, 40)).astype(np.float32)
    x0 = x.copy()
    exact = collectives.allreduce(x)
    for spec in SPECS:
        comp = compressors.get(spec)
        for scheme in feasible(comp) + ["auto"]:
            what = f"{spec} {scheme}"
            stats: dict = {}
            y = chk.run(what, collectives.allreduce, x, compressor=comp, scheme=scheme,
                        feedback=compressors.ErrorFeedback(comp), name="w", stats=stats)
            if y is None:
                continue
            chk.check(np.array_equal(x, x0), f"{what}: out of place, the input is untouched")
            chk.identical(y, what)
            err = np.linalg.norm(y - exact) / np.linalg.norm(exact)
            # a sanity bound: unbiased ternary codes quantized twice (owner side) reach ~2
            chk.check(y.shape == x.shape and np.isfinite(err) and err < 3.0,
                      f"{what}: error {err:.3g}")
            chk.check(stats.get("scheme") in SCHEMES and stats["bytes_sent"] >= 0 and
                      (P == 1 or stats["bytes_sent"] > 0), f"{what}: stats {stats}")


def nonfinite_on_some_ranks(chk: Checker) -> None:
    """NaN/Inf on some ranks only: their payloads outgrow the expected size (side lists) and
    take the exchanges' escape path; every rank gets the same result, NaN/Inf where they were,
    and the next call (finite again) is back to normal."""
    comp = compressors.get("uniform:bits=4")
    for scheme in ("reduce_scatter_allgather", "allgather"):
        for bad in sorted({0, P - 1, P // 2}):
            x = np.random.default_rng([5, R]).standard_normal(1013).astype(np.float32)
            if R == bad:
                x[[3, 700]] = [np.nan, np.inf]
            what = f"non-finite on rank {bad}, {scheme}"
            fb = compressors.ErrorFeedback(comp)
            y = chk.run(what, collectives.allreduce, x, compressor=comp, scheme=scheme,
                        feedback=fb, name="w")
            if y is None:
                continue
            chk.identical(y, what)
            chk.check(bool(np.isnan(y[3]) and np.isnan(y[700]) or np.isinf(y[700])), what)
            finite = np.delete(y, [3, 700])
            chk.check(bool(np.isfinite(finite).all()), f"{what}: finite elsewhere")
            z = chk.run(what + " then finite", collectives.allreduce, np.ones(1013, np.float32),
                        compressor=comp, scheme=scheme, feedback=fb, name="w")
            chk.check(z is not None and bool(np.isfinite(z).all()), what + " then finite")


def feedback_over_steps(chk: Checker) -> None:
    """Telescoping, both levels: sum of outputs + all residuals == sum of true gradients."""
    n, steps = 999, 25
    for spec, scheme in (("uniform:bits=2", "reduce_scatter_allgather"),
                         ("sign", "reduce_scatter_allgather"), ("topk:ratio=0.02", "sparse"),
                         ("topk:ratio=0.02", "sparse:gtopk"), ("topk:ratio=0.02", "allgather"),
                         ("topk:ratio=0.02", "sparse:ssar_recursive_doubling"),
                         ("topk:ratio=0.02", "sparse:ssar_split_allgather"),
                         ("topk:ratio=0.02,approximate=true", "sparse:dsar"),
                         ("threshold:tau=1.0", "sparse"),
                         ("fp16", "dense"), ("qsgd", "allgather")):
        scheme, _, salgo = scheme.partition(":")
        comp = compressors.get(spec)
        fb = compressors.ErrorFeedback(comp)
        out_sum = np.zeros(n, np.float64)
        true_sum = np.zeros(n, np.float64)
        for t in range(steps):
            g = np.random.default_rng([t, R]).standard_normal(n).astype(np.float32)
            out_sum += collectives.allreduce(g, compressor=comp, scheme=scheme, feedback=fb,
                                             name="g", step=t, sparse_algorithm=salgo or "auto")
            true_sum += np.sum(WORLD.allgather(g.astype(np.float64)), axis=0)
        res1 = np.sum(WORLD.allgather(fb.residuals["g"].astype(np.float64)), axis=0)
        owner = fb.residuals.get("g@owner")
        res2 = np.zeros(n)
        if owner is not None:  # each owner's residual covers its (per-segment) ranges
            count = rsag.segment_count(n, P, comp.fuses_feedback)  # (fused: segments)
            for r, piece in enumerate(WORLD.allgather(owner.astype(np.float64))):
                at = 0
                for a, b in rsag.owned_ranges(n, P, r, count):
                    res2[a:b] += piece[at:at + b - a]
                    at += b - a
        gap = np.abs(out_sum + res1 + res2 - true_sum).max()
        what = f"feedback telescoping {spec} {scheme}"
        chk.check(gap < 1e-3 * steps, f"{what}: gap {gap:.3g}")
        chk.check((owner is not None) == (scheme == "reduce_scatter_allgather"),
                  f"{what}: owner-side residual present only for reduce-scatter/allgather")
        # The residual stays bounded: the accumulated error does not grow with the steps.
        rel = np.linalg.norm(out_sum - true_sum) / np.linalg.norm(true_sum)
        chk.check(rel < 1.0, f"{what}: accumulated relative error {rel:.3g}")


def powersgd_end_to_end(chk: Checker) -> None:
    """A sum of rank-2 matrices sharing their column space is found exactly by rank 2."""
    u = np.random.default_rng(0).standard_normal((30, 2))
    v = np.random.default_rng(1).standard_normal((20, 2))
    m = (u * np.array([1.0 + R, 2.0 - 0.5 * R])) @ v.T
    want = np.sum(WORLD.allgather(m), axis=0)
    comp = compressors.get("powersgd:rank=2")
    fb = compressors.ErrorFeedback(comp)
    for t in range(3):  # warm start carries Q from step to step
        y = collectives.allreduce(m.astype(np.float32), compressor=comp, scheme="dense",
                                  feedback=fb, name="m", step=t)
        err = np.abs(y - want).max() / np.abs(want).max()
        chk.check(err < 1e-4, f"powersgd step {t}: error {err:.3g}")
    chk.check(np.abs(fb.residuals["m"]).max() < 1e-3, "powersgd residual of an exact fit")
    stats: dict = {}
    collectives.allreduce(np.ones((300, 200), np.float32), compressor=comp, stats=stats)
    # Two allreduces of P and Q, or one allgather of each rank's own (P, Q) when p is small.
    chk.check(stats["scheme"] in ("dense", "allgather"), f"auto for PowerSGD: {stats}")


def nonblocking(chk: Checker) -> None:
    hs = [collectives.iallreduce(np.full(500, float(i + R), np.float32), compressor=spec,
                                 scheme=scheme)
          for i, (spec, scheme) in enumerate((("fp16", "dense"), ("uniform:bits=8", "allgather"),
                                             ("none", "reduce_scatter_allgather"),
                                             ("none", "sparse")))]
    for i, h in reversed(list(enumerate(hs))):
        r = h.wait()
        want = i * P + P * (P - 1) / 2
        chk.check(np.allclose(r, want, rtol=2e-2), f"compressed iallreduce #{i}")


def refusals_and_mismatches(chk: Checker) -> None:
    x = np.ones(100, np.float32)
    for kwargs, needle, exc in (
            (dict(compressor="topk:ratio=0.1", scheme="dense"), "use one of: allgather",
             ValueError),
            (dict(compressor="sign", scheme="dense"), "summable=False", ValueError),
            (dict(compressor="topk:ratio=0.1", scheme="reduce_scatter_allgather"),
             "same-size dense", ValueError),
            (dict(compressor="none", scheme="bogus"), "available: auto, dense", ValueError),
            (dict(compressor="nope"), "unknown compressor", ValueError),
            (dict(compressor=3), "spec string", TypeError),
            (dict(compressor="none", op="max"), "op='sum' or 'avg'", ValueError),
            (dict(compressor="none", feedback=compressors.ErrorFeedback(
                compressors.get("none"))), "pass name=", ValueError),
            (dict(compressor="none", buf=np.ones(3, np.int32)), "floating-point", ValueError)):
        buf = kwargs.pop("buf", x)
        try:
            collectives.allreduce(buf, **kwargs)
            chk.check(False, f"accepted {kwargs}")
        except exc as e:
            chk.check(needle in str(e), f"{needle!r} not in {e}")
    if P > 1:
        for kwargs, needle in ((dict(compressor=f"uniform:bits={8 if R == 0 else 4}"),
                                "compressor and its parameters"),
                               (dict(compressor="fp16", scheme="dense" if R else "allgather"),
                                "scheme")):
            try:
                collectives.allreduce(x, **kwargs)
                chk.check(False, f"mismatch accepted: {kwargs}")
            except MismatchError as e:
                chk.check(needle in str(e), str(e))
    chk.check(bool((collectives.allreduce(x, compressor="none") == P).all()), "usable after")


def pipelined(chk: Checker) -> None:
    """The same checks with the reduce-scatter/allgather scheme cut into many segments that
    run interleaved (tiny segments, so these small tensors get up to 8)."""
    from collectives.config import defaults

    saved, defaults.compressed_segment_bytes = defaults.compressed_segment_bytes, 512
    try:
        for part in (none_equals_plain, nonfinite_on_some_ranks, feedback_over_steps):
            chk.run(f"pipelined {part.__name__}", part, chk)
    finally:
        defaults.compressed_segment_bytes = saved


def main() -> None:
    chk = Checker("compressed allreduce")
    for part in (none_equals_plain, every_compressor_every_scheme, nonfinite_on_some_ranks,
                 feedback_over_steps,
                 powersgd_end_to_end, nonblocking, refusals_and_mismatches, pipelined):
        chk.run(part.__name__, part, chk)
    chk.finish()


if __name__ == "__main__":
    main()
