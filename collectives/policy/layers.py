"""What a policy knows about a layer: its name, size, shape and kind."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Kinds a rule may name with ``kind=``.
KINDS = ("1d", "embedding", "conv", "linear", "other")


@dataclass(frozen=True)
class Layer:
    """One parameter as a policy sees it.

    ``kind`` is "1d" for tensors of at most one dimension (biases, norm scales), else the
    kind of the module that owns the parameter: "embedding", "conv", "linear" or "other".
    ``aliases``: the other names of a parameter that several modules share (a tied
    embedding's ``lm_head.weight``); they do not take part in comparisons.
    """

    name: str
    numel: int
    shape: tuple[int, ...]
    kind: str
    aliases: tuple[str, ...] = field(default=(), compare=False)

    @property
    def names(self) -> tuple[str, ...]:
        """The name, then the aliases: what a table key or a ``name~`` rule may match."""
        return (self.name, *self.aliases)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"layer {self.name!r}: unknown kind {self.kind!r}; kinds: {KINDS}")


def _module_kind(module: Any) -> str:
    import torch.nn as nn

    if isinstance(module, nn.Embedding | nn.EmbeddingBag):
        return "embedding"
    if isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d | nn.ConvTranspose1d
                  | nn.ConvTranspose2d | nn.ConvTranspose3d):  # and their lazy, QAT subclasses
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


#: Prefixes wrappers put before a module's own names: DDP's ``module`` and
#: torch.compile's ``_orig_mod`` (which may also wrap a submodule, so it is dropped anywhere).
_WRAPPER_PARTS = ("_orig_mod",)


def unwrap(model: Any) -> Any:
    """The user's module inside DDP (``.module``) and torch.compile (``._orig_mod``) wrappers."""
    while True:
        # torch.compile registers the module as its child "_orig_mod" (the prefix of its
        # state_dict keys): found among the registered children, by name
        children = dict(model.named_children()) if hasattr(model, "named_children") else {}
        if "_orig_mod" in children:
            model = children["_orig_mod"]
        elif callable(getattr(model, "register_comm_hook", None)) and hasattr(model, "module"):
            model = model.module
        else:
            return model


def clean_name(name: str) -> str:
    """A parameter name as the unwrapped model's ``named_parameters()`` gives it: without
    torch.compile's ``_orig_mod.`` parts (a table written for the plain model applies to the
    compiled one)."""
    return ".".join(part for part in name.split(".") if part not in _WRAPPER_PARTS)


def model_layers(model: Any) -> dict[str, tuple[Any, Layer]]:
    """name -> (parameter, Layer) for every trainable parameter of ``model``, under the names
    ``named_parameters()`` gives them on the unwrapped model (see :func:`unwrap`).

    A parameter that several modules share (a tied embedding and output layer) is one layer,
    under its first name, with the kind of its first owner; its other names are its
    ``aliases``.
    """
    found: dict[int, tuple[str, Any, Any, list[str]]] = {}
    for mod_name, module in unwrap(model).named_modules(remove_duplicate=False):
        for p_name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            full = clean_name(f"{mod_name}.{p_name}" if mod_name else p_name)
            if id(p) in found:
                if full != found[id(p)][0] and full not in found[id(p)][3]:
                    found[id(p)][3].append(full)
            else:
                found[id(p)] = (full, p, module, [])
    out: dict[str, tuple[Any, Layer]] = {}
    for full, p, module, aliases in found.values():
        lay = layer_of(full, p, module)
        out[full] = (p, Layer(lay.name, lay.numel, lay.shape, lay.kind, tuple(aliases)))
    return out
