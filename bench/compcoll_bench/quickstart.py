"""``make bench``'s compressed part: compressed allreduce where compression pays, across hosts.

On one machine's shared memory moving a byte costs about what compressing it does, so the
shared-memory sweep shows the algorithms, not compression. Across a slower link compression
pays. Where this machine can emulate hosts (root, ``ip``, ``tc`` and ``unshare``:
``emulate.check_host``, then a network namespace made and removed), this runs::

    compcoll bench compressed -np N --link RATE -s SIZE --json DIR/compressed_link<R>_np<N>.json

and writes its table beside it (``.txt``). Elsewhere it prints in one line why not, and the
cost model's forecast for that link (``compcoll model``, into ``..._forecast.{txt,json}``).

    python -m compcoll_bench.quickstart [-np N] [--link RATE] [--latency TIME] [-s SIZE]
                                        [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from . import emulate
from .commands import checks
from .commands.benchlib import parse_size

#: The compressors timed or forecast (each priced by the cost model: a fixed wire size).
COMPRESSORS = ["uniform:bits=8", "uniform:bits=4", "topk:ratio=0.01"]


def blocker() -> str | None:
    """Why hosts cannot be emulated here (None: they can): a tool or root missing
    (``emulate.check_host``), or a network namespace that cannot be created."""
    try:
        emulate.check_host()
    except RuntimeError as exc:
        return str(exc)
    name = f"{emulate.PREFIX}{os.getpid()}-0"  # ``compcoll emulate cleanup`` knows the name
    try:
        made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"'ip netns add' did not run ({exc})"
    if made.returncode != 0:
        return (f"'ip netns add' failed ({made.stderr.strip() or 'no message'}): this "
                f"container or kernel does not allow network namespaces")
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)
    return None


def stem(args: argparse.Namespace) -> str:
    """``compressed_link1g_np4``: the name of this run's files, as the curated results'."""
    return f"compressed_link{args.link.strip().lower().removesuffix('bit')}_np{args.np}"


def measure(args: argparse.Namespace, out: Path) -> int:
    """Run ``bench compressed`` across emulated hosts; its table goes to the terminal and to
    ``.txt`` (headed by the command), its rows to ``.json``."""
    argv = ["bench", "compressed", "-np", str(args.np), "--link", args.link,
            "-s", str(args.size), "--json", str(out / f"{stem(args)}.json")]
    print(f"# compcoll {' '.join(argv)}", flush=True)
    proc = subprocess.Popen([sys.executable, "-m", "compcoll_bench", *argv],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = [f"# command: compcoll {' '.join(argv)}"]
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line.rstrip("\n"))
    code = proc.wait()
    (out / f"{stem(args)}.txt").write_text("\n".join(lines) + "\n")
    return code


def forecast(args: argparse.Namespace, out: Path) -> int:
    """The cost model's forecast for ``args.np`` hosts behind ``args.link`` (``compcoll
    model``), printed and written, with one line of each compressor's speed-up."""
    from .cli import main

    name = out / f"{stem(args)}_forecast"
    argv = ["model", "--nodes", str(args.np), "--link", args.link, "--latency", args.latency,
            "--size", str(args.size), "--json", f"{name}.json", "--compressor", "none"]
    for spec in COMPRESSORS:
        argv += ["--compressor", spec]
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        code = main(argv)
    if code != 0:
        return code
    report = f"# compcoll {' '.join(argv)}\n{text.getvalue()}{speedups(f'{name}.json')}\n"
    name.with_suffix(".txt").write_text(report)
    print(report, end="")
    return 0


def speedups(path: str) -> str:
    """One line: each compressor's predicted speed-up over the best dense allreduce."""
    with open(path) as f:
        block = json.load(f)["nodes"][0]
    dense = min(a["time_s"] for a in block["algorithms"].values())
    each = [f"{c['compressor']} {dense / c['time_s']:.1f}x" for c in block["compressors"]
            if c["compressor"] != "none" and c["time_s"]]
    return (f"# forecast: compressed allreduce against the best dense one ({dense * 1e3:.0f} "
            f"ms), codec time included: {', '.join(each)}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m compcoll_bench.quickstart",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("-np", dest="np", type=checks.positive_int, default=4,
                   help="ranks, one per emulated host (default 4)")
    p.add_argument("--link", default="1gbit", help="link rate of each host (default 1gbit)")
    p.add_argument("--latency", default="120us",
                   help="alpha of the forecast (default 120us, as fitted on the emulated "
                        "1 Gbit/s link)")
    p.add_argument("-s", "--size", type=parse_size, default=parse_size("64M"),
                   help="float32 buffer bytes (default 64M)")
    p.add_argument("--out", default="compcoll-results", help="folder of the result files")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.np < 2:
        p.error(f"-np {args.np}: hosts need at least 2 ranks to exchange anything; give -np 2 "
                "or more")
    try:
        emulate.parse_rate(args.link)
        emulate.parse_duration(args.latency)
    except ValueError as exc:
        p.error(str(exc))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    why = blocker()
    if why is None:
        return measure(args, out)
    print(f"# compressed allreduce across emulated hosts skipped: {why}")
    print(f"# instead, the cost model's forecast for {args.np} hosts at {args.link} (as root: "
          f"the same run, measured):", flush=True)
    return forecast(args, out)


if __name__ == "__main__":
    raise SystemExit(main())
