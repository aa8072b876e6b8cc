"""Admission without polling (issue 20): runs go in input order, a waiting run goes as
soon as a slot frees (a run's end wakes it), and starting runs hold half a slot each
while measured-busy runs hold the cores (real cgroups, real busy processes)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from aexec._boundary.admission import Admission
from aexec._boundary.cgroups import Caps
from aexec._boundary.isolation import detect_isolation

CG = detect_isolation().cgroups

pytestmark = pytest.mark.anyio


@pytest.mark.skipif(CG is None or CG.v2 is None, reason="no writable cgroup v2 tree here")
async def test_starting_runs_overlap_but_busy_runs_hold_the_cores() -> None:
    assert CG is not None
    adm = Admission(cpu_slots=1, limit=8, cgroups=CG)
    # Two starting runs fit one slot (half each); a third waits.
    admitted: list[str] = []
    busy = [f"adm-{uuid.uuid4().hex[:8]}-{i}" for i in range(2)]
    procs: list[subprocess.Popen[bytes]] = []
    go = anyio.Event()
    try:

        async def spin(run: str) -> None:
            CG.create(run, Caps(1.0, 1 << 30, 16))
            join = "".join(f"open({f!r}, 'w').write(str(os.getpid()))\n" for f in CG.procs_files(run))
            busy_code = f"import os\n{join}while True:\n    pass\n"
            procs.append(subprocess.Popen([sys.executable, "-c", busy_code]))  # noqa: ASYNC220
            while not Path(CG.procs_files(run)[-1]).read_text().strip():
                await anyio.sleep(0.01)  # joined: it spins in its cgroup from now on
            async with adm.slot(run, 0):
                admitted.append(run)
                await go.wait()

        async with anyio.create_task_group() as tg:
            for run in busy:
                tg.start_soon(spin, run)
            while len(admitted) < 2:
                await anyio.sleep(0.01)
            assert sorted(admitted) == sorted(busy)  # both starting: half a slot each

            third: list[float] = []

            async def late() -> None:
                async with adm.slot("late", 99):
                    third.append(anyio.current_time())

            tg.start_soon(late)
            await anyio.sleep(0.6)  # measured: two busy runs, one slot
            assert third == []
            go.set()  # they end: the late run goes at once
            for p in procs:
                p.kill()
        assert len(third) == 1
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for run in busy:
            CG.kill(run)
            CG.remove(run)
