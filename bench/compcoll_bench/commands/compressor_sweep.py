"""Compressor benchmark: throughput, compression ratio and error, plus kernel side-by-sides.

Run: ``compcoll bench compressors`` (or ``python -m compcoll_bench.commands.compressor_sweep``): it
writes ``compcoll-results/compressors.json`` and a Markdown table beside it, unless ``--out``
says where (the committed summary: ``--out bench/results/compressors/compressors.json``).
Throughput is GB/s of float32 input, median over repeats, with preallocated outputs (payload
buffers reused through ``compress(out=)``, ``decompress(out=)``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import compressors
from compressors import kernels

from ..registry import UsageError
from . import noise
from .checks import output_file, output_path

SPECS = ["none", "fp16", "bf16", "uniform:bits=8", "uniform:bits=4", "uniform:bits=2",
         "uniform:bits=8,stochastic=false", "qsgd:levels=127", "terngrad", "sign",
         "topk:ratio=0.01", "topk:ratio=0.01,approximate=true", "randomk:ratio=0.01",
         "threshold:tau=2.5", "powersgd:rank=4"]


def call_times(fn: Callable[[], Any], repeats: int) -> np.ndarray:
    """Seconds of each of ``repeats`` calls of ``fn``, after one untimed call."""
    fn()  # warm-up: first-touch page faults and lazy allocations stay out of the timing
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return np.array(times)


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    return float(np.median(call_times(fn, repeats)))


def _speedup(base: np.ndarray, ours: np.ndarray) -> tuple[float, bool | None]:
    """The median of ``base`` over the median of ``ours``, and whether it is within the noise
    of the two (``noise.within_noise``)."""
    ratio = float(np.median(base) / np.median(ours))
    return ratio, noise.within_noise(ratio, noise.spread(base), noise.spread(ours))


def paired_times(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Seconds per repeat of each function, run in turn within every repeat.

    The machine may be shared: interleaving makes a change of load hit every function alike,
    so ratios taken within one repeat are steadier than ratios of separate medians.
    """
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {key: [] for key in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    return times


def gaussian(n: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(n, dtype=np.float32)


def real_gradients(n: int) -> tuple[np.ndarray, str] | None:
    """Gradients of a small MLP on sklearn's digits, tiled to n values, and a line saying so.

    None when scikit-learn or torch is missing. The digits ship with scikit-learn (no
    download); the model is trained for a few steps so the gradients are not those of a
    random initialisation.
    """
    try:
        import torch
        from sklearn.datasets import load_digits
    except ImportError:
        return None
    data = load_digits()
    xs = torch.tensor(data.data, dtype=torch.float32) / 16
    ys = torch.tensor(data.target)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 5
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xs), ys).backward()
        opt.step()
    g = np.concatenate([p.grad.numpy().ravel() for p in model.parameters()])
    note = (f"MLP 64-512-10 on sklearn digits after {steps} SGD steps: {g.size} gradient values, "
            f"tiled {n / g.size:.1f}x to {n}")
    return np.resize(g, n).astype(np.float32), note


def as_input(spec: str, x: np.ndarray) -> np.ndarray:
    # PowerSGD needs a matrix: rows of 1024 values, as a flattened layer would be viewed.
    return x.reshape(-1, 1024) if spec.startswith("powersgd") and x.size % 1024 == 0 else x


def bench_compressor(spec: str, x: np.ndarray, threads: int, repeats: int) -> dict[str, Any]:
    c = compressors.get(spec)
    xi = as_input(spec, x)
    kernels.set_num_threads(threads)
    p = c.compress(xi, name="bench", step=0)
    out = np.empty_like(xi)
    tc = median_time(lambda: c.compress(xi, name="bench", step=0, out=p), repeats)
    td = median_time(lambda: c.decompress(p, out=out), repeats)
    diff = out.ravel().astype(np.float64) - x
    err = float(np.linalg.norm(diff) / max(np.linalg.norm(x.astype(np.float64)), 1e-30))
    gb = x.nbytes / 1e9
    return {"compressor": spec, "numel": x.size, "threads": threads,
            "compress_gbps": gb / tc, "decompress_gbps": gb / td,
            "compress_ms": tc * 1e3, "decompress_ms": td * 1e3,
            "ratio": x.nbytes / max(p.nbytes, 1), "rel_error": err}


#: Compress + decompress round trips timed against a plain copy in the side-by-side.
ROUNDTRIP_SPECS = ["uniform:bits=8", "uniform:bits=8,stochastic=false", "uniform:bits=4", "sign"]


