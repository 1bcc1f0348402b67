"""Transport over a torch.distributed process group (gloo on CPU, NCCL on GPU).

compcoll's algorithms work on host arrays. gloo takes them as they are (zero-copy CPU tensors);
NCCL only moves device memory, so on an NCCL group every message is staged through a tensor
on the rank's current CUDA device: copied there before a send, and back into the host array
once a receive has completed.

NCCL runs a pair's sends and receives in posting order on one stream (``orders_pairs``): the
sends and receives an algorithm posts inside ``grouped()`` are launched together through
``batch_isend_irecv``, and each request of the group completes with the whole group.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import numpy as np

from compressors.arrays import torch_from_raw
from compressors.dtypes import DType

from ..config import resolve_timeout
from ..errors import CommunicatorUnusable, TransportError
from .base import Communicator, Request


def _torch():
    import torch
    import torch.distributed as dist

    return torch, dist


class _Batch:
    """The works of one ``batch_isend_irecv`` as one work: completed when all are. Each work is
    waited on once (a second wait on a finished gloo send or receive blocks for ever), however
    many of the group's requests wait."""

    def __init__(self) -> None:
        self.works: list[Any] | None = None  # None until the group is launched
        self._waited = 0  # works[:_waited] have returned from wait()

    def is_completed(self) -> bool:
        return self.works is not None and all(
            i < self._waited or w.is_completed() for i, w in enumerate(self.works))

    def wait(self, timeout: timedelta | None = None) -> bool:
        if self.works is None:
            raise RuntimeError("a request of a group was waited on before the group was "
                               "launched (wait after the grouped() block)")
        while self._waited < len(self.works):
            w = self.works[self._waited]
            if timeout is None:
                w.wait()
            else:
                w.wait(timeout=timeout)
            self._waited += 1
        return True


class _WorkRequest(Request):
    __slots__ = ("_work", "_done", "_keep", "_land")

    def __init__(self, work: Any, peer: int | None, what: str, keep: object = None,
                 land: Any = None) -> None:
        super().__init__(peer, what)
        self._work = work
        self._done = False
        self._keep = keep
        self._land = land  # staged receive: copies the staging tensor into the host array

    def _finish(self) -> None:
        self._done = True
        if self._land is not None:
            land, self._land = self._land, None
            land()
        self._keep = None

    @property
    def seen_done(self) -> bool:
        return self._done

    def test(self) -> bool:
        if not self._done:
            try:
                if self._work.is_completed():
                    self._work.wait()  # surfaces an error the work finished with
                    self._finish()
            except RuntimeError as exc:
                raise TransportError(f"torch.distributed error during {self.what}: {exc}") from exc
        return self._done

    blocking = True  # gloo's send/recv work only completes inside wait()

    def block(self, seconds: float) -> bool:
        if self._done:
            return True
        try:
            self._work.wait(timeout=timedelta(seconds=seconds))
        except RuntimeError as exc:
            if "imeout" in str(exc) or "timed out" in str(exc).lower():
                return False
            raise TransportError(f"torch.distributed error during {self.what}: {exc}") from exc
        self._finish()
        return True


