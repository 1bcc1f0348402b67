"""Registry of allreduce algorithms by name: each entry holds how the algorithm runs, what
it costs in the alpha-beta-gamma model (``collectives.costmodel``) and what it sends.

Adding an algorithm is one module (its ``allreduce`` generator, ``cost`` and ``wire_bytes``)
and one ``register(...)`` call below; "auto", the cost model, the pricing of compressed
schemes and the test matrix all iterate this registry.
"""

from __future__ import annotations

from . import native, rabenseifner, recursive_doubling, ring, tree, two_level
from .registry import REGISTRY, Algorithm, CostFormula, get, modeled, names, register

__all__ = ["REGISTRY", "Algorithm", "CostFormula", "get", "modeled", "names", "register"]

register("ring", ring.allreduce, "segmented, pipelined ring reduce-scatter + allgather",
         cost=ring.cost, wire_bytes=ring.wire_bytes)
register("tree", tree.allreduce, "segmented binomial reduce + binomial broadcast",
         cost=tree.cost, wire_bytes=tree.wire_bytes)
register("recursive_doubling", recursive_doubling.allreduce, "log p full-vector exchanges",
         cost=recursive_doubling.cost, wire_bytes=recursive_doubling.wire_bytes)
register("rabenseifner", rabenseifner.allreduce,
         "recursive-halving reduce-scatter + recursive-doubling allgather",
         cost=rabenseifner.cost, wire_bytes=rabenseifner.wire_bytes)
# Priced per link class on the hosts the cost parameters describe; on one host it ties with
# the ring it runs there, and "auto" keeps the ring.
register("two_level", two_level.allreduce,
         "reduce-scatter inside hosts, shards allreduced across hosts, allgather inside hosts",
         cost=two_level.cost, wire_bytes=two_level.wire_bytes)
register("mpi", native.mpi, "the MPI library's MPI_Allreduce (baseline)", ours=False)
register("torch", native.torch, "torch.distributed.all_reduce (baseline)", ours=False)
