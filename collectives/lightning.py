"""The DDP compression hook in a PyTorch Lightning ``Trainer``, on any device.

Lightning's own ``DDPStrategy(ddp_comm_hook=...)`` registers a hook only when the model is on
a CUDA device and ignores it, without a word, on the CPU. :class:`CompressionCallback`
registers :func:`collectives.ddp.compression_hook` itself, on the DistributedDataParallel
model the strategy has built, at the start of every ``fit``, whatever the device, and closes
the hook's state when ``fit`` ends (normally or not). Lightning is imported when the callback
is made, not with this module: ``lightning.pytorch`` or ``pytorch_lightning``, whichever the
script has imported (``lightning.pytorch`` where both or neither have been).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from .ddp import CompressionState, compression_hook

_FLAVOURS = ("lightning.pytorch", "pytorch_lightning")
_CLASSES: dict[tuple[type, type], type] = {}


def _callback_base() -> type:
    """Lightning's ``Callback`` class, from the package the script uses."""
    order = sorted(_FLAVOURS, key=lambda name: name not in sys.modules)
    for name in order:
        try:
            return importlib.import_module(name).Callback
        except ImportError:
            continue
    raise ImportError("CompressionCallback needs PyTorch Lightning: pip install lightning "
                      "(or pytorch-lightning)")


class CompressionCallback:
    """A Lightning callback that compresses DDP's gradient averaging with
    :func:`collectives.ddp.compression_hook`.

    ``policy``: a :class:`collectives.ddp.CompressionState` to use as it is, or what
    ``CompressionState(policy=...)`` accepts (a compressor spec, rules, a table, "auto"), with
    ``kwargs`` passed on to it. The state is ``callback.state``: its ``timeline``, ``policy``
    and ``state_dict`` are there during and after training.

    In ``on_fit_start``, the strategy's model must be a ``DistributedDataParallel`` (strategy
    "ddp", "ddp_spawn", "ddp_notebook" or a ``DDPStrategy``); the callback binds the state to
    it and registers the hook, on the CPU as on CUDA. Any other strategy is refused with an
    error naming it. Don't also pass ``ddp_comm_hook`` to the strategy: on CUDA, Lightning
    would register that one first, and DDP takes one hook. The state is closed (its
    background thread stopped) in ``teardown`` of ``fit``.

    Example::

        >>> from lightning.pytorch import Trainer
        >>> from collectives.lightning import CompressionCallback
        >>> trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp",
        ...                   callbacks=[CompressionCallback("uniform:bits=8")])
        >>> trainer.fit(model, train_dataloaders=loader)
    """

    state: CompressionState

    def __new__(cls, policy: Any = "auto", **kwargs: Any) -> CompressionCallback:
        # A subclass of Lightning's Callback too, made once per Lightning package: the
        # Trainer accepts only its own Callback's subclasses.
        base = _callback_base()
        if issubclass(cls, base):
            return super().__new__(cls)
        if (cls, base) not in _CLASSES:
            _CLASSES[cls, base] = type(cls.__name__, (cls, base), {"__module__": cls.__module__})
        return super().__new__(_CLASSES[cls, base])

    def __init__(self, policy: Any = "auto", **kwargs: Any) -> None:
        if isinstance(policy, CompressionState):
            if kwargs:
                raise TypeError(f"CompressionCallback: pass either a CompressionState or a "
                                f"policy with CompressionState's arguments, not both (got "
                                f"{sorted(kwargs)} with a CompressionState)")
            self.state = policy
        else:
            self.state = CompressionState(policy=policy, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        # The class made in __new__ is not importable by name: rebuild through this one
        # (strategy "ddp_spawn" pickles the Trainer and its callbacks into each process).
        return (_rebuild, (self.state,))

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Bind the state to the strategy's DDP model and register the hook."""
        from torch.nn.parallel import DistributedDataParallel

        strategy = trainer.strategy
        model = getattr(strategy, "model", None)
        if not isinstance(model, DistributedDataParallel):
            raise RuntimeError(
                f"CompressionCallback compresses DistributedDataParallel's gradient averaging, "
                f"but this Trainer's strategy {type(strategy).__name__} gives a "
                f"{type(model).__name__} model: use strategy='ddp' (or 'ddp_spawn', or "
                f"DDPStrategy(...)) with devices > 1 or num_nodes > 1")
        self.state.bind(model)
        model.register_comm_hook(self.state, compression_hook)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Close the state once ``fit`` is over (a later ``fit`` registers the hook again)."""
        if stage == "fit":
            self.state.close()


def _rebuild(state: CompressionState) -> CompressionCallback:
    return CompressionCallback(state)


__all__ = ["CompressionCallback"]