class TorchCommunicator(Communicator):
    """compcoll transport on a ``torch.distributed`` ProcessGroup (None = the default group)."""

    engine = "torch"

    def __init__(self, group: Any = None, stage_device: Any = None) -> None:
        """``stage_device``: where messages are staged (default: the current CUDA device on an
        NCCL group, none on gloo; "cpu" stages through CPU tensors, which tests use)."""
        super().__init__()
        torch, dist = _torch()
        if not dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is not initialized: call torch.distributed.init_process_group"
                "(backend='gloo') first (torchrun sets the environment), or pass an MPI comm"
            )
        group = group if group is not None else dist.group.WORLD
        # Held weakly: destroy_process_group must free the group (and join gloo's threads)
        # then, not at interpreter exit, where a gloo thread releasing a finished work's
        # tensors would need the GIL that finalization no longer hands out (an abort).
        self._group = weakref.ref(group)
        self._rank = dist.get_rank(self.group)
        self._size = dist.get_world_size(self.group)
        self._global = [dist.get_global_rank(self.group, r) for r in range(self._size)]
        self.backend = str(dist.get_backend(self.group))
        if stage_device is None and self.backend == "nccl":
            stage_device = torch.device("cuda", torch.cuda.current_device())
        self.stage_device = None if stage_device is None else torch.device(stage_device)
        self.matches_by_tag = self.backend != "nccl"  # NCCL ignores tags
        self.orders_pairs = self.backend == "nccl"  # one stream per pair of ranks
        self._local = threading.local()  # the group being collected on this thread

    @property
    def group(self) -> Any:
        """The torch.distributed group (raises once it was destroyed)."""
        group = self._group()
        if group is None:
            raise CommunicatorUnusable(
                "the torch.distributed process group of this communicator was destroyed "
                "(destroy_process_group); pass the new group, or comm=None after "
                "init_process_group")
        return group

    def _tensor(self, buf: np.ndarray):
        torch, _ = _torch()
        return torch.from_numpy(buf.reshape(-1).view(np.uint8))

    def _out(self, host: Any, read_too: bool = False) -> tuple[Any, Any]:
        """The tensor the engine writes into for ``host`` (``read_too``: and reads from), and
        how to land it there after."""
        if self.stage_device is None:
            return host, None
        torch, _ = _torch()
        staged = (host.to(self.stage_device, copy=True) if read_too else
                  torch.empty_like(host, device=self.stage_device))

        def land() -> None:
            host.copy_(staged)  # a device->host copy waits for the engine's stream

        return staged, land

    def _in(self, host: Any) -> Any:
        """The tensor the engine reads ``host`` from (a staged copy on NCCL)."""
        return host if self.stage_device is None else host.to(self.stage_device, copy=True)

    # -- the engine's calls (a subclass on a bare ProcessGroup object replaces these) ------
    def _send(self, t: Any, dest: int, tag: int) -> Any:
        _, dist = _torch()
        return dist.isend(t, self._global[dest], group=self.group, tag=tag)

    def _recv(self, t: Any, source: int, tag: int) -> Any:
        _, dist = _torch()
        return dist.irecv(t, self._global[source], group=self.group, tag=tag)

    def _gather(self, dst: Any, src: Any) -> Any:
        _, dist = _torch()
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return gather(dst, src, group=self.group, async_op=True)

    def _allreduce(self, t: Any, rop: Any) -> Any:
        _, dist = _torch()
        return dist.all_reduce(t, op=rop, group=self.group, async_op=True)

    @contextmanager
    def grouped(self):  # type: ignore[override]
        """See ``Communicator.grouped``: on NCCL the sends and receives posted inside are
        launched at its end by one ``batch_isend_irecv``; elsewhere each is posted at once."""
        if not self.orders_pairs or getattr(self._local, "ops", None) is not None:
            yield  # nothing to group, or inside an enclosing group: that one launches
            return
        self._local.ops, batch = [], _Batch()
        self._local.batch = batch
        try:
            yield
        finally:
            ops, self._local.ops = self._local.ops, None
            if ops:
                self._launch(ops, batch)

    def _launch(self, ops: list[Any], batch: _Batch) -> None:
        _, dist = _torch()
        try:
            batch.works = list(dist.batch_isend_irecv(ops))
        except RuntimeError as exc:
            raise self._engine_error("torch.distributed.batch_isend_irecv failed", exc) from exc

    def _grouping(self, kind: str, t: Any, peer: int, tag: int) -> _Batch | None:
        """The group's batch after adding this operation to it, or None outside a group."""
        ops = getattr(self._local, "ops", None)
        if ops is None:
            return None
        _, dist = _torch()
        fn = dist.isend if kind == "send" else dist.irecv
        ops.append(dist.P2POp(fn, t, self._global[peer], group=self.group, tag=tag))
        return self._local.batch

    def isend(self, buf: np.ndarray, dest: int, tag: int, what: str = "send") -> Request:
        self.check_usable()
        t = self._in(self._tensor(buf))
        self._count_sent(buf.nbytes)
        batch = self._grouping("send", t, dest, tag)
        if batch is not None:
            return self._track(_WorkRequest(batch, dest, what, t))
        try:
            work = self._send(t, dest, tag)
        except RuntimeError as exc:
            raise self._engine_error(f"torch.distributed.isend to rank {dest} failed", exc) from exc
        return self._track(_WorkRequest(work, dest, what, t))

    def irecv(self, buf: np.ndarray, source: int, tag: int, what: str = "recv") -> Request:
        self.check_usable()
        t, land = self._out(self._tensor(buf))
        batch = self._grouping("recv", t, source, tag)
        if batch is not None:
            return self._track(_WorkRequest(batch, source, what, t, land))
        try:
            work = self._recv(t, source, tag)
        except RuntimeError as exc:
            raise self._engine_error(f"torch.distributed.irecv from rank {source} failed",
                                     exc) from exc
        return self._track(_WorkRequest(work, source, what, t, land))

    def iallgather_bytes(self, data: np.ndarray, out: np.ndarray) -> Request | None:
        """``all_gather_into_tensor`` of uint8 blocks (see ``Communicator.iallgather_bytes``),
        on a communicator whose messages keep their posting order (NCCL)."""
        if not self.orders_pairs:
            return None
        self.check_usable()
        src = self._in(self._tensor(data))
        dst, land = self._out(self._tensor(out))
        self._count_sent((self._size - 1) * data.nbytes)
        try:
            work = self._gather(dst, src)
        except RuntimeError as exc:
            raise self._engine_error("torch.distributed all_gather_into_tensor failed",
                                     exc) from exc
        return self._track(_WorkRequest(work, None, "allgather of payloads", (src, dst), land))

    def iallgather_ints(self, values: np.ndarray, out: np.ndarray) -> Request:
        self.check_usable()
        torch, _ = _torch()
        src = self._in(torch.from_numpy(values))
        dst, land = self._out(torch.from_numpy(out.reshape(-1)))
        try:
            work = self._gather(dst, src)
        except RuntimeError as exc:
            raise self._engine_error("torch.distributed all_gather failed", exc) from exc
        return self._track(_WorkRequest(work, None, "allgather of metadata", (src, dst), land))

    def native_iallreduce(self, buf: np.ndarray, dtype: DType, op: str) -> Request:
        """torch.distributed.all_reduce in place on ``buf`` (the engine's own algorithm)."""
        self.check_usable()
        torch, dist = _torch()
        t = torch_from_raw(buf, dtype.name)
        rop = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
               "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op]
        staged, land = self._out(t, read_too=True)
        try:
            work = self._allreduce(staged, rop)
        except RuntimeError as exc:
            raise self._engine_error("torch.distributed.all_reduce failed", exc) from exc
        return self._track(_WorkRequest(work, None, "torch all_reduce", staged, land))

    def split(self, ranks: list[int], timeout: float = 300.0) -> TorchCommunicator | None:
        """A sub-group of the given group ranks (every rank must call it); None if not a member."""
        self.check_usable()
        _, dist = _torch()
        pg = dist.new_group([self._global[r] for r in ranks], timeout=timedelta(seconds=timeout))
        return TorchCommunicator(pg, self.stage_device) if self._rank in ranks else None

    def _split(self, color: int | None, key: int, groups: list[list[int]],
               timeout: float | None) -> TorchCommunicator | None:
        """One new_group per group, every rank creating every group in the same order: on
        torch.distributed that is collective over the whole job, so only a communicator of
        the whole job can be split."""
        self.check_usable()
        _, dist = _torch()
        if self._size != dist.get_world_size():
            raise ValueError(
                f"a torch.distributed group of {self._size} of the job's "
                f"{dist.get_world_size()} ranks cannot be split into sub-groups (every rank "
                "of the job must create each one); use the default group or an MPI "
                "communicator, or a flat algorithm (ring, rabenseifner, ...)")
        seconds = timedelta(seconds=resolve_timeout(timeout))
        mine = None
        for ranks in groups:
            members = [self._global[r] for r in ranks]
            order = {} if members == sorted(members) else {"sort_ranks": False}
            try:
                pg = dist.new_group(members, timeout=seconds, **order)
            except RuntimeError as exc:
                raise self._engine_error("torch.distributed.new_group failed", exc) from exc
            if self._rank in ranks:
                mine = TorchCommunicator(pg, self.stage_device)
                mine.matches_by_tag = mine.matches_by_tag and self.matches_by_tag
        return mine

    def abort(self, code: int = 1) -> None:
        import os

        os._exit(code)


