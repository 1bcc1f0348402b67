"""Runs of ``bench tta`` that change the optimizer rather than hook DDP's gradients.

Ours (``collectives.optim``, every setting at its default, "auto" included): ``diloco``
(DiLoCo over the same Adam as every other run, on the plain model), ``diloco-fg`` (the same
with its syncs in the foreground, ``overlap=False``), ``diloco-int8`` and ``diloco-sparse``
(8-bit or ``SPARSE`` pseudo-gradients whatever the link), ``diloco-h8-{none,int8,sparse}``
(the same three at syncs 8 steps apart) and ``onebit`` (OneBitAdam, the run's
Adam learning rate). The interval sweep: ``diloco-h{H}-{avg,nesterov,rule}``, DiLoCo with
syncs H steps apart (H in ``SWEEP``) and its outer step averaging, DiLoCo's Nesterov (lr 0.7,
momentum 0.9) or the default rule of the interval (``collectives.optim.intervals``).
PyTorch's baseline for local steps: ``postlocal`` (``PostLocalSGDOptimizer`` with a
``PeriodicModelAverager`` over Adam, every ``POSTLOCAL_PERIOD`` steps after
``args.start_step`` synchronous ones, DDP's post-local SGD hook with one-rank subgroups, so
nothing moves between the averages).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from . import train_common as common

POSTLOCAL_PERIOD = 8


def _local(module: Any) -> Any:
    """The plain model, with what the runs use of DDP: ``.module`` and ``no_sync()``."""
    import torch

    class Local(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.module = inner

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return self.module(*args, **kwargs)

        def no_sync(self) -> Any:
            return contextlib.nullcontext()

    return Local(module)


#: ``diloco-sparse``'s pseudo-gradients: 2% of each chunk of 4096, 2 bits a value (87x fewer
#: bytes than float32), error feedback across syncs
SPARSE = "chunktopk:ratio=0.02,bits=2,chunk=4096"
#: the sync intervals of the sweep runs
SWEEP = (2, 4, 8, 16, 32, 64, 128)
#: the sweep's outer steps: (lr, momentum), "auto" for the default rule
OUTER = {"avg": (1.0, 0.0), "nesterov": (0.7, 0.9), "rule": ("auto", "auto")}


def _diloco_with(**settings: Any) -> Callable[[Any, Any, float], tuple[Any, Any]]:
    def make(module: Any, args: Any, bucket_mb: float) -> tuple[Any, Any]:
        from collectives.optim import DiLoCo

        return _local(module), DiLoCo(common.adam(module.parameters(), args.lr), module,
                                      **settings)
    return make


def _onebit(module: Any, args: Any, bucket_mb: float) -> tuple[Any, Any]:
    from collectives.optim import OneBitAdam

    model = _local(module)
    return model, OneBitAdam(module.parameters(), lr=args.lr)


def _postlocal(module: Any, args: Any, bucket_mb: float) -> tuple[Any, Any]:
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as pl
    from torch.distributed.algorithms.model_averaging import averagers
    from torch.distributed.optim import PostLocalSGDOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(module, bucket_cap_mb=bucket_mb)
    alone, _ = dist.new_subgroups(group_size=1)  # (collective) no averaging between averages
    state = pl.PostLocalSGDState(process_group=None, subgroup=alone,
                                 start_localSGD_iter=args.start_step)
    model.register_comm_hook(state, pl.post_localSGD_hook)
    averager = averagers.PeriodicModelAverager(period=POSTLOCAL_PERIOD,
                                               warmup_steps=args.start_step)
    return model, PostLocalSGDOptimizer(optim=common.adam(model.parameters(), args.lr),
                                        averager=averager)


#: name -> make(plain module, args, bucket MB) -> (the model the steps run, the optimizer)
OPTIMIZERS: dict[str, Callable[[Any, Any, float], tuple[Any, Any]]] = {
    "diloco": _diloco_with(), "diloco-fg": _diloco_with(overlap=False),
    "diloco-int8": _diloco_with(compressor="uniform:bits=8"),
    "diloco-sparse": _diloco_with(compressor=SPARSE), "onebit": _onebit,
    "postlocal": _postlocal}
for _name, _spec in (("none", "none"), ("int8", "uniform:bits=8"), ("sparse", SPARSE)):
    # what a sync sends, at a pinned interval: the same outer steps, other bytes
    OPTIMIZERS[f"diloco-h8-{_name}"] = _diloco_with(sync_every=8, compressor=_spec)
for _h in SWEEP:
    for _outer, (_lr, _m) in OUTER.items():
        OPTIMIZERS[f"diloco-h{_h}-{_outer}"] = _diloco_with(sync_every=_h, outer_lr=_lr,
                                                            outer_momentum=_m)


def payload(name: str, opt: Any, numel: int) -> float:
    """Bytes each rank contributes per step, averaged over the run's steps so far."""
    import compressors

    if name.startswith("diloco"):
        comp = opt.compressor
        per = 4 * numel if comp == "none" else compressors.get(comp).payload_nbytes(numel)
        return (per or 4 * numel) / max(1, opt.sync_every or 1)
    if name == "onebit":
        if opt.frozen_at is None:
            return 2.0 * numel
        return float(compressors.get(opt.compressor).payload_nbytes(numel) or numel)
    return 4.0 * numel / POSTLOCAL_PERIOD
