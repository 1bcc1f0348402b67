"""The same algorithms on a torch.distributed (gloo) process group, checked against MPI.

Ranks come from mpiexec; torch.distributed is initialized from the MPI ranks (rank 0's TCP
store, ``collectives.ddp.init_from_mpi``). Run: mpiexec -n P python tests/mpi/torch_transport.py
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

import collectives
from collectives.ddp import init_from_mpi
from collectives.transport.torch_dist import TorchCommunicator

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank


def main() -> None:
    chk = Checker("torch transport")
    init_from_mpi(WORLD, "gloo", timeout=60)
    group = dist.new_group(list(range(P)))
    for comm in (None, group):  # the default group and an explicit ProcessGroup
        c = collectives.as_communicator(comm if comm is not None else dist.group.WORLD)
        chk.check(isinstance(c, TorchCommunicator) and c.size == P, "wrapped as torch transport")
        for algo in ("ring", "tree", "recursive_doubling", "rabenseifner", "torch", "auto"):
            for dtype in (torch.float32, torch.bfloat16, torch.int64):
                for n in (0, 1, P + 1, 4099):
                    x = (torch.arange(n) % 7 + R).to(dtype)
                    what = f"torch {algo} {dtype} n={n}"
                    y = chk.run(what, collectives.allreduce, x, algorithm=algo, comm=comm or
                                dist.group.WORLD)
                    if y is None:
                        continue
                    ref = np.empty(n, np.float64)
                    WORLD.Allreduce(x.double().numpy(), ref)  # MPI_Allreduce as the oracle
                    chk.check(np.array_equal(y.double().numpy(), ref), what)
                    chk.identical(y.view(torch.uint8).numpy() if n else np.zeros(0), what)
    sub = TorchCommunicator(dist.group.WORLD).split(list(range(P - 1, -1, -2)))
    if sub is not None:
        y = collectives.allreduce(torch.ones(10), comm=sub, algorithm="ring")
        chk.check(bool((y == sub.size).all()), "torch sub-group")
    try:
        collectives.allreduce(torch.ones(3), algorithm="mpi", comm=dist.group.WORLD)
        chk.check(False, "mpi algorithm on a torch group accepted")
    except ValueError as exc:
        chk.check("torch" in str(exc), str(exc))
    staged(chk)
    dist.barrier()
    dist.destroy_process_group()
    chk.finish()


def staged(chk: Checker) -> None:
    """Messages staged through engine-side tensors, matched in posting order and each round
    with a peer launched as one ``batch_isend_irecv``, as on NCCL (staged here through CPU
    tensors): the same results as the plain transport, bit for bit.
    Both sides name the algorithm and the scheme: each communicator fits its own cost model
    (here two far apart, as on two machines), and "auto" could pick differently."""
    from collectives.config import defaults
    from collectives.costmodel import CostParams

    plain = TorchCommunicator(dist.new_group(list(range(P))))  # a cost model of its own
    ordered = TorchCommunicator(dist.new_group(list(range(P))), stage_device="cpu")
    ordered.matches_by_tag = False
    ordered.orders_pairs = True  # grouped() rounds go through batch_isend_irecv
    plain.cache.cost_params = CostParams(alpha=1e-3, beta=1e-11, gamma=1e-12)  # latency-bound
    ordered.cache.cost_params = CostParams(alpha=1e-9, beta=1e-6, gamma=1e-12)  # bandwidth-bound
    x = (torch.arange(100_003, dtype=torch.float32) * (R + 1) % 13) - 6
    for algo in ("ring", "tree", "recursive_doubling", "rabenseifner", "torch"):
        a = collectives.allreduce(x, algorithm=algo, comm=plain)
        b = collectives.allreduce(x, algorithm=algo, comm=ordered)
        chk.check(torch.equal(a, b), f"staged {algo}")
    saved = defaults.compressed_segment_bytes
    defaults.compressed_segment_bytes = 4096  # segments interleave where tags allow it
    try:
        # (not reduce_scatter_allgather: where tags allow, it splits the call into segments
        # that quantize their own blocks; in posting order it sends one)
        for spec, scheme in (("uniform:bits=4", "allgather"), ("topk:ratio=0.05", "allgather"),
                             ("fp16", "dense")):
            pin = {"scheme": scheme, "algorithm": "ring"}
            a = collectives.allreduce(x, compressor=spec, comm=plain, **pin)
            b = collectives.allreduce(x, compressor=spec, comm=ordered, **pin)
            chk.check(torch.equal(a, b), f"staged, in posting order: {spec}")
    finally:
        defaults.compressed_segment_bytes = saved


if __name__ == "__main__":
    main()
