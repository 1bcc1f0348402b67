"""The core of compcoll: how one gradient becomes the same sum on every rank, compressed.

Read this file first. The DDP hook, FSDP's reduce-scatter, the ``compcoll`` backend and the
optimizers in ``collectives.optim`` all send what they compress through
:func:`icompressed_allreduce` (the hook, the backend and the optimizers call it by way of
``collectives.iallreduce``; FSDP runs the same per-call state and schemes on its shards).

The data path, step by step, each step naming the code that does it:

1. **The call** is one value, :class:`~collectives.compressed.compression.Compression`:
   compressor, error feedback, scheme, name, step, hierarchy. It checked itself when built.
2. **Agree**: every rank makes the same call, or every rank raises ``MismatchError``
   (``Compression.fields`` in one small allgather).
3. **Route**, decided on the first call of a (compressor, scheme, hierarchy, size, dtype,
   algorithm) on a communicator and kept with it (:class:`Route`); a warm call decides
   nothing again. **Levels**: on several hosts of several ranks the call runs two-level
   (``compressed/hierarchical.py``): the host reduces in full precision, only the shard
   that crosses hosts goes through the steps below.
4. **Scheme**: the compressor's declared ``Capabilities`` say which schemes can carry its
   payloads; "auto" prices them with the fitted cost model (``compressed/select.py``),
   once per route.
5. **Compensate, encode, remember** (``Ctx.compress_compensated``, ``compressed/common.py``):
   ``x + residual`` (:class:`Feedback`), ``payload = compress(...)`` (:class:`Compressor`),
   ``residual = x + residual - decompress(payload)``; one fused pass where a kernel has one.
6. **Exchange** by the scheme (:class:`Scheme`, ``compressed/{dense,rsag,gather,sparse}.py``):
   its payloads' wire bytes over the :class:`Transport`'s point-to-point messages.
7. **Decode and sum** (``Ctx.decode_bytes_add``) into the result, in float32 (float64 for
   float64 buffers), the same bits on every rank; then average and hand back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from compressors.dtypes import lookup

from . import buffers, ops, tuning
from .algorithms import two_level
from .compressed import candidates, flat, hierarchical, ondevice
from .compressed.checks import check_algorithm, spec_text
from .compressed.compression import Compression
from .compressed.select import choose
from .config import defaults
from .progress import Handle
from .validation import agree, open_comm, refusing

__all__ = ["Compression", "Compressor", "Feedback", "Route", "Scheme", "Transport",
           "icompressed_allreduce", "route"]


@runtime_checkable
class Compressor(Protocol):
    """Encodes a tensor into a payload and back (``compressors.Compressor``)."""

    capabilities: Any  # what schemes its payloads can go through

    def compress(self, x: Any, *, name: str, step: int, rank: int) -> Any: ...
    def decompress(self, payload: Any, out: Any = None) -> Any: ...


@runtime_checkable
class Feedback(Protocol):
    """Keeps per name what the compressor dropped (``compressors.ErrorFeedback``)."""

    def compensate(self, x: Any, name: str, out: Any = None) -> Any: ...
    def update_sent(self, name: str, compensated: Any, sent: Any) -> None: ...


@runtime_checkable
class Transport(Protocol):
    """Point-to-point messages between the ranks (``transport.base.Communicator``)."""

    rank: int
    size: int

    def isend(self, buf: np.ndarray, dest: int, tag: int, what: str = ...) -> Any: ...
    def irecv(self, buf: np.ndarray, source: int, tag: int, what: str = ...) -> Any: ...


class Scheme(Protocol):
    """How payloads cross (``compressed.SCHEMES``): ``run(ctx)`` yields the rounds of
    requests to wait on, a generator the progress engine drives."""

    name: str
    run: Callable[[Any], Iterator[Any]]


def icompressed_allreduce(comm: Any, buf: Any, call: Compression, *, op: str, out: Any,
                          algorithm: str, timeout: float | None,
                          validate: bool | None) -> Handle:
    """Start the compressed allreduce of ``buf`` on ``comm`` (anything ``as_communicator``
    takes; steps 2-7 above); ``wait()`` gives the sum. ``collectives.iallreduce`` with a
    compressor comes here, and so does the DDP hook."""
    c = open_comm(comm, timeout, validate)
    check = defaults.validate if validate is None else validate
    with refusing(c, "compressed allreduce", check, timeout):
        check_algorithm(algorithm)
        codec = ondevice.route(buf, out, call.compressor, call.feedback)
        if codec is not None:  # compressed on the device: only payloads cross to the host
            prepared, dtype = None, lookup("float32")
            numel = int(np.prod(buffers.shape_of(buf)))
        else:  # out of place the input is read where it is: ``out`` is the working array
            prepared = buffers.prepare(buf, out, copy_input=False)
            dtype, numel = prepared.dtype, prepared.work.size
        if not dtype.is_float:
            raise ValueError("compressed allreduce needs a floating-point buffer, got "
                             f"{dtype.name}")
        op = ops.check_op(op, dtype)
        if op not in ("sum", "avg"):
            raise ValueError(f"compressed allreduce sums (op='sum' or 'avg'), got op={op!r}")
    if check:  # 2. agree
        agree(c, "compressed allreduce", call.fields(op, algorithm, numel, dtype), timeout)
    r = route(c, call, numel, dtype.itemsize, algorithm, timeout)  # 3-4. the route
    if r.levels is not None:  # staged through host memory: the host-level steps run there
        if prepared is None:
            prepared = buffers.prepare(buf, out, copy_input=False)
        return hierarchical.start(c, r.levels, prepared, call, op, algorithm, timeout)
    call = call.resolved(r.scheme)
    if codec is not None and r.scheme in ondevice.SCHEMES:  # 5-7 with the codec on the device
        return ondevice.start(c, buf, out, call, op, codec, algorithm, timeout)
    if prepared is None:  # a scheme without device steps: stage the whole buffer after all
        prepared = buffers.prepare(buf, out, copy_input=False)
    shape = buffers.shape_of(buf)
    return flat.start(c, prepared, shape, call, op, algorithm, timeout)


@dataclass(frozen=True)
class Route:
    """How calls of one (compressor, scheme, hierarchy, size, value size, algorithm) run on
    a communicator: two-level on ``levels`` (their own scheme per level), else flat through
    ``scheme``. Decided on the first such call, where every rank makes it (the set-up
    collectives: topology, sub-communicators, the model's fit and tuning table), and the same
    on every rank; kept with the communicator, so a warm call prices nothing again."""

    levels: Any  # hierarchical.Levels | None
    scheme: str


#: Routes kept per communicator (``comm.cache.routes``), the oldest dropped first past this
#: many (a caller that varies every call must not grow memory without bound).
MAX_ROUTES = 4096


def route(c: Any, call: Compression, numel: int, value_bytes: int, algorithm: str,
          timeout: float | None) -> Route:
    """The call's route on ``c`` (see :class:`Route`): kept, or decided now (collective on
    the first call of its kind: every rank reaches it at the same call, after ``agree``)."""
    comp = call.compressor
    key = (type(comp), spec_text(comp), call.scheme, call.hierarchy, call.sparse_algorithm,
           numel, value_bytes, algorithm)
    kept = c.cache.routes
    r = kept.get(key)
    if r is None:
        r = _decide(c, call, numel, value_bytes, algorithm, timeout)
        if len(kept) >= MAX_ROUTES:
            del kept[next(iter(kept))]
        kept[key] = r
    return r


def _decide(c: Any, call: Compression, numel: int, value_bytes: int, algorithm: str,
            timeout: float | None) -> Route:
    """A route decided: the set-up collectives (topology, sub-communicators, the model's
    fit) come now, in call order on every rank, before the call's first message."""
    schemes = candidates(call.compressor)
    lv = hierarchical.levels(c, call.hierarchy, call.compressor, timeout,  # 3. levels
                             numel, value_bytes, call.scheme, schemes)
    if lv is not None:
        return Route(lv, call.scheme)
    if algorithm in ("auto", "two_level"):  # the dense scheme's algorithm may be two_level
        two_level.prepare(c, timeout=timeout)
    if "auto" in (call.scheme, algorithm, call.sparse_algorithm):
        tuning.ready(c, timeout=timeout)  # collectively, not midway through the scheme
    scheme = call.scheme  # 4. scheme
    if scheme == "auto":
        scheme = choose(c, call.compressor, numel, value_bytes, schemes)
    return Route(None, scheme)
