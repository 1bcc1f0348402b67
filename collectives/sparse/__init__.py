"""Sparse allreduce: every rank contributes (indices, values) of a vector of ``size``.

Algorithms (registry ``ALGORITHMS``): ``ssar_recursive_doubling``, ``ssar_split_allgather``,
``dsar`` (SparCML, Renggli et al. SC'19) and ``gtopk`` (global top-k, result k-sparse). Each
entry (``SparseAlgorithm``) holds how it runs, its price in the cost model and, where it can,
how it hands its result over in parts; "auto" and the pricing read the entries.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from compressors.arrays import is_cupy, is_torch

from .. import costmodel, moved
from ..agreement import Worded
from ..config import defaults
from ..costparams import CostParams
from ..progress import Handle
from ..transport.base import Request
from ..validation import agree, open_comm, refusing
from . import gtopk, split, ssar
from .common import Sparse, SparseAlgorithm, SparseJob, SparseSteps
from .merge import coalesce, index_dtype

ALGORITHMS: dict[str, SparseAlgorithm] = {}
#: Algorithms that can hand over their result as sets whose ``merge`` (in list order) it is,
#: for a caller that wants it dense (``merge.to_dense``: no merged set built).
PARTS: dict[str, Callable[[SparseJob], Generator[list[Request], None, list[Sparse]]]] = {}


def register(algorithm: SparseAlgorithm) -> None:
    """Add a sparse allreduce under its name."""
    if algorithm.name in ALGORITHMS:
        raise ValueError(f"sparse algorithm {algorithm.name!r} is already registered")
    ALGORITHMS[algorithm.name] = algorithm
    if algorithm.parts is not None:
        PARTS[algorithm.name] = algorithm.parts


register(SparseAlgorithm("ssar_recursive_doubling", ssar.recursive_doubling, ssar.price,
                         ssar.recursive_doubling_parts))
register(SparseAlgorithm("ssar_split_allgather", split.split_allgather,
                         split.split_allgather_price, split.split_allgather_parts))
register(SparseAlgorithm("dsar", split.dsar, split.dsar_price, split.dsar_parts))
register(SparseAlgorithm("gtopk", gtopk.gtopk, gtopk.price, exact=False))

__all__ = ["ALGORITHMS", "PARTS", "SparseAlgorithm", "isparse_allreduce", "modeled", "parse",
           "register", "sparse_allreduce"]


#: The most entries gtopk may keep: its k travels as a 64-bit integer.
MAX_K = 2**63 - 1


def parse(algorithm: Any) -> tuple[str, int | None]:
    """A sparse algorithm as written, as (name, k): "auto", a name in ``ALGORITHMS``, or
    "gtopk:k=N" (global top-k: the result keeps the N sums of largest magnitude; a bare
    "gtopk" is allowed in a compressed call, where N is the most entries any rank sends).
    A name that is not registered, or an option other than gtopk's k, raises ValueError
    naming what would work."""
    if not isinstance(algorithm, str):
        raise TypeError(f"a sparse algorithm is a string such as 'dsar' or 'gtopk:k=1000', "
                        f"got {type(algorithm).__name__}")
    name, colon, option = algorithm.partition(":")
    if name != "auto" and name not in ALGORITHMS:
        raise ValueError(f"unknown sparse algorithm {name!r}; available: auto, "
                         f"{', '.join(ALGORITHMS)} (gtopk with its k: 'gtopk:k=1000')")
    if not colon:
        return name, None
    key, _, value = option.partition("=")
    if name != "gtopk" or key.strip() != "k":
        raise ValueError(f"sparse algorithm {algorithm!r}: only gtopk takes an option, k "
                         "(the entries its result keeps), as in 'gtopk:k=1000'")
    try:
        k = int(value)
    except ValueError:
        k = 0
    if not 1 <= k <= MAX_K:
        raise ValueError(f"sparse algorithm {algorithm!r}: k must be an integer from 1 to "
                         f"2**63 - 1 (the entries gtopk keeps: k=0 keeps none, and the ranks "
                         f"compare k as a 64-bit integer), as in 'gtopk:k=1000'")
    return name, k


def modeled() -> tuple[str, ...]:
    """The exact sparse allreduces, in registration order ("auto" chooses among them)."""
    return tuple(name for name, a in ALGORITHMS.items() if a.exact)


def _host(x: Any) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """numpy copy or view of indices or values (numpy, torch on any device, CuPy; bf16/fp16
    values widened to float32), and how to hand an array back in the caller's kind and device."""
    if is_torch(x):
        import torch

        t = x.detach().reshape(-1)
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()
        dev = t.device
        return t.cpu().numpy(), lambda a: torch.from_numpy(a).to(dev)
    if is_cupy(x):
        import cupy

        dev = x.device
        with dev:
            return cupy.asnumpy(x).reshape(-1), lambda a: _to_cupy(cupy, dev, a)
    return np.asarray(x).reshape(-1), lambda a: a


def _to_cupy(cupy: Any, dev: Any, a: np.ndarray) -> Any:
    with dev:
        return cupy.asarray(a)


