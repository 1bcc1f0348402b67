"""torch.distributed started from MPI ranks: rank 0's TCP store, its port sent over MPI."""

from __future__ import annotations

import ipaddress
import math
from datetime import timedelta
from typing import Any


def init_from_mpi(comm: Any, backend: str = "gloo", *, host: str = "127.0.0.1",
                  timeout: float = 300.0, **options: Any) -> None:
    """``torch.distributed.init_process_group`` for the ranks of the mpi4py communicator
    ``comm`` (collective over it; a no-op if torch.distributed is already initialized).

    Rank 0 opens a TCP store on ``host`` at a port the kernel picks and broadcasts the
    number, so no port is chosen, released and bound again (another process could take it in
    between). ``timeout`` bounds the rendezvous and every collective of the group; ``options``
    go to ``init_process_group`` (``device_id`` for NCCL, for instance). With gloo on a
    loopback ``host`` and no ``GLOO_SOCKET_IFNAME`` set, gloo's pairs use the loopback
    interface too (not whatever address the host name resolves to).
    """
    import os

    import torch.distributed as dist

    if dist.is_initialized():
        return
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be > 0 seconds (a finite number), got {timeout!r}")
    wait = timedelta(seconds=timeout)
    if backend == "gloo" and _loopback(host):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    store = None
    if comm.rank == 0:
        try:
            store = dist.TCPStore(host, 0, comm.size, is_master=True, timeout=wait,
                                  wait_for_workers=False)
        except Exception as exc:  # the others must not wait for a port that never comes
            comm.bcast(None)
            raise RuntimeError(f"cannot open a TCP store on {host}: {exc}") from exc
    port = comm.bcast(store.port if store is not None else None)
    if port is None:
        raise RuntimeError(f"rank 0 could not open a TCP store on {host} (see its error)")
    if store is None:
        store = dist.TCPStore(host, port, comm.size, is_master=False, timeout=wait)
    dist.init_process_group(backend, store=store, rank=comm.rank, world_size=comm.size,
                            timeout=wait, **options)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name, not an address
        return host == "localhost"
