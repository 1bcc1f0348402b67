"""compcoll as a ``torch.distributed`` backend: compressed allreduce behind the backend string.

An existing training script compresses its gradient allreduce by changing one word::

    torch.distributed.init_process_group("compcoll")   # was "gloo"

(the backend registers itself when torch is imported, through the ``torch.backends`` entry
point; ``import collectives.backend`` does the same where that autoloading is turned off with
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``). DDP, a hand-written loop of ``all_reduce`` calls and
everything else that runs on the default group then go through this backend:

* ``allreduce`` with SUM (or AVG) of a floating-point tensor of at least ``min_numel``
  elements is compressed (:func:`collectives.iallreduce` with the configured compressor, on
  compcoll's own gloo group); the work completes on a background thread, so DDP's buckets
  overlap the backward pass as with gloo;
* every other call (small or integer tensors, MAX/MIN/PRODUCT, broadcast, allgather, barrier,
  send/recv, ...) is gloo's own, unchanged.

The configuration comes from the environment (every rank must see the same):

* ``COMPCOLL_COMPRESSOR``: the compressor spec (default ``uniform:bits=8``: stochastic
  rounding, unbiased, about 1% error per step, which needs no error feedback);
* ``COMPCOLL_FEEDBACK=1``: error feedback, one residual per tensor *address* and size. Right
  for DDP, whose bucket buffers stay at fixed addresses for the whole run; wrong for a loop
  that reduces freshly allocated tensors (another tensor may come to live at an address and
  inherit its residual), hence off by default;
* ``COMPCOLL_MIN_NUMEL``: smaller tensors go uncompressed (default 16384).

Or in code, before ``init_process_group``: ``collectives.backend.configure(...)``.

Example::

    >>> import torch.distributed as dist
    >>> dist.init_process_group("compcoll")  # under torchrun; rank and size from its env
    >>> t = torch.ones(1 << 16)
    >>> dist.all_reduce(t)  # 8-bit quantized on the way
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from . import torchwork

NAME = "compcoll"

__all__ = ["NAME", "BackendConfig", "CompressedProcessGroup", "configure", "register"]


@dataclass(frozen=True)
class BackendConfig:
    """What the backend compresses and how (see the module doc)."""

    compressor: str = "uniform:bits=8"
    feedback: bool = False
    min_numel: int = 16384

    @classmethod
    def from_env(cls) -> BackendConfig:
        cfg = cls()
        env = os.environ
        if env.get("COMPCOLL_COMPRESSOR"):
            cfg = replace(cfg, compressor=env["COMPCOLL_COMPRESSOR"])
        if env.get("COMPCOLL_FEEDBACK"):
            flag = env["COMPCOLL_FEEDBACK"].strip().lower()
            if flag not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(f"COMPCOLL_FEEDBACK must be 0 or 1, got {flag!r}")
            cfg = replace(cfg, feedback=flag in ("1", "true", "yes", "on"))
        if env.get("COMPCOLL_MIN_NUMEL"):
            try:
                cfg = replace(cfg, min_numel=int(env["COMPCOLL_MIN_NUMEL"]))
            except ValueError:
                raise ValueError("COMPCOLL_MIN_NUMEL must be an integer number of elements, "
                                 f"got {env['COMPCOLL_MIN_NUMEL']!r}") from None
        return cfg.checked()

    def checked(self) -> BackendConfig:
        import compressors

        compressors.get(self.compressor)  # raises, naming the compressors there are
        if not (isinstance(self.min_numel, int) and self.min_numel >= 0):
            raise ValueError(f"min_numel must be an integer >= 0, got {self.min_numel!r}")
        return self


_config: BackendConfig | None = None


def configure(compressor: str | None = None, *, feedback: bool | None = None,
              min_numel: int | None = None) -> BackendConfig:
    """Set what process groups created from now on compress (unset fields: the environment's
    or the defaults). Returns the configuration in force.

    Example::

        >>> collectives.backend.configure("topk:ratio=0.01", feedback=True)
    """
    global _config
    cfg = BackendConfig.from_env()
    changes = {k: v for k, v in (("compressor", compressor), ("feedback", feedback),
                                 ("min_numel", min_numel)) if v is not None}
    _config = replace(cfg, **changes).checked()
    return _config


def _delegate(name: str) -> Any:
    def call(self: CompressedProcessGroup, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._inner, name)(*args, **kwargs)
    call.__name__ = name
    call.__doc__ = f"gloo's own ``{name}``."
    return call


class CompressedProcessGroup(dist.ProcessGroup):
    """A process group whose large floating-point SUM allreduces are compressed; everything
    else is an inner gloo group's (see the module doc)."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta,
                 config: BackendConfig) -> None:
        super().__init__(rank, size)
        self._rank, self._size, self.config = rank, size, config
        self._inner = dist.ProcessGroupGloo(dist.PrefixStore("compcoll/gloo", store), rank,
                                            size, timeout)
        self._timeout = timeout.total_seconds()
        self._comm: Any = None
        self._worker: Any = None
        self._feedback: Any = None
        self._steps: dict[str, int] = {}
        self.compressed = self.plain = 0  # calls of each kind (for tests and curiosity)

    def getBackendName(self) -> str:  # noqa: N802 (the ProcessGroup API's name)
        return NAME

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank

    def _compresses(self, tensors: list[Any], opts: Any) -> bool:
        if len(tensors) != 1 or not _is(opts, dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            return False
        t = tensors[0]
        return (t.is_floating_point() and t.dtype in (torch.float32, torch.float64,
                                                       torch.float16, torch.bfloat16)
                and t.device.type == "cpu" and t.is_contiguous()
                and t.numel() >= max(self.config.min_numel, 1))

    def allreduce(self, tensors: list[Any], opts: Any = None) -> Any:
        """Compressed where it applies (see the module doc), gloo's own elsewhere."""
        opts = opts if opts is not None else dist.AllreduceOptions()
        if not self._compresses(tensors, opts):
            self.plain += 1
            if _is(opts, dist.ReduceOp.AVG):  # gloo has no AVG: sum, then divide
                return torchwork.then(self._inner.allreduce(tensors, _sum_opts()),
                                      lambda: [t.div_(self._size) for t in tensors])
            return self._inner.allreduce(tensors, opts)
        self.compressed += 1
        return self._start(tensors[0], avg=_is(opts, dist.ReduceOp.AVG))

    def _start(self, t: Any, avg: bool) -> Any:
        import compressors

        from . import api
        from .ddp.worker import Job, Worker
        from .transport.torch_dist import ProcessGroupCommunicator

        if self._comm is None:
            self._comm = ProcessGroupCommunicator(self._inner)
            self._worker = Worker()
            if self.config.feedback:
                self._feedback = compressors.ErrorFeedback(
                    compressors.get(self.config.compressor))
        name = f"t{t.data_ptr():x}:{t.numel()}:{t.dtype}"
        step = self._steps.get(name, 0)
        self._steps[name] = step + 1
        handle = api.iallreduce(t, op="avg" if avg else "sum", comm=self._comm, out=t,
                                compressor=self.config.compressor, feedback=self._feedback,
                                name=name, step=step, timeout=self._timeout)
        fut: torch.futures.Future[Any] = torch.futures.Future()
        self._worker.submit(Job(fut, [t], [(None, t, handle, {})], {}))
        return torchwork.from_future(fut)

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.close()
        self._inner.shutdown()

    def __repr__(self) -> str:
        return (f"<CompressedProcessGroup rank {self._rank} of {self._size}, "
                f"{self.config.compressor}>")


# Everything but allreduce is gloo's own.
for _name in ("broadcast", "allgather", "_allgather_base", "allgather_coalesced",
              "allreduce_coalesced", "reduce", "gather", "scatter", "reduce_scatter",
              "_reduce_scatter_base", "alltoall", "alltoall_base", "barrier", "send", "recv",
              "recv_anysource", "monitored_barrier"):
    setattr(CompressedProcessGroup, _name, _delegate(_name))


def _is(opts: Any, *ops: Any) -> bool:
    """Whether the options' reduction is one of ``ops`` (a ReduceOp compares equal to its
    RedOpType but does not hash like it, so ``in`` on a tuple cannot tell)."""
    return any(opts.reduceOp == op for op in ops)


def _sum_opts() -> Any:
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    return opts


def create(store: Any, rank: int, size: int, timeout: timedelta) -> CompressedProcessGroup:
    """torch.distributed's creator of a ``compcoll`` group (the configuration in force)."""
    return CompressedProcessGroup(store, rank, size, timeout,
                                  _config if _config is not None else BackendConfig.from_env())


def register() -> None:
    """Make ``init_process_group("compcoll")`` create a :class:`CompressedProcessGroup`
    (idempotent)."""
    if NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, create, devices=["cpu"])


register()
