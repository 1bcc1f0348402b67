"""The hook's fast path: a bucket whose plan is one 16-bit format (or none) throughout goes as
PyTorch's own hooks send it.

``fp16``/``bf16``: cast the bucket, divide by the world size, allreduce it with the engine's
own collective and copy the result back, chained with ``then()`` (PyTorch's
``fp16_compress_hook``/``bf16_compress_hook``, operation for operation: the same bits).
``none`` (and the warm-up steps) where the plain allreduce is the engine's own: the bucket,
already divided as DDP divides it, through the engine's allreduce. No background thread, no
per-parameter work, no copy beyond the cast; the arguments are compared across ranks once per
bucket layout, not every step.

A 16-bit format needs no error feedback (its rounding is within 2^-8 of each value, and
PyTorch's hooks keep none): a residual left from an earlier compressor is sent once on the
general path, then this path takes over.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ..transport.torch_dist import ProcessGroupCommunicator, TorchCommunicator
from ..validation import agree, digest

#: The 16-bit formats this path sends, by canonical spec.
HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}


def serves(comm: Any) -> bool:
    """Whether the communicator is a torch.distributed group whose own allreduce this path
    may post (gloo or NCCL). Where messages match by tag it posts from the training thread at
    once; where they match in posting order (NCCL) it posts there only while the hook's worker
    is idle, and otherwise from the worker behind its collectives (``hook.compression_hook``),
    so every rank posts the group's operations in one order."""
    return isinstance(comm, TorchCommunicator) and not isinstance(comm, ProcessGroupCommunicator)


def spec_of(groups: list[Any], feedback: Callable[[str], Any], plain_is_engine: bool
            ) -> str | None:
    """The bucket's one spec when this path can send it (else None): every group fp16, or
    every group bf16, with no residual waiting; or every group none where the plain allreduce
    is the engine's own."""
    specs = {g.spec for g in groups}
    if len(specs) != 1:
        return None
    spec = specs.pop()
    if spec == "none":
        return spec if plain_is_engine and not _pending(groups, feedback(spec)) else None
    if spec in HALF and not _pending(groups, feedback(spec)):
        return spec
    return None


def _pending(groups: list[Any], fb: Any) -> bool:
    return fb is not None and any(g.name in fb.residuals for g in groups)


def wire_bytes(comm: Any, buf: torch.Tensor, spec: str) -> int:
    """What a ring sends of the bucket in ``spec`` (the engine's own algorithm is not known
    here)."""
    p, size = comm.size, HALF[spec].itemsize if spec in HALF else buf.element_size()
    return int(2 * (p - 1) / p * buf.numel() * size)


def start(comm: Any, buf: torch.Tensor, spec: str, record: dict[str, Any], check: bool,
          after: Callable[[Any], None] | None) -> torch.futures.Future[torch.Tensor]:
    """Post the bucket's allreduce; the future's value is ``buf`` holding the average.

    ``buf`` is the bucket's undivided buffer for fp16/bf16 (cast, then divided, as PyTorch's
    hooks do) and the already divided one for none."""
    if check:  # once per bucket layout: every rank sends the same count, dtype and format
        agree(comm, "allreduce", {"element count": buf.numel(),
                                  "dtype": digest(str(buf.dtype)),
                                  "format": list(HALF).index(spec) if spec in HALF else -1},
              None)
    wire = buf.to(HALF[spec]).div_(comm.size) if spec in HALF else buf
    fut = dist.all_reduce(wire, group=comm.group, async_op=True).get_future()
    record["launched"] = time.perf_counter()

    def finish(f: torch.futures.Future[Any]) -> torch.Tensor:
        value = f.value()[0]
        t0 = time.perf_counter()
        if value is not buf:
            buf.copy_(value)
        record["copy_s"] = time.perf_counter() - t0
        if after is not None:
            after(buf)
        record["done"] = time.perf_counter()
        record["schemes"] = [f"engine {spec}"]
        record["bytes_sent"] = wire_bytes(comm, buf, spec)
        return buf

    return fut.then(finish)
