"""Optimizers that communicate less than every gradient, for a plain ``nn.Module`` (no DDP).

- :class:`DiLoCo`: local steps of any inner optimizer, and every ``sync_every`` steps an outer
  Nesterov step on the compressed average of the ranks' pseudo-gradients (the global weights
  less the local ones), error feedback kept across syncs (Douillard et al. 2023, "DiLoCo:
  Distributed Low-Communication Training of Language Models").
- :class:`OneBitAdam`: Adam averaging gradients in 16 bits until its second moment settles,
  then the momenta compressed to 1 bit with error feedback (Tang et al. 2021, "1-bit Adam").

Both run over any communicator ``collectives`` accepts (MPI, torch.distributed; ``comm=None``
follows the launcher) and need the same model on every rank (rank 0's weights are broadcast
at construction, as DDP does).
"""

from __future__ import annotations

from .diloco import DiLoCo
from .onebit import OneBitAdam

__all__ = ["DiLoCo", "OneBitAdam"]
