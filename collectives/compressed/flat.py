"""A compressed call on one level: every rank compresses its whole buffer on the host and the
scheme runs over all ranks (``collectives.core`` steps 5-7)."""

from __future__ import annotations

from typing import Any

from .. import ops
from ..buffers import Prepared
from ..progress import Handle
from ..transport.base import Communicator
from . import SCHEMES
from .compression import Compression
from .views import input_view, store


def start(c: Communicator, prepared: Prepared, shape: tuple[int, ...], call: Compression,
          op: str, algorithm: str, timeout: float | None) -> Handle:
    """Start ``call.scheme`` on ``prepared`` (the caller's ``shape``); ``wait()`` gives the
    sum (the average for op="avg")."""
    dtype = prepared.dtype
    if op == "avg" and dtype.itemsize == 2:
        prepared.load()  # the input is scaled in place first
    ops.prescale(prepared.work, dtype, op, c.size)  # fp16/bf16 average: divide first
    source = prepared.source if prepared.source is not None else prepared.work
    ctx = call.ctx(c, c.next_tag(), input_view(source, dtype, shape), dtype, algorithm)
    # Every scheme reads its input before writing the sum, so the sum may land in the
    # caller's buffer directly when no rounding to a narrower dtype is needed.
    direct = prepared.work.dtype == ctx.acc
    ctx.out = prepared.work if direct else ctx.buffer("result", prepared.work.size)
    sent_before = c.bytes_sent

    def finish() -> Any:
        if not direct:
            store(ctx.out, prepared.work, dtype)
        ops.finish(prepared.work, dtype, op, c.size)  # fp32/fp64 average: divide after
        if call.stats is not None:
            call.stats.update(ctx.stats, scheme=call.scheme, hierarchy="flat",
                              bytes_sent=c.bytes_sent - sent_before)
        return prepared.finish()

    return Handle(SCHEMES[call.scheme].run(ctx), finish, f"compressed allreduce[{call.scheme}]",
                  timeout)
