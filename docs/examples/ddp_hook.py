# mpiexec -n 2
"""DDP with compcoll's compression hook: the three lines after the model is wrapped.

Run under torchrun (gloo, no MPI needed) or under an MPI launcher:
    torchrun --standalone --nproc-per-node 2 docs/examples/ddp_hook.py
    mpiexec -n 2 python docs/examples/ddp_hook.py
"""

import os

import torch
import torch.distributed as dist

import collectives.ddp as cddp

if "RANK" in os.environ:                      # torchrun set up the rendezvous
    dist.init_process_group("gloo")
else:                                         # an MPI job: rank 0 opens the TCP store
    from mpi4py import MPI
    cddp.init_from_mpi(MPI.COMM_WORLD, "gloo")
rank = dist.get_rank()

torch.manual_seed(0)                          # the same initial weights on every rank
net = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
model = torch.nn.parallel.DistributedDataParallel(net)

state = cddp.CompressionState(policy="auto").bind(model)
model.register_comm_hook(state, cddp.compression_hook)

opt = torch.optim.Adam(model.parameters(), lr=1e-3)
data = torch.Generator().manual_seed(rank)    # each rank its own batches
w_true = torch.randn(64, 10, generator=torch.Generator().manual_seed(1))
for _ in range(20):
    x = torch.randn(32, 64, generator=data)
    loss = torch.nn.functional.mse_loss(model(x), x @ w_true)
    opt.zero_grad()
    loss.backward()                           # the hook averages the compressed gradients
    opt.step()

if rank == 0:
    print(state.policy.table())               # per layer: the pick, its error and residual
checkpoint = state.state_dict()               # residuals and the policy's decisions
state.close()                                 # stop the hook's thread before tearing down
dist.destroy_process_group()
