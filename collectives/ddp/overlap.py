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
    """
    by_step: dict[int, list[dict]] = {}
    for rec in list(state.timeline):
        if "done" in rec:
            by_step.setdefault(rec["step"], []).append(rec)
    keys = sorted(by_step)[-steps:] if steps else sorted(by_step)
    if not keys:
        return {"steps": 0, "hook_s": 0.0, "comm_s": 0.0, "exposed_s": 0.0, "overlap": 0.0}
    hook = comm = exposed = 0.0
    for k in keys:
        recs = sorted(by_step[k], key=lambda r: r["launched"])
        hook += sum(r["launched"] - r["start"] for r in recs)
        free = 0.0
        for r in recs:  # one thread: a collective is busy from max(launch, previous done)
            comm += r["done"] - max(r["launched"], free)
            free = r["done"]
        exposed += max(r["done"] for r in recs) - max(r["launched"] for r in recs)
    n = len(keys)
    return {"steps": n, "hook_s": hook / n, "comm_s": comm / n, "exposed_s": exposed / n,
            "overlap": max(0.0, 1.0 - exposed / comm) if comm > 0 else 0.0}
