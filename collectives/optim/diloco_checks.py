"""What DiLoCo refuses: its arguments, a wrapped model, and a state_dict that does not fit.

Every refusal is a TypeError or ValueError naming the argument or field and what is accepted.
"""

from __future__ import annotations

import math
import numbers
import zlib
from collections.abc import Mapping
from typing import Any

import torch

import compressors

from ..policy.base import canonical
from .origin import check_origin

#: state_dict versions this code loads (1: before background syncs and buffers)
VERSIONS = (1, 2)
FIELDS = ("steps", "syncs", "sync_every", "compressor", "world_size", "inner", "outer",
          "global", "feedback")


def check_arguments(optimizer: Any, model: Any, sync_every: Any, outer_lr: Any,
                    outer_momentum: Any, overlap: Any) -> list[torch.nn.Parameter]:
    """The model's trainable parameters, once every argument is checked."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"DiLoCo wraps a torch.optim.Optimizer (AdamW, Adam, ...), got "
                        f"{type(optimizer).__name__}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"DiLoCo needs the model (a torch.nn.Module), got {type(model).__name__}")
    wrapped = [type(m).__name__ for m in model.modules() if _is_wrapper(m)]
    if wrapped:
        raise TypeError(f"DiLoCo takes the plain model, got one wrapped in {wrapped[0]}: that "
                        "wrapper averages every step's gradients, so the local steps would not "
                        "be local. Pass the module inside (model.module; with Accelerate, "
                        "accelerator.unwrap_model(model), or do not prepare() the model)")
    if sync_every != "auto" and (isinstance(sync_every, bool) or not isinstance(
            sync_every, numbers.Integral) or sync_every < 1):
        raise ValueError(f"sync_every must be 'auto' or an integer >= 1, got {sync_every!r}")
    if not isinstance(overlap, bool):
        raise TypeError(f"overlap must be True or False, got {overlap!r}")
    for name, value in (("outer_lr", outer_lr), ("outer_momentum", outer_momentum)):
        if isinstance(value, str) and value == "auto":
            continue
        real = isinstance(value, numbers.Real) and not isinstance(value, bool) and \
            math.isfinite(value)
        if not (real and ((0.0 <= value < 1.0) if name == "outer_momentum" else value > 0)):
            bounds = "in [0, 1)" if name == "outer_momentum" else "> 0 and finite"
            raise ValueError(f"{name} must be 'auto' or a number {bounds}, got {value!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    mine = {id(p) for p in params}
    stray = sum(1 for g in optimizer.param_groups for p in g["params"] if id(p) not in mine)
    if stray:
        raise ValueError(f"the optimizer holds {stray} parameter(s) that are not the model's "
                         "trainable ones: build it over model.parameters()")
    if len({p.device for p in params}) != 1:
        raise ValueError("the model's parameters are on several devices; DiLoCo keeps one "
                         "flat copy of them on one device")
    return params


def _is_wrapper(module: torch.nn.Module) -> bool:
    """DDP (what ``accelerator.prepare`` returns) and FSDP (1 and 2) communicate every step."""
    return isinstance(module, _wrappers())


def _wrappers() -> tuple[type, ...]:
    kinds: list[type] = [torch.nn.parallel.DistributedDataParallel]
    try:
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    except ImportError:  # a torch built without distributed
        return tuple(kinds)
    return (*kinds, FullyShardedDataParallel, FSDPModule)


def setting(value: Any) -> float | str:
    """A checked outer setting as kept: "auto" or a float."""
    return "auto" if isinstance(value, str) else float(value)


def spec_of(compressor: Any) -> str:
    """The canonical spec of ``compressor`` (a spec or a Compressor); "none" for None."""
    if compressor is None or compressor == "none":
        return "none"
    spec = canonical(compressor)
    if compressors.get(spec).capabilities.allreduce_steps:
        raise ValueError(f"compressor {spec!r} needs a matrix per parameter; DiLoCo sends one "
                         "flat pseudo-gradient: use a quantizer or top-k")
    return spec


def shapes(tensors: list[torch.Tensor]) -> str:
    """The tensors' shapes and dtypes in words, for the ranks to compare (a checksum past
    a few hundred characters: the comparison says that they differ, not where)."""
    text = "; ".join(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}"
                     for t in tensors)
    n = sum(t.numel() for t in tensors)
    if len(text) > 400:
        text = f"shapes crc32 {zlib.crc32(text.encode()):08x}"
    return f"{len(tensors)} tensors of {n} elements: {text}"


def check_state(state: Any, opt: Any, weights: tuple[int, ...]) -> None:
    """ValueError naming what in ``state`` does not fit ``opt`` (a DiLoCo), whose global
    weights have the shape ``weights``."""
    if not isinstance(state, Mapping) or state.get("version") not in VERSIONS:
        raise ValueError(f"not a DiLoCo state_dict of version {VERSIONS[-1]}")
    missing = [k for k in FIELDS if k not in state]
    if missing:
        raise ValueError(f"DiLoCo state_dict lacks {', '.join(missing)}")
    g = state["global"]
    if not isinstance(g, torch.Tensor) or tuple(g.shape) != weights:
        shape = tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__
        raise ValueError(f"DiLoCo state_dict: global weights of shape {shape}, this model has "
                         f"{weights}")
    check_origin("DiLoCo", state, opt.compressor, opt.comm)
    if state.get("overlap", opt.overlap) != opt.overlap:
        raise ValueError(f"DiLoCo state_dict was saved with overlap={state['overlap']}, this "
                         f"optimizer has overlap={opt.overlap}")
    pending = state.get("pending")
    if pending is not None and (not isinstance(pending, Mapping) or tuple(
            pending["delta"].shape) != weights or tuple(pending["snapshot"].shape) != weights):
        raise ValueError("DiLoCo state_dict: its sync in flight does not fit this model")
