# mpiexec -n 2
"""The "compcoll" torch.distributed backend: gloo with large float allreduces compressed.

Run under torchrun or under an MPI launcher:
    torchrun --standalone --nproc-per-node 2 docs/examples/backend.py
    mpiexec -n 2 python docs/examples/backend.py
"""

import os

import torch
import torch.distributed as dist

import collectives.backend  # registers "compcoll" (torch's entry point does it on its own)
import collectives.ddp

collectives.backend.configure("uniform:bits=8", min_numel=16384)   # or COMPCOLL_* variables
if "RANK" in os.environ:
    dist.init_process_group("compcoll")       # was "gloo"
else:
    from mpi4py import MPI
    collectives.ddp.init_from_mpi(MPI.COMM_WORLD, "compcoll")
rank, size = dist.get_rank(), dist.get_world_size()

t = torch.full((1 << 16,), float(rank + 1))
dist.all_reduce(t)                            # 8-bit quantized on the way
expected = size * (size + 1) / 2
assert torch.allclose(t, torch.full_like(t, expected), rtol=0.02)

small = torch.tensor([rank], dtype=torch.int64)
dist.all_reduce(small, op=dist.ReduceOp.MAX)  # integers, MAX, small tensors: gloo's own
assert small.item() == size - 1

torch.manual_seed(0)                          # DDP on this group compresses its buckets
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(256, 256))
model(torch.randn(8, 256)).square().mean().backward()
if rank == 0:
    print("allreduce of", t.numel(), "floats ->", t[0].item(), "expected", expected)
dist.destroy_process_group()
