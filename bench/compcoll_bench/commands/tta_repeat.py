"""``bench tta --repeat-auto N``: does the automatic policy decide alike run after run?

Each repeat trains the same model with the ``auto`` run for ``--repeat-steps`` steps from an
empty measurement cache (a fresh directory, so every repeat profiles, times and fits anew),
then records its per-layer decisions. Reported: how many repeats reached the most common
set of decisions, and whether every rank held the same decisions in every repeat. Noise in
the timings is the only thing that differs between repeats: the batches and the weights are
the same.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import tempfile
import zlib
from collections import Counter
from typing import Any

from . import train_common as common
from .train_runs import RUNS


def repeat_auto(t: Any, args: argparse.Namespace, mpi: Any) -> dict[str, Any]:
    """Decisions of ``args.repeat_auto`` cold runs of ``auto`` (collective)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    runs: list[dict[str, str]] = []
    ranks_agree = True
    for _ in range(args.repeat_auto):
        folder = mpi.bcast(tempfile.mkdtemp(prefix="compcoll-repeat-") if mpi.rank == 0
                           else None, root=0)
        opts = copy.copy(args)
        opts.cache_dir = folder  # empty: this repeat measures everything again
        model = DDP(t.make(), bucket_cap_mb=args.bucket_mb)
        state = RUNS["auto"](model, opts)
        opt = common.adam(model.parameters(), args.lr)
        try:
            for step in range(args.repeat_steps):
                common.timed_step(model, t, opt, step, args, mpi)
            mine = dict(state.policy.decisions)
        finally:
            state.close()
        digest = zlib.crc32(json.dumps(mine, sort_keys=True).encode())
        ranks_agree &= len(set(mpi.allgather(digest))) == 1
        runs.append(mine)
        mpi.Barrier()
        if mpi.rank == 0:
            shutil.rmtree(folder, ignore_errors=True)
    counts = Counter(json.dumps(r, sort_keys=True) for r in runs)
    common_json, same = counts.most_common(1)[0]
    return {"model": t.name, "repeats": len(runs), "steps": args.repeat_steps,
            "same": same, "distinct": len(counts), "ranks_agree": ranks_agree,
            "decisions": json.loads(common_json), "runs": runs}


def describe(result: dict[str, Any]) -> str:
    """One line and the most common decisions (compressor per layer)."""
    head = (f"# auto decided alike in {result['same']} of {result['repeats']} cold runs of "
            f"{result['steps']} steps ({result['distinct']} distinct sets of decisions; "
            f"ranks agreed in every run: {'yes' if result['ranks_agree'] else 'NO'}), "
            f"{result['model']}:")
    picks = Counter(result["decisions"].values())
    return head + "\n#   " + ", ".join(f"{spec}: {n} layer(s)" for spec, n in picks.items())
