"""The public collectives: allreduce, iallreduce, reduce_scatter, allgather, broadcast."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from . import algorithms, buffers, core, ops, tuning
from .agreement import Worded
from .algorithms import ring, tree, two_level
from .algorithms.common import Job, blocks_from_counts, partition
from .compressed.compression import Compression
from .config import defaults
from .progress import Handle
from .transport import Communicator
from .validation import agree, check_counts, check_root, digest, open_comm, refusing

_OP_CODES = {name: i for i, name in enumerate(ops.SUPPORTED_OPS)}


def _dtype(dtype: Any) -> Worded:
    """A validated dtype: its code, named in a mismatch."""
    return Worded(dtype.code, dtype.name)


def _op(op: str) -> Worded:
    return Worded(_OP_CODES[op], op)


def _validate(comm: Communicator, collective: str, fields: dict[str, int],
              timeout: float | None) -> np.ndarray:
    """Check that every rank passed the same ``fields``; raise MismatchError on every rank."""
    return agree(comm, collective, fields, timeout)


def _checks(c: Communicator, path: str, validate: bool | None,
            timeout: float | None) -> Any:
    """Context of a call's local argument checks (see ``validation.refusing``)."""
    return refusing(c, path, defaults.validate if validate is None else validate, timeout)


def _job(comm: Communicator, work: np.ndarray, dtype: Any, op: str, collective: str) -> Job:
    seg = max(1, defaults.segment_bytes // dtype.itemsize)
    return Job(comm, work, dtype, op, comm.next_tag(), seg, collective)


def iallreduce(buf: Any, *, op: str = "sum", algorithm: str = "auto", comm: Any = None,
               out: Any = None, timeout: float | None = None, validate: bool | None = None,
               compress: Any = None, **compression: Any) -> Handle:
    """Start an allreduce; ``wait()`` on the returned handle gives the result.

    Same arguments as :func:`allreduce` (``compression``: its compression keywords). Every
    rank must start its nonblocking collectives in the same order; several may be in flight
    at once.

    Example::

        >>> import numpy as np, collectives
        >>> a, b = np.ones(1000, np.float32), np.arange(10.0)
        >>> h1 = collectives.iallreduce(a, algorithm="ring")
        >>> h2 = collectives.iallreduce(b, op="max")  # both in flight
        >>> total, largest = h1.wait(), h2.wait()
        >>> assert total[0] == collectives.as_communicator().size and largest[9] == 9.0
    """
    c = open_comm(comm, timeout, validate)
    if compress is not None or compression:
        with _checks(c, "compressed allreduce", validate, timeout):
            call = Compression.of(compress, **compression)
        if call is not None:
            return core.icompressed_allreduce(c, buf, call, op=op, out=out, algorithm=algorithm,
                                              timeout=timeout, validate=validate)
    hierarchy = compression.get("hierarchy", "auto")  # (no compressor: the dense call's)
    if algorithm == "mpi" and c.engine == "mpi":
        direct = buffers.prepare_direct(buf, out, str(op).lower())
        if direct is not None:
            return _direct_mpi(c, direct, ops.check_op(op, direct.dtype), timeout, validate)
    with _checks(c, "allreduce", validate, timeout):
        prepared = buffers.prepare(buf, out)
        dtype = prepared.dtype
        op = ops.check_op(op, dtype)
        name = algorithm
        if name != "auto":
            algorithms.get(name)
        if name == "two_level":
            two_level.cross_algorithm()  # a bad CROSS is refused here, on every rank
        if hierarchy != "auto":
            raise ValueError(f"hierarchy={hierarchy!r} chooses how a compressed allreduce "
                             "crosses hosts; without a compressor pass algorithm='two_level' "
                             "(or 'auto')")
    if defaults.validate if validate is None else validate:
        algo_id = Worded(-1 if name == "auto" else algorithms.names().index(name), name)
        # the cross-host step of two_level (and of auto, which may pick it) must agree too
        cross = digest(two_level.CROSS) if name in ("auto", "two_level") else 0
        _validate(c, "allreduce", {"element count": prepared.work.size, "dtype": _dtype(dtype),
                                   "op": _op(op), "algorithm": algo_id,
                                   "two_level.CROSS (cross-host algorithm)": cross}, timeout)
    if name == "auto":
        name = tuning.choose(c, prepared.work.size * dtype.itemsize, timeout=timeout)
    if name == "two_level":  # its set-up collectives now, in call order, before its messages
        two_level.prepare(c, timeout=timeout)
    job = _job(c, prepared.work, dtype, op, f"allreduce[{name}]")
    ops.prescale(job.work, dtype, op, c.size)

    def finish() -> Any:
        ops.finish(job.work, dtype, op, c.size)
        return prepared.finish()

    return Handle(algorithms.get(name).run(job), finish, job.collective, timeout)


def _direct_mpi(c: Communicator, direct: buffers.Direct, op: str, timeout: float | None,
                validate: bool | None) -> Handle:
    """CUDA-aware MPI_Iallreduce straight on device memory (see buffers.prepare_direct)."""
    if defaults.validate if validate is None else validate:
        _validate(c, "allreduce", {"element count": direct.count, "dtype": _dtype(direct.dtype),
                                   "op": _op(op),
                                   "algorithm": algorithms.names().index("mpi")}, timeout)
    c.next_tag()  # keep the collective sequence in step with ranks that took another path
    req = c.native_iallreduce_device(direct.send, direct.recv, direct.count,  # type: ignore[attr-defined]
                                     direct.dtype, op)
    return Handle(iter([[req]]), lambda: direct.result, "allreduce[mpi, device]", timeout)


def allreduce(buf: Any, *, op: str = "sum", algorithm: str = "auto", comm: Any = None,
              out: Any = None, timeout: float | None = None, validate: bool | None = None,
              compress: Any = None, **compression: Any) -> Any:
    """Reduce ``buf`` over all ranks of ``comm``; every rank gets the same bits.

    Args:
        buf: numpy array, torch tensor (CPU or CUDA, contiguous or not), CuPy array, or any
            object with ``__cuda_array_interface__``. Left untouched unless ``out is buf``.
        op: "sum", "avg", "min", "max" or "prod" ("avg" needs a floating-point dtype).
        algorithm: "auto" (the cost model picks, flat or two-level), "ring", "tree",
            "recursive_doubling", "rabenseifner", "two_level" (reduce-scatter inside each
            host, shards allreduced across hosts by ``two_level.CROSS``, allgather inside
            the host), or the engines' own "mpi" / "torch".
        comm: None (the job: MPI.COMM_WORLD, or under torchrun the initialized
            torch.distributed default group), an mpi4py communicator, a torch.distributed
            ProcessGroup, or a :class:`collectives.Communicator`.
        out: where to write the result (same type, shape and dtype); ``out=buf`` is in place.
            None allocates a new array of the caller's type on the caller's device (on the
            host, of 1 MiB or more, in memory a result dropped earlier left mapped:
            ``collectives.resultpool``; never memory the caller still refers to through
            Python objects: a raw address kept alone is not a reference, see there).
        timeout: seconds any single wait may block before ``CollectiveTimeout`` (a positive
            finite number; None: ``collectives.defaults.timeout``). After a timeout the
            communicator raises ``CommunicatorUnusable`` on every later call.
        validate: check first, in one small allgather, that every rank makes the same call
            with every argument that changes what ranks exchange (count, dtype, op,
            algorithm and, where it may run two_level, ``two_level.CROSS``; with a compressor
            also its spec, scheme, feedback, sparse_algorithm, hierarchy, and name and step
            where they seed shared randomness); a mismatch raises
            ``MismatchError`` on every rank. Default ``collectives.defaults.validate``.
            ``validate=False`` saves that allgather and checks nothing: ranks that disagree
            may then hang until ``timeout`` or get different results.
        compress: compress before communicating: a :class:`collectives.Compression` (the
            whole compressed call as one value, checked when built), a
            ``compressors.Compressor`` or a spec such as ``"uniform:bits=8"`` or
            ``"topk:ratio=0.01"`` (see ``collectives.compressed``). The keywords below are
            the same value's fields, written out (``collectives.core`` shows the path).
        compressor: the compressor, as ``compress=`` takes it.
        feedback: a ``compressors.ErrorFeedback`` keeping this tensor's residual (needs name).
        scheme: "auto", "dense", "reduce_scatter_allgather", "allgather" or "sparse".
        name, step: the tensor's name (error-feedback key, seeds) and the training step.
        sparse_algorithm: the sparse scheme's allreduce ("auto", a name, "gtopk:k=N").
        stats: a dict to fill with the scheme used, compress/decompress seconds and bytes sent.
        hierarchy: how a compressed allreduce crosses hosts. "two_level": reduce-scatter
            inside each host in the buffer's own precision, each local rank compresses its
            own shard and allreduces it across hosts with ``scheme`` (error feedback keyed
            ``f"{name}@shard{local_rank}"``, kept by the rank that sends that shard), then
            allgather inside the host: only what crosses hosts is compressed. "flat": every
            rank compresses the whole buffer and the scheme runs over all ranks. "auto"
            (default): two-level where the job has several hosts, each with the same number
            (more than one) of ranks; flat on one host, with one rank per host, on hosts of
            different sizes (their shards would not line up) and for compressors that
            compress matrices (PowerSGD: a shard is no matrix). Without a compressor it must
            stay "auto": pass ``algorithm="two_level"`` instead.

    Example::

        >>> from mpi4py import MPI
        >>> import numpy as np, collectives
        >>> x = np.full(1000, MPI.COMM_WORLD.rank, dtype=np.float32)
        >>> y = collectives.allreduce(x, op="sum", algorithm="ring")
    """
    return iallreduce(buf, op=op, algorithm=algorithm, comm=comm, out=out, timeout=timeout,
                      validate=validate, compress=compress, **compression).wait()


def reduce_scatter(buf: Any, *, op: str = "sum", comm: Any = None,
                   counts: list[int] | None = None, timeout: float | None = None,
                   validate: bool | None = None) -> Any:
    """Reduce ``buf`` over all ranks and return this rank's block of the result (flattened).

    Blocks follow ``counts`` (one per rank, summing to ``buf``'s size) or, by default, a
    balanced split whose sizes differ by at most one element. Ring algorithm, pipelined.

    Example::

        >>> import numpy as np, collectives
        >>> p = collectives.as_communicator().size
        >>> mine = collectives.reduce_scatter(np.ones(10 * p, np.float32))
        >>> assert mine.size == 10 and (mine == p).all()
    """
    c = open_comm(comm, timeout, validate)
    with _checks(c, "reduce_scatter", validate, timeout):
        prepared = buffers.prepare(buf, None)
        dtype, n = prepared.dtype, prepared.work.size
        op = ops.check_op(op, dtype)
        if counts is None:
            blocks = partition(n, c.size)
        else:
            counts = check_counts(counts, c.size, n)
            blocks = blocks_from_counts(counts)
    if defaults.validate if validate is None else validate:
        _validate(c, "reduce_scatter", {"element count": n, "dtype": _dtype(dtype),
                                        "op": _op(op),
                                        "counts": -1 if counts is None else
                                        Worded(zlib.crc32(np.asarray(counts, np.int64).tobytes()),
                                               str(list(map(int, counts))))},
                  timeout)
    job = _job(c, prepared.work, dtype, op, "reduce_scatter")
    ops.prescale(job.work, dtype, op, c.size)
    Handle(ring.reduce_scatter(job, blocks), lambda: None, job.collective, timeout).wait()
    lo, hi = blocks[c.rank]
    mine = job.work[lo:hi].copy()
    ops.finish(mine, dtype, op, c.size)
    return buffers.like(buf, mine, dtype)


def allgather(buf: Any, *, comm: Any = None, timeout: float | None = None) -> Any:
    """Concatenate every rank's ``buf`` (flattened, sizes may differ) in rank order.

    One small allgather exchanges the sizes and checks the dtypes agree, then a pipelined ring
    moves the data. Returns a 1-D array of the caller's type.

    Example::

        >>> import numpy as np, collectives
        >>> c = collectives.as_communicator()
        >>> every = collectives.allgather(np.full(c.rank + 1, c.rank))  # sizes may differ
        >>> assert every.size == c.size * (c.size + 1) // 2
    """
    c = open_comm(comm, timeout)
    with _checks(c, "allgather", True, timeout):
        prepared = buffers.prepare(buf, None)
    dtype = prepared.dtype
    table = agree(c, "allgather", {"dtype": _dtype(dtype)}, timeout,
                  shared={"element count": prepared.work.size})
    sizes = table[:, 1]
    blocks = blocks_from_counts(sizes.tolist())
    work = np.empty(int(sizes.sum()), dtype=dtype.raw)
    lo, hi = blocks[c.rank]
    work[lo:hi] = prepared.work
    job = _job(c, work, dtype, "sum", "allgather")
    Handle(ring.allgather(job, blocks), lambda: None, job.collective, timeout).wait()
    return buffers.like(buf, work, dtype)


def broadcast(buf: Any, *, root: int = 0, comm: Any = None, timeout: float | None = None,
              validate: bool | None = None) -> Any:
    """Broadcast ``buf`` from ``root`` to every rank, in place; returns ``buf``.

    Binomial tree, segmented so that large buffers stream down the tree.

    Example::

        >>> import numpy as np, collectives
        >>> x = np.full(5, collectives.as_communicator().rank, np.int64)
        >>> assert (collectives.broadcast(x, root=0) == 0).all()
    """
    c = open_comm(comm, timeout, validate)
    with _checks(c, "broadcast", validate, timeout):
        root = check_root(root, c.size)
        prepared = buffers.prepare(buf, buf)
    dtype = prepared.dtype
    if defaults.validate if validate is None else validate:
        _validate(c, "broadcast", {"element count": prepared.work.size, "dtype": _dtype(dtype),
                                   "root": root}, timeout)
    job = _job(c, prepared.work, dtype, "sum", "broadcast")
    Handle(tree.broadcast(job, root), prepared.finish, job.collective, timeout).wait()
    return buf
