"""``compcoll bench compressed``: compressed allreduce against MPI_Allreduce, side by side.

For one buffer size, times MPI_Allreduce of the float32 buffer, our best dense algorithms, and
each compressor (with error feedback) through the scheme its capabilities pick, all in one
run. Effective bandwidth counts the uncompressed bytes, so it compares directly with
MPI_Allreduce's; the time is split into compress / communicate / decompress, and the bytes
each rank sent are printed next to the model's prediction.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from collectives import pricing
from collectives.compressed.checks import HIERARCHIES

from ..registry import UsageError, command
from . import bench_report as report
from . import checks, noise
from . import emulate as emulated
from .benchlib import Timing, bus_bandwidth, comment, parse_size, time_calls
from .launch import relaunch

DEFAULT = ["uniform:bits=8", "uniform:bits=4", "topk:ratio=0.01",
           "topk:ratio=0.01,approximate=true"]


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-s", "--size", type=parse_size, default=parse_size("64M"),
                   help="float32 buffer size in bytes (default 64M)")
    p.add_argument("--compressor", action="append", metavar="SPEC",
                   help=f"compressor spec, repeatable (default: {' '.join(DEFAULT)})")
    p.add_argument("--scheme", default="auto", help="scheme for every compressor (default auto)")
    p.add_argument("--hierarchy", default="auto",
                   help="comma-separated of auto, flat, two_level: a row per compressor and "
                        "hierarchy (flat and two_level side by side on hosts of several "
                        "ranks; default auto)")
    p.add_argument("--no-feedback", action="store_true", help="compress without error feedback")
    p.add_argument("--without-out", action="store_true",
                   help="also time each compressed call without out= (the result a new "
                        "array each call, dropped before the next), beside the same call "
                        "with out=")
    p.add_argument("-n", "--iters", type=checks.positive_int, default=5,
                   help="timed calls per row (5)")
    p.add_argument("-w", "--warmup", type=checks.count_int, default=2,
                   help="untimed calls first (2)")
    p.add_argument("-np", type=checks.positive_int, dest="np",
                   help="launch N ranks with mpiexec")
    p.add_argument("--json", metavar="PATH", type=checks.output_file,
                   help="write the rows and the command as JSON")
    p.add_argument("--txt", metavar="PATH", type=checks.output_file,
                   help="also write the tables, after the command line, to PATH")
    emulated.add_link_arguments(p)


def _check(args: argparse.Namespace, specs: list[str]) -> None:
    """Refuse, before any rank starts, every argument that cannot work."""
    import compressors
    from collectives.compressed import check_scheme

    if args.size < 4:
        raise UsageError(f"-s {args.size}: the buffer holds float32 values; give at least 4 "
                         "bytes (e.g. -s 64M)")
    checks.scheme(args.scheme)
    args.hierarchy = checks.names(args.hierarchy, "--hierarchy", HIERARCHIES)
    for spec in specs:
        checks.compressor(spec)
        try:
            check_scheme(args.scheme, compressors.get(spec))
        except ValueError as exc:
            raise UsageError(f"--compressor {spec}: {exc}") from None
    emulated.check_arguments(args)


def _row(name: str, scheme: str, t: Timing, nbytes: int, p: int, t_mpi: float, **extra: Any
         ) -> dict[str, Any]:
    return {"name": name, "scheme": scheme, "time_s": t.median, "iters": t.calls,
            "spread": t.spread, "eff_busbw_GBps": bus_bandwidth(nbytes / t.median, p) / 1e9,
            "vs_mpi": t_mpi / t.median, **extra}


def _flag(rows: list[dict[str, Any]]) -> None:
    """Mark each row's ``vs MPI`` within the noise or not (``noise.flags``; the first row is
    MPI_Allreduce)."""
    marks = noise.flags([r["time_s"] for r in rows], [r["spread"] for r in rows])
    for row, noisy in zip(rows, marks, strict=True):
        row["noisy"] = noisy


def _tables(rows: list[dict[str, Any]]) -> list[str]:
    """The rows as two tables within ``benchlib.WIDTH`` columns: time, its spread and
    bandwidth of every run (a ratio within the spread flagged, ``noise``), then the compressed
    runs' time split and bytes (MiB each rank sent, and the model's
    prediction of them)."""
    name = max(len("run"), *(len(r["name"]) for r in rows))
    scheme = max(len("scheme"), *(len(r["scheme"]) for r in rows))
    lines = [f"# {'run':<{name - 2}} {'scheme':<{scheme}} {'time(ms)':>9} {'iqr%':>4} "
             f"{'effbusbw':>8} {'vs MPI':>6} {'rel.err':>8} {'x-host MiB':>10} {'/bound':>6}"]
    for r in rows:
        err = f"{r['rel_error']:.2e}" if "rel_error" in r else "-"
        up = f"{r['host_uplink_bytes'] / 2**20:10.2f}" if r.get("host_uplink_bytes") else \
            f"{'-':>10}"
        over = f"{r['time_s'] / r['bound_s']:6.2f}" if r.get("bound_s") else f"{'-':>6}"
        iqr = "-" if r["spread"] is None else noise.percent(r["spread"])
        lines.append(f"{r['name']:<{name}} {r['scheme']:<{scheme}} {r['time_s'] * 1e3:9.1f} "
                     f"{iqr:>4} {r['eff_busbw_GBps']:8.3f} "
                     f"{noise.ratio_cell(r['vs_mpi'], r.get('noisy')):>6} {err:>8} {up} {over}")
    lines.append(noise.summary(rows, "vs MPI"))
    split = [r for r in rows if "compress_s" in r]
    if split:
        lines += ["", f"# {'run':<{name - 2}} {'comp(ms)':>8} {'comm(ms)':>8} {'deco(ms)':>8} "
                  f"{'sent MiB':>8} {'model MiB':>9}"]
        lines += [f"{r['name']:<{name}} {r['compress_s'] * 1e3:8.1f} {r['comm_s'] * 1e3:8.1f} "
                  f"{r['decompress_s'] * 1e3:8.1f} {r['bytes_sent'] / 2**20:8.2f} "
                  f"{r['bytes_predicted'] / 2**20:9.2f}" for r in split]
    return lines


def dense_uplink(algo: str, topo: Any, nbytes: int) -> float | None:
    """Bytes each host's uplink must carry one way in a dense allreduce of ``nbytes`` on
    uniform hosts: a flat ring over contiguous hosts crosses each host boundary with one
    rank's whole traffic, 2(p-1)/p n; two_level sends each host's n/L shards' ring traffic
    across, L * 2(H-1)/H * n/L = 2(H-1)/H n. None on one host or where it is not modeled."""
    h, p = topo.n_hosts, sum(len(x) for x in topo.hosts)
    if h < 2 or not topo.uniform:
        return None
    if algo == "two_level":
        return 2 * (h - 1) / h * nbytes
    if algo == "ring" and topo.contiguous:
        return 2 * (p - 1) / p * nbytes
    return None


def _host_sum(world: Any, topo: Any, mine: int) -> float:
    """The most bytes the ranks of one host sent across hosts (summed over the host)."""
    every = world.allgather(int(mine))
    return float(max(sum(every[r] for r in host) for host in topo.hosts))


def _bound(uplink: float | None, rate: float | None) -> dict[str, float]:
    """The host uplink's bytes and the time they take at the emulated link's rate."""
    if not uplink:
        return {}
    return {"host_uplink_bytes": uplink, **({"bound_s": uplink / rate} if rate else {})}


def _without_out(world: Any, x: np.ndarray, comp: Any, fb: Any, step: list[int],
                 args: argparse.Namespace, hier: str, label: str, scheme: str, t_out: float,
                 t_mpi: float, p: int) -> dict[str, Any]:
    """The same call as the row before it without ``out=``, interleaved with it call by call
    (one with, one without) so both see the same machine; the row keeps both medians."""
    import collectives

    out = np.empty_like(x)

    def call(with_out: bool) -> None:
        step[0] += 1
        collectives.allreduce(x, compressor=comp, feedback=fb, name="grad", step=step[0],
                              scheme=args.scheme, validate=False, hierarchy=hier,
                              **({"out": out} if with_out else {}))

    pairs = [time_calls(world, lambda w=w: call(w), 1, 0 if i else args.warmup).median
             for i in range(args.iters) for w in (True, False)]
    with_out, without = Timing.of(np.array(pairs[0::2])), Timing.of(np.array(pairs[1::2]))
    vs_out = without.median / with_out.median
    return _row(f"{label} no out=", scheme, without, args.size, p, t_mpi,
                with_out_s=with_out.median, vs_out=vs_out, first_row_s=t_out,
                vs_out_noisy=noise.within_noise(vs_out, without.spread, with_out.spread))


def _jsonable(value: Any) -> Any:
    """A number as a float; anything else the JSON cannot hold (a link class) as text."""
    return float(value) if isinstance(value, np.generic | int | float) else repr(value)


@command("bench compressed", arguments=_arguments)
def run(args: argparse.Namespace) -> int:
    specs = args.compressor or DEFAULT
    _check(args, specs)
    if args.link and not emulated.inside():
        return emulated.run_on_cluster(emulated.topology(args), args.argv)
    code = relaunch(args.np, args.argv)
    if code is not None:
        return code
    from mpi4py import MPI

    import collectives
    import compressors
    from collectives import costmodel
    from collectives.compressed.select import measure
    from collectives.topology import topology

    world = MPI.COMM_WORLD
    comm = collectives.as_communicator(None)
    p, n = comm.size, args.size // 4
    x = np.random.default_rng(comm.rank).standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    exact = np.empty_like(x)
    world.Allreduce(x, exact)
    cost = costmodel.params(comm)
    rows: list[dict[str, Any]] = []
    where = emulated.label(args, p)
    if comm.rank == 0:
        print(f"# compcoll bench compressed: {p} ranks{', ' + where if where else ''}, "
              f"{args.size} B float32, {'no ' if args.no_feedback else ''}error feedback, "
              f"{args.iters} iters")
    base = time_calls(world, lambda: world.Allreduce(x, out), args.iters, args.warmup)
    t_mpi = base.median
    rows.append(_row("MPI_Allreduce", "-", base, args.size, p, t_mpi))
    topo = topology(comm)
    rate = emulated.describe(args, p)["rate_bps"] / 8 if args.link else None
    for algo in ("ring", "rabenseifner", "two_level"):
        t = time_calls(world, lambda a=algo: collectives.allreduce(
            x, algorithm=a, out=out, validate=False), args.iters, args.warmup)
        up = dense_uplink(algo, topo, args.size)
        rows.append(_row(f"ours dense {algo}", "-", t, args.size, p, t_mpi,
                         **_bound(up, rate)))
    for spec, hier in [(s, h) for s in specs for h in args.hierarchy]:
        comp = compressors.get(spec)
        fb = None if args.no_feedback else compressors.ErrorFeedback(comp)
        stats: dict[str, Any] = {}
        step = [0]

        def call(comp=comp, fb=fb, stats=stats, step=step, hier=hier) -> None:
            step[0] += 1
            stats.clear()
            collectives.allreduce(x, compressor=comp, feedback=fb, name="grad", step=step[0],
                                  scheme=args.scheme, out=out, validate=False, stats=stats,
                                  hierarchy=hier)

        t = time_calls(world, call, args.iters, args.warmup)
        level = stats.get("hierarchy", "flat")
        up = _host_sum(world, topo, stats["cross_bytes_sent"]) if level == "two_level" else None
        split = np.array([stats["compress_s"], stats["decompress_s"], stats["bytes_sent"]])
        world.Allreduce(MPI.IN_PLACE, split, op=MPI.MAX)
        cs, ds, per_elem, kept = measure(comm, comp)
        scheme = stats["scheme"] or "-"  # two-level on one host: nothing crosses, no scheme
        if level == "two_level" and stats["scheme"]:
            hosts, local = topo.n_hosts, len(topo.hosts[0])
            inside, across = pricing.two_level_bytes(scheme, hosts, local, args.size,
                                                     int(per_elem * n / local),
                                                     int(kept * n / local), 8)
            load = pricing.SchemeLoad.of_rates(p, n, 4, int(per_elem * n), cs, ds, int(kept * n))
            predicted, model = inside + across, sum(pricing.two_level_costs(scheme, load, cost))
        elif stats["scheme"]:
            predicted = pricing.predicted_bytes(scheme, p, int(per_elem * n), int(kept * n), 8)
            load = pricing.SchemeLoad.of_rates(p, n, 4, int(per_elem * n), cs, ds, int(kept * n))
            model = pricing.predict_scheme(scheme, load, cost)
        else:
            predicted, model = 0.0, None
        err = float(np.linalg.norm(out - exact) / np.linalg.norm(exact))
        label = spec + ("" if fb is None else " +EF") + \
            (f" [{level}]" if len(args.hierarchy) > 1 or level != "flat" else "")
        rows.append(_row(label, scheme, t, args.size,
                         p, t_mpi, compress_s=split[0], decompress_s=split[1], hierarchy=level,
                         **_bound(up, rate),
                         comm_s=max(t.median - split[0] - split[1], 0.0), bytes_sent=split[2],
                         bytes_predicted=predicted, rel_error=err, model_s=model))
        if args.without_out:
            rows.append(_without_out(world, x, comp, fb, step, args, hier, label, scheme,
                                     t.median, t_mpi, p))
    _flag(rows)
    if comm.rank == 0:
        lines = comment(noise.legend(args.iters, "MPI_Allreduce", "vs MPI")) + _tables(rows)
        for r in rows:
            if "vs_out" in r:
                lines.append(f"# {r['name']}: {r['vs_out']:.3f}x the time of the same call "
                             f"with out= ({r['time_s'] * 1e3:.1f} ms against "
                             f"{r['with_out_s'] * 1e3:.1f}, medians of calls taken in turn"
                             f"{'; within the noise' if r['vs_out_noisy'] else ''})")
        if any("rel_error" in r for r in rows):
            lines += comment(report.ERROR_NOTE)
            if not args.link:
                lines += comment(emulated.SHARED_MEMORY_HINT)
        print("\n".join(lines), flush=True)
        # the command as the user typed it: the launcher's re-run drops -np
        argv = list(args.argv)
        if "-np" not in argv:
            argv[2:2] = ["-np", str(p)]
        if args.txt:
            with open(args.txt, "w") as f:
                f.write("\n".join([f"# command: compcoll {' '.join(argv)}",
                                   f"# {p} ranks{', ' + where if where else ''}, "
                                   f"{args.size} B float32, result pool "
                                   f"{collectives.defaults.result_pool_bytes} B "
                                   "(COMPCOLL_RESULT_POOL_BYTES)", *lines]) + "\n")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"command": ["compcoll", *argv], "ranks": p, "bytes": args.size,
                           "iters": args.iters, "warmup": args.warmup,
                           "spread": noise.SPREAD_MEANS, "noisy": noise.NOISY_MEANS,
                           "link": emulated.describe(args, p), "cost_params": vars(cost),
                           "rows": rows}, f, indent=1, default=_jsonable)
    return 0
