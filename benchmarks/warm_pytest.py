#!/usr/bin/env python3
"""What a pytest-mode fork server costs to start, and what a warm pytest run costs, in
one interpreter (issue 28: the start-up list learnt once, the plugins preloaded).

    python benchmarks/warm_pytest.py [PYTHON] [--runs N]

PYTHON (default: this interpreter) is the candidates' interpreter: a venv with the pytest
and plugins to measure (e.g. ``uv venv /tmp/p83 && uv pip install --python /tmp/p83/bin/python
pytest==8.3.3 hypothesis``). Printed:

* **server start**: the CPU of a fork server until it is ready (its own and its children's,
  read from ``/proc/<pid>/stat``), once with an empty start-up directory (``computed``: the
  ``pytest --collect-only`` child runs) and once with what that start kept (``cached``);
* **warm run**: CPU and wall per run of a one-test pytest candidate through
  ``aexec.observe`` (the fork server's reaped children's CPU, after one warm-up run), and
  whether the server preloaded the interpreter's plugins (``hypothesis`` among its modules).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import anyio

import aexec
from aexec._boundary import DRIVER
from aexec._boundary.forkserver import ForkServer

TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int, *, children: bool) -> float:
    """Seconds of CPU of ``pid`` (utime+stime), or of its reaped children (cutime+cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    first = 13 if children else 11
    return (int(fields[first]) + int(fields[first + 1])) / TICK


async def server_start(python: str, startup_dir: str) -> tuple[float, str, frozenset[str]]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
    server = await ForkServer.start(python, DRIVER, "pytest", env, startup_dir=startup_dir)
    try:
        cpu = _cpu(server.pid, children=False) + _cpu(server.pid, children=True)
        return cpu, server.startup, server.modules
    finally:
        await server.aclose()


def _servers() -> list[int]:
    """The fork servers this process started."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if b"--serve" in argv and ppid == os.getpid():
            found.append(int(pid))
    return found


async def warm_runs(python: str, runs: int, work: Path) -> tuple[float, float]:
    repo = work / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    candidate = aexec.Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests"], python=python)
    async with aexec.Observer() as observer:
        first = (await observer.observe_many([candidate]))[0]
        if first.verdict != "pass":
            raise SystemExit(f"the warm-up run is {first.verdict}: {first.stderr[-500:]}")
        servers = _servers()
        before = sum(_cpu(p, children=True) for p in servers)
        start = time.monotonic()
        for _ in range(runs):
            (obs,) = await observer.observe_many([candidate])
            assert obs.verdict == "pass", obs.verdict
        wall = time.monotonic() - start
        cpu = sum(_cpu(p, children=True) for p in servers) - before
    return cpu / runs, wall / runs


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("python", nargs="?", default=sys.executable)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="aexec-warm-pytest-") as tmp:
        for _ in range(2):
            cpu, how, modules = await server_start(args.python, os.path.join(tmp, "startup"))
            print(f"server start: {cpu:.2f} s CPU ({how})")
        print(f"plugins preloaded: {'hypothesis' in modules} (hypothesis among the server's modules)")
        cpu, wall = await warm_runs(args.python, args.runs, Path(tmp))
        print(f"warm run: {cpu * 1000:.0f} ms CPU, {wall * 1000:.0f} ms wall per run ({args.runs} runs)")


if __name__ == "__main__":
    anyio.run(main)
