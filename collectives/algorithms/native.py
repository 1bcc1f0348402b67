"""The engine's own allreduce: MPI_Allreduce ("mpi") or torch.distributed.all_reduce ("torch").

These are the baselines every benchmark compares against, reachable through the same API.
"""

from __future__ import annotations

from .common import Job, Steps


def _native(job: Job, engine: str) -> Steps:
    comm = job.comm
    if comm.engine != engine:
        other = "torch" if engine == "mpi" else "mpi"
        raise ValueError(
            f"algorithm {engine!r} runs on a {engine} communicator, but this call runs on a "
            f"{comm.engine} communicator; use algorithm={other!r} or one of compcoll's own "
            "algorithms (ring, tree, recursive_doubling, rabenseifner)"
        )
    if job.work.size == 0 or comm.size == 1:
        return
    yield [comm.native_iallreduce(job.work, job.dtype, job.op)]  # type: ignore[attr-defined]


def mpi(job: Job) -> Steps:
    """MPI_Iallreduce of the MPI library (fp16/bf16 through a user op with fp32 accumulation)."""
    yield from _native(job, "mpi")


def torch(job: Job) -> Steps:
    """torch.distributed.all_reduce on the process group (gloo or NCCL)."""
    yield from _native(job, "torch")
