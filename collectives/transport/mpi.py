"""Transport over an mpi4py communicator."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from compressors.dtypes import DType

from ..errors import TransportError
from ..ops import combine
from .base import Communicator, Request

_MPI_TYPES = {
    "float32": MPI.FLOAT, "float64": MPI.DOUBLE, "int8": MPI.INT8_T, "uint8": MPI.UINT8_T,
    "int32": MPI.INT32_T, "int64": MPI.INT64_T,
}
_MPI_OPS = {"sum": MPI.SUM, "avg": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}
_HALF_OPS: dict[tuple[str, int], MPI.Op] = {}


def _half_op(op: str, dtype: DType) -> MPI.Op:
    """A user-defined MPI op reducing fp16/bf16 (carried as uint16) with our fp32 kernel."""
    key = (op, dtype.code)
    if key not in _HALF_OPS:
        def reduce(inbuf, inoutbuf, datatype):  # noqa: ARG001
            src = np.frombuffer(inbuf, dtype=np.uint16)
            dst = np.frombuffer(inoutbuf, dtype=np.uint16)
            combine(dst, src, dtype, op)

        _HALF_OPS[key] = MPI.Op.Create(reduce, commute=True)
    return _HALF_OPS[key]


def _type_and_op(dtype: DType, op: str) -> tuple[MPI.Datatype, MPI.Op]:
    """MPI datatype and op for a reduction (fp16/bf16: uint16 carrier + our fp32 user op)."""
    if dtype.itemsize == 2 and dtype.is_float:
        return MPI.UINT16_T, _half_op(op, dtype)
    return _MPI_TYPES[dtype.name], _MPI_OPS[op]


class _MPIRequest(Request):
    __slots__ = ("_req", "_done", "_keep")

    def __init__(self, req: MPI.Request, peer: int | None, what: str, keep: object = None):
        super().__init__(peer, what)
        self._req = req
        self._done = False
        self._keep = keep  # buffers must outlive the request

    @property
    def seen_done(self) -> bool:
        return self._done

    def test(self) -> bool:
        if not self._done:
            try:
                self._done = self._req.Test()
            except MPI.Exception as exc:
                raise TransportError(f"MPI error during {self.what}: {exc}") from exc
            if self._done:
                self._keep = None
        return self._done


def _bytes(buf: np.ndarray) -> list:
    return [buf, buf.nbytes, MPI.BYTE]


class MPICommunicator(Communicator):
    """compcoll transport on an ``mpi4py.MPI.Comm`` (intracommunicator)."""

    engine = "mpi"

    def __init__(self, comm: MPI.Comm | None = None) -> None:
        super().__init__()
        self.comm = MPI.COMM_WORLD if comm is None else comm
        if not isinstance(self.comm, MPI.Intracomm):
            raise TypeError(f"need an MPI intracommunicator, got {type(self.comm).__name__}")
        self._rank = self.comm.Get_rank()
        self._size = self.comm.Get_size()
        ub = self.comm.Get_attr(MPI.TAG_UB)
        self.max_tag = min(int(ub) if ub else 32767, 1 << 20)
        # The error handler turns MPI failures into Python exceptions instead of aborting.
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        if MPI.COMM_WORLD.Get_size() > 1:
            from ..abort import install

            install(lambda code: MPI.COMM_WORLD.Abort(code))

    def isend(self, buf: np.ndarray, dest: int, tag: int, what: str = "send") -> Request:
        self.check_usable()
        self._count_sent(buf.nbytes)
        try:
            req = self.comm.Isend(_bytes(buf), dest, tag)
        except MPI.Exception as exc:
            raise self._engine_error(f"MPI_Isend to rank {dest} failed", exc) from exc
        return self._track(_MPIRequest(req, dest, what, buf))

    def irecv(self, buf: np.ndarray, source: int, tag: int, what: str = "recv") -> Request:
        self.check_usable()
        try:
            req = self.comm.Irecv(_bytes(buf), source, tag)
        except MPI.Exception as exc:
            raise self._engine_error(f"MPI_Irecv from rank {source} failed", exc) from exc
        return self._track(_MPIRequest(req, source, what, buf))

    def iallgather_ints(self, values: np.ndarray, out: np.ndarray) -> Request:
        self.check_usable()
        try:
            req = self.comm.Iallgather([values, MPI.INT64_T], [out, MPI.INT64_T])
        except MPI.Exception as exc:
            raise self._engine_error("MPI_Iallgather failed", exc) from exc
        return self._track(_MPIRequest(req, None, "allgather of metadata", (values, out)))

    def native_iallreduce(self, buf: np.ndarray, dtype: DType, op: str) -> Request:
        """MPI_Iallreduce in place on ``buf`` (the MPI library's own algorithm)."""
        self.check_usable()
        mpi_type, mpi_op = _type_and_op(dtype, op)
        try:
            req = self.comm.Iallreduce(MPI.IN_PLACE, [buf, buf.size, mpi_type], mpi_op)
        except MPI.Exception as exc:
            raise self._engine_error("MPI_Iallreduce failed", exc) from exc
        return self._track(_MPIRequest(req, None, "MPI_Iallreduce", buf))

    def native_iallreduce_device(self, send: object, recv: object, count: int, dtype: DType,
                                 op: str) -> Request:
        """MPI_Iallreduce on device arrays (CUDA-aware MPI); ``send=None`` means in place."""
        self.check_usable()
        mpi_type, mpi_op = _type_and_op(dtype, op)
        spec = MPI.IN_PLACE if send is None else [send, count, mpi_type]
        try:
            req = self.comm.Iallreduce(spec, [recv, count, mpi_type], mpi_op)
        except MPI.Exception as exc:
            raise self._engine_error("MPI_Iallreduce on device buffers failed", exc) from exc
        return self._track(_MPIRequest(req, None, "MPI_Iallreduce (device buffers)",
                                       (send, recv)))

    def native_allreduce(self, buf: np.ndarray, dtype: DType, op: str) -> None:
        """Blocking MPI_Allreduce in place (the baseline the benchmarks compare against)."""
        self.check_usable()
        mpi_type, mpi_op = _type_and_op(dtype, op)
        try:
            self.comm.Allreduce(MPI.IN_PLACE, [buf, buf.size, mpi_type], mpi_op)
        except MPI.Exception as exc:
            raise self._engine_error("MPI_Allreduce failed", exc) from exc

    def split(self, color: int, key: int) -> MPICommunicator:
        """A sub-communicator (MPI_Comm_split)."""
        self.check_usable()
        return MPICommunicator(self.comm.Split(color, key))

    def _split(self, color: int | None, key: int, groups: list[list[int]],
               timeout: float | None) -> MPICommunicator | None:
        """MPI_Comm_split (MPI ranks the members by key, then by rank, as ``groups`` does)."""
        self.check_usable()
        try:
            sub = self.comm.Split(MPI.UNDEFINED if color is None else color, key)
        except MPI.Exception as exc:
            raise self._engine_error("MPI_Comm_split failed", exc) from exc
        return None if sub == MPI.COMM_NULL else MPICommunicator(sub)

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)
