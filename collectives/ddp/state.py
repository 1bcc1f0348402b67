"""CompressionState: configuration and lasting state of the DDP compression hook."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

import compressors
from compressors import device_feedback

from .. import moved
from ..config import check_timeout
from ..policy import Layer, Policy, layer_of, model_layers
from ..session import Session
from ..validation import agree_settings
from . import checkpoint
from . import groups as grouping
from .fastpath import HALF
from .worker import Job, Worker


class CompressionState:
    """State of :func:`compression_hook`; see ``collectives.ddp`` for the contract.

    Hyperparameters: ``process_group`` (a torch process group, or an mpi4py communicator or
    ``collectives.Communicator`` to use instead of one; None: torch's default group),
    ``policy`` (a compressor spec, a Compressor, rules, a table, "auto", a Policy, or a
    :class:`collectives.Session`, which also carries ``error_feedback``, ``hierarchy`` and
    ``min_numel``: a group of fewer elements, a layer sent alone or the layers of a bucket
    that share a compressor, goes uncompressed; a policy given without a session has no such
    bound, ``min_numel=0``),
    ``error_feedback``, ``start_step`` (steps sent uncompressed first), ``timeout`` (seconds
    per wait; None: the process group's own timeout, see ``deadline``), ``scheme`` and
    ``algorithm`` for compressed groups, ``plain``: the allreduce of uncompressed groups
    (None: the engine's own, "torch" or "mpi", as DDP itself uses, in warm-up steps and under
    a fixed policy; under an adaptive one, "auto" once compression is on, see
    ``group_algorithm``). The session's ``hierarchy`` says how compressed groups cross hosts
    (``CompressionState(policy=Session(spec, hierarchy="flat"))``; "auto": on several hosts
    of the same size with more than one rank each, two-level where the cost model prices it
    below the flat call, full precision inside the host and the compressor only on what
    crosses hosts; "flat"; "two_level": always, 16-bit buckets included, which then leave
    the fast path of the engine's flat allreduce). Internal state: the step counter,
    error-feedback residuals (in the state's own ``scope`` of the session's store: states
    sharing a session never share a residual), PowerSGD warm starts, the policy's decisions.
    Pickling leaves the process group, the communicator and the thread out.
    """

    @moved.keywords("CompressionState")
    def __init__(self, process_group: Any = None, policy: Any = "uniform:bits=8",
                 error_feedback: bool = True, start_step: int = 0, *,
                 timeout: float | None = None, scheme: str = "auto",
                 algorithm: str = "auto", plain: str | None = None) -> None:
        if isinstance(start_step, bool) or not (isinstance(start_step, int) and start_step >= 0):
            raise ValueError(f"start_step must be an integer >= 0, got {start_step!r}")
        check_timeout(timeout)  # a positive finite number of seconds, or None (the default)
        #: the policy, compressor instances, residual store and validate-once (the front
        #: door every adapter shares, ``collectives.session``)
        if isinstance(policy, Session):
            if error_feedback is not True:
                raise TypeError("CompressionState: give error_feedback to the Session, not "
                                "beside it")
            self.session = policy
        else:
            # no size bound of its own: the policy decides every group (a rule such as
            # ("numel<16384", "none") keeps small layers uncompressed)
            self.session = Session(policy, error_feedback=error_feedback, min_numel=0)
        #: this state's scope in the session's residual store (its own, should another state
        #: share the session: two models may both have a parameter named "fc.weight")
        self.scope = self.session.owner_scope("ddp")
        self.process_group = process_group
        self.start_step = start_step
        self.timeout, self.scheme, self.algorithm, self.plain = timeout, scheme, algorithm, plain
        self.step = 0  # iterations begun, counted at each call for bucket 0
        self.current = 0  # the step the hooks of this iteration belong to
        self.version = 0  # bumped when the policy's decisions change
        self.timeline: deque[dict[str, Any]] = deque(maxlen=4096)
        self._names: dict[int, str] = {}
        self._order: dict[str, int] = {}
        #: the parameters in the order of DDP's buckets once rebuilt (recorded from step 1 on,
        #: saved in checkpoints): the canonical order of zero-slot layouts (with_zero_slots)
        self.layout: dict[str, int] = {}
        self._layers: dict[str, Layer] = {}
        self._groups: dict[int, tuple[Any, list[grouping.Group]]] = {}
        # the hook's lookup of a bucket's groups without its gradients (hook._groups)
        self.quick: dict[int, tuple[Any, list[grouping.Group]]] = {}
        self._pool: dict[str, Any] = {}  # per-parameter residuals waiting for their group
        self._agreed = False  # the ranks compared their settings (at the first hook call)
        self._bound = False  # bind() learned the model's parameters (the hook refuses before)
        self._comm: Any = None
        self._group_wait: float | None = None  # the process group's timeout (communicator())
        self._worker = Worker()

    @property
    def policy(self) -> Policy:
        return self.session.policy

    @property
    def error_feedback(self) -> bool:
        return self.session.error_feedback

    @property
    def hierarchy(self) -> str:
        return self.session.hierarchy

    def bind(self, model: Any) -> CompressionState:
        """Learn parameter names and kinds from ``model``, the DistributedDataParallel wrapper
        the hook is registered on; returns self.

        Layers are named as the unwrapped model's ``named_parameters()`` names them (without
        DDP's ``module.`` and torch.compile's ``_orig_mod.``); a tied parameter is one layer
        under its first name, with its first owner's kind (see ``policy.model_layers``).
        """
        if not callable(getattr(model, "register_comm_hook", None)):
            raise TypeError(
                f"CompressionState.bind() needs the DistributedDataParallel model the hook is "
                f"registered on (model.register_comm_hook), got {type(model).__name__}: a "
                f"module that is not wrapped in DDP never calls a communication hook, so "
                f"nothing would be averaged. Wrap it first (model = DistributedDataParallel("
                f"model)); under Accelerate, bind what accelerator.prepare() returns, and if "
                f"that is the bare module the job runs a single process: start it with "
                f"torchrun --nproc-per-node N")
        found = model_layers(model)
        self._names = {id(p): name for name, (p, _) in found.items()}
        self._names.update({p.data_ptr(): name for name, (p, _) in found.items()})
        self._layers = {name: layer for name, (_, layer) in found.items()}
        self._order = {name: i for i, name in enumerate(found)}
        self.policy.bind(list(self._layers.values()))
        if self._pool:  # residuals loaded before the model was known
            self._pool = checkpoint.check_pool(self, self._pool)
        self._bound = True
        return self

    @property
    def bound(self) -> bool:
        """Whether :meth:`bind` has learned the model's parameters in this process."""
        return self._bound

    def require_bound(self) -> None:
        """RuntimeError unless :meth:`bind` was called: the hook's first check, before any
        message, so a state registered without it stops at once rather than averaging
        under made-up layer names (and an adaptive policy profiling layers it never saw)."""
        if not self._bound:
            raise RuntimeError(
                "compression_hook: the CompressionState was never bound to its model. Call "
                "state.bind(model) with the DistributedDataParallel model before training: "
                "model.register_comm_hook(state.bind(model), cddp.compression_hook). bind() "
                "learns the parameters' names and kinds, which the policy chooses by and the "
                "residuals are kept under (a state unpickled in another process is bound "
                "again there)")

    # -- what the hook uses -------------------------------------------------------------
    def communicator(self) -> Any:
        if self._comm is None:
            import torch.distributed as dist

            from .. import as_communicator

            group = self.process_group or dist.group.WORLD
            self._comm = as_communicator(group)
            if isinstance(group, dist.ProcessGroup):  # not an mpi4py communicator
                from ..torchwork import group_deadline

                self._group_wait = group_deadline(group)
        return self._comm

    @property
    def deadline(self) -> float | None:
        """Seconds each wait of the hook may go without progress: ``timeout`` where given,
        else the process group's own timeout (as long as DDP itself waits: gloo's 30
        minutes, or ``init_process_group(timeout=...)``), unless ``COMPCOLL_TIMEOUT`` or
        ``collectives.defaults.timeout`` is set; None means those defaults."""
        if self.timeout is not None:
            return self.timeout
        self.communicator()
        return self._group_wait

    def plain_algorithm(self) -> str:
        """The allreduce of warm-up steps: ``plain``, else the engine's own (DDP's sums)."""
        return self.plain or self.communicator().engine

    def group_algorithm(self) -> str:
        """The allreduce of uncompressed groups once compression is on: ``plain``, else the
        engine's own under a fixed policy (its sums are DDP's), and under an adaptive one the
        cost model's pick among the engine's and ours ("auto"): the policy is already off
        DDP's order of additions, and on small buckets the engine's allreduce can cost
        several times ours (gloo on a 1 Gbit/s link: 15.6 ms against 6.4 for a 0.15 MB
        bucket)."""
        if self.plain:
            return self.plain
        return "auto" if self.policy.adaptive else self.communicator().engine

    def compressor(self, spec: str) -> compressors.Compressor:
        return self.session.compressor(spec)

    def feedback(self, spec: str) -> compressors.ErrorFeedback | None:
        return self.session.feedback(spec, self.scope)

    def held(self, spec: str) -> compressors.ErrorFeedback | None:
        """This state's error feedback of ``spec`` if one was made (makes nothing)."""
        return self.session.held(spec, self.scope)

    def feedbacks(self) -> list[compressors.ErrorFeedback]:
        """This state's error feedbacks (of every spec)."""
        return [fb for _, scope, fb in self.session.feedbacks() if scope == self.scope]

    def layer(self, param: Any, fallback: str) -> Layer:
        name = self._names.get(id(param)) or self._names.get(param.data_ptr()) or fallback
        lay = self._layers.get(name)
        if lay is None:
            lay = self._layers[name] = layer_of(name, param)
        return lay

    def begin_step(self) -> None:
        """Called for bucket 0, when nothing is in flight: count, let the policy decide."""
        if not self._agreed:  # before any message: ranks that differ raise, never abort
            agree_settings(self.communicator(), "DDP hook settings", {
                "policy": self.policy.describe(), "start_step": str(self.start_step),
                "error_feedback": str(self.error_feedback), "scheme": self.scheme,
                "algorithm": self.algorithm, "plain": str(self.plain),
                "hierarchy": self.hierarchy, "min_numel": str(self.session.min_numel)},
                self.deadline)
            self._agreed = True
        self.current, self.step = self.step, self.step + 1
        if self.policy.adaptive and self.current >= self.start_step and \
                self.policy.update(self.communicator(), self.current,
                                   plain=self.group_algorithm(), hierarchy=self.hierarchy):
            self.version += 1

    def observe_loss(self, loss: Any) -> None:
        """This rank's training loss of the step under way (a float or a one-element tensor;
        a device tensor costs a synchronization), for an adaptive policy's quality check:
        call it on every rank after ``loss.backward()``, every step or every few steps."""
        self.policy.observe_loss(self.current, float(loss))

    def groups(self, index: int, params: list[Any], ranges: list[tuple[int, int]]
               ) -> list[grouping.Group]:
        """The bucket's groups under the current decisions (cached; residuals follow a
        parameter when its group changes)."""
        key = (self.version, tuple(id(p) for p in params), tuple(ranges))
        cached = self._groups.get(index)
        if cached is not None and cached[0] == key:
            return cached[1]
        if cached is not None:
            self._release(cached[1])
        by_spec: dict[str, list[int]] = {}
        layers = [self.layer(p, f"bucket{index}/{j}") for j, p in enumerate(params)]
        # The layout an adaptive policy keys its measurements by (a static one ignores it).
        self.policy.see_bucket(index, layers, [str(p.dtype) for p in params])
        out = []
        specs = self._uncompressed_if_small(layers, self.policy.choose_bucket(layers))
        for j, (lay, spec) in enumerate(zip(layers, specs, strict=True)):
            if self._alone(spec, lay):
                out.append(grouping.Group(spec, lay.name, [(lay.name, lay.numel)],
                                          [ranges[j]], lay.shape))
            else:
                by_spec.setdefault(spec, []).append(j)
        if self.current >= 1:  # DDP rebuilds its buckets after its first iteration
            for _, lay in sorted(zip(ranges, layers, strict=True), key=lambda t: t[0]):
                self.layout.setdefault(lay.name, len(self.layout))
        known = all(lay.name in self.layout for lay in layers)
        for spec, js in by_spec.items():
            # Fused order: the order of DDP's rebuilt buckets (``layout``, recorded from step 1
            # and saved in checkpoints; before, reverse registration order), so a group of
            # adjacent parameters is a view of the bucket, and the same whatever the current
            # bucketing: blockwise quantizers see the same buffer in DDP's first iteration
            # after a resume. 16 bits are elementwise and keep no residual: bucket order.
            if spec not in HALF and known:
                js = sorted(js, key=lambda j: self.layout[layers[j].name])
            elif spec not in HALF and all(layers[j].name in self._order for j in js):
                js = sorted(js, key=lambda j: -self._order[layers[j].name])
            names = [layers[j].name for j in js]
            out.append(grouping.Group(spec, grouping.group_name(names),
                                      [(layers[j].name, layers[j].numel) for j in js],
                                      [ranges[j] for j in js]))
        # A sparsifier's group with a few small holes goes in place over its span; a dense
        # quantizer's with an exact zero keeps zero slots for the layers between its members.
        out = grouping.with_span(out, lambda spec: self.compressor(spec).capabilities.sparse)
        if known:
            canon = sorted(((lay.name, lay.numel) for lay in layers),
                           key=lambda m: self.layout[m[0]])
            out = grouping.with_zero_slots(
                out, canon, lambda spec: self.compressor(spec).capabilities.exact_zero)
        for g in out:
            fb = self.feedback(g.spec)
            if fb is not None and g.name not in fb.residuals:
                res = g.assemble(self._pool, "float32")
                if res is not None:
                    fb.residuals[g.name] = res
        self._groups[index] = (key, out)
        return out

    def _alone(self, spec: str, lay: Layer) -> bool:
        """Whether ``lay`` is sent in a group of its own (a low-rank compressor's matrix)."""
        return self.compressor(spec).capabilities.allreduce_steps and len(lay.shape) >= 2

    def _uncompressed_if_small(self, layers: list[Layer], specs: list[str]) -> list[str]:
        """``specs`` with ``none`` for the layers whose collective would carry fewer than the
        session's ``min_numel`` elements (a layer sent alone, else all the bucket's layers of
        its spec together), as FSDP and the backend leave small tensors uncompressed."""
        fused: dict[str, int] = {}
        for lay, spec in zip(layers, specs, strict=True):
            if not self._alone(spec, lay):
                fused[spec] = fused.get(spec, 0) + lay.numel
        return ["none" if spec != "none" and not self.session.compresses(
                    lay.numel if self._alone(spec, lay) else fused[spec]) else spec
                for lay, spec in zip(layers, specs, strict=True)]

    def _release(self, groups: list[grouping.Group]) -> None:
        """The groups' residuals back to the per-parameter pool (device ones copied first),
        for the groups that replace them."""
        for g in groups:
            fb = self.held(g.spec)
            if fb is not None:
                held = [g.name, f"{g.name}@owner"]  # only these: not every residual per group
                device_feedback.export_residuals(fb, held)
                device_feedback.forget(fb, held)
                fb.residuals.pop(f"{g.name}@owner", None)  # tied to the old chunking
                res = fb.residuals.pop(g.name, None)
                if res is not None:
                    self._pool.update(g.pieces(res))

    def validate_once(self, name: str, spec: str, numel: int) -> bool:
        """Check agreement across ranks the first time a group is sent, not every step."""
        return self.session.validate_once(name, spec, numel, self.scope)

    def busy(self) -> bool:
        """Whether the background thread has jobs queued or running (their collectives may
        still post messages)."""
        return self._worker.busy()

    def submit(self, job: Job) -> None:
        """Complete ``job`` on the background thread, after every job submitted before it
        (the hooks' order, the same on every rank); it sets the job's future."""
        self._worker.submit(job)

    def close(self) -> None:
        """Stop the background thread (a later hook call starts it again)."""
        self._worker.close()

    # -- what checkpoints save and restore (``collectives.ddp.checkpoint``) --------------
    def parameter_sizes(self) -> dict[str, int]:
        """Elements of each known parameter by name (empty before :meth:`bind`)."""
        return {name: lay.numel for name, lay in self._layers.items()}

    def warm_starts(self) -> dict[str, dict[str, np.ndarray]]:
        """Copies of the warm starts (PowerSGD's Q) of the compressors that hold any, by spec."""
        return self.session.warm_starts()

    def residuals(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Copies of this rank's error-feedback residuals: per parameter (the groups' cut
        into their parameters' pieces, with those waiting for their group), and the ones tied
        to a group's chunking under ``"spec|name"`` (owner-side ``name@owner`` as ``name``, a
        two-level call's ``name@shard<i>[@owner]`` as they are)."""
        for fb in self.feedbacks():  # device residuals copied back first
            device_feedback.export_residuals(fb)
        per_param = {k: np.array(v) for k, v in self._pool.items()}
        chunked: dict[str, np.ndarray] = {}
        for _, groups in self._groups.values():
            for g in groups:
                fb = self.held(g.spec)
                if fb is None:
                    continue
                res = fb.residuals.get(g.name)
                if res is not None:
                    per_param.update(g.pieces(res))
                own = fb.residuals.get(f"{g.name}@owner")
                if own is not None:
                    chunked[f"{g.spec}|{g.name}"] = own.copy()
                for key, res in fb.residuals.items():  # a two-level call's shard residuals
                    if key.startswith(f"{g.name}@shard"):
                        chunked[f"{g.spec}|{key}"] = np.array(res)
        return per_param, chunked

    def restore_residuals(self, per_param: dict[str, np.ndarray],
                          chunked: dict[str, np.ndarray]) -> None:
        """Replace every residual by those :meth:`residuals` gave (checked by the caller):
        the per-parameter ones wait for their groups, formed again at the next call; the
        chunked ones go back to their compressor's error feedback."""
        self._groups.clear()
        self.quick.clear()
        for fb in self.feedbacks():
            fb.residuals.clear()
        self._pool = per_param
        for key, res in chunked.items():
            spec, _, name = key.partition("|")
            fb = self.feedback(spec)
            if fb is not None:  # "name@shard<i>[@owner]" as it is; a bare name is an owner's
                fb.residuals[name if "@shard" in name else f"{name}@owner"] = res

    def __getstate__(self) -> dict[str, Any]:
        skip = ("process_group", "_comm", "_worker", "_agreed")
        return {k: (None if k in skip else v) for k, v in self.__dict__.items()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("scope", "")  # pickled before states had scopes: the first's
        self.quick = {}  # keyed by this process's object ids and addresses
        self._bound = False  # so are the parameter names bind() learned: bind again
        self._worker = Worker()

    def state_dict(self) -> dict[str, Any]:
        """This rank's lasting state (see ``collectives.ddp.checkpoint``)."""
        return checkpoint.state_dict(self)

    def gather_state_dict(self) -> list[dict[str, Any]]:
        """Every rank's :meth:`state_dict`, in rank order, on every rank: what a checkpoint
        written by rank 0 alone must hold, since each rank's error-feedback residuals are its
        own. A collective: call it on every rank (then save on rank 0); every rank's
        :meth:`load_state_dict` takes the list and restores its own part."""
        return checkpoint.gather(self)

    def load_state_dict(self, state: Any) -> None:
        """Resume from :meth:`state_dict` (this rank's dict, or a list of every rank's)."""
        checkpoint.load_state_dict(self, state)
