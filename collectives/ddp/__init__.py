"""Compressed gradient averaging for ``torch.nn.parallel.DistributedDataParallel``.

``compression_hook`` follows PyTorch's communication-hook contract; ``CompressionState``
holds its configuration (a compressor or a per-layer policy, error feedback, warm-up steps)
and its lasting state (``state_dict``/``load_state_dict``). ``overlap`` summarises how much of
the communication the backward pass hid. ``init_from_mpi`` starts torch.distributed on the
ranks of an MPI job.

Example::

    import collectives.ddp as cddp
    state = cddp.CompressionState(policy=[("numel<16384", "none"), ("*", "uniform:bits=8")])
    model.register_comm_hook(state.bind(model), cddp.compression_hook)
"""

from __future__ import annotations

from .hook import compression_hook
from .overlap import overlap
from .rendezvous import init_from_mpi
from .state import CompressionState

__all__ = ["CompressionState", "compression_hook", "init_from_mpi", "overlap"]
