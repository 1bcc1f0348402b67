"""One message size of the allreduce benchmark: its buffers, the timed calls and the check."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from collectives import allreduce
from compressors import dtypes

from . import bench_data as data
from .collective_table import COLLECTIVES

BASELINE = "MPI_Allreduce"  # the MPI library's blocking allreduce, called directly


class Case:
    """One message size: the buffers and the calls that reduce them."""

    def __init__(self, comm: Any, dtype: dtypes.DType, op: str, count: int, inplace: bool):
        self.comm, self.dtype, self.op, self.inplace = comm, dtype, op, inplace
        self.send = data.empty(dtype, count)
        self.recv = self.send if inplace else data.empty(dtype, count)
        data.fill(self.send, comm.rank, dtype)

    def call(self, name: str) -> Callable[[], object]:
        if name == BASELINE:
            return self._mpi_allreduce
        return lambda: allreduce(self.send, op=self.op, algorithm=name, comm=self.comm,
                                 out=self.recv, validate=False)

    def _mpi_allreduce(self) -> None:
        from mpi4py import MPI

        # The transport's datatype and op: fp16/bf16 go through the same fp32-accumulating
        # user op as the "mpi" algorithm, so both baselines compute the same thing.
        from collectives.transport.mpi import _MPI_OPS, _MPI_TYPES, _half_op

        if self.dtype.itemsize == 2 and self.dtype.is_float:
            mtype, mop = MPI.UINT16_T, _half_op(self.op, self.dtype)
        else:
            mtype, mop = _MPI_TYPES[self.dtype.name], _MPI_OPS[self.op]
        recv = [data.bits(self.recv), mtype]
        send = MPI.IN_PLACE if self.inplace else [data.bits(self.send), mtype]
        self.comm.comm.Allreduce(send, recv, mop)
        if self.op == "avg":
            self.recv /= self.comm.size

    def check(self, name: str) -> tuple[int, bool]:
        """(#wrong elements over all ranks, all ranks hold the same bits) of one fresh call."""
        data.fill(self.send, self.comm.rank, self.dtype)
        self.call(name)()
        if os.environ.get("COMPCOLL_BENCH_CORRUPT") == name and self.comm.rank == 0:
            data.corrupt(self.recv)
        wrong = COLLECTIVES["allreduce"].check(self.recv, self.comm.size, self.comm.rank,
                                              len(self.recv), self.dtype, self.op)
        world = self.comm.comm
        sums = world.allgather(data.checksum(self.recv))
        return world.allreduce(wrong), len(set(sums)) == 1
