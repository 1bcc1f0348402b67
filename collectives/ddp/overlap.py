"""How much communication the backward pass hid, from the hook's timeline."""

from __future__ import annotations

from typing import Any


def overlap(state: Any, steps: int | None = None) -> dict[str, float]:
    """Per-step means over the last ``steps`` complete steps of the state's timeline.

    Per bucket the timeline holds: start (hook called), launched (collective started, after
    compression) and done (future set). Per step:

        hook_s     time spent inside the hook (compression, posting): on backward's path
        comm_s     time the background thread was busy completing collectives
        exposed_s  last done - last launched: communication left after the last bucket was
                   handed over, i.e. after the backward's computation had ended
        overlap    1 - exposed_s / comm_s (share of communication hidden behind backward)
        encode_s, decode_s   the codecs' time inside the collectives (compression of the
                   input and of partial sums, decompression), wherever it ran
        copy_s     copying results back into the bucket (fused groups, 16-bit casts)
        wire_s     comm_s less the codecs and copies it holds: the messages and the waits
                   for the other ranks
    """
    by_step: dict[int, list[dict]] = {}
    for rec in list(state.timeline):
        if "done" in rec:
            by_step.setdefault(rec["step"], []).append(rec)
    keys = sorted(by_step)[-steps:] if steps else sorted(by_step)
    phases = ("encode_s", "decode_s", "copy_s")
    if not keys:
        return {"steps": 0, "hook_s": 0.0, "comm_s": 0.0, "exposed_s": 0.0, "overlap": 0.0,
                "wire_s": 0.0, **dict.fromkeys(phases, 0.0)}
    hook = comm = exposed = 0.0
    spent = dict.fromkeys(phases, 0.0)
    for k in keys:
        recs = sorted(by_step[k], key=lambda r: r["launched"])
        hook += sum(r["launched"] - r["start"] for r in recs)
        for ph in phases:
            spent[ph] += sum(r.get(ph, 0.0) for r in recs)
        free = 0.0
        for r in recs:  # one thread: a collective is busy from max(launch, previous done)
            comm += r["done"] - max(r["launched"], free)
            free = r["done"]
        exposed += max(r["done"] for r in recs) - max(r["launched"] for r in recs)
    n = len(keys)
    out = {"steps": n, "hook_s": hook / n, "comm_s": comm / n, "exposed_s": exposed / n,
           "overlap": max(0.0, 1.0 - exposed / comm) if comm > 0 else 0.0,
           **{ph: v / n for ph, v in spent.items()}}
    out["wire_s"] = max(0.0, out["comm_s"] - sum(out[ph] for ph in phases))
    return out
