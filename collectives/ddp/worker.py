"""The background thread that completes a state's collectives and sets the hooks' futures."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Job:
    """One bucket's collectives in flight and the future DDP waits on."""

    future: Any
    buffer: Any
    #: (group or None, input, handle or a callable that starts the collective, stats)
    parts: list[tuple[Any, Any, Any, dict]]
    record: dict[str, Any]
    after: Callable[[Any], None] | None = None
    done: list[float] = field(default_factory=list)

    def run(self) -> None:
        _use_device(self.buffer)
        copy = 0.0
        for group, x, handle, _ in self.parts:
            if callable(handle):  # started here (engines that match messages by order)
                handle = handle()
            handle.wait()
            if group is not None:
                t0 = time.perf_counter()
                group.scatter(self.buffer, x)
                copy += time.perf_counter() - t0
        if self.after is not None:
            self.after(self.buffer)  # before the future: the next step may read what it kept
        rec, stats = self.record, [st for *_, st in self.parts]
        rec["done"] = time.perf_counter()
        rec["schemes"] = [st.get("scheme", "plain") for st in stats]
        rec["bytes_sent"] = sum(st.get("bytes_sent", 0) for st in stats)
        # the phases of ``overlap``: coding (on this thread or inside the call) and copies
        rec["encode_s"] = sum(st.get("compress_s", 0.0) for st in stats)
        rec["decode_s"] = sum(st.get("decompress_s", 0.0) for st in stats)
        rec["copy_s"] = copy
        self.future.set_result(self.buffer)


def _use_device(buffer: Any) -> None:
    """Make the buffer's CUDA device current on this thread: a thread starts on device 0, and
    each local rank's work belongs on its own device."""
    if getattr(buffer, "is_cuda", False):
        import torch

        if torch.cuda.current_device() != buffer.device.index:
            torch.cuda.set_device(buffer.device)


class Worker:
    """One thread, one FIFO queue: collectives complete in the order the hooks started them,
    which is the same on every rank."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._in_flight = 0  # jobs submitted and not yet finished
        self._count_lock = threading.Lock()

    def busy(self) -> bool:
        """Whether a job is queued or running (its collectives may still post messages)."""
        with self._count_lock:
            return self._in_flight > 0

    def submit(self, job: Job) -> None:
        with self._count_lock:
            self._in_flight += 1
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="compcoll-ddp", daemon=True)
            self._thread.start()
        self._queue.put(job)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                job.run()
            except BaseException as exc:  # noqa: BLE001 - handed to DDP through the future
                job.future.set_exception(exc)
            finally:
                with self._count_lock:
                    self._in_flight -= 1

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._thread = None