class ProcessGroupCommunicator(TorchCommunicator):
    """compcoll transport on a bare ``ProcessGroup`` object that torch.distributed does not
    know as a group (the ``compcoll`` backend's own gloo group): its methods are called
    directly, with group ranks.

    ``store`` (a key-value store of the group's ranks, keys of its own) lets it be split:
    each sub-communicator is a gloo group that only its members create, on keys under
    ``store`` that no other split uses; ``timeout`` is their gloo operations' deadline."""

    def __init__(self, pg: Any, store: Any = None, timeout: timedelta | None = None) -> None:
        Communicator.__init__(self)
        self._pg = pg  # owned by the backend's process group, which owns this communicator
        self._rank, self._size = int(pg.rank()), int(pg.size())
        self._global = list(range(self._size))
        self.backend = str(pg.name()) if hasattr(pg, "name") else "gloo"
        self.stage_device = None
        self.matches_by_tag = True
        self.orders_pairs = False
        self._local = threading.local()
        self._store, self._timeout = store, timeout
        self._splits = 0  # splits so far: the same count on every rank (each is collective)

    @property
    def group(self) -> Any:
        return self._pg

    def _send(self, t: Any, dest: int, tag: int) -> Any:
        return self.group.send([t], dest, tag)

    def _recv(self, t: Any, source: int, tag: int) -> Any:
        return self.group.recv([t], source, tag)

    def _gather(self, dst: Any, src: Any) -> Any:
        return allgather_base(self.group, dst, src)

    def _allreduce(self, t: Any, rop: Any) -> Any:
        _, dist = _torch()
        opts = dist.AllreduceOptions()
        opts.reduceOp = rop
        return self.group.allreduce([t], opts)

    def _split(self, color: int | None, key: int, groups: list[list[int]],
               timeout: float | None) -> ProcessGroupCommunicator | None:
        """This rank's group of ``groups`` as a new gloo group (its members create it, on keys
        of this split and group; every rank of this communicator calls it, in the same order
        with respect to the other splits)."""
        self.check_usable()
        if self._store is None:
            raise TypeError("a bare process group without a store cannot be split into "
                            "sub-communicators: pass a torch.distributed group or an MPI "
                            "communicator, or use a flat algorithm (ring, rabenseifner, ...)")
        _, dist = _torch()
        self._splits += 1
        wait = self._timeout or timedelta(seconds=resolve_timeout(timeout))
        for index, ranks in enumerate(groups):
            if self._rank not in ranks:
                continue
            store = dist.PrefixStore(f"split{self._splits}.{index}", self._store)
            try:
                pg = dist.ProcessGroupGloo(dist.PrefixStore("gloo", store),
                                           ranks.index(self._rank), len(ranks), wait)
            except RuntimeError as exc:
                raise self._engine_error("gloo group creation (split) failed", exc) from exc
            return ProcessGroupCommunicator(pg, store, self._timeout)
        return None

    def split(self, ranks: list[int], timeout: float = 300.0) -> TorchCommunicator | None:
        """A sub-group of ``ranks`` (every rank calls it; None where not a member)."""
        return self._split(None, 0, [list(ranks)], timeout)


# -- the single-tensor collectives of a c10d backend object ---------------------------------
# An inner gloo group (``dist.ProcessGroupGloo``) is a backend, not a ProcessGroup registered
# with torch.distributed: ``dist.all_gather_into_tensor`` / ``reduce_scatter_tensor`` cannot
# take it, and its only binding of them is the private one. Reached here alone.

def allgather_base(backend: Any, output: Any, input: Any, opts: Any = None) -> Any:  # noqa: A002
    """``dist.all_gather_into_tensor`` on ``backend`` (its default options where None)."""
    if opts is None:
        from torch._C._distributed_c10d import AllgatherOptions  # not re-exported by dist

        opts = AllgatherOptions()
    return backend._allgather_base(output, input, opts)


def reduce_scatter_base(backend: Any, output: Any, input: Any, opts: Any) -> Any:  # noqa: A002
    """``dist.reduce_scatter_tensor`` on ``backend``."""
    return backend._reduce_scatter_base(output, input, opts)
