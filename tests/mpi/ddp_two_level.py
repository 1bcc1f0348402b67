"""The DDP hook on several hosts of several ranks (emulated through COMPCOLL_HOST, gloo).

"2x2": ranks 0, 1 on one host and 2, 3 on the other; "2x2-interleaved": ranks 0, 2 and 1, 3
(non-contiguous placement). With ``hierarchy="two_level"`` a 16-bit bucket leaves the fast
path (the engine's allreduce is flat) for our call: full precision inside the host and 16
bits only across hosts; an 8-bit one runs two-level too. Under "auto" the 16-bit bucket
keeps the fast path and the 8-bit one runs two-level or flat as the cost model prices it.
The gradients are the average within the rounding, the same bits on every rank.
``hierarchy="flat"`` keeps the fast path, bit for bit PyTorch's fp16 hook.
Run: mpiexec -n 4 python tests/mpi/ddp_two_level.py 2x2|2x2-interleaved
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from ddp_common import backward, grads, init_gloo, local_grads, make
from mpi4py import MPI
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import collectives.ddp as cddp
from collectives import Session
from collectives.topology import topology

from common import WORLD, Checker

LAYOUT = sys.argv[1] if len(sys.argv) > 1 else "2x2"


def host_of(rank: int) -> int:
    return rank % 2 if LAYOUT == "2x2-interleaved" else rank // 2


def exact_and_scale(step: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The exact average of every rank's gradients (float64) and sum_r |g_r| / P."""
    avg, scale = {}, {}
    for name, g in local_grads(step).items():
        x = (g.double() / WORLD.size).numpy()
        total, mag = np.empty_like(x), np.empty_like(x)
        WORLD.Allreduce(x, total, op=MPI.SUM)
        WORLD.Allreduce(np.abs(x), mag, op=MPI.SUM)
        avg[name], scale[name] = torch.from_numpy(total), torch.from_numpy(mag)
    return avg, scale


def schemes(state: cddp.CompressionState, step: int) -> set[str]:
    return {s for r in state.timeline if r["step"] == step for s in r.get("schemes", [])}


def two_level(chk: Checker, spec: str, ulp: float, whole: bool, hierarchy: str) -> None:
    """The policy ``spec`` crosses hosts two-level: within ``ulp`` of the summed magnitudes
    of the exact average (per element, or of their largest in the model with ``whole``: a
    min-max quantizer's step follows the range of its block, which layers fused in one
    collective share), every rank the same bits, off the fast path."""
    model = make(0.004)  # several buckets
    state = cddp.CompressionState(
        policy=Session(spec, error_feedback=False, hierarchy=hierarchy, min_numel=0)).bind(model)
    model.register_comm_hook(state, cddp.compression_hook)
    for step in range(3):
        backward(model, step)
        ours = grads(model)
        exact, scale = exact_and_scale(step)
        top = max(float(v.max()) for v in scale.values())
        for name, g in ours.items():
            bound = ulp * (top if whole else scale[name]) + 1e-7
            err = float(((g.double() - exact[name]).abs() - bound).max())
            chk.check(err <= 0, f"{spec} step {step}: {name} off the average by {err:.3g} "
                      "past the rounding bound")
            chk.identical(g.numpy(), f"{spec} step {step}: {name}")
        got = schemes(state, step)
        # a 16-bit bucket leaves the engine's (flat) fast path only when told to cross hosts
        # two-level: under "auto" it goes as PyTorch's hook sends it
        fast = spec == "fp16" and hierarchy != "two_level"
        chk.check(got == {"engine fp16"} if fast else
                  bool(got) and not any(s.startswith("engine") for s in got),
                  f"{spec} {hierarchy} step {step}: fast path {fast}, got {got}")
    topo = topology(state.communicator())
    chk.check(topo.n_hosts == 2 and topo.local_size == 2,
              f"{spec}: the hook's communicator does not see two hosts of two: {topo}")
    if hierarchy == "two_level":
        subs = state.communicator().cache.host_comms
        chk.check(subs is not None and subs.intra.size == 2 and subs.cross.size == 2,
                  f"{spec}: no intra/cross-host communicators of 2 ranks each")
    state.close()


def flat_is_pytorchs(chk: Checker) -> None:
    """hierarchy="flat": the fast path, PyTorch's fp16 hook bit for bit."""
    theirs, ours = make(0.004), make(0.004)
    theirs.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    state = cddp.CompressionState(policy=Session("fp16", hierarchy="flat", min_numel=0)).bind(ours)
    ours.register_comm_hook(state, cddp.compression_hook)
    for step in range(3):
        backward(theirs, step)
        backward(ours, step)
        a, b = grads(theirs), grads(ours)
        for name in a:
            chk.check(torch.equal(a[name], b[name]), f"flat step {step}: {name} differs "
                      "from PyTorch's fp16 hook")
        chk.check(schemes(state, step) == {"engine fp16"},
                  f"flat step {step}: fast path only, got {schemes(state, step)}")
    state.close()


def refused(chk: Checker) -> None:
    try:
        cddp.CompressionState(policy=Session("fp16", hierarchy="tree"))
    except ValueError as e:
        chk.check("auto, flat, two_level" in str(e), f"unclear refusal: {e}")
    else:
        chk.check(False, "hierarchy='tree' was accepted")


def main() -> None:
    os.environ["COMPCOLL_HOST"] = f"ddp {LAYOUT}/host{host_of(WORLD.rank)}"
    chk = Checker(f"ddp two-level {LAYOUT}")
    init_gloo()
    # fp16: the shard is rounded once to fp16 and summed in fp16 across 2 hosts (one more
    # rounding), each within 2^-11 of the values' magnitude
    for hierarchy in ("two_level", "auto"):  # auto: two-level or flat, as the model prices
        chk.run(f"fp16 {hierarchy}", two_level, chk, "fp16", 3 * 2.0 ** -11, False,
                hierarchy)
        # 8 bits, min-max per bucket, stochastic rounding: each host's shard within a step
        # (range / 255, range <= 2 max|x|) of its value, then the owner's sum within a step
        # of its own range (twice as wide)
        chk.run(f"8-bit {hierarchy}", two_level, chk, "uniform:bits=8", 2 * (2 + 4) / 255,
                True, hierarchy)
    chk.run("flat keeps the fast path", flat_is_pytorchs, chk)
    chk.run("bad hierarchy", refused, chk)
    dist.barrier()
    dist.destroy_process_group()
    chk.finish()


if __name__ == "__main__":
    main()
