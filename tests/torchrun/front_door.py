"""The README's DDP snippet, as written there, in a real script under torchrun.

The python block after ``<!-- front-door -->`` in README.md is split at its ``...`` line: the
lines before run right after the model is wrapped in DistributedDataParallel, the training
loop runs (the digits CNN, real data, Adam), then the lines after. Checked: the hook was
called, the policy decided and its table names the model's layers, the loss fell, every rank
holds the same weights, and ``state.close()`` stopped the hook's thread.

An argument other than "auto" replaces the snippet's ``policy="auto"`` (the README offers a
fixed compressor, ``policy="uniform:bits=8"``, in the same place); the rest runs as written.
A second argument, ``bfloat16``, trains the model and its data in that dtype.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/front_door.py [POLICY [DTYPE]]
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from compcoll_bench.commands.train_models import task

from torchrun_checks import Checks, P, train

README = Path(__file__).resolve().parents[2] / "README.md"
STEPS, BATCH = 30, 16
checks = Checks("torchrun front door")
check = checks.check


def snippet() -> tuple[str, str]:
    """The README's front-door block, split at its ``...`` line."""
    m = re.search(r"<!-- front-door -->\s*```python\n(.*?)```", README.read_text(), re.S)
    if m is None:
        raise RuntimeError("README.md has no python block after <!-- front-door -->")
    lines = m.group(1).splitlines()
    cut = next(i for i, line in enumerate(lines) if line.startswith("..."))
    return "\n".join(lines[:cut]), "\n".join(lines[cut + 1:])


def main() -> None:
    before, after = snippet()
    policy = sys.argv[1] if len(sys.argv) > 1 else "auto"
    check('policy="auto"' in before, "the snippet passes policy=\"auto\"")
    before = before.replace('policy="auto"', f"policy={policy!r}")
    dist.init_process_group("gloo")
    t = task("cnn", 0)
    dtype = getattr(torch, sys.argv[2]) if len(sys.argv) > 2 else torch.float32
    data = (t.train[0].to(dtype), t.train[1])
    model = torch.nn.parallel.DistributedDataParallel(t.make().to(dtype))
    scope: dict = {"model": model}
    exec(compile(before, "README.md front-door", "exec"), scope)  # noqa: S102 - the test's point
    state = scope["state"]
    losses = train(model, data, STEPS, BATCH)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(after, "README.md front-door", "exec"), scope)  # noqa: S102
    table = printed.getvalue()
    check(state.step == STEPS, f"the hook ran every step ({state.step} of {STEPS})")
    if policy == "auto":
        check(bool(state.policy.decisions), "the automatic policy decided")
    else:
        kind = policy.split(":")[0]
        check(table.count(kind) >= len(list(model.parameters())),
              f"the printed table gives every layer {policy}:\n{table}")
    names = [n for n, _ in model.module.named_parameters()]
    check(all(n in table for n in names), f"the printed table names every layer:\n{table}")
    check(sum(losses[-5:]) < sum(losses[:5]), f"the loss fell: {losses[:5]} -> {losses[-5:]}")
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(P)]
    dist.all_gather(every, flat)
    check(all(torch.equal(e, every[0]) for e in every), "the same weights on every rank")
    worker = state._worker._thread
    check(worker is None or not worker.is_alive(), "state.close() stopped the hook's thread")
    dist.destroy_process_group()


if __name__ == "__main__":
    checks.guarded("front door", main)
    checks.finish()
