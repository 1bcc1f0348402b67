"""The DDP hook's 16-bit fast path against PyTorch's own fp16/bf16 hooks (gloo).

A bucket whose plan is one 16-bit format throughout is sent as PyTorch's hook sends it (cast,
divide, the engine's allreduce, copy back): the same operations in the same order, so the
gradients must be the same bits, at any process count. A bucket that mixes formats takes the
general path.
Run: mpiexec -n P python tests/mpi/ddp_fastpath.py
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from ddp_common import backward, grads, init_gloo, make
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import collectives.ddp as cddp
from collectives.policy import Rules

from common import Checker


def bf16_on_cpu(process_group, bucket):  # noqa: ANN001, ANN202 - DDP reads real annotations
    """PyTorch's bf16 hook as it is (DDP refuses to register it by name off CUDA)."""
    return default_hooks.bf16_compress_hook(process_group, bucket)


HOOKS = {"fp16": default_hooks.fp16_compress_hook, "bf16": bf16_on_cpu}


def schemes(state: cddp.CompressionState, step: int) -> set[str]:
    return {s for r in state.timeline if r["step"] == step for s in r.get("schemes", [])}


def same_as_pytorch(chk: Checker, spec: str, cap: float) -> None:
    theirs, ours = make(cap), make(cap)
    theirs.register_comm_hook(dist.group.WORLD, HOOKS[spec])
    state = cddp.CompressionState(policy=spec).bind(ours)
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


def mixed(chk: Checker) -> None:
    """fc1 in 8 bits, the rest fp16, in one bucket: the general path, close to DDP's."""
    plain, ours = make(25.0), make(25.0)
    state = cddp.CompressionState(policy=Rules([("name~fc1", "uniform:bits=8"),
                                                ("*", "fp16")])).bind(ours)
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
        chk.check(not any(s.startswith("engine") for s in got),
                  f"mixed step {step}: general path, got {got}")
    state.close()


def main() -> None:
    chk = Checker("ddp fast path")
    init_gloo()
    for spec in HOOKS:
        chk.run(f"{spec}, one bucket", same_as_pytorch, chk, spec, 25.0)
        chk.run(f"{spec}, several buckets", same_as_pytorch, chk, spec, 0.004)
    chk.run("mixed bucket", mixed, chk)
    dist.barrier()
    dist.destroy_process_group()
    chk.finish()


if __name__ == "__main__":
    main()
