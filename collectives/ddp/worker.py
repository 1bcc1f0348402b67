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
        for group, x, handle, _ in self.parts:
            if callable(handle):  # started here (engines that match messages by order)
                handle = handle()
            handle.wait()
            if group is not None:
                group.scatter(self.buffer, x)
        if self.after is not None:
            self.after(self.buffer)  # before the future: the next step may read what it kept
        self.record["done"] = time.perf_counter()
        self.record["schemes"] = [st.get("scheme", "plain") for *_, st in self.parts]
        self.record["bytes_sent"] = sum(st.get("bytes_sent", 0) for *_, st in self.parts)
        self.future.set_result(self.buffer)


class Worker:
    """One thread, one FIFO queue: collectives complete in the order the hooks started them,
    which is the same on every rank."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def submit(self, job: Job) -> None:
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

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._thread = None
