"""compcoll as a ``torch.distributed`` backend: compressed allreduce behind the backend string.

An existing training script compresses its gradient allreduce by changing one word::

    torch.distributed.init_process_group("compcoll")   # was "gloo"

(the backend registers itself when torch is imported, through the ``torch.backends`` entry
point; ``import collectives.backend`` does the same where that autoloading is turned off with
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``). DDP, a hand-written loop of ``all_reduce`` calls and
everything else that runs on the default group then go through this backend:

* ``allreduce`` with SUM (or AVG) of a floating-point tensor (CPU or CUDA) of at least
  ``min_numel`` elements is compressed (:func:`collectives.iallreduce` with the configured
  compressor, on compcoll's own gloo group); the work completes on a background thread, so
  DDP's buckets overlap the backward pass as with gloo. On hosts of several ranks it runs
  two-level where the library chooses that (its intra- and cross-host steps on gloo groups
  of its own);
* every other call (small or integer tensors, MAX/MIN/PRODUCT, broadcast, allgather,
  ``all_gather_into_tensor``, ``reduce_scatter_tensor``, all-to-all, barrier, send/recv, ...)
  is gloo's own, unchanged. AVG of an integer tensor is refused, as gloo refuses it.

A strided tensor (a slice such as ``t[:, ::2]``, a transpose) is reduced as a contiguous copy,
copied back when the call completes, compressed or not: the elements between its strides are
left alone (gloo's own allreduce would treat its storage as contiguous).

Deadlines: each wait of a compressed call may last as long as the group's timeout
(``init_process_group(timeout=...)``, 30 minutes by default, as gloo waits), unless
``COMPCOLL_TIMEOUT`` is set, which then wins. A group can be made again after
``destroy_process_group``, as often as wanted (each gets store keys of its own).

Errors: a call that fails on the background thread (a peer died, a deadline passed) raises
from the call that waits for it, ``dist.all_reduce(t)`` itself or ``work.wait()`` after
``async_op=True`` (:mod:`collectives.torchwork`); the group is unusable after that.

Names and randomness: each compressed call is named by its element count and dtype, and its
step is the number of earlier calls of that name. Every rank issues its collectives in the
same order, so name and step agree on every rank, and compressors with shared random choices
(``randomk``, ``powersgd``) draw the same ones everywhere. Calls of one name run one after
the other (they share scratch memory); calls of different names overlap.

The configuration comes from the environment, read when a group is created (a bad value is
refused then, naming its variable; ``import torch`` never fails because of one):

* ``COMPCOLL_COMPRESSOR``: the compressor spec (default ``uniform:bits=8``: stochastic
  rounding, unbiased, about 1% error per step, which needs no error feedback);
* ``COMPCOLL_FEEDBACK=1``: error feedback, one residual per buffer: the group's
  :class:`collectives.Session` scopes a call by its tensor's size and the order in which
  buffers of that size were first reduced (``<numel>:<dtype>#<slot>``, a slot per address,
  the same on every rank and in every run of the program). Right for DDP, whose bucket
  buffers stay at fixed addresses for the whole run; wrong for a loop that reduces freshly
  allocated tensors (another tensor may come to live at an address and inherit its
  residual), hence off by default;
* ``COMPCOLL_FEEDBACK_MAX_TENSORS``: the most residuals feedback keeps (default 64); past
  it the least recently used one is dropped, with a warning the first time (a program that
  reduces fresh tensors would otherwise keep one residual per tensor it ever reduced);
* ``COMPCOLL_MIN_NUMEL``: smaller tensors go uncompressed (default 16384, ``config.MIN_NUMEL``).

The group's :class:`collectives.Session` (:func:`session`) holds the compressor, the
residuals, ``min_numel`` and the step counts; its ``state_dict()`` / ``load_state_dict()``
carry them across a restart.

Or in code, before ``init_process_group``: ``collectives.backend.configure(...)``. The group
checks, when it is created, that every rank has the same compressor, feedback and
``min_numel`` (ranks that disagree would send differently shaped messages and wait for each
other until the timeout): ``MismatchError`` naming the variable and each rank's value on
every rank otherwise. The process-wide settings (``COMPCOLL_TIMEOUT``, ``COMPCOLL_VALIDATE``,
``COMPCOLL_SEGMENT_BYTES``, ``COMPCOLL_POLL_SPINS``, ...) are read then too, and so are
torchrun's variables that place the rank on its host (``GROUP_RANK``, ``RANK``,
``LOCAL_RANK``): a bad one fails group creation, on every rank.

Example::

    >>> import torch.distributed as dist
    >>> dist.init_process_group("compcoll")  # under torchrun; rank and size from its env
    >>> t = torch.ones(1 << 16)
    >>> dist.all_reduce(t)  # 8-bit quantized on the way
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions  # not re-exported by dist

from . import torchwork
from .config import MIN_NUMEL, defaults, resolve_timeout
from .errors import MismatchError
from .session import Session
from .torchwork import deadline
from .transport.torch_dist import allgather_base, reduce_scatter_base

NAME = "compcoll"
#: the tensors' devices the backend serves: CUDA tensors are compressed as CPU ones are (on a
#: device codec where one serves the compressor, else staged through host memory), and go to
#: the inner gloo group, which takes CUDA tensors, for everything else
DEVICES = ("cpu", "cuda")

__all__ = ["NAME", "BackendConfig", "CompressedProcessGroup", "configure", "register",
           "session"]


def _flag(raw: str) -> bool:
    flag = raw.strip().lower()
    if flag not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
        raise ValueError("use 1/0, true/false, yes/no or on/off")
    return flag in ("1", "true", "yes", "on")


def _count(minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            return int(raw.strip())
        except ValueError:
            raise ValueError(f"use a whole number >= {minimum}") from None
    return parse


def _check_compressor(value: Any) -> None:
    import compressors

    if not isinstance(value, str):
        raise TypeError(f"use a compressor spec string such as 'uniform:bits=8', not "
                        f"{type(value).__name__}")
    compressors.get(value)  # ValueError naming the compressors there are


def _check_flag(value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"use True or False, not {type(value).__name__}")


def _check_count(minimum: int) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"use a whole number >= {minimum}")
    return check


#: field -> (environment variable, parse its text, check a value)
_SETTINGS: dict[str, tuple[str, Callable[[str], Any], Callable[[Any], None]]] = {
    "compressor": ("COMPCOLL_COMPRESSOR", str.strip, _check_compressor),
    "feedback": ("COMPCOLL_FEEDBACK", _flag, _check_flag),
    "min_numel": ("COMPCOLL_MIN_NUMEL", _count(0), _check_count(0)),
    "feedback_max_tensors": ("COMPCOLL_FEEDBACK_MAX_TENSORS", _count(1), _check_count(1)),
}
#: the fields every rank must share (they decide what crosses the wire)
_SHARED = ("compressor", "feedback", "min_numel")


def _refused(where: str, exc: Exception) -> ValueError:
    return ValueError(f"{where}: {exc.args[0] if exc.args else exc}")


@dataclass(frozen=True)
class BackendConfig:
    """What the backend compresses and how (see the module doc); each field has its
    environment variable (``COMPCOLL_`` and the field's name in capitals)."""

    compressor: str = "uniform:bits=8"
    feedback: bool = False
    min_numel: int = MIN_NUMEL
    feedback_max_tensors: int = 64

    @classmethod
    def from_env(cls) -> BackendConfig:
        """The defaults, overridden by the environment; a bad value raises ValueError naming
        its variable, e.g. ``COMPCOLL_COMPRESSOR='bogus': unknown compressor ...``."""
        changes = {}
        for field, (env, parse, check) in _SETTINGS.items():
            raw = os.environ.get(env)
            if raw is None or raw.strip() == "":
                continue
            try:
                value = parse(raw)
                check(value)
            except (TypeError, ValueError) as exc:
                raise _refused(f"{env}={raw!r}", exc) from None
            changes[field] = value
        return replace(cls(), **changes)

    def checked(self) -> BackendConfig:
        """Self, once every field is valid; else ValueError naming the field and its
        variable."""
        for f in fields(self):
            env, _, check = _SETTINGS[f.name]
            value = getattr(self, f.name)
            try:
                check(value)
            except (TypeError, ValueError) as exc:
                raise _refused(f"{f.name}={value!r} (the setting of {env})", exc) from None
        return self

    def shared(self) -> dict[str, tuple[str, str]]:
        """The fields every rank must share, by variable: (what is compared, what is
        shown). A compressor compares by its name and every parameter, so that
        ``uniform:bits=8`` equals ``uniform:stochastic=true,bits=8``."""
        import compressors

        out = {}
        for field in _SHARED:
            value = getattr(self, field)
            shown = str(int(value) if isinstance(value, bool) else value)
            key = shown
            if field == "compressor":
                comp = compressors.get(value)
                key = f"{comp.name}:{sorted((k, repr(v)) for k, v in comp.params.items())}"
            out[_SETTINGS[field][0]] = (key, shown)
        return out


_config: BackendConfig | None = None


def configure(compressor: str | None = None, *, feedback: bool | None = None,
              min_numel: int | None = None,
              feedback_max_tensors: int | None = None) -> BackendConfig:
    """Set what process groups created from now on compress (unset fields: the environment's
    or the defaults). Returns the configuration in force. A bad value raises ValueError
    naming the argument and the environment variable of the same setting.

    Example::

        >>> collectives.backend.configure("topk:ratio=0.01", feedback=True)
    """
    global _config
    given = {"compressor": compressor, "feedback": feedback, "min_numel": min_numel,
             "feedback_max_tensors": feedback_max_tensors}
    changes = {k: v for k, v in given.items() if v is not None}
    for field, value in changes.items():
        env, _, check = _SETTINGS[field]
        try:
            check(value)
        except (TypeError, ValueError) as exc:
            raise _refused(f"configure({field}={value!r}), the setting of {env}",
                           exc) from None
    _config = replace(BackendConfig.from_env(), **changes)
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
        # Keys of this group's own: a group made again after destroy_process_group gets the
        # same store (torchrun's agent store, the same prefix), and gloo's rendezvous would
        # read the keys of the destroyed group's listeners. Every rank counts the groups it
        # made on this store; ranks that re-create groups together count alike.
        made = store.add(f"compcoll/groups made by rank {rank}", 1)
        keys = dist.PrefixStore(f"compcoll/{made}", store)
        self._inner = dist.ProcessGroupGloo(dist.PrefixStore("gloo", keys), rank, size,
                                            timeout)
        self._keys = dist.PrefixStore("split", keys)  # for the two-level sub-groups
        # torch's own entry points that bypass these methods (the group's name, collectives
        # dispatched from C++) find gloo as the group's backend, for CPU and CUDA tensors
        for device in DEVICES:
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM,
                                   self._inner)
        self._group_timeout = timeout
        self._timeout = deadline(timeout)
        self._comm: Any = None
        self._worker: Any = None
        #: the compressor, residual store (scoped by buffer, at most ``feedback_max_tensors``),
        #: ``min_numel`` and step counts (``collectives.session``)
        self.session = Session(config.compressor, error_feedback=config.feedback,
                               min_numel=config.min_numel,
                               max_scopes=config.feedback_max_tensors)
        self._slots: dict[tuple[int, int, str], str] = {}  # a buffer -> its scope
        self._made: dict[str, int] = {}  # the last slot given, by size and layout
        self._running: dict[str, threading.Event] = {}  # the last call of each name
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
                and t.device.type in DEVICES and self.session.compresses(t.numel()))

    def allreduce(self, tensors: list[Any], opts: Any = None) -> Any:
        """Compressed where it applies (see the module doc), gloo's own elsewhere. A strided
        tensor (a slice, a transpose) is reduced as a contiguous copy, copied back after: gloo
        would read and write its storage as if it were contiguous."""
        opts = opts if opts is not None else dist.AllreduceOptions()
        _no_integer_average(tensors, opts, "allreduce")
        if any(not t.is_contiguous() for t in tensors):
            dense = [t.contiguous() for t in tensors]
            return torchwork.then(self._allreduce(dense, opts, tensors),
                                  lambda: [t.copy_(d) for t, d in zip(tensors, dense,
                                                                      strict=True)])
        return self._allreduce(tensors, opts, tensors)

    def _allreduce(self, tensors: list[Any], opts: Any, given: list[Any]) -> Any:
        """Allreduce of contiguous ``tensors`` (``given``: the caller's, which key the error
        feedback)."""
        if not self._compresses(tensors, opts):
            self.plain += 1
            if _is(opts, dist.ReduceOp.AVG):  # a sum, then the division (any gloo version)
                return torchwork.then(self._inner.allreduce(tensors, _sum_opts()),
                                      lambda: [t.div_(self._size) for t in tensors])
            return self._inner.allreduce(tensors, opts)
        self.compressed += 1
        return self._start(tensors[0], given[0], avg=_is(opts, dist.ReduceOp.AVG))

    def _communicator(self) -> Any:
        """compcoll's transport on the inner gloo group (made on first use), which splits
        into gloo groups of its own for two-level calls on hosts of several ranks."""
        from .ddp.worker import Worker
        from .transport.torch_dist import ProcessGroupCommunicator

        if self._comm is None:
            self._comm = ProcessGroupCommunicator(self._inner, self._keys, self._group_timeout)
            self._worker = Worker()
        return self._comm

    def _start(self, t: Any, given: Any, avg: bool) -> Any:
        from . import api
        from .ddp.worker import Job

        comm = self._communicator()
        # Rank-independent: the same call order gives every rank the same name and step.
        name = f"backend/{t.numel()}:{str(t.dtype).removeprefix('torch.')}"
        step = self.session.next_step(name)
        previous = self._running.get(name)
        if previous is not None:
            previous.wait(resolve_timeout(self._timeout))  # it shares this name's scratch
        handle = api.iallreduce(t, op="avg" if avg else "sum", comm=comm, out=t,
                                compressor=self.session.compressor(self.session.spec),
                                feedback=self._feedback_of(given), name=name, step=step,
                                timeout=self._timeout)
        fut: torch.futures.Future[Any] = torch.futures.Future()
        finished = self._running[name] = threading.Event()
        fut.add_done_callback(lambda _: finished.set())
        self._worker.submit(Job(fut, [t], [(None, t, handle, {})], {}))
        return torchwork.from_future(fut)

    def _feedback_of(self, t: Any) -> Any:
        """The error feedback of ``t``'s buffer (None without feedback): the session's scope
        ``<numel>:<layout>#<slot>``, the slot counting the distinct buffers of that size in
        order of first use (the same on every rank and in every run of the program); at most
        ``feedback_max_tensors`` are kept, the least recently used dropped first."""
        if not self.config.feedback:
            return None
        layout = str(t.dtype) if t.is_contiguous() else f"{t.dtype} strides {t.stride()}"
        key = (t.data_ptr(), t.numel(), layout)
        scope = self._slots.get(key)
        if scope is None:
            size = f"{t.numel()}:{layout}"
            slot = self._made[size] = self._made.get(size, -1) + 1
            scope = self._slots[key] = f"{size}#{slot}"
        evicted = self.session.evicted
        fb = self.session.feedback(self.session.spec, scope)
        if self.session.evicted > evicted:
            held = set(self.session.scopes())
            self._slots = {k: s for k, s in self._slots.items() if s in held}
            if evicted == 0:
                warnings.warn(
                    f"compcoll backend: error feedback keeps residuals of at most "
                    f"{self.config.feedback_max_tensors} tensors (COMPCOLL_FEEDBACK_MAX_"
                    f"TENSORS) and has dropped the least recently used one; the error it "
                    f"held is lost. This program reduces more distinct tensors than that: "
                    f"raise COMPCOLL_FEEDBACK_MAX_TENSORS if they live for the whole run, "
                    f"or turn feedback off (COMPCOLL_FEEDBACK=0) for freshly allocated "
                    f"tensors. Warned once.", RuntimeWarning, stacklevel=3)
        return fb

    def all_gather_single(self, output: Any, input: Any, opts: Any = None) -> Any:  # noqa: A002
        """gloo's own (``dist.all_gather_into_tensor``)."""
        return allgather_base(self._inner, output, input, _or(opts, AllgatherOptions))

    def reduce_scatter_single(self, output: Any, input: Any, opts: Any = None) -> Any:  # noqa: A002
        """gloo's own (``dist.reduce_scatter_tensor``); AVG of integers refused."""
        opts = _or(opts, dist.ReduceScatterOptions)
        _no_integer_average([input], opts, "reduce_scatter_tensor")
        return reduce_scatter_base(self._inner, output, input, opts)

    def all_gather_single_coalesced(self, outputs: list[Any], inputs: list[Any],
                                    opts: Any = None) -> Any:
        """gloo's own, one tensor after the other."""
        return torchwork.collect([self.all_gather_single(o, i, opts)
                                  for o, i in zip(outputs, inputs, strict=True)], outputs)

    def reduce_scatter_single_coalesced(self, outputs: list[Any], inputs: list[Any],
                                        opts: Any = None) -> Any:
        """gloo's own, one tensor after the other."""
        return torchwork.collect([self.reduce_scatter_single(o, i, opts)
                                  for o, i in zip(outputs, inputs, strict=True)], outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def all_to_all_single(self, output: Any, input: Any, output_split_sizes: list[int],  # noqa: A002
                          input_split_sizes: list[int], opts: Any = None) -> Any:
        """gloo's own (``dist.all_to_all_single``)."""
        return self._inner.alltoall_base(output, input, output_split_sizes,
                                         input_split_sizes, _or(opts, dist.AllToAllOptions))

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.close()
        self._inner.shutdown()

    def __repr__(self) -> str:
        return (f"<CompressedProcessGroup rank {self._rank} of {self._size}, "
                f"{self.config.compressor}>")


# Everything else is gloo's own.
for _name in ("broadcast", "allgather", "_allgather_base", "allgather_coalesced",
              "allreduce_coalesced", "reduce", "gather", "scatter", "reduce_scatter",
              "_reduce_scatter_base", "alltoall", "alltoall_base", "barrier", "send", "recv",
              "recv_anysource", "monitored_barrier"):
    setattr(CompressedProcessGroup, _name, _delegate(_name))


def _is(opts: Any, *ops: Any) -> bool:
    """Whether the options' reduction is one of ``ops`` (a ReduceOp compares equal to its
    RedOpType but does not hash like it, so ``in`` on a tuple cannot tell)."""
    return any(opts.reduceOp == op for op in ops)


def _or(opts: Any, kind: Callable[[], Any]) -> Any:
    return opts if opts is not None else kind()


def _no_integer_average(tensors: list[Any], opts: Any, call: str) -> None:
    """AVG is a division: refused for integer (and bool) tensors, as gloo refuses it."""
    if _is(opts, dist.ReduceOp.AVG):
        for t in tensors:
            if not (t.is_floating_point() or t.is_complex()):
                raise ValueError(f"compcoll backend: {call} with ReduceOp.AVG needs "
                                 f"floating-point tensors, got {t.dtype} (gloo refuses it "
                                 f"too); reduce with SUM and divide where you want")


def _sum_opts() -> Any:
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    return opts


def _settings() -> BackendConfig:
    """The configuration in force, and the process-wide settings read now (a bad value
    raises ValueError naming its variable here, not in the middle of training): the
    defaults, the polling of waits and the launcher's variables that place this rank on a
    host."""
    from .topology import host_key
    from .transport.waiting import poll_settings

    for name in ("timeout", "validate", "segment_bytes", "compressed_segment_bytes"):
        getattr(defaults, name)
    poll_settings()
    host_key()
    return (_config if _config is not None else BackendConfig.from_env()).checked()


def _texts(group: Any, text: str) -> list[str]:
    """Every rank's ``text`` (a few hundred bytes), in rank order, through ``group``."""
    data = torch.tensor(list(text.encode()), dtype=torch.uint8)
    n = torch.tensor([data.numel()], dtype=torch.int64)
    sizes = [torch.empty_like(n) for _ in range(group.size())]
    group.allgather([sizes], [n]).wait()
    width = max(int(s.item()) for s in sizes)
    mine = torch.zeros(width, dtype=torch.uint8)
    mine[:data.numel()] = data
    every = [torch.empty_like(mine) for _ in sizes]
    group.allgather([every], [mine]).wait()
    return [bytes(e[:int(s.item())].tolist()).decode() for e, s in zip(every, sizes, strict=True)]


def _agree(group: Any, config: BackendConfig | None, error: str | None) -> None:
    """Compare the shared settings (or a refusal) of every rank; raise on every rank alike."""
    mine = json.dumps({"error": error} if error is not None else config.shared())  # type: ignore[union-attr]
    table = [json.loads(t) for t in _texts(group, mine)]
    refusals = [f"rank {r}: {row['error']}" for r, row in enumerate(table) if "error" in row]
    if refusals:
        raise ValueError("compcoll backend settings refused (" + "; ".join(refusals) + ")")
    for env in table[0]:
        if len({row[env][0] for row in table}) > 1:
            by_rank = ", ".join(f"rank {r}: {row[env][1]!r}" for r, row in enumerate(table))
            raise MismatchError(
                f"compcoll backend: ranks run with different {env} ({by_rank}); set it "
                f"alike on every rank (or call collectives.backend.configure alike): ranks "
                f"that disagree would send differently shaped messages and wait for each "
                f"other until the timeout")


def create(store: Any, rank: int, size: int, timeout: timedelta) -> CompressedProcessGroup:
    """torch.distributed's creator of a ``compcoll`` group (the configuration in force, the
    same on every rank: see the module doc)."""
    config: BackendConfig | None = None
    error = None
    try:
        config = _settings()
    except (TypeError, ValueError) as exc:
        error = str(exc)
    pg = CompressedProcessGroup(store, rank, size, timeout, config or BackendConfig())
    if size > 1:
        _agree(pg, config, error)  # through the inner gloo group's allgather
    elif error is not None:
        raise ValueError(error)
    return pg


def session(group: Any = None) -> Session:
    """The :class:`collectives.Session` of a ``compcoll`` group (None: the default group):
    its compressor, residuals, ``min_numel`` and step counts.

    Example::

        >>> state = collectives.backend.session().state_dict()  # this rank's, to save
    """
    pg = dist.group.WORLD if group is None else group
    if not isinstance(pg, CompressedProcessGroup):
        raise TypeError(f"collectives.backend.session() needs a group made with the "
                        f"'compcoll' backend, got {type(pg).__name__} (init_process_group("
                        f"'compcoll') or new_group(backend='compcoll'))")
    return pg.session


def register() -> None:
    """Make ``init_process_group("compcoll")`` create a :class:`CompressedProcessGroup`
    (idempotent)."""
    if NAME not in dist.Backend.backend_list:  # register_backend adds it there
        dist.Backend.register_backend(NAME, create, devices=list(DEVICES))


register()