def side_by_side(x: np.ndarray, threads: int, repeats: int) -> dict[str, Any]:
    import torch

    kernels.set_num_threads(threads)
    torch.set_num_threads(threads)
    n, k = x.size, x.size // 100
    xt = torch.from_numpy(x)
    t_torch = call_times(lambda: torch.topk(xt.abs(), k, sorted=False), max(1, repeats // 2))
    ref = np.sort(torch.topk(xt.abs(), k, sorted=False).indices.numpy())
    t_exact = call_times(lambda: kernels.topk_indices(x, k), repeats)
    same = bool(np.array_equal(kernels.topk_indices(x, k), ref))
    t_sampled = call_times(lambda: kernels.topk_sampled_indices(x, k, 1), repeats)
    recall = np.intersect1d(kernels.topk_sampled_indices(x, k, 1), ref).size / k
    dst = torch.empty_like(xt)
    res: dict[str, Any] = {"numel": n, "threads": threads, "k": k,
                           "exact_same_indices": same, "sampled_recall": recall}
    for key, t in (("torch_topk", t_torch), ("exact_topk", t_exact), ("sampled_topk", t_sampled)):
        res[f"{key}_ms"], res[f"{key}_spread"] = float(np.median(t)) * 1e3, noise.spread(t)
    res["exact_speedup"], res["exact_speedup_noisy"] = _speedup(t_torch, t_exact)
    res["sampled_speedup"], res["sampled_speedup_noisy"] = _speedup(t_torch, t_sampled)
    # torch copies into a preallocated tensor with the same threads: the memory-bound floor.
    fns: dict[str, Callable[[], Any]] = {"copy": lambda: dst.copy_(xt)}
    for spec in ROUNDTRIP_SPECS:
        c = compressors.get(spec)
        p = c.compress(x, name="b", step=0)
        out = np.empty_like(x)
        fns[spec] = lambda c=c, p=p, out=out: (c.compress(x, name="b", step=0, out=p),
                                               c.decompress(p, out=out))
    times = paired_times(fns, repeats)
    res["copy_ms"] = float(np.median(times["copy"])) * 1e3
    for spec in ROUNDTRIP_SPECS:
        res[f"{spec} roundtrip_ms"] = float(np.median(times[spec])) * 1e3
        ratios = np.divide(times[spec], times["copy"])
        ratio, spread = float(np.median(ratios)), noise.spread(ratios)
        res[f"{spec} vs_copy"], res[f"{spec} vs_copy_spread"] = ratio, spread
        # paired within a repeat, the ratios' own spread holds the noise of both times
        res[f"{spec} vs_copy_noisy"] = noise.within_noise(ratio, spread, 0.0)
    return res


def _mark(noisy: bool | None, markdown: bool = False) -> str:
    """The flag of a ratio within the noise (escaped in Markdown, where ``~`` may strike)."""
    if not noisy:
        return ""
    return f"\\{noise.FLAG}" if markdown else noise.FLAG


def markdown(result: dict[str, Any]) -> str:
    lines = ["# Compressor benchmark", "", f"Machine: {result['machine']}", "", "Inputs:", ""]
    lines += [f"- {line}" for line in result.get("inputs", [])]
    lines += ["",
             "| input | numel | compressor | threads | compress GB/s | decompress GB/s | ratio "
             "| rel. error |", "|---|---|---|---|---|---|---|---|"]
    for r in result["compressors"]:
        lines.append(f"| {r['input']} | {r['numel']} | `{r['compressor']}` | {r['threads']} | "
                     f"{r['compress_gbps']:.2f} | {r['decompress_gbps']:.2f} | {r['ratio']:.1f} | "
                     f"{r['rel_error']:.3g} |")
    numel = result["side_by_side"][0]["numel"] if result["side_by_side"] else 0
    lines += ["", f"## Side by side ({numel} float32 Gaussian values, k = 1%)", "",
              "Round trip (rt) = compress + decompress into preallocated buffers; rt/copy is the "
              "median over repeats of its time over a torch copy of the input timed in the same "
              f"repeat, with the same threads. Each time is the median of {result['repeats']} "
              "timed calls (torch.topk's of half as many); a speedup or rt/copy ending in "
              f"{_mark(True, markdown=True)} is within the noise: |ratio - 1| is smaller than "
              "the spread (interquartile range over median) of either time, or for rt/copy of "
              "the per-repeat ratios.", "",
              "| threads | torch.topk ms | exact ms | speedup | same set | sampled ms | speedup "
              "| recall | copy ms | "
              + " | ".join(f"`{spec}` rt/copy" for spec in ROUNDTRIP_SPECS) + " |",
              "|---" * (9 + len(ROUNDTRIP_SPECS)) + "|"]
    for s in result["side_by_side"]:
        lines.append(
            f"| {s['threads']} | {s['torch_topk_ms']:.1f} | {s['exact_topk_ms']:.1f} | "
            f"{s['exact_speedup']:.1f}x{_mark(s['exact_speedup_noisy'], True)} | "
            f"{s['exact_same_indices']} | {s['sampled_topk_ms']:.1f} | "
            f"{s['sampled_speedup']:.1f}x{_mark(s['sampled_speedup_noisy'], True)} | "
            f"{s['sampled_recall']:.3f} | {s['copy_ms']:.1f} | "
            + " | ".join(f"{s[f'{spec} vs_copy']:.2f}{_mark(s[f'{spec} vs_copy_noisy'], True)}"
                         for spec in ROUNDTRIP_SPECS) + " |")
    if result.get("skipped"):
        lines += ["", "Skipped: " + "; ".join(result["skipped"])]
    return "\n".join(lines) + "\n"


#: Where results go unless ``--out`` says otherwise (under the current directory, created).
DEFAULT_OUT = Path("compcoll-results") / "compressors.json"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The benchmark's options (``compcoll bench compressors`` and ``python -m
    compcoll_bench.commands.compressor_sweep``)."""
    ap.add_argument("--out", type=output_file, metavar="PATH",
                    help="JSON result file; a Markdown table is written beside it (.md). "
                         f"Default: {DEFAULT_OUT} (the folder is created)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 20, 1 << 24], metavar="N",
                    help="input sizes in float32 values (default 1048576 16777216); the "
                         "side-by-side uses the largest")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], metavar="T",
                    help="kernel thread counts to time every compressor with (default 1 2)")
    ap.add_argument("--repeats", type=int, default=5, metavar="R",
                    help="timed calls per measurement, the median kept (default 5; at most "
                         "half above 4M values, at least 3)")
    ap.add_argument("--specs", nargs="+", default=SPECS, metavar="SPEC",
                    help="compressor specs to time (default: one of each compressor, e.g. "
                         "uniform:bits=8 topk:ratio=0.01)")


def check(args: argparse.Namespace) -> tuple[Path, Path]:
    """(JSON path, Markdown path) of the run; arguments that cannot work are refused here,
    before anything is timed (:class:`~compcoll_bench.registry.UsageError`). The default output
    folder is created."""
    if min(args.sizes) < 1 or min(args.threads) < 1 or args.repeats < 1:
        raise UsageError("--sizes, --threads and --repeats take integers >= 1")
    for spec in args.specs:
        try:
            compressors.get(spec)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"--specs {spec}: {exc}") from None
    out = Path(args.out) if args.out else DEFAULT_OUT
    if not args.out:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create {out.parent} for the results ({exc}); give "
                             "--out PATH") from None
    md = out.with_suffix(".md")
    for path in (out, md):
        output_path(str(path), "--out")
    return out, md


def describe(s: dict[str, Any]) -> str:
    """One line of the side-by-side: top-k against torch.topk, and the copy it is timed with."""
    return (f"side by side, {s['numel']} values, {s['threads']} thread(s): torch.topk "
            f"{s['torch_topk_ms']:.2f} ms; exact top-k {s['exact_topk_ms']:.2f} ms "
            f"({s['exact_speedup']:.1f}x{_mark(s['exact_speedup_noisy'])}, same set: "
            f"{s['exact_same_indices']}); sampled {s['sampled_topk_ms']:.2f} ms "
            f"({s['sampled_speedup']:.1f}x{_mark(s['sampled_speedup_noisy'])}, recall "
            f"{s['sampled_recall']:.3f}); copy {s['copy_ms']:.2f} ms")


def run(args: argparse.Namespace) -> int:
    """Time every compressor (see the module doc) and write the JSON and Markdown results."""
    out, md = check(args)
    result: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, "
                   f"python {sys.version.split()[0]}, openmp={kernels.OPENMP}",
        "repeats": args.repeats, "compressors": [], "side_by_side": [], "skipped": [],
        "inputs": ["gaussian: standard normal float32, seed 0"]}
    for n in args.sizes:
        inputs = {"gaussian": gaussian(n)}
        real = real_gradients(n)
        if real is None:
            result["skipped"].append("real gradients (scikit-learn or torch is not installed)")
        else:
            inputs["mlp-digits"] = real[0]
            result["inputs"].append(real[1])
            print(real[1], flush=True)
        for label, x in inputs.items():
            for spec in args.specs:
                for th in args.threads:
                    reps = args.repeats if n <= 1 << 22 else max(3, args.repeats // 2)
                    r = bench_compressor(spec, x, th, reps)
                    r["input"] = label
                    result["compressors"].append(r)
                    print(f"{label:10s} {n:>9d} {spec:34s} t={th} "
                          f"C {r['compress_gbps']:6.2f} GB/s  D {r['decompress_gbps']:6.2f} GB/s  "
                          f"ratio {r['ratio']:7.1f}  err {r['rel_error']:.3g}", flush=True)
    big = gaussian(max(args.sizes))
    for th in args.threads:
        s = side_by_side(big, th, args.repeats)
        result["side_by_side"].append(s)
        print(describe(s), flush=True)
    kernels.set_num_threads(1)
    result["skipped"] = sorted(set(result["skipped"]))
    out.write_text(json.dumps(result, indent=1) + "\n")
    md.write_text(markdown(result))
    print(f"wrote {out} and {md.name} beside it")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    args = ap.parse_args(argv)
    try:
        return run(args)
    except UsageError as exc:
        ap.error(str(exc))


if __name__ == "__main__":
    raise SystemExit(main())
