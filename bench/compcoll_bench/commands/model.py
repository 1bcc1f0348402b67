"""``compcoll model``: what the cost model predicts for a cluster that is not here.

Give the link (``--link 100gbit``: beta = 8 / rate) and the per-message latency
(``--latency 2us``: alpha), or ``--fitted`` to probe this machine's communicator instead (under
``-np N``) so the forecast can be held against ``compcoll bench allreduce``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from collectives import costmodel, defaults

from .. import emulate, forecast
from ..registry import UsageError, command
from . import checks
from .benchlib import bus_bandwidth, parse_size
from .launch import LAUNCHER_VARS, relaunch
from .model_report import text

COMPRESSORS = ["none", "fp16", "uniform:bits=8", "sign", "topk:ratio=0.01",
               "randomk:ratio=0.01", "powersgd:rank=4"]
_ITEMSIZE = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2}


def parse_count(text: str) -> int:
    """A parameter count: ``25.6M``, ``7B``, ``350K`` (powers of 1000, as models are sized)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMbBgG]?)\s*", text)
    if m is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a parameter count; use e.g. 25.6M, 7B")
    scale = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", default="16,256,4096",
                   help="comma-separated node counts (default 16,256,4096; with --fitted: -np)")
    p.add_argument("--link", default="100gbit", help="link rate per node (default 100gbit)")
    p.add_argument("--latency", default="2us", help="latency per message, alpha (default 2us)")
    p.add_argument("--gamma", type=checks.nonneg_float, metavar="S_PER_BYTE",
                   help="reduction seconds per byte (default: the kernel timed here)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--size", type=parse_size, help="gradient bytes (K/M/G: powers of 1024)")
    size.add_argument("--params", type=parse_count, help="parameter count (e.g. 25.6M, 7B)")
    p.add_argument("--sweep", metavar="SIZES",
                   help="also tabulate predicted times at these sizes (e.g. 1M,4M,16M,64M)")
    p.add_argument("--dtype", default="float32", choices=sorted(_ITEMSIZE),
                   help="gradient dtype with --params (default float32)")
    p.add_argument("--segment", type=parse_size, help="pipeline segment bytes (default: "
                   "collectives.defaults.segment_bytes)")
    p.add_argument("--compressor", action="append", metavar="SPEC",
                   help=f"price this compressor (repeatable; default {' '.join(COMPRESSORS)}; "
                        "'--compressor none' alone prices only the dense case)")
    p.add_argument("--compress-gbps", type=checks.positive_float, metavar="GBPS",
                   help="encode and decode rate, GB/s of float32 input (default: each "
                        "compressor timed here on 1M floats)")
    p.add_argument("--fitted", action="store_true",
                   help="fit alpha, beta, gamma on this machine's communicator (use -np N)")
    p.add_argument("--compare", metavar="BENCH_JSON",
                   help="set each algorithm's prediction beside the times of a 'bench allreduce "
                        "--json' file (its sizes; its rank count must be among the nodes)")
    p.add_argument("--json", metavar="PATH", type=checks.output_file_or_stdout,
                   help="write the forecast as JSON ('-': stdout)")
    p.add_argument("-np", dest="np", type=checks.positive_int, metavar="N",
                   help="ranks for --fitted")


def _params(args: argparse.Namespace) -> tuple[costmodel.CostParams, list[int], str]:
    if args.fitted:
        from collectives import as_communicator

        comm = as_communicator(None)
        if comm.size < 2:
            raise UsageError("--fitted needs at least 2 ranks to fit alpha and beta; add -np N "
                             "with N >= 2")
        c = costmodel.fit(comm)
        nodes = sorted({comm.size, *_nodes(args.nodes)}) if args.nodes != "16,256,4096" \
            else [comm.size]
        return c, nodes, f"fitted on {comm.size} ranks here"
    rate, alpha = _link(args)
    gamma = args.gamma if args.gamma is not None else costmodel.measure_gamma()
    return (costmodel.CostParams(alpha, 8.0 / rate, gamma), _nodes(args.nodes),
            f"link {args.link}, latency {args.latency}")


def _link(args: argparse.Namespace) -> tuple[float, float]:
    """(bits per second, alpha seconds) of ``--link`` and ``--latency``."""
    try:
        return emulate.parse_rate(args.link), emulate.parse_duration(args.latency)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _nodes(text: str) -> list[int]:
    try:
        nodes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--nodes wants integers like 16,256,4096, got {text!r}") from None
    if not nodes or min(nodes) < 2:
        raise UsageError(f"--nodes needs counts >= 2, got {text!r}")
    return nodes


