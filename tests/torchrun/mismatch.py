"""Settings that differ between ranks raise MismatchError on every rank, under torchrun.

* ``backend``: a ``compcoll`` group (``dist.new_group(backend="compcoll")`` on a gloo job)
  created while rank 1's environment differs in ``COMPCOLL_MIN_NUMEL``,
  ``COMPCOLL_COMPRESSOR`` or ``COMPCOLL_FEEDBACK`` refuses, on every rank, naming the variable
  and each rank's value; a value rank 1 alone cannot parse is refused on every rank, naming
  it; with the environment alike the group is made and compresses;
* ``fsdp``: ``CompressedReduceScatter`` with another compressor, or another ``min_numel``,
  on rank 1 refuses its first call on every rank, naming the setting and each rank's value;
* ``hook``: the DDP hook with another policy on rank 1 (a fixed compressor against ``auto``,
  two compressors, two ``auto`` settings, an alias) or another ``start_step`` refuses the
  first backward pass on every rank, naming the policy in words (never aborting inside gloo,
  as ``auto``'s first messages against the fixed policy's did); alike, it averages.

Without the check these runs hang until the timeout or abort inside gloo.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/mismatch.py backend
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import collectives.backend  # noqa: F401  (where torch's autoloading is off)
from collectives.errors import MismatchError
from collectives.fsdp import CompressedReduceScatter

from torchrun_checks import Checks, P, R

MODE = sys.argv[1]
checks = Checks(f"torchrun mismatch {MODE}")
check = checks.check


def refused(what: str, make, kind: type, words: list[str]) -> None:  # noqa: ANN001
    try:
        make()
        check(False, f"{what}: refused on rank {R}")
    except kind as exc:
        text = str(exc)
        check(all(w in text for w in words), f"{what}: the error names {words}: {text}")
    except Exception as exc:  # noqa: BLE001 - the wrong kind of error
        check(False, f"{what}: {kind.__name__} expected, got {type(exc).__name__}: {exc}")


def backend() -> None:
    cases = [("COMPCOLL_MIN_NUMEL", "100", "16384", MismatchError),
             ("COMPCOLL_COMPRESSOR", "uniform:bits=4", "uniform:bits=8", MismatchError),
             ("COMPCOLL_FEEDBACK", "1", "0", MismatchError),
             ("COMPCOLL_MIN_NUMEL", "abc", None, ValueError)]
    for var, other, default, kind in cases:
        if R == 1:
            os.environ[var] = other
        words = [var, repr(other)] + ([repr(default)] if default else ["rank 1"])
        refused(f"{var} differing", lambda: dist.new_group(backend="compcoll"), kind, words)
        os.environ.pop(var, None)
    os.environ["COMPCOLL_MIN_NUMEL"] = "1000"  # alike: the group is made
    group = dist.new_group(backend="compcoll")
    t = torch.full((5000,), float(R + 1))
    dist.all_reduce(t, group=group)
    check(bool((t == P * (P + 1) / 2).all()) and group.compressed == 1,
          "settings alike: the group compresses")


def fsdp() -> None:
    x = torch.randn(P * 20_000)
    for setting, mine, other in (("compressor", "uniform:bits=8", "uniform:bits=4"),
                                 ("min_numel", 16384, 100)):
        value = other if R == 1 else mine
        rs = CompressedReduceScatter(**{setting: value})
        refused(f"FSDP {setting} differing",
                lambda rs=rs: rs(torch.empty(20_000), x, dist.group.WORLD, dist.ReduceOp.AVG),
                MismatchError, [setting, str(mine), str(other)])
    rs = CompressedReduceScatter()
    out = torch.empty(20_000)
    rs(out, x, dist.group.WORLD, dist.ReduceOp.AVG)
    check(rs.calls["compressed"] == 1, "settings alike: compressed")


def hook() -> None:
    from torch.nn.parallel import DistributedDataParallel

    from collectives.ddp import CompressionState, compression_hook

    def model_with(policy: object, **options: object) -> DistributedDataParallel:
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Linear(256, 128))  # 32K weights: compressed
        state = CompressionState(policy=policy, **options).bind(model)
        model.register_comm_hook(state, compression_hook)
        return model

    def step(model: DistributedDataParallel) -> None:
        model(torch.randn(4, 256)).sum().backward()

    cases = [("fixed vs auto", "uniform:bits=8", "auto", ["policy", "'uniform:bits=8,", "'auto'"]),
             ("two compressors", "uniform:bits=8", "topk:ratio=0.01",
              ["policy", "'uniform:bits=8,", "'topk:", "ratio=0.01"]),
             ("auto settings", "auto", "auto:max_error=0.1",
              ["policy", "'auto'", "'auto:max_error=0.1'"]),
             ("alias vs auto", "auto", "int4", ["policy", "'auto'", "'uniform:bits=4,"])]
    for what, mine, other, words in cases:
        model = model_with(other if R == 1 else mine)
        refused(f"DDP hook: {what}", lambda model=model: step(model), Exception,
                ["DDP hook settings: ranks disagree on", *words])
    model = model_with("uniform:bits=8" if R else "auto", start_step=2 if R else 0)
    refused("DDP hook: start_step and policy", lambda: step(model), Exception,
            ["policy", "start_step (rank 0: '0', rank 1: '2')"])
    from collectives import Session

    model = model_with(Session("int8", min_numel=0 if R else 16384))
    refused("DDP hook: the session's min_numel", lambda: step(model), Exception,
            ["min_numel (rank 0: '16384', rank 1: '0')"])
    model = model_with("int8")  # alike: it trains
    step(model)
    grad = model.module.weight.grad
    check(grad is not None and bool(torch.isfinite(grad).all()), "settings alike: averaged")


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    {"backend": backend, "fsdp": fsdp, "hook": hook}[MODE]()
    dist.barrier()


if __name__ == "__main__":
    checks.guarded(MODE, main)
    checks.finish()
