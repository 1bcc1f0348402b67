"""The runs of ``compcoll bench train`` and ``bench tta``: PyTorch's own hooks and ours, one
registry.

PyTorch's: ``ddp`` (no hook), ``ddp-hook`` (its allreduce through PyTorch's Python
``allreduce_hook``), ``fp16`` and ``bf16`` (``fp16_compress_hook``,
``bf16_compress_hook``), ``powersgd`` and ``powersgd1`` (``powerSGD_hook``, rank 4 and 1).
Ours (``collectives.ddp``, error feedback on): ``int8+ef``, ``int4+ef`` (uniform 8 and 4
bits), ``topk+ef`` (top-k 1%), ``powersgd+ef`` (rank 4), ``auto`` (the automatic policy) and
``auto-rerun`` (the same again, deciding from what ``auto`` left in the measurement cache).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

RUNS: dict[str, Callable[[Any, Any], Any]] = {}

#: Runs that need one DDP bucket whatever --bucket-mb. PyTorch's powerSGD_hook waits for a
#: collective inside a future callback, i.e. on one of gloo's worker threads; with several
#: buckets those threads all wait and none is left to run the collectives (deadlock), so its
#: runs get one bucket (a cap larger than any model here) on gloo.
ONE_BUCKET = {"powersgd": 1e4, "powersgd1": 1e4}

#: The matrix rank of PyTorch's PowerSGD runs.
POWERSGD_RANK = {"powersgd": 4, "powersgd1": 1}


def run(name: str) -> Callable[[Callable[[Any, Any], Any]], Callable[[Any, Any], Any]]:
    """Register ``fn(ddp_model, args) -> our CompressionState or None`` under ``name``."""
    def deco(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        RUNS[name] = fn
        return fn
    return deco


@run("ddp")
def _plain(model: Any, args: Any) -> None:
    """DDP's own allreduce, no hook."""


@run("ddp-hook")
def _ddp_hook(model: Any, args: Any) -> None:
    """DDP's allreduce through PyTorch's own Python hook (``allreduce_hook``): what any hook
    written in Python costs over DDP's built-in path, the floor of ours."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    model.register_comm_hook(None, default_hooks.allreduce_hook)


@run("fp16")
def _fp16(model: Any, args: Any) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    model.register_comm_hook(None, default_hooks.fp16_compress_hook)


@run("bf16")
def _bf16(model: Any, args: Any) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    # PyTorch's hook through another name: DDP refuses bf16_compress_hook by its name unless
    # NCCL or XCCL is there, though its bfloat16 allreduce runs on gloo too (and DDP checks
    # a hook's annotations, so this one has none).
    model.register_comm_hook(None, lambda state, bucket: default_hooks.bf16_compress_hook(
        state, bucket))


def _torch_powersgd(rank: int) -> Callable[[Any, Any], None]:
    def register(model: Any, args: Any) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

        state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                 start_powerSGD_iter=args.start_step, min_compression_rate=2,
                                 random_seed=args.seed)
        model.register_comm_hook(state, ps.powerSGD_hook)
    return register


for _name, _rank in POWERSGD_RANK.items():
    RUNS[_name] = _torch_powersgd(_rank)


def _ours(policy: Callable[[Any], Any], hierarchy: str = "auto") -> Callable[[Any, Any], Any]:
    def register(model: Any, args: Any) -> Any:
        import collectives.ddp as cddp
        from collectives import Session

        comm = None
        if args.comm == "mpi":
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        # Half the step watchdog: a stalled collective raises, naming itself, before the
        # watchdog would dump the stacks.
        # min_numel=0: the policy decides every group, small ones too
        state = cddp.CompressionState(comm, Session(policy(args), hierarchy=hierarchy,
                                                    min_numel=0),
                                      start_step=args.start_step, scheme=args.scheme,
                                      plain=getattr(args, "plain", None),
                                      timeout=args.timeout / 2).bind(model)
        model.register_comm_hook(state, cddp.compression_hook)
        return state
    return register


RUNS["int8+ef"] = _ours(lambda args: "uniform:bits=8")
RUNS["int4+ef"] = _ours(lambda args: "uniform:bits=4")
RUNS["topk+ef"] = _ours(lambda args: "topk:ratio=0.01")
RUNS["powersgd+ef"] = _ours(lambda args: "powersgd:rank=4")


def _auto(args: Any, cache: bool = True) -> Any:
    from collectives.policy import AutoPolicy

    return AutoPolicy(first=args.start_step + 1, every=args.every, max_error=args.max_error,
                      cost=args.plan_cost, cache=cache,
                      cache_dir=getattr(args, "cache_dir", None))


RUNS["auto"] = _ours(_auto)
# The same policy with every rank a peer on one flat link (no reduction inside hosts first).
# It neither reads nor writes the measurement cache: it profiles as ``auto`` does from an
# empty cache, not from what ``auto`` left there (which would spare it the profiling steps).
RUNS["auto-flat"] = _ours(lambda args: _auto(args, cache=False), hierarchy="flat")
# Our fp16 two-level: on several hosts of several ranks, full precision inside the host and
# 16 bits across hosts; elsewhere PyTorch's fp16 hook, bit for bit (the hook's fast path).
RUNS["fp16-ours"] = _ours(lambda args: "fp16", hierarchy="two_level")
# The same policy again, in the same process: it reads what ``auto`` measured from the cache
# and decides at its first step (run it after ``auto``).
RUNS["auto-rerun"] = _ours(_auto)


def init_gloo(comm: Any, emulated: bool, timeout: float = 300.0) -> None:
    """torch.distributed over gloo for the MPI ranks (rank 0's TCP store).

    On an emulated cluster every rank sits in its own network namespace: gloo then talks to
    rank 0's address over the shaped link.
    """
    from collectives.ddp import init_from_mpi

    from .. import emulate

    if emulated:
        os.environ["GLOO_SOCKET_IFNAME"] = emulate.RANK_IF
    init_from_mpi(comm, "gloo", host=emulate.address(0) if emulated else "127.0.0.1",
                  timeout=timeout)


def payload_bytes(name: str, model: Any, state: Any) -> int:
    """Bytes each rank contributes per step once compression is on (before the scheme's
    own traffic): fp32 for ddp, 16 bits for fp16 and bf16, PowerSGD's P and Q (matrices where
    that is more than a 2x saving, as PyTorch's min_compression_rate=2), and for ours the
    payload of every group under the current decisions."""
    params = [p for p in model.parameters() if p.requires_grad]
    if state is not None:
        total = 0
        for _, groups in state._groups.values():
            for g in groups:
                size = state.compressor(g.spec).payload_nbytes(g.shape or g.numel)
                total += 4 * g.numel if size is None else size
        return total
    if name in ("fp16", "bf16"):
        return sum(2 * p.numel() for p in params)
    if name in POWERSGD_RANK:
        total = 0
        for p in params:
            n = p.shape[0] if p.dim() >= 2 else 0
            m = p.numel() // n if n else 0
            r = min(POWERSGD_RANK[name], n, m)
            small = n and (n + m) * r * 2 < n * m
            total += 4 * (n + m) * r if small else 4 * p.numel()
        return total
    return sum(4 * p.numel() for p in params)
