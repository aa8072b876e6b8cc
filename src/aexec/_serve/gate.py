"""Admission for ``aexec serve``: `Gate` (and `Refused`, an HTTP error answer).

At most ``jobs`` runs at once (runs beyond the cores would make a wall-clock timeout
depend on the load, a wrong verdict of its own), at most ``queue`` more waiting. Two ways
to wait: ``/observe`` and ``/observe_many`` are refused at once when every place is
taken (``429``); ``/run_code`` waits for a place and a slot, but never past ``start_by``
— the last moment at which its run can still end before its client gives up — and is
then answered ``504`` with ``Retry-After``, the status SandboxFusion's clients retry.
Free slots go to the waiter that must start soonest (`Slots`): a C++ request, whose
deadline covers its build too, has less time to wait than a Python one behind it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .sandboxfusion import RUN_OVERHEAD_S


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
class Slots:
    """``total`` run slots, given to waiters earliest key first (a ``/run_code`` request's
    key is the last moment it may start, so the most pressed starts first; another's is
    when it began to wait), each waiter waiting until its own ``until`` at most."""

    total: int
    used: int = 0
    waiting: list[tuple[float, int, anyio.Event]] = attrs.field(factory=list)
    order: itertools.count[int] = attrs.field(factory=itertools.count)

    async def acquire(self, key: float, until: float | None) -> bool:
        """A slot (True), or False if none was given by ``until`` (anyio's clock)."""
        if self.used < self.total and not self.waiting:
            self.used += 1
            return True
        entry = (key, next(self.order), anyio.Event())
        heapq.heappush(self.waiting, entry)
        try:
            with anyio.move_on_after(float("inf") if until is None else until - anyio.current_time()):
                await entry[2].wait()
        except BaseException:  # cancelled from outside: a slot handed over is given back
            self._leave(entry)
            raise
        if entry[2].is_set():
            return True
        self._leave(entry)
        return False

    def _leave(self, entry: tuple[float, int, anyio.Event]) -> None:
        if entry[2].is_set():
            self.release()
        else:
            self.waiting.remove(entry)
            heapq.heapify(self.waiting)

    def release(self) -> None:
        """Give a slot back: to the first waiter (it is handed over), or free."""
        if self.waiting:
            heapq.heappop(self.waiting)[2].set()
        else:
            self.used -= 1


@attrs.define
class Gate:
    """Admission: ``jobs`` runs at once, ``queue`` more waiting, the rest refused (429) or,
    with ``start_by``, held until then at most (504)."""

    jobs: int
    queue: int
    slots: Slots = attrs.field(init=False)
    lock: anyio.Lock = attrs.field(init=False, factory=anyio.Lock)
    #: Set (and replaced) whenever places are given back.
    freed: anyio.Event = attrs.field(init=False, factory=anyio.Event)
    admitted: int = 0
    done: Counter[str] = attrs.field(factory=Counter)
    sandboxfusion: Counter[str] = attrs.field(factory=Counter)
    refused: int = 0
    late: int = 0
    #: Seconds each recent run that reached its deadline took beyond it (preparing it,
    #: killing it, collecting it): on a loaded machine, more than the floor.
    overheads: deque[float] = attrs.field(factory=lambda: deque(maxlen=32))

    def __attrs_post_init__(self) -> None:
        self.slots = Slots(self.jobs)

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
        want = min(n, self.jobs)
        taken = 0
        key = anyio.current_time() if start_by is None else start_by
        try:
            # One batch takes its slots at a time (the lock), so two never hold part of
            # theirs each; a single request needs no lock, and waits in deadline order.
            async with self.lock if want > 1 else contextlib.nullcontext():
                while taken < want and await self.slots.acquire(key, start_by):
                    taken += 1
            if taken < want:
                self.late += 1
                raise _late()
            return await work()
        finally:
            for _ in range(taken):
                self.slots.release()
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

    def overhead(self, floor: float = RUN_OVERHEAD_S) -> float:
        """What a run is now expected to take beyond its deadline: the recent ones' third
        quartile and a second, within [``floor``, 3 × ``floor``] (one slow run must not
        turn every request away: a 504 for all would leave no run to measure again)."""
        recent = sorted(self.overheads)
        typical = recent[(3 * len(recent)) // 4] + 1.0 if recent else 0.0
        return min(3 * floor, max(floor, typical))

    def metrics(self) -> dict[str, Any]:
        running = self.slots.used
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
            "run_overhead_s": round(self.overhead(), 2),
        }


def answered(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """``handler``, a `Refused` it raises answered with its own response."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except Refused as e:
            return e.response()

    return wrapped
