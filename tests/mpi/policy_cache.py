"""The automatic policy's measurement cache across two runs of the DDP hook.

Run: mpiexec -n P python tests/mpi/policy_cache.py first DIR, then ... second DIR. The first
run profiles, decides and writes the cache; the second reads it, decides at its first step
without profiling, and decides as the first did. Every rank decides alike in both.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist
from ddp_common import backward, init_gloo, make

import collectives.ddp as cddp
from collectives.costmodel import CostParams
from collectives.policy import AutoPolicy, profile

from common import WORLD, Checker

SLOW = CostParams(alpha=5e-5, beta=8e-9, gamma=1e-10)  # ~1 Gbit/s: compression pays
STEPS = 6


def main() -> None:
    phase, folder = sys.argv[1], Path(sys.argv[2])
    chk = Checker("policy cache")
    init_gloo()
    calls = []
    real = profile.Profiler.observe

    def counted(self, *args, **kw):  # type: ignore[no-untyped-def]
        calls.append(args[1].name)
        return real(self, *args, **kw)

    profile.Profiler.observe = counted  # type: ignore[method-assign]
    model = make(0.004)  # several buckets
    # The link named, so that two fits of the cost model on busy cores share the cache;
    # collectives priced free, so that this small model's layers are worth compressing.
    policy = AutoPolicy(first=1, every=3, probe_steps=1, max_error=0.3, cost=SLOW,
                        latency=0.0, min_numel=512, cache_dir=str(folder), link="test link",
                        trial_steps=0)  # decisions from the measurements, not step times
    state = cddp.CompressionState(policy=policy).bind(model)
    model.register_comm_hook(state, cddp.compression_hook)
    for step in range(STEPS):
        backward(model, step)
    decisions = sorted(policy.decisions.items())
    everyone = WORLD.allgather(decisions)
    chk.check(bool(decisions) and all(d == everyone[0] for d in everyone),
              f"every rank decided alike: {everyone}")
    chk.check(any(spec != "none" for _, spec in decisions), f"compressed: {decisions}")
    first = next(e for e in policy.log if e["event"].startswith("decided"))
    record = folder / f"decisions-{WORLD.size}.json"
    if phase == "first":
        chk.check(bool(calls) and first["event"] == "decided (measured)", f"{first} {calls}")
        keyed = [p for p in folder.glob("*.json") if len(p.stem) == 64]
        chk.check(len(keyed) == 1, f"one cache file: {keyed}")
        if WORLD.rank == 0:
            record.write_text(json.dumps(decisions))
    else:
        chk.check(not calls, f"profiled {calls} although the cache holds the measurements")
        chk.check(first["step"] == 1 and first["event"] == "decided (first, from the cache)",
                  f"decided at the first step from the cache: {first}")
        want = [tuple(d) for d in json.loads(record.read_text())]
        chk.check(decisions == want, f"the second run decided as the first: {decisions} "
                                     f"!= {want}")
    dist.barrier()
    dist.destroy_process_group()
    chk.finish()


if __name__ == "__main__":
    main()
