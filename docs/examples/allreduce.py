# mpiexec -n 2
"""Allreduce and friends on numpy arrays (torch tensors and CuPy arrays work alike).

Run: mpiexec -n 2 python docs/examples/allreduce.py
"""

import numpy as np
from mpi4py import MPI

import collectives

rank, size = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size

x = np.full(1 << 16, rank, dtype=np.float32)
y = collectives.allreduce(x)                                  # a new array; "auto" picks
assert (y == sum(range(size))).all()
collectives.allreduce(x, op="avg", algorithm="ring", out=x)   # in place
assert np.allclose(x, (size - 1) / 2)

v = np.arange(2000.0).reshape(100, 20)[:, ::2]                # a non-contiguous view
s = collectives.allreduce(v, algorithm="rabenseifner")        # same shape and type
assert s.shape == v.shape and np.allclose(s, size * v)

h1 = collectives.iallreduce(x, algorithm="ring")              # several may be in flight
h2 = collectives.iallreduce(y, algorithm="tree", op="max")
r1, r2 = h1.wait(), h2.wait()

mine = collectives.reduce_scatter(np.ones(10 * size, np.float32))  # this rank's block
assert mine.size == 10 and (mine == size).all()
every = collectives.allgather(np.arange(rank + 1))            # sizes may differ
assert every.size == size * (size + 1) // 2
b = np.arange(8.0) if rank == 0 else np.zeros(8)
collectives.broadcast(b, root=0)                              # in place on every rank
assert (b == np.arange(8.0)).all()

if rank == 0:
    print("algorithms:", ", ".join(collectives.algorithms()))
