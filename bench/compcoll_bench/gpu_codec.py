"""Device codec speed on one GPU, side by side with torch in the same run (medians).

* 8-bit quantize + dequantize with error feedback of a float32 buffer (default 256 MB):
  the residual is added, the sum quantized, the residual set to what was not sent, the codes
  decoded (``compressors.cuda``), against ``torch.clone`` of the same buffer;
* exact top-k of 1% (and 0.1%) of 64M floats (``compressors.cuda.topk``) against
  ``torch.topk`` on the same data, with the index sets compared;
* the same codecs' results against the C++ kernels on a slice (bit for bit).

Writes ``compcoll-results/gpu_codec.{txt,json}`` (``--out`` names another path without its
suffix; the committed summary: ``--out bench/results/gpu/gpu_codec``) with the command line inside.
Needs CuPy, torch with CUDA and a GPU; without them it says so and exits with status 2.

Run: ``python -m compcoll_bench.gpu_codec [--mb 256] [--topk-n 67108864] [--repeats 20]``
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path("compcoll-results")  # under the current directory, created


def median_ms(fn: Callable[[], Any], sync: Callable[[], None], repeats: int) -> float:
    fn()  # warm-up: compilation, allocator
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def quantize_feedback(cuda: Any, cupy: Any, x: Any, residual: Any, bits: int,
                      bucket: int) -> Any:
    """One error-feedback step: codes of x + residual, residual = what they miss; returns
    the decoded values (what the receivers add)."""
    c = x + residual
    codes, mins, scales = cuda.quantize(c, bits, bucket, 7, True)
    decoded = cuda.dequantize(codes, mins, scales, c.size, bits, bucket)
    cupy.subtract(c, decoded, out=residual)
    return decoded


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=256, help="quantize buffer size in MB")
    ap.add_argument("--topk-n", type=int, default=64 << 20, help="top-k input elements")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default=str(OUT / "gpu_codec"), help="result path without suffix")
    args = ap.parse_args()
    try:
        import cupy
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
    except (ImportError, RuntimeError) as exc:
        print(f"gpu_codec: needs CuPy, torch with CUDA and a GPU ({exc})", file=sys.stderr)
        return 2
    from compressors import cuda, kernels
    from compressors.cuda import topk as cuda_topk

    sync = torch.cuda.synchronize
    rows: list[dict[str, Any]] = []
    n = args.mb * (1 << 20) // 4
    x = torch.randn(n, device="cuda")
    xc = cupy.asarray(x)  # shares the memory (__cuda_array_interface__)
    residual = cupy.zeros(n, cupy.float32)
    clone = median_ms(lambda: x.clone(), sync, args.repeats)
    quant = median_ms(lambda: quantize_feedback(cuda, cupy, xc, residual, 8, 512), sync,
                      args.repeats)
    rows.append({"what": f"8-bit quantize+dequantize with error feedback, {args.mb} MB",
                 "ours_ms": quant, "torch_ms": clone, "torch_op": "clone",
                 "ratio_ours_over_torch": quant / clone, "target": "<= 2.0"})

    m = args.topk_n
    y = torch.randn(m, device="cuda")
    yc = cupy.asarray(y)
    for share in (0.01, 0.001):
        k = max(1, int(m * share))
        ours = median_ms(lambda k=k: cuda_topk.topk(yc, k), sync, args.repeats)
        theirs = median_ms(lambda k=k: torch.topk(y.abs(), k, sorted=False), sync, args.repeats)
        same = bool(np.array_equal(np.sort(cuda_topk.topk(yc, k).get()),
                                   np.sort(torch.topk(y.abs(), k).indices.cpu().numpy())))
        rows.append({"what": f"exact top-k {share:.1%} of {m} floats", "ours_ms": ours,
                     "torch_ms": theirs, "torch_op": "topk(abs)",
                     "speedup_over_torch": theirs / ours, "same_index_set": same,
                     "target": ">= 5.0x" if share == 0.01 else "-"})

    s = np.random.default_rng(3).standard_normal(1 << 20).astype(np.float32)
    nb = s.size // 512
    codes, mins, scales = (np.zeros(s.size, np.uint8), np.zeros(nb, np.float32),
                           np.zeros(nb, np.float32))
    kernels.quantize(s, codes, mins, scales, 8, 512, 7, True)
    dc, dm, ds = cuda.quantize(cupy.asarray(s), 8, 512, 7, True)
    exact = {"quantize codes": bool(np.array_equal(dc.get(), codes)),
             "quantize mins/scales": bool(np.array_equal(dm.get(), mins) and
                                          np.array_equal(ds.get(), scales)),
             "top-k 1% indices": bool(np.array_equal(
                 cuda_topk.topk(cupy.asarray(s), s.size // 100).get(),
                 kernels.topk_indices(s, s.size // 100)))}

    command = "python " + shlex.join(sys.argv)
    lines = [f"# gpu codec: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
             f"cupy {cupy.__version__}, medians of {args.repeats}",
             f"# command: {command}"]
    for r in rows:
        ratio = r.get("ratio_ours_over_torch")
        tail = f"ours/torch {ratio:.2f}x" if ratio is not None else \
            f"torch/ours {r['speedup_over_torch']:.2f}x, same set: {r['same_index_set']}"
        lines.append(f"{r['what']:<58} ours {r['ours_ms']:8.3f} ms  torch {r['torch_op']} "
                     f"{r['torch_ms']:8.3f} ms  {tail}  (target {r['target']})")
    lines.append("bit for bit against the C++ kernels: " +
                 ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in exact.items()))
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".txt").write_text(text + "\n")
    out.with_suffix(".json").write_text(json.dumps(
        {"command": command, "device": torch.cuda.get_device_name(0), "rows": rows,
         "bit_exact": exact}, indent=1) + "\n")
    return 0 if all(exact.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
