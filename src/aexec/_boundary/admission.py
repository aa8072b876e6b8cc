"""Admission: how many runs may be under way at once, and which goes next.

One CPU slot per core for busy runs, and more (up to a limit) for runs that wait:
a run's busyness is read from its cgroup (`Cgroups.cpu_demand_s`). Waiting runs are
admitted in the candidates' input order.

No polling: a waiting run sleeps until something can change the answer — a run ends,
a run is admitted (the next in order may go), or a running run's next sample is due
(busyness changes without an event, so the wait is bounded by the earliest sample).
Only the first waiting run in order is woken: the others could not go anyway.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator

import anyio

from .cgroups import Cgroups


class Admission:
    """How many runs may start: one CPU slot per core, and more for runs that wait.

    A run holds a CPU slot while it is busy; one that has used (or waited for, see
    `Cgroups.cpu_demand_s`) less than half a core over the last ``SAMPLE_S`` (sleeping,
    blocked, waiting for its deadline) gives its slot to the next run, up to ``limit``
    runs in all. A run that is still starting (its first ``FIRST_SAMPLE_S``: cgroup
    joins, namespaces, the mount view, mostly waits in the kernel) holds
    ``STARTING_WEIGHT`` of a slot, so short runs overlap their start-up; once measured
    busy it holds a whole one, and no run is admitted while the measured-busy runs fill
    the cores. The price: a burst of CPU-bound runs admitted while all were starting
    (up to ``cpu_slots / STARTING_WEIGHT`` of them) shares the cores until one ends,
    each getting at least ``STARTING_WEIGHT`` of a core. Each run is held to its own core cap by its cgroup, so a sleeper that
    wakes up shares cores for a while; it never gets more than its cap. Without a cgroup
    to measure, every run counts as busy.
    """

    SAMPLE_S = 0.2
    #: A new run is judged this soon: start-up through the fork server takes ~40 ms.
    FIRST_SAMPLE_S = 0.06
    #: The share of a CPU slot a run holds until its first sample.
    STARTING_WEIGHT = 0.5
    #: The shortest wait for a sample that is due (a sample due now is taken at once).
    MIN_WAIT_S = 0.002

    def __init__(self, cpu_slots: int, limit: int, cgroups: Cgroups | None) -> None:
        self.cpu_slots = max(1, min(cpu_slots, limit))
        self.limit = limit
        self.cgroups = cgroups
        #: run -> (time of the last sample, CPU demand then, busy?, time of the next sample,
        #: still starting?)
        self._running: dict[str, tuple[float, float | None, bool, float, bool]] = {}
        #: Runs waiting for a slot -> their order (lowest goes first).
        self._waiting: dict[str, int] = {}
        #: The waiting runs' wake-ups: only the first in order is woken (`_notify`), as
        #: only it may go; the others wait until they are first.
        self._wakeups: dict[str, anyio.Event] = {}

    def _load(self, now: float) -> tuple[float, float]:
        """(CPU slots held, time of the next sample due), sampling runs that are due."""
        held, next_due = 0.0, math.inf
        for run, (then, used, was_busy, due, starting) in list(self._running.items()):
            if now >= due:
                if self.cgroups is not None:
                    got = self.cgroups.cpu_demand_s(run)
                    if got is not None and used is not None:
                        was_busy = (got - used) / (now - then) >= 0.5
                    starting = False
                    then, used, due = now, got, now + self.SAMPLE_S
                else:
                    due = math.inf  # nothing to measure: it stays busy
            self._running[run] = (then, used, was_busy, due, starting)
            if was_busy:
                held += self.STARTING_WEIGHT if starting else 1.0
            next_due = min(next_due, due)
        return held, next_due

    def _notify(self) -> None:
        """Something changed (a run started or ended): the first waiting run looks again."""
        if self._waiting:
            first = min(self._waiting, key=self._waiting.__getitem__)
            wakeup = self._wakeups.get(first)
            if wakeup is not None:
                wakeup.set()

    @contextlib.asynccontextmanager
    async def slot(self, run: str, order: int = 0) -> AsyncIterator[None]:
        """Hold a slot for ``run``; waiting runs go in ``order`` (the candidates' input
        order), not in whichever order their tasks happen to wake up."""
        self._waiting[run] = order
        try:
            while True:
                wait: float | None = None  # until woken as the first in order
                if order <= min(self._waiting.values()) and len(self._running) < self.limit:
                    now = anyio.current_time()
                    held, next_due = self._load(now)
                    if held + (self.STARTING_WEIGHT if self.cgroups is not None else 1.0) <= self.cpu_slots:
                        break
                    if next_due < math.inf:
                        wait = max(self.MIN_WAIT_S, next_due - now)  # busyness has no event
                wakeup = self._wakeups[run] = anyio.Event()
                if wait is None:  # no deadline: no cancel scope for one
                    await wakeup.wait()
                    continue
                with anyio.move_on_after(wait):
                    await wakeup.wait()
        finally:
            del self._waiting[run]
            self._wakeups.pop(run, None)
            self._notify()  # the next in order may go (also if this one was cancelled)
        now = anyio.current_time()
        # Starting up is CPU work until measured otherwise.
        self._running[run] = (now, 0.0, True, now + self.FIRST_SAMPLE_S, True)
        try:
            yield
        finally:
            del self._running[run]
            self._notify()
