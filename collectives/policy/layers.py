"""What a policy knows about a layer: its name, size, shape and kind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Kinds a rule may name with ``kind=``.
KINDS = ("1d", "embedding", "conv", "linear", "other")


@dataclass(frozen=True)
class Layer:
    """One parameter as a policy sees it.

    ``kind`` is "1d" for tensors of at most one dimension (biases, norm scales), else the
    kind of the module that owns the parameter: "embedding", "conv", "linear" or "other".
    """

    name: str
    numel: int
    shape: tuple[int, ...]
    kind: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"layer {self.name!r}: unknown kind {self.kind!r}; kinds: {KINDS}")


def _module_kind(module: Any) -> str:
    import torch.nn as nn

    if isinstance(module, nn.Embedding | nn.EmbeddingBag):
        return "embedding"
    if isinstance(module, nn.modules.conv._ConvNd):
        return "conv"
    if isinstance(module, nn.Linear):
        return "linear"
    return "other"


def kind_from_shape(shape: tuple[int, ...]) -> str:
    """The kind of a parameter whose module is unknown (guessed from its shape)."""
    if len(shape) <= 1:
        return "1d"
    return {2: "linear", 3: "conv", 4: "conv", 5: "conv"}.get(len(shape), "other")


def layer_of(name: str, tensor: Any, module: Any = None) -> Layer:
    shape = tuple(int(s) for s in tensor.shape)
    numel = int(tensor.numel())
    if len(shape) <= 1:
        kind = "1d"
    elif module is not None:
        kind = _module_kind(module)
    else:
        kind = kind_from_shape(shape)
    return Layer(name, numel, shape, kind)


def model_layers(model: Any) -> dict[str, tuple[Any, Layer]]:
    """name -> (parameter, Layer) for every trainable parameter of ``model`` (the module
    inside a DistributedDataParallel wrapper, so names match the unwrapped model)."""
    inner = getattr(model, "module", model)
    out: dict[str, tuple[Any, Layer]] = {}
    for mod_name, module in inner.named_modules():
        for p_name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            full = f"{mod_name}.{p_name}" if mod_name else p_name
            out[full] = (p, layer_of(full, p, module))
    return out
