"""The DDP hook's 16-bit fast path against PyTorch's own fp16/bf16 hooks (gloo).

A bucket whose plan is one 16-bit format throughout is sent as PyTorch's hook sends it (cast,
divide, the engine's allreduce, copy back): the same operations in the same order, so the
gradients must be the same bits, at any process count. A bucket that mixes formats takes the
general path; a residual held for a 16-bit group goes out once (16 bits keep none).
Run: mpiexec -n P python tests/mpi/ddp_fastpath.py
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from ddp_common import backward, grads, init_gloo, make
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import collectives
import collectives.ddp as cddp
from collectives.policy import Rules

from common import Checker


def bf16_on_cpu(process_group, bucket):  # noqa: ANN001, ANN202 - DDP reads real annotations
    """PyTorch's bf16 hook as it is (DDP refuses to register it by name off CUDA)."""
    return default_hooks.bf16_compress_hook(process_group, bucket)


HOOKS = {"fp16": default_hooks.fp16_compress_hook, "bf16": bf16_on_cpu}


def schemes(state: cddp.CompressionState, step: int) -> set[str]:
    return {s for r in state.timeline if r["step"] == step for s in r.get("schemes", [])}


def same_as_pytorch(chk: Checker, spec: str, cap: float, group: object = None) -> None:
    theirs, ours = make(cap), make(cap)
    theirs.register_comm_hook(dist.group.WORLD, HOOKS[spec])
    state = cddp.CompressionState(policy=spec, process_group=group).bind(ours)
    ours.register_comm_hook(state, cddp.compression_hook)
    for step in range(4):  # step 0 and the steps after DDP rebuilt its buckets
        backward(theirs, step)
        backward(ours, step)
        a, b = grads(theirs), grads(ours)
        for name in a:
            err = float((a[name] - b[name]).abs().max())
            chk.check(torch.equal(a[name], b[name]),
                      f"{spec} cap {cap} step {step}: {name} differs from PyTorch's hook "
                      f"by {err:.3g}")
            chk.identical(b[name].numpy(), f"{spec} step {step}: {name}")
        chk.check(schemes(state, step) == {f"engine {spec}"},
                  f"{spec} step {step}: fast path only, got {schemes(state, step)}")
    state.close()


def held_residual_goes_once(chk: Checker) -> None:
    """A residual held for a 16-bit group (left by an earlier compressor) goes out once, added
    to the group's input; none is kept, and the next step is PyTorch's hook bit for bit."""
    theirs, ours = make(25.0), make(25.0)
    theirs.register_comm_hook(dist.group.WORLD, HOOKS["fp16"])
    state = cddp.CompressionState(policy="fp16").bind(ours)
    ours.register_comm_hook(state, cddp.compression_hook)
    backward(theirs, 0)
    backward(ours, 0)
    fb, p, held = state.feedback("fp16"), dist.get_world_size(), 0.25
    groups = [g for _, gs in state._groups.values() for g in gs]
    names = [g.name for g in groups]
    fb.residuals.update({g.name: np.full(g.numel, held, np.float32) for g in groups})
    for step in (1, 2):
        backward(theirs, step)
        backward(ours, step)
        a, b = grads(theirs), grads(ours)
        for name in a:
            if step == 1:  # every rank's residual added: the sum of them on top of the average
                shift = b[name] - a[name]
                chk.check(torch.allclose(shift, torch.full_like(shift, held * p),
                                         atol=2e-3 * p, rtol=0),
                          f"held residual: {name} moved by {float(shift.mean()):.4f}, "
                          f"not {held * p}")
            else:
                chk.check(torch.equal(a[name], b[name]), f"after the residual: {name} differs")
            chk.identical(b[name].numpy(), f"held residual step {step}: {name}")
        chk.check(not set(names) & set(fb.residuals),
                  f"step {step}: residuals kept for 16 bits: {sorted(fb.residuals)}")
    chk.check(schemes(state, 2) == {"engine fp16"},
              f"after the residual: fast path again, got {schemes(state, 2)}")
    state.close()


def mixed(chk: Checker, cap: float = 25.0, group: object = None) -> None:
    """fc1 in 8 bits, the rest fp16: in one bucket the general path, close to DDP's; in
    buckets of their own, fc1's on the general path and the others' on the fast path."""
    plain, ours = make(cap), make(cap)
    state = cddp.CompressionState(policy=Rules([("name~fc1", "uniform:bits=8"),
                                                ("*", "fp16")]), process_group=group).bind(ours)
    ours.register_comm_hook(state, cddp.compression_hook)
    for step in range(3):
        backward(plain, step)
        backward(ours, step)
        a, b = grads(plain), grads(ours)
        for name in a:
            chk.check(torch.allclose(a[name], b[name], rtol=0.05, atol=0.05),
                      f"mixed step {step}: {name}")
            chk.identical(b[name].numpy(), f"mixed step {step}: {name}")
        got = schemes(state, step)
        fast = {s for s in got if s.startswith("engine")}
        if cap >= 1.0:
            chk.check(not fast, f"mixed step {step}: general path, got {got}")
        elif step > 0:  # (step 0: DDP's first buckets)
            chk.check(fast == {"engine fp16"} and got - fast,
                      f"mixed, several buckets, step {step}: both paths, got {got}")
    state.close()


def in_posting_order(chk: Checker) -> None:
    """As on NCCL: messages matched in posting order, each round with a peer one batch. The
    fast path is PyTorch's hook bit for bit; beside buckets on the general path, a 16-bit
    bucket's allreduce is posted behind the worker's messages, in one order on every rank."""
    group = dist.new_group(list(range(dist.get_world_size())))
    comm = collectives.as_communicator(group)
    comm.matches_by_tag, comm.orders_pairs = False, True
    for spec in HOOKS:
        same_as_pytorch(chk, spec, 0.004, group)
    mixed(chk, 0.004, group)


def main() -> None:
    chk = Checker("ddp fast path")
    init_gloo()
    for spec in HOOKS:
        chk.run(f"{spec}, one bucket", same_as_pytorch, chk, spec, 25.0)
        chk.run(f"{spec}, several buckets", same_as_pytorch, chk, spec, 0.004)
    chk.run("held residual", held_residual_goes_once, chk)
    chk.run("mixed bucket", mixed, chk)
    chk.run("mixed buckets", mixed, chk, 0.004)
    chk.run("in posting order", in_posting_order, chk)
    dist.barrier()
    dist.destroy_process_group()
    chk.finish()


if __name__ == "__main__":
    main()
