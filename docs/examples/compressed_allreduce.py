# mpiexec -n 2
"""Compressed allreduce with error feedback, and the sparse allreduce.

Run: mpiexec -n 2 python docs/examples/compressed_allreduce.py
"""

import numpy as np
from mpi4py import MPI

import collectives
import compressors

rank, size = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size
rng = np.random.default_rng(rank)

# Error feedback keeps, per tensor name, what compression left out and adds it next step.
feedback = compressors.ErrorFeedback(compressors.get("uniform:bits=4"))
for step in range(3):
    grad = rng.standard_normal(1 << 16).astype(np.float32)
    avg = collectives.allreduce(grad, compressor="uniform:bits=4", feedback=feedback,
                                name="layer1.weight", step=step, op="avg")  # scheme="auto"

# The scheme follows the compressor: top-k payloads go through a sparse allreduce.
stats: dict = {}
grad = rng.standard_normal(1 << 16).astype(np.float32)
total = collectives.allreduce(grad, compressor="topk:ratio=0.01", scheme="sparse",
                              sparse_algorithm="gtopk", stats=stats)
assert np.count_nonzero(total) <= (1 << 16) // 100            # the result stays k-sparse
if rank == 0:
    print("scheme:", stats["scheme"], "| stats:", sorted(stats))

# A scheme the compressor cannot use is refused with the reason and what would work.
try:
    collectives.allreduce(grad, compressor="topk:ratio=0.01", scheme="dense")
except ValueError as exc:
    if rank == 0:
        print("refused:", exc)

# The sparse allreduce itself: (indices, values) of a vector of `n` elements per rank.
n = 1000
indices = np.array([rank, 10 + rank, 999], dtype=np.int64)
values = np.ones(3, dtype=np.float32)
dense = collectives.sparse_allreduce(indices, values, n)     # algorithm="auto"
assert dense[999] == size and dense.sum() == 3 * size
idx, val = collectives.sparse_allreduce(indices, values, n, algorithm="gtopk:k=2",
                                        dense=False)         # the global top 2
assert idx.size == 2 and 999 in idx
