"""Stage (c), the supervisor: real processes, on both backends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from aexec._boundary.cgroups import Caps
from aexec._boundary.isolation import Isolation, detect_isolation
from aexec._boundary.supervise import Invocation, execute

from .conftest import live_pids_with, slack

pytestmark = pytest.mark.anyio

CG = detect_isolation()
needs_cgroups = pytest.mark.skipif(CG.cgroups is None, reason="no writable cgroup tree here")
#: execute() with no driver: the bare mechanism (the boundary is tested in test_isolation).
NS = Isolation(namespaces=False)


def inv(code: str, tmp: Path, timeout: float = 10.0, *args: str) -> Invocation:
    return Invocation(
        argv=(sys.executable, "-c", code, *args),
        cwd=str(tmp),
        env={"PATH": os.environ["PATH"], "PYTHONUNBUFFERED": "1"},
        timeout_s=timeout,
        report_path=str(tmp / "no-report.jsonl"),
    )


async def wait_for(path: Path, limit: float = 10.0) -> None:
    with anyio.fail_after(limit):
        while not path.exists():
            await anyio.sleep(0.02)


SETSID_GRANDCHILD = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", sys.argv[1]],
                 start_new_session=True)
open(sys.argv[2], "w").close()
if sys.argv[3] == "hang":
    time.sleep(300)
"""


async def test_timeout_kills_within_a_second_of_the_deadline(tmp_path: Path) -> None:
    run = await execute(attrs.evolve(inv("import time; time.sleep(60)", tmp_path, timeout=1.0), isolation=NS))
    assert run.timed_out
    assert run.exit_code is None
    assert 1.0 <= run.duration < 1 + slack(1.0)


@needs_cgroups
@pytest.mark.parametrize("ending", ["hang", "exit"])
async def test_the_run_cgroup_kills_a_setsid_grandchild(tmp_path: Path, ending: str) -> None:
    # Without the driver there is no namespace: the cgroup alone must get it.
    marker = f"aexec-test-{uuid.uuid4()}"
    ready = tmp_path / "ready"
    seen_alive: list[int] = []

    async def watch() -> None:
        await wait_for(ready)
        seen_alive.extend(live_pids_with(marker))

    assert CG.cgroups is not None
    run_name = f"t{uuid.uuid4().hex[:8]}"
    procs = CG.cgroups.procs_files(run_name)
    joined = "".join(f"open({p!r}, 'w').write(str(os.getpid()))\n" for p in procs)
    code = "import os\n" + joined + SETSID_GRANDCHILD
    invocation = attrs.evolve(
        inv(code, tmp_path, 3.0, marker, str(ready), ending),
        run=run_name,
        caps=Caps(cpu_cores=1.0, memory_bytes=1 << 30, pids=64),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        run = await execute(
            attrs.evolve(invocation, isolation=Isolation(namespaces=False, cgroups=CG.cgroups))
        )
    assert run.timed_out is (ending == "hang")
    assert seen_alive, "the grandchild never ran, so the test proves nothing"
    assert live_pids_with(marker) == []
    assert not any(os.path.exists(os.path.dirname(p)) for p in procs)


@needs_cgroups
async def test_an_ended_runs_cgroups_are_removed_without_a_thread_hop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reaped run's cgroups are empty: one rmdir each, on the event loop's thread (a
    # worker-thread hop per run cost ~0.13 ms of CPU); the waiting removal is for a
    # cgroup still busy.
    hops: list[Any] = []
    real = anyio.to_thread.run_sync

    async def counting(fn: Any, *args: Any, **kw: Any) -> Any:
        hops.append(fn)
        return await real(fn, *args, **kw)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)
    assert CG.cgroups is not None
    run_name = f"t{uuid.uuid4().hex[:8]}"
    procs = CG.cgroups.procs_files(run_name)
    joined = "".join(f"open({p!r}, 'w').write(str(os.getpid()))\n" for p in procs)
    invocation = attrs.evolve(
        inv("import os\n" + joined + "print('in')\n", tmp_path),
        run=run_name,
        caps=Caps(cpu_cores=1.0, memory_bytes=1 << 30, pids=64),
        isolation=Isolation(namespaces=False, cgroups=CG.cgroups),
    )
    run = await execute(invocation)
    assert (run.exit_code, run.stdout) == (0, "in\n")
    assert not any(os.path.exists(os.path.dirname(p)) for p in procs)
    assert hops == []


async def test_process_group_fallback_kills_the_group(tmp_path: Path) -> None:
    fallback = Isolation(namespaces=False)
    assert fallback.enforced["process_tree"] == "process_group"
    assert fallback.enforced["network"] == "none"  # never claims what it did not apply
    marker = f"aexec-test-{uuid.uuid4()}"
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[1]])\n"
        "time.sleep(300)\n"
    )
    run = await execute(attrs.evolve(inv(code, tmp_path, 1.5, marker), isolation=fallback))
    assert run.timed_out
    assert live_pids_with(marker) == []


