"""``allreduce(buf, compressor=...)``: set up, validate, pick levels and scheme, run it."""

from __future__ import annotations

from typing import Any

import numpy as np

from compressors import ErrorFeedback
from compressors.arrays import device_empty_like
from compressors.dtypes import lookup

from .. import buffers, ops, tuning
from ..algorithms import two_level
from ..config import defaults
from ..progress import Handle
from ..transport.base import Communicator
from ..validation import agree, refusing
from . import (
    SCHEMES,
    candidates,
    check_scheme,
    hierarchical,
    make_ctx,
    ondevice,
    resolve_compressor,
)
from .checks import check_algorithms, check_feedback, check_hierarchy, fields
from .select import choose
from .views import input_view, store


def icompressed_allreduce(c: Communicator, buf: Any, *, compressor: Any, feedback: Any,
                          scheme: str, op: str, out: Any, name: str | None, step: int,
                          algorithm: str, sparse_algorithm: str, k: int | None,
                          timeout: float | None, validate: bool | None,
                          stats: dict | None, hierarchy: str = "auto") -> Handle:
    check = defaults.validate if validate is None else validate
    with refusing(c, "compressed allreduce", check, timeout):
        comp = resolve_compressor(compressor)
        if feedback is not None and not isinstance(feedback, ErrorFeedback):
            raise TypeError("feedback must be a compressors.ErrorFeedback (it keeps the "
                            f"residuals between steps), got {type(feedback).__name__}")
        if feedback is not None and not name:
            raise ValueError("pass name=: error feedback keeps one residual per tensor name")
        check_scheme(scheme, comp)
        check_feedback(feedback, comp)
        check_algorithms(algorithm, sparse_algorithm, k)
        check_hierarchy(hierarchy, comp, algorithm)
        shape = buffers.shape_of(buf)
        codec = ondevice.route(buf, out, comp, feedback)
        if codec is not None:  # compressed on the device: only payloads cross to the host
            prepared, dtype, numel = None, lookup("float32"), int(np.prod(shape))
        else:
            # Out of place, every scheme reads its whole input before writing the sum: the
            # input is read where it is, and the caller's output buffer is the working array
            # (no copy).
            prepared = buffers.prepare(buf, out, copy_input=False)
            dtype, numel = prepared.dtype, prepared.work.size
        if not dtype.is_float:
            raise ValueError("compressed allreduce needs a floating-point buffer, got "
                             f"{dtype.name}")
        op = ops.check_op(op, dtype)
        if op not in ("sum", "avg"):
            raise ValueError(f"compressed allreduce sums (op='sum' or 'avg'), got op={op!r}")
    schemes = candidates(comp)
    if check:
        agree(c, "compressed allreduce", fields(comp, feedback, scheme, op, algorithm,
                                                sparse_algorithm, k, name, step,
                                                numel, dtype, hierarchy), timeout)
    # Set-up collectives (topology, sub-communicators, the model's fit) come now, in call
    # order on every rank, before the call's first message.
    lv = hierarchical.levels(c, hierarchy, comp, timeout, numel, dtype.itemsize, scheme,
                             schemes)
    options = {"algorithm": algorithm, "sparse_algorithm": sparse_algorithm, "k": k}
    if lv is not None:  # staged through host memory: the host-level steps run there
        if prepared is None:
            prepared = buffers.prepare(buf, out, copy_input=False)
        return hierarchical.start(c, lv, prepared, comp, feedback, scheme, schemes, op,
                                  name or "buffer", step, timeout, stats, options)
    if algorithm in ("auto", "two_level"):  # the dense scheme's algorithm may be two_level
        two_level.prepare(c, timeout=timeout)
    if "auto" in (scheme, algorithm, sparse_algorithm):
        tuning.ready(c, timeout=timeout)  # collectively, not midway through the scheme
    if scheme == "auto":
        scheme = choose(c, comp, numel, dtype.itemsize, schemes)
    if codec is not None and scheme in ondevice.SCHEMES:
        return _on_device(c, buf, out, comp, feedback, scheme, op, name, step, codec, dtype,
                          timeout, stats, options)
    if prepared is None:  # a scheme without device steps: stage the whole buffer after all
        prepared = buffers.prepare(buf, out, copy_input=False)
    if op == "avg" and dtype.itemsize == 2:
        prepared.load()  # the input is scaled in place first
    ops.prescale(prepared.work, dtype, op, c.size)  # fp16/bf16 average: divide first
    source = prepared.source if prepared.source is not None else prepared.work
    ctx = make_ctx(c, c.next_tag(), comp, feedback, name or "buffer", step,
                   input_view(source, dtype, shape), dtype, **options)
    # Every scheme reads its input before writing the sum, so the sum may land in the
    # caller's buffer directly when no rounding to a narrower dtype is needed.
    direct = prepared.work.dtype == ctx.acc
    ctx.out = prepared.work if direct else ctx.buffer("result", prepared.work.size)
    sent_before = c.bytes_sent

    def finish() -> Any:
        if not direct:
            store(ctx.out, prepared.work, dtype)
        ops.finish(prepared.work, dtype, op, c.size)  # fp32/fp64 average: divide after
        if stats is not None:
            stats.update(ctx.stats, scheme=scheme, hierarchy="flat",
                         bytes_sent=c.bytes_sent - sent_before)
        return prepared.finish()

    return Handle(SCHEMES[scheme].run(ctx), finish, f"compressed allreduce[{scheme}]",
                  timeout)


def _on_device(c: Communicator, buf: Any, out: Any, comp: Any, feedback: Any, scheme: str,
               op: str, name: str | None, step: int, codec: Any, dtype: Any,
               timeout: float | None, stats: dict | None, options: dict) -> Handle:
    """The scheme with its codec steps on the device (``ondevice``); float32 sums in place
    in the result, averaged after summing as on the host."""
    result = out if out is not None else device_empty_like(buf)
    ctx = ondevice.make(c, c.next_tag(), comp, feedback, name or "buffer", step, buf, result,
                        dtype, codec, **options)
    sent_before = c.bytes_sent

    def finish() -> Any:
        ctx.release()
        if op == "avg" and c.size > 1 and ctx.x.size:
            codec.scale(ctx.out, 1.0 / c.size)
        if stats is not None:
            stats.update(ctx.stats, scheme=scheme, bytes_sent=c.bytes_sent - sent_before,
                         on_device=True)
        return result

    return Handle(SCHEMES[scheme].run(ctx), finish, f"compressed allreduce[{scheme}, device]",
                  timeout)
