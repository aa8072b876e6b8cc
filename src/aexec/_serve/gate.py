"""Admission for ``aexec serve``: `Gate` (and `Refused`, an HTTP error answer).

At most ``jobs`` runs at once (runs beyond the cores would make a wall-clock timeout
depend on the load, a wrong verdict of its own), at most ``queue`` more waiting. Two ways
to wait: ``/observe`` and ``/observe_many`` are refused at once when every place is
taken (``429``); ``/run_code`` waits for a place and a slot, but never past ``start_by``
— the last moment at which its run can still end before its client gives up — and is
then answered ``504`` with ``Retry-After``, the status SandboxFusion's clients retry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
from starlette.responses import JSONResponse, Response


class Refused(Exception):
    """An HTTP error answer: status, one-line message, extra headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}

    def response(self) -> Response:
        return JSONResponse({"error": str(self)}, self.status, headers=self.headers)


def _late() -> Refused:
    return Refused(
        504, "busy: the run could not start in time to end before the client gives up", {"Retry-After": "1"}
    )


@attrs.define
class Gate:
    """Admission: ``jobs`` runs at once, ``queue`` more waiting, the rest refused (429) or,
    with ``start_by``, held until then at most (504)."""

    jobs: int
    queue: int
    limiter: anyio.CapacityLimiter = attrs.field(init=False)
    lock: anyio.Lock = attrs.field(init=False, factory=anyio.Lock)
    #: Set (and replaced) whenever places are given back.
    freed: anyio.Event = attrs.field(init=False, factory=anyio.Event)
    admitted: int = 0
    done: Counter[str] = attrs.field(factory=Counter)
    sandboxfusion: Counter[str] = attrs.field(factory=Counter)
    refused: int = 0
    late: int = 0

    def __attrs_post_init__(self) -> None:
        self.limiter = anyio.CapacityLimiter(self.jobs)

    def admit(self, n: int) -> None:
        if n > self.jobs + self.queue:
            raise Refused(413, f"{n} requests in one batch; at most {self.jobs + self.queue} (split it)")
        if self.admitted + n > self.jobs + self.queue:
            self.refused += 1
            raise Refused(429, "busy: every run slot and queue place is taken", {"Retry-After": "1"})
        self.admitted += n

    async def run(
        self,
        n: int,
        work: Callable[[], Awaitable[Any]],
        *,
        admitted: bool = False,
        start_by: float | None = None,
    ) -> Any:
        """``work()`` holding ``min(n, jobs)`` run slots (one batch takes its slots at a
        time, so two batches never hold part of theirs each); ``n`` places are given back
        at the end (taken here unless ``admitted``). With ``start_by`` (anyio's clock), a
        place and the slots not had by then are `Refused` (504)."""
        if start_by is not None and not admitted:
            await self._wait_for_places(n, start_by)
        elif not admitted:
            self.admit(n)
        borrowers = [object() for _ in range(min(n, self.jobs))]
        taken: list[object] = []
        try:
            with anyio.move_on_after(
                max(0.0, start_by - anyio.current_time()) if start_by is not None else float("inf")
            ):
                async with self.lock:
                    for b in borrowers:
                        try:
                            self.limiter.acquire_on_behalf_of_nowait(b)
                        except anyio.WouldBlock:
                            await self.limiter.acquire_on_behalf_of(b)
                        taken.append(b)
            if len(taken) < len(borrowers):
                self.late += 1
                raise _late()
            return await work()
        finally:
            for b in taken:
                self.limiter.release_on_behalf_of(b)
            self.admitted -= n
            self.freed.set()
            self.freed = anyio.Event()

    async def _wait_for_places(self, n: int, start_by: float) -> None:
        while self.admitted + n > self.jobs + self.queue:
            if anyio.current_time() >= start_by:
                self.late += 1
                raise _late()
            with anyio.move_on_after(start_by - anyio.current_time()):
                await self.freed.wait()
        self.admitted += n

    def metrics(self) -> dict[str, Any]:
        running = int(self.limiter.borrowed_tokens)
        return {
            "jobs": self.jobs,
            "queue": self.queue,
            "in_flight": self.admitted,
            "running_slots": running,
            "queued": max(0, self.admitted - running),
            "done": sum(self.done.values()),
            "done_by_verdict": dict(sorted(self.done.items())),
            "run_code_by_status": dict(sorted(self.sandboxfusion.items())),
            "refused_busy": self.refused,
            "refused_late": self.late,
        }