def _peak_rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


async def test_a_gigabyte_of_output_is_capped_and_memory_stays_bounded(tmp_path: Path) -> None:
    code = "import os\nb = b'x' * (1 << 20)\nfor _ in range(1024):\n    os.write(1, b)\nos.write(2, b'e' * 100000)\n"
    before = _peak_rss_kib()
    run = await execute(attrs.evolve(inv(code, tmp_path, 60.0), isolation=NS))
    grown_mib = (_peak_rss_kib() - before) / 1024
    assert run.exit_code == 0
    kept, marker = run.stdout[: 64 * 1024], run.stdout[64 * 1024 :]
    assert kept == "x" * (64 * 1024)
    assert f"{(1 << 30) - 64 * 1024} more bytes of stdout" in marker
    assert run.stderr.startswith("e" * (64 * 1024)) and "more bytes of stderr" in run.stderr
    assert grown_mib < 64, f"the supervisor grew by {grown_mib:.0f} MiB"


@needs_cgroups
def test_cpu_demand_counts_the_time_a_busy_run_waits_for_a_core() -> None:
    # Three busy runs pinned to one CPU each use a third of it: by usage alone they would
    # look idle to the admission, and more runs would be let onto the cores they share.
    cg = CG.cgroups
    assert cg is not None
    if cg.v2 is None or not os.path.exists(os.path.join(cg.v2, "cpu.pressure")):
        pytest.skip("no cgroup v2 CPU pressure (PSI) here: demand is usage alone")
    runs = [f"demand-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    procs = []
    try:
        for run in runs:
            cg.create(run, Caps(1.0, 1 << 30, 16))
            join = "".join(f"open({f!r}, 'w').write(str(os.getpid()))\n" for f in cg.procs_files(run))
            code = f"import os\n{join}os.sched_setaffinity(0, {{0}})\nwhile True:\n    pass\n"
            procs.append(subprocess.Popen([sys.executable, "-c", code]))
        time.sleep(0.5)  # joined and spinning
        before = [cg.cpu_demand_s(r) for r in runs]
        usage_before = [cpu_usage(cg, r) for r in runs]
        time.sleep(1.0)
        demand = [(cg.cpu_demand_s(r) or 0) - (b or 0) for r, b in zip(runs, before, strict=True)]
        usage = [cpu_usage(cg, r) - u for r, u in zip(runs, usage_before, strict=True)]
    finally:
        for run in runs:
            cg.kill(run)
        for p in procs:
            p.wait()
        for run in runs:
            cg.remove(run)
    assert all(u < 0.5 for u in usage), usage  # a third of a core each
    assert all(d >= 0.8 for d in demand), demand  # but each wants a whole one


def cpu_usage(cg: Any, run: str) -> float:
    d = os.path.join(cg.v2, os.path.basename(cg.dirs(run)[0]))
    stat = dict(line.split() for line in Path(d, "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6
