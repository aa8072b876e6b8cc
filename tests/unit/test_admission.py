"""Admission's order and wake-ups (issue 20), without a run: runs go in input order, and a
waiting run goes as soon as a slot frees (a run's end wakes it, not a poll). The cores
held by measured-busy runs, with real cgroups and processes, are tests/test_admission.py."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from aexec._boundary.admission import Admission

pytestmark = pytest.mark.anyio


async def test_waiting_runs_go_in_order_when_a_run_ends() -> None:
    adm = Admission(cpu_slots=1, limit=4, cgroups=None)
    started: list[int] = []
    release = {i: anyio.Event() for i in range(4)}

    async def one(i: int) -> None:
        async with adm.slot(f"r{i}", i):
            started.append(i)
            await release[i].wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, 0)
        await anyio.sleep(0.01)
        for i in (3, 1, 2):  # the waiters' tasks start out of order
            tg.start_soon(one, i)
        await anyio.sleep(0.05)
        assert started == [0]  # one slot, no measurement: every run counts as busy
        for i in range(3):
            t0 = anyio.current_time()
            release[i].set()
            while len(started) == i + 1:
                await anyio.lowlevel.checkpoint()
            # woken by the end, not by a poll interval
            assert anyio.current_time() - t0 < 0.5
            assert started == list(range(i + 2))
        release[3].set()


async def test_a_cancelled_waiter_lets_the_next_go() -> None:
    adm = Admission(cpu_slots=1, limit=4, cgroups=None)
    order: list[int] = []
    hold = anyio.Event()

    async def one(i: int) -> None:
        async with adm.slot(f"r{i}", i):
            order.append(i)
            if i == 0:
                await hold.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, 0)
        await anyio.sleep(0.01)
        tg.start_soon(one, 2)
        async with anyio.create_task_group() as inner:
            inner.start_soon(one, 1)
            await anyio.sleep(0.02)
            inner.cancel_scope.cancel()  # run 1 gives up while it waits
        hold.set()
    assert order == [0, 2]
