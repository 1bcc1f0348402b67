"""A stand-in for DistributedDataParallel in unit tests that bind a model without a process
group: the module under ``.module`` and a ``register_comm_hook`` that records the hook."""

from __future__ import annotations

from typing import Any


def wrapped(module: Any) -> Any:
    """``module`` inside a DDP-shaped wrapper (what ``CompressionState.bind`` requires)."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.module = module
            self.hooks: list[tuple[Any, Any]] = []

        def register_comm_hook(self, state: Any, hook: Any) -> None:
            self.hooks.append((state, hook))

    return Wrapped()