def _arguments(indices: Any, values: Any, size: Any, name: str, k: int | None
               ) -> tuple[np.ndarray, np.ndarray, np.dtype, Callable[[np.ndarray], Any]]:
    """A sparse call's arguments checked (the algorithm as :func:`parse` gave it): coalesced
    indices and values, the accumulation dtype, and the function giving a result back in the
    caller's array type."""
    if name == "gtopk" and k is None:
        raise ValueError("algorithm 'gtopk' keeps the k largest sums: name k in it, as in "
                         "algorithm='gtopk:k=1000'")
    if not isinstance(size, int | np.integer) or size < 0:
        raise ValueError(f"size must be a non-negative int, got {size!r}")
    idx_in, _ = _host(indices)
    val_in, back = _host(values)
    if val_in.dtype.kind != "f":
        raise ValueError(f"sparse values must be floating point, got {val_in.dtype}")
    acc = np.dtype(np.float64 if val_in.dtype == np.float64 else np.float32)
    idx, val = coalesce(idx_in, val_in, int(size), acc)
    return idx, val, acc, back


@moved.keywords("sparse_allreduce")
def isparse_allreduce(indices: Any, values: Any, size: int, *, comm: Any = None,
                      algorithm: str = "auto", dense: bool = True,
                      timeout: float | None = None, validate: bool | None = None) -> Handle:
    """Start a sparse allreduce; ``wait()`` returns what ``sparse_allreduce`` returns.

    Example::

        >>> import numpy as np, collectives
        >>> h = collectives.isparse_allreduce(np.array([3]), np.ones(1, np.float32), size=10)
        >>> assert h.wait()[3] == collectives.as_communicator().size
    """
    c = open_comm(comm, timeout, validate)
    check = defaults.validate if validate is None else validate
    with refusing(c, "sparse_allreduce", check or algorithm == "auto", timeout):
        algorithm, k = parse(algorithm)
        idx, val, acc, back = _arguments(indices, values, size, algorithm, k)
    names = list(ALGORITHMS)
    algo_id = Worded(-1 if algorithm == "auto" else names.index(algorithm), algorithm)
    if check or algorithm == "auto":  # one allgather validates and gathers the sizes
        table = agree(c, "sparse_allreduce", {"size": size, "value bytes": acc.itemsize,
                                              "k": -1 if k is None else k,
                                              "algorithm": algo_id}, timeout,
                      shared={"entries": idx.size})
        if algorithm == "auto":
            costmodel.params(c, timeout=timeout)  # a first use fits it, within the deadline
            algorithm = choose(c, int(size), int(table[:, 4].max()), acc.itemsize)
    job = SparseJob(c, c.next_tag(), idx, val, int(size), acc, k,
                    costmodel.sparse_dense_threshold(index_dtype(size).itemsize, acc.itemsize))
    result: dict[str, Any] = {}

    def steps() -> SparseSteps:
        result["set"] = yield from ALGORITHMS[algorithm].run(job)
        return result["set"]

    def finish() -> Any:
        ridx, rval = result["set"]
        if not dense:
            return back(ridx), back(rval)
        out = np.zeros(int(size), acc)
        out[ridx] = rval
        return back(out)

    return Handle(steps(), finish, f"sparse_allreduce[{algorithm}]", timeout)


@moved.keywords("sparse_allreduce")
def sparse_allreduce(indices: Any, values: Any, size: int, *, comm: Any = None,
                     algorithm: str = "auto", dense: bool = True,
                     timeout: float | None = None, validate: bool | None = None) -> Any:
    """Sum sparse vectors over all ranks; every rank gets the same result.

    Args:
        indices, values: this rank's entries (duplicates are summed; may be empty).
        size: length of the dense vector (the same on every rank).
        algorithm: "auto" (the exact algorithm the cost model prices lowest), a name in
            ``ALGORITHMS``, or "gtopk:k=N": a global top-k whose result keeps the N sums of
            largest magnitude (see :func:`parse`).
        dense: return a dense array of ``size`` (default), or (indices, values) sorted.
        validate: check size, value dtype and algorithm (gtopk's k too) agree on every rank in
            the small allgather that also gathers the entry counts (``MismatchError`` on every
            rank). ``validate=False`` skips that allgather unless ``algorithm="auto"`` needs
            it, and checks nothing: ranks that disagree may hang until ``timeout``.

    Values are summed in float32 (float64 for float64 input). Entries whose sum is exactly
    zero may be left out of a sparse result.

    Example::

        >>> import numpy as np, collectives
        >>> c = collectives.as_communicator()
        >>> dense = collectives.sparse_allreduce(np.array([c.rank, 7]), np.ones(2, np.float32),
        ...                                      size=100)
        >>> assert dense[7] == c.size and dense.sum() == 2 * c.size
    """
    return isparse_allreduce(indices, values, size, comm=comm, algorithm=algorithm, dense=dense,
                             timeout=timeout, validate=validate).wait()


def choose(comm: Any, size: int, nnz: int, value_bytes: int) -> str:
    """The sparse algorithm of least predicted time for nnz entries per rank (all ranks
    agree: the fitted parameters and nnz are the same everywhere)."""
    c = costmodel.params(comm)
    ib = index_dtype(size).itemsize
    return min(modeled(),
               key=lambda a: (predict(a, comm.size, size, nnz, c, ib, value_bytes),
                              a))


def predict(algorithm: str, p: int, n: int, k: int, c: CostParams,
                   index_bytes: int = 4, value_bytes: int = 4) -> float:
    """Predicted seconds of a sparse allreduce (formulas: ``collectives.pricing``)."""
    if p <= 1:
        return 0.0
    if algorithm not in ALGORITHMS:
        raise ValueError(f"no price for sparse algorithm {algorithm!r}")
    return ALGORITHMS[algorithm].price(p, n, k, c, index_bytes, value_bytes)
