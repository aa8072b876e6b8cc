"""`Remover`: the scratch roots of delivered observations, removed in a thread of their own.

A run's scratch root is removed once its observation is delivered (issue 20), one root
after another. Handing each over through a worker-thread hop of the event loop cost the
loop ~50 µs of CPU per run (issue 42); `Remover.put` hands roots to one long-lived thread
through a queue instead, and a call waits once, at its end, for the roots it handed over
(`Remover.wait`): when ``observe_many`` returns, every root of its runs is gone, as before.
"""

from __future__ import annotations

import queue
import threading

import anyio

from .._boundary.scratch import remove_scratch
from .._log import get_logger
from .._stages.plan import Scratch

log = get_logger(__name__)


class Remover:
    """Removes the scratch roots handed over (`put`), in order, in a thread of its own
    (started on first use, stopped by `close`). `put` returns a ticket; `wait` returns
    once every root handed over up to that ticket is removed."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Scratch | None] = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._handed = 0
        self._removed = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def put(self, scratches: list[Scratch]) -> int:
        """Hand ``scratches`` over (the list is emptied): no wait, no thread hop."""
        with self._lock:
            self._ensure_thread()
            for scratch in scratches:
                self._queue.put(scratch)
            self._handed += len(scratches)
            scratches.clear()
            return self._handed

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():  # first use, or forked since
            self._thread = threading.Thread(target=self._work, name="aexec-remover", daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while (scratch := self._queue.get()) is not None:
            error = None
            try:
                remove_scratch(scratch)
            except BaseException as e:  # handed to the call that waits (`wait`)
                log.error("scratch_remove_failed", scratch_root=scratch.root, error=repr(e))
                error = e
            with self._lock:
                self._removed += 1
                self._error = self._error or error
                self._lock.notify_all()

    def _until(self, ticket: int) -> None:
        with self._lock:
            while self._removed < ticket:
                self._ensure_thread()
                self._lock.wait(1.0)
            error, self._error = self._error, None
        if error is not None:
            raise error

    async def wait(self, ticket: int) -> None:
        """Return once the roots handed over up to ``ticket`` are removed (shielded; one
        worker-thread hop, none if nothing was handed over); a removal's error is raised."""
        if ticket > 0:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._until, ticket)

    async def close(self) -> None:
        """Remove what is still queued, then stop the thread (shielded)."""
        with anyio.CancelScope(shield=True):
            await self.wait(self._handed)
            thread, self._thread = self._thread, None
            if thread is not None and thread.is_alive():
                self._queue.put(None)
                await anyio.to_thread.run_sync(thread.join)
