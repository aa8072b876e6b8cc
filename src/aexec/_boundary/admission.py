"""Admission: how many runs may be under way at once, and which goes next.

One CPU slot per core for busy runs, and more (up to a limit) for runs that wait:
a run's busyness is read from its cgroup (`Cgroups.cpu_demand_s`). Waiting runs are
admitted in the candidates' input order.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio

from .cgroups import Cgroups


class Admission:
    """How many runs may start: one CPU slot per core, and more for runs that wait.

    A run holds a CPU slot while it is busy; one that has used (or waited for, see
    `Cgroups.cpu_demand_s`) less than half a core over the last ``SAMPLE_S`` (sleeping,
    blocked, waiting for its deadline) gives its slot to the next run, up to ``limit``
    runs in all. Each run is held to its own core
    cap by its cgroup, so a sleeper that wakes up shares cores for a while; it never
    gets more than its cap. Without a cgroup to measure, every run counts as busy.
    """

    SAMPLE_S = 0.2
    #: A new run is judged this soon: start-up through the fork server takes ~40 ms,
    #: and until then the run counts as busy.
    FIRST_SAMPLE_S = 0.06
    POLL_S = 0.02

    def __init__(self, cpu_slots: int, limit: int, cgroups: Cgroups | None) -> None:
        self.cpu_slots = max(1, min(cpu_slots, limit))
        self.limit = limit
        self.cgroups = cgroups
        #: run -> (time of the last sample, CPU demand then, busy?, time of the next sample)
        self._running: dict[str, tuple[float, float | None, bool, float]] = {}
        #: Runs waiting for a slot -> their order (lowest goes first).
        self._waiting: dict[str, int] = {}

    def _busy(self, now: float) -> int:
        busy = 0
        for run, (then, used, was_busy, due) in list(self._running.items()):
            if self.cgroups is not None and now >= due:
                got = self.cgroups.cpu_demand_s(run)
                if got is not None and used is not None:
                    was_busy = (got - used) / (now - then) >= 0.5
                self._running[run] = (now, got, was_busy, now + self.SAMPLE_S)
            busy += was_busy
        return busy

    @contextlib.asynccontextmanager
    async def slot(self, run: str, order: int = 0) -> AsyncIterator[None]:
        """Hold a slot for ``run``; waiting runs go in ``order`` (the candidates' input
        order), not in whichever order their tasks happen to poll."""
        self._waiting[run] = order
        try:
            # Polled: a run's CPU use changes without any event to wait for.
            while (  # noqa: ASYNC110
                order > min(self._waiting.values())
                or len(self._running) >= self.limit
                or self._busy(anyio.current_time()) >= self.cpu_slots
            ):
                await anyio.sleep(self.POLL_S)
        finally:
            del self._waiting[run]
        now = anyio.current_time()
        self._running[run] = (now, 0.0, True, now + self.FIRST_SAMPLE_S)  # starting up is CPU work
        try:
            yield
        finally:
            del self._running[run]