def check(args: argparse.Namespace) -> None:
    """Refuse, before anything is probed or timed, every argument that cannot work."""
    if args.np is not None and not args.fitted:
        raise UsageError("-np only applies with --fitted (a forecast runs nowhere)")
    if args.fitted and (args.np or 1) < 2 and not any(v in os.environ for v in LAUNCHER_VARS):
        raise UsageError("--fitted fits alpha and beta on this machine's ranks; add -np N "
                         "with N >= 2")
    if not args.fitted or args.nodes != "16,256,4096":
        _nodes(args.nodes)
    if not args.fitted:
        _link(args)
    for option, value in (("--size", args.size), ("--params", args.params),
                          ("--segment", args.segment)):
        if value is not None and value < 1:
            raise UsageError(f"{option} must be at least 1, got {value}")
    for spec in args.compressor or ():
        checks.compressor(spec)
    _sweep(args.sweep)
    bench = _load_bench(args.compare)
    if bench is not None and not (args.fitted and args.np is None):  # else: after the fit
        custom = not args.fitted or args.nodes != "16,256,4096"
        nodes = {*(_nodes(args.nodes) if custom else ()), *([args.np] if args.fitted else [])}
        if bench["ranks"] not in nodes:
            raise UsageError(f"--compare: the bench ran on {bench['ranks']} ranks; forecast "
                             f"them too (--nodes {bench['ranks']}, or --fitted -np "
                             f"{bench['ranks']})")


def build(args: argparse.Namespace) -> dict[str, Any]:
    """The forecast as one JSON-able document."""
    c, nodes, source = _params(args)
    nbytes = args.size or (args.params or 25_600_000) * _ITEMSIZE[args.dtype]
    seg = args.segment or defaults.segment_bytes
    specs = args.compressor or COMPRESSORS
    bench = _load_bench(args.compare)
    sweep = _sweep(args.sweep) or sorted({r["size"] for r in bench["rows"]} if bench else ())
    doc: dict[str, Any] = {
        "source": source, "alpha_s": c.alpha, "beta_s_per_byte": c.beta,
        "gamma_s_per_byte": c.gamma, "segment_bytes": seg, "size": nbytes, "nodes": []}
    rates = {}
    for spec in specs:
        gbps = args.compress_gbps
        rates[spec] = (forecast.CodecRates(gbps * 1e9, gbps * 1e9) if gbps
                       else forecast.measure_codec(spec))
    doc["codec_gbps"] = {s: {"compress": r.compress / 1e9, "decompress": r.decompress / 1e9}
                         for s, r in rates.items()}
    for p in nodes:
        algos = {a: costmodel.predict(a, p, nbytes, c, seg) for a in costmodel.MODELED}
        auto, _ = forecast.best(p, nbytes, c, seg)
        doc["nodes"].append({
            "nodes": p, "auto": auto,
            "algorithms": {a: {"time_s": t, "busbw_GBps": bus_bandwidth(nbytes / t / 1e9, p)}
                           for a, t in algos.items()},
            "crossovers": forecast.crossovers(p, c, segment=seg),
            "compressors": [forecast.price_compressor(s, p, nbytes, c, rates[s], seg)
                            for s in specs],
            "sweep": [{"size": n, "auto": forecast.best(p, n, c, seg)[0],
                       "time_us": {a: costmodel.predict(a, p, n, c, seg) * 1e6
                                   for a in costmodel.MODELED}} for n in sweep]})
    if bench:
        doc["compare"] = compare(doc, bench)
        doc["compare_source"] = " ".join(bench.get("command", [args.compare]))
    return doc


def _load_bench(path: str | None) -> dict[str, Any] | None:
    if not path:
        return None
    try:
        with open(path) as f:
            bench = json.load(f)
        {(r["size"], r["algo"], r["time_us"]) for r in bench["rows"]} | {bench["ranks"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--compare {path}: not a bench allreduce JSON ({exc}); give the "
                         "file 'compcoll bench allreduce --json' wrote") from None
    return bench


def compare(doc: dict[str, Any], bench: dict[str, Any]) -> list[dict[str, Any]]:
    """Predicted against measured time for every modeled row of a bench run (error in %)."""
    p = bench["ranks"]
    block = next((b for b in doc["nodes"] if b["nodes"] == p), None)
    if block is None:
        raise UsageError(f"--compare: the bench ran on {p} ranks; forecast them too "
                         f"(--nodes {p}, or --fitted -np {p})")
    predicted = {r["size"]: r["time_us"] for r in block["sweep"]}
    rows = []
    for r in bench["rows"]:
        algo = r.get("auto_choice") or r["algo"]
        if algo in costmodel.MODELED and r["size"] in predicted:
            model = predicted[r["size"]][algo]
            rows.append({"size": r["size"], "algo": r["algo"], "modeled": algo,
                         "measured_us": r["time_us"], "model_us": model,
                         "error_pct": (model - r["time_us"]) / r["time_us"] * 100})
    return rows


def _sweep(text: str | None) -> list[int]:
    try:
        sizes = [parse_size(x) for x in (text or "").split(",") if x.strip()]
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"--sweep: {exc}") from None
    if 0 in sizes:
        raise UsageError(f"--sweep sizes must be at least 1 byte, got {text!r}")
    return sizes


@command("model", arguments=_arguments)
def run(args: argparse.Namespace) -> int:
    check(args)
    if args.fitted:
        code = relaunch(args.np, args.argv)
        if code is not None:
            return code
    doc = build(args)
    if args.fitted:
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() != 0:
            return 0
    if args.json == "-":
        json.dump(doc, sys.stdout, indent=1)
        print()
        return 0
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    print(text(doc))
    return 0
