"""``compcoll model``'s text output: one block of tables per node count."""

from __future__ import annotations

from typing import Any

from collectives import costmodel


def _size(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def text(doc: dict[str, Any]) -> str:
    """The forecast as tables, one block per node count."""
    lines = [f"# compcoll model: {doc['source']}: alpha {doc['alpha_s'] * 1e6:.3g} us, "
             f"beta {doc['beta_s_per_byte']:.3g} s/B ({1e-9 / doc['beta_s_per_byte']:.3g} GB/s), "
             f"gamma {doc['gamma_s_per_byte']:.3g} s/B, segment {_size(doc['segment_bytes'])}",
             f"# allreduce of {_size(doc['size'])} ({doc['size']} B)"]
    for block in doc["nodes"]:
        p = block["nodes"]
        lines += ["", f"## {p} nodes: auto picks {block['auto']}",
                  f"{'algorithm':>34} {'time(ms)':>11} {'busbw(GB/s)':>12}"]
        for a, r in block["algorithms"].items():
            mark = " <- auto" if a == block["auto"] else ""
            lines.append(f"{a:>34} {r['time_s'] * 1e3:11.3f} {r['busbw_GBps']:12.3f}{mark}")
        cross = ", ".join(f"{x['from']} -> {x['to']} at {_size(x['size'])}"
                          for x in block["crossovers"]) or "none"
        lines.append(f"# crossovers: {cross}")
        lines.append(f"{'compressor':>34} {'wire':>10} {'time(ms)':>11} {'comm':>9} "
                     f"{'codec':>9}  scheme")
        for r in block["compressors"]:
            if r["time_s"] is None:
                lines.append(f"{r['compressor']:>34} {'-':>10} {'-':>11}  ({r['note']})")
                continue
            lines.append(f"{r['compressor']:>34} {_size(r['payload']):>10} "
                         f"{r['time_s'] * 1e3:11.3f} {r['comm_s'] * 1e3:9.3f} "
                         f"{r['codec_s'] * 1e3:9.3f}  {r['scheme']}")
        if block["sweep"]:
            lines.append(f"{'size(B)':>11} " + " ".join(f"{a:>19}" for a in costmodel.MODELED)
                         + "  auto (predicted us)")
            for r in block["sweep"]:
                lines.append(f"{r['size']:>11d} " + " ".join(
                    f"{r['time_us'][a]:19.1f}" for a in costmodel.MODELED) + f"  {r['auto']}")
    if doc.get("compare"):
        lines += ["", f"## model vs measured ({doc['compare_source']})",
                  f"{'size(B)':>11} {'algo':>24} {'measured(us)':>13} {'model(us)':>11} "
                  f"{'error':>8}"]
        for r in doc["compare"]:
            lines.append(f"{r['size']:>11d} {r['algo']:>24} {r['measured_us']:13.1f} "
                         f"{r['model_us']:11.1f} {r['error_pct']:+7.0f}%")
    return "\n".join(lines)
