# mpiexec -n 2
"""FSDP2 (fully_shard) with a compressed reduce-scatter for each sharded module.

Run under torchrun or under an MPI launcher:
    torchrun --standalone --nproc-per-node 2 docs/examples/fsdp.py
    mpiexec -n 2 python docs/examples/fsdp.py
"""

import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

import collectives.ddp
from collectives.fsdp import compress_reduce_scatter

if "RANK" in os.environ:
    dist.init_process_group("gloo")
else:
    from mpi4py import MPI
    collectives.ddp.init_from_mpi(MPI.COMM_WORLD, "gloo")
rank = dist.get_rank()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(model)
comms = compress_reduce_scatter(model, "uniform:bits=8")   # one per FSDP module, with EF

opt = torch.optim.Adam(model.parameters(), lr=1e-3)
data = torch.Generator().manual_seed(rank)
for _ in range(5):
    x = torch.randn(32, 64, generator=data)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()                           # gradients reduce-scattered, compressed
    opt.step()

if rank == 0:
    print("compressed / exact reduce-scatters:",
          sum(c.calls["compressed"] for c in comms), "/", sum(c.calls["plain"] for c in comms))
dist.destroy_process_group()
