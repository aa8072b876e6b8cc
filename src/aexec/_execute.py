"""Stage (c): execute (spec §3.3) — the only place that spawns and kills processes.

The supervisor spawns the candidate under the declared boundary, streams both pipes
into capped buffers while it keeps draining them, enforces the wall-clock deadline with
a cancel scope, and kills the whole process tree deterministically. It captures raw
artifacts and judges nothing.

The boundary is built from the strongest mechanisms the kernel offers, each probed
once per process (see ``docs/isolation.md``):

* **namespaces** (root): the driver unshares PID, network and mount namespaces, makes
  the host read-only but the scratch dirs, and drops the candidate to a fresh
  unprivileged uid. Killing the namespace's init kills everything in it, and the
  driver dies with aexec (``PR_SET_PDEATHSIG``).
* **cgroups** (root, a writable cgroup tree): a cgroup per run with a CPU quota, a
  memory cap for the whole tree, a process cap, and ``cgroup.kill``.
* otherwise a new session, killed by process group, and rlimits only.

``environment.enforced`` records, per mechanism, what was applied; nothing weaker is
ever described as stronger.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import attrs
import structlog

from ._forkserver import ForkServer, ServerGone
from ._records import RawRun
from ._types import STREAM_CAP_BYTES, TRUNCATION_MARKER

log = structlog.get_logger(__name__)

#: After the process exits, how long its pipes may stay open before the tree is killed.
EOF_GRACE_S = 1.0
#: How long a killed run may take to be reaped before the wrapper itself is killed.
KILL_WAIT_S = 5.0
#: The most of the driver's report file that is read back.
REPORT_CAP_BYTES = 16 * 1024 * 1024
_CHUNK = 65536
#: After a read that did not fill a chunk, the next waits this long: a chatty run (pytest's
#: dot per test, written unbuffered) then costs aexec a wake-up per interval, not per write.
_COALESCE_S = 0.005
_CPU_PERIOD_US = 100_000
#: Run cgroups are named ``aexec-<supervisor pid>-<run>``: a dead supervisor's are stale.
CGROUP_PREFIX = "aexec-"


@attrs.frozen
class Caps:
    """What a run's cgroup holds it to."""

    cpu_cores: float
    memory_bytes: int
    pids: int


@attrs.frozen
class Cgroups:
    """Where run cgroups are made: the supervisor's own cgroup, per hierarchy.

    ``v1`` maps a v1 controller (cpu, memory, pids) to its directory; ``v2`` is the
    unified hierarchy's directory, with the controllers it can use (``cgroup.kill``
    needs none).
    """

    v1: dict[str, str]
    v2: str | None
    v2_controllers: frozenset[str]

    def dirs(self, run: str) -> list[str]:
        name = f"{CGROUP_PREFIX}{os.getpid()}-{run}"
        roots = list(dict.fromkeys(self.v1.values()))
        if self.v2 is not None:
            roots.append(self.v2)
        return [os.path.join(root, name) for root in roots]

    def procs_files(self, run: str) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs(run)]

    def describe(self) -> dict[str, str]:
        have = set(self.v1) | set(self.v2_controllers)
        out = {}
        if "cpu" in have:
            out["cpu"] = "cgroup CPU quota of cpu_cap_cores (RLIMIT_CPU as a backstop)"
        if "memory" in have:
            out["ram_tree"] = "memory cgroup: the whole tree, scratch files included, within ram + disk caps"
        if "pids" in have:
            out["processes"] = "pids cgroup"
        return out

    def create(self, run: str, caps: Caps) -> None:
        quota = max(1000, round(caps.cpu_cores * _CPU_PERIOD_US))
        writes: list[tuple[str, str]] = []
        for kind, root in self.v1.items():
            d = os.path.join(root, os.path.basename(self.dirs(run)[0]))
            if kind == "cpu":
                writes += [
                    (f"{d}/cpu.cfs_period_us", str(_CPU_PERIOD_US)),
                    (f"{d}/cpu.cfs_quota_us", str(quota)),
                ]
            elif kind == "memory":
                writes.append((f"{d}/memory.limit_in_bytes", str(caps.memory_bytes)))
            elif kind == "pids":
                writes.append((f"{d}/pids.max", str(caps.pids)))
        if self.v2 is not None:
            d = os.path.join(self.v2, os.path.basename(self.dirs(run)[0]))
            if "cpu" in self.v2_controllers:
                writes.append((f"{d}/cpu.max", f"{quota} {_CPU_PERIOD_US}"))
            if "memory" in self.v2_controllers:
                writes += [(f"{d}/memory.max", str(caps.memory_bytes)), (f"{d}/memory.swap.max", "0")]
            if "pids" in self.v2_controllers:
                writes.append((f"{d}/pids.max", str(caps.pids)))
        for d in self.dirs(run):
            os.makedirs(d, exist_ok=True)
        for path, value in writes:
            Path(path).write_text(value)

    def kill(self, run: str) -> None:
        """Kill every process of the run's cgroups; none can leave them."""
        for d in self.dirs(run):
            if _write(os.path.join(d, "cgroup.kill"), "1"):
                return
        for d in self.dirs(run):  # no cgroup.kill: a v1-only machine
            for pid in _pids(d):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def cpu_demand_s(self, run: str) -> float | None:
        """CPU seconds the run has used or waited for so far (cgroup v2).

        ``cpu.stat`` usage plus ``cpu.pressure`` "some" (time a task of the run was
        runnable but not running): a busy run sharing a core with others still counts
        as wanting a whole one, where its usage alone would make it look half idle.
        """
        if self.v2 is None:
            return None
        d = os.path.join(self.v2, os.path.basename(self.dirs(run)[0]))
        try:
            usage = next(
                int(line.split()[1])
                for line in Path(d, "cpu.stat").read_text().splitlines()
                if line.startswith("usage_usec ")
            )
        except (OSError, ValueError, IndexError, StopIteration):
            return None
        waited = 0
        try:
            some = Path(d, "cpu.pressure").read_text().splitlines()[0]
            waited = int(some.rsplit("total=", 1)[1])
        except (OSError, ValueError, IndexError):
            pass  # no PSI in this kernel: usage alone
        return (usage + waited) / 1e6

    def oom_killed(self, run: str) -> bool:
        for d in self.dirs(run):
            for name in ("memory.oom_control", "memory.events"):
                try:
                    text = Path(d, name).read_text()
                except OSError:
                    continue
                for line in text.splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip() not in ("", "0"):
                        return True
        return False

    def remove(self, run: str) -> None:
        _remove_cgroups(self.dirs(run), self)


def _write(path: str, value: str) -> bool:
    try:
        Path(path).write_text(value)
    except OSError:
        return False
    return True


def _pids(cgroup_dir: str) -> list[int]:
    try:
        return [int(p) for p in Path(cgroup_dir, "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _remove_cgroups(dirs: list[str], cgroups: Cgroups) -> None:
    for d in dirs:
        if not os.path.isdir(d):
            continue
        for _ in range(200):  # killed processes leave their cgroup within milliseconds
            try:
                os.rmdir(d)
                break
            except OSError:
                if _write(os.path.join(d, "cgroup.kill"), "1") is False:
                    for pid in _pids(d):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)
        else:
            log.warning("cgroup_not_removed", cgroup=d)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale(cgroups: Cgroups) -> None:
    """Remove the run cgroups of supervisors that died (e.g. SIGKILLed)."""
    roots = list(dict.fromkeys(cgroups.v1.values())) + ([cgroups.v2] if cgroups.v2 else [])
    for root in roots:
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            owner = name[len(CGROUP_PREFIX) :].split("-", 1)[0]
            if name.startswith(CGROUP_PREFIX) and owner.isdigit() and not _alive(int(owner)):
                _remove_cgroups([os.path.join(root, name)], cgroups)


def _own_cgroups() -> Cgroups | None:
    """This process's cgroup directories, from /proc/self/cgroup and mountinfo."""
    v1_mounts: dict[str, str] = {}
    v2_mount = None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                pre, _, post = line.partition(" - ")
                fstype, _, options = (post.split() + ["", "", ""])[:3]
                point = pre.split()[4]
                if fstype == "cgroup2":
                    v2_mount = point
                elif fstype == "cgroup":
                    for opt in options.split(","):
                        if opt in ("cpu", "memory", "pids"):
                            v1_mounts[opt] = point
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            lines = [ln.rstrip("\n").split(":", 2) for ln in f]
    except OSError:
        return None
    v1: dict[str, str] = {}
    v2 = None
    for hid, controllers, path in lines:
        if hid == "0" and v2_mount is not None:
            v2 = os.path.join(v2_mount, path.lstrip("/"))
        for c in controllers.split(","):
            if c in v1_mounts:
                v1[c] = os.path.join(v1_mounts[c], path.lstrip("/"))
    v2_controllers: frozenset[str] = frozenset()
    if v2 is not None:
        try:
            enabled = Path(v2, "cgroup.subtree_control").read_text().split()
        except OSError:
            enabled = []
        v2_controllers = frozenset(c for c in enabled if c in ("cpu", "memory", "pids") and c not in v1)
    return Cgroups(v1=v1, v2=v2, v2_controllers=v2_controllers)


def _probe_cgroups() -> Cgroups | None:
    found = _own_cgroups()
    if found is None or not (found.v1 or found.v2):
        return None
    probe = f"probe{os.urandom(4).hex()}"
    try:
        found.create(probe, Caps(cpu_cores=1.0, memory_bytes=1 << 30, pids=64))
        ok = all(os.path.isfile(p) for p in found.procs_files(probe))
    except OSError:
        ok = False
    finally:
        found.remove(probe)
    if not ok:
        return None
    _sweep_stale(found)
    return found


@attrs.frozen
class Isolation:
    """Which kernel mechanisms a run gets; ``enforced`` is what observations record."""

    #: PID + network + mount namespaces, read-only host, unprivileged uid, tmpfs scratch.
    namespaces: bool
    cgroups: Cgroups | None = None

    @property
    def enforced(self) -> dict[str, str]:
        rlimits = "RLIMIT_AS per process"
        out = {
            "ram": rlimits,
            "cpu": "RLIMIT_CPU backstop above the deadline (no core cap)",
            "disk": "RLIMIT_FSIZE per file only",
            "open_files": "RLIMIT_NOFILE",
            "processes": "RLIMIT_NPROC (per uid; not applied to root)",
            "environment": "declared variables only; stdin /dev/null",
        }
        if self.namespaces:
            out |= {
                "process_tree": "pid_namespace (init killed; dies with aexec via PR_SET_PDEATHSIG)",
                "network": "net_namespace (no interface up, loopback included)",
                "filesystem": "mount_namespace: host read-only, fresh /proc; writable: scratch work, home, tmp",
                "user": "unprivileged uid per run, no_new_privs, no capabilities",
                "disk": "scratch root on a tmpfs sized repo + disk cap; RLIMIT_FSIZE per file",
                "processes": "RLIMIT_NPROC for the run's own uid",
            }
        else:
            out |= {
                "process_tree": "process_group",
                "network": "none",
                "filesystem": "scratch copy of the repo (host paths not write-protected)",
                "user": "aexec's own user",
            }
        if self.cgroups is not None:
            out |= self.cgroups.describe()
            out["process_tree"] += " + cgroup.kill" if self.cgroups.v2 else " + cgroup sweep"
        return out


_detected: Isolation | None = None


def _probe_namespaces() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        done = subprocess.run(
            ["unshare", "--pid", "--net", "--mount", "--fork", "--kill-child", "--", "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def detect_isolation() -> Isolation:
    """Probe once per process what the kernel allows.

    ``AEXEC_NO_NAMESPACES=1`` and ``AEXEC_NO_CGROUPS=1`` forbid a mechanism (to test
    the fallbacks, or where it misbehaves). Each missing mechanism logs one warning.
    """
    global _detected
    if _detected is None:
        ns = os.environ.get("AEXEC_NO_NAMESPACES") != "1" and _probe_namespaces()
        cg = None if os.environ.get("AEXEC_NO_CGROUPS") == "1" else _probe_cgroups()
        if not ns:
            log.warning(
                "isolation_degraded",
                mechanism="namespaces",
                reason="not root or namespaces unavailable: process-group kill, network and host files unprotected",
            )
        if cg is None:
            log.warning(
                "isolation_degraded",
                mechanism="cgroups",
                reason="no writable cgroup tree: no core cap, tree memory cap or cgroup.kill",
            )
        _detected = Isolation(namespaces=ns, cgroups=cg)
    return _detected


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


@attrs.frozen
class Invocation:
    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    timeout_s: float
    report_path: str
    #: The run's name, unique in this process: names its cgroups.
    run: str = "run"
    caps: Caps | None = None
    #: Fork the driver from this warm server (``argv`` is then ``python -s DRIVER SPEC``);
    #: if it is gone, the run starts cold.
    server: ForkServer | None = None


class _Sink:
    """Keeps the first ``cap`` bytes of a stream and counts the rest."""

    def __init__(self, name: str, cap: int = STREAM_CAP_BYTES) -> None:
        self.name = name
        self.cap = cap
        self.kept = bytearray()
        self.dropped = 0
        self.done = anyio.Event()

    async def drain(self, stream: anyio.abc.ByteReceiveStream) -> None:
        try:
            while True:
                try:
                    chunk = await stream.receive(_CHUNK)
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    break
                room = self.cap - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
                self.dropped += max(0, len(chunk) - max(room, 0))
                if len(chunk) < _CHUNK:
                    await anyio.sleep(_COALESCE_S)
        finally:
            self.done.set()

    def text(self) -> str:
        text = self.kept.decode("utf-8", errors="replace")
        if self.dropped:
            text += TRUNCATION_MARKER.format(dropped=self.dropped, stream=self.name, cap=self.cap)
        return text


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def _tree(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < 4096:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _tree_usage(pid: int) -> tuple[float | None, int | None]:
    """CPU seconds and peak RSS of a live tree, read from /proc just before a kill."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu, peak = 0.0, 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except (OSError, ValueError, IndexError):
            continue
    return cpu, (peak // 1024 if peak else None)


def _kill_tree(proc: anyio.abc.Process, inv: Invocation, isolation: Isolation) -> None:
    if isolation.cgroups is not None and inv.caps is not None:
        isolation.cgroups.kill(inv.run)  # everything in the run's cgroups, at once
    if proc.returncode is not None:
        return  # reaped: its pid may belong to someone else now
    if isolation.namespaces:
        # Kill the namespace's init (the driver's child): the kernel then kills
        # everything inside the namespace before the init can be reaped, and the driver
        # (left alive to reap it) exits only after that — so its exit means the
        # namespace is empty.
        targets = _children(proc.pid) or [proc.pid]
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _read_report(path: str) -> tuple[tuple[dict[str, Any], ...], int]:
    try:
        with open(path, "rb") as f:
            data = f.read(REPORT_CAP_BYTES)
    except OSError:
        return (), 0
    records: list[dict[str, Any]] = []
    bad = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(value, dict) and isinstance(value.get("kind"), str):
            records.append(value)
        else:
            bad += 1
    return tuple(records), bad


async def execute(inv: Invocation, isolation: Isolation) -> RawRun:
    """Run ``inv`` to completion or to its deadline and return the raw artifacts.

    **Cancellation:** if the caller is cancelled, the whole process tree is killed and
    reaped inside a shielded scope, then the cancellation is re-raised; no process of
    the run outlives this call.
    """
    cgroups = isolation.cgroups if inv.caps is not None else None
    if cgroups is not None:
        assert inv.caps is not None
        cgroups.create(inv.run, inv.caps)
    try:
        raw = await _execute(inv, isolation)
        if cgroups is not None and cgroups.oom_killed(inv.run):
            raw = attrs.evolve(raw, oom_killed=True)
        return raw
    finally:
        if cgroups is not None:
            with anyio.CancelScope(shield=True):
                cgroups.kill(inv.run)
                await anyio.to_thread.run_sync(cgroups.remove, inv.run)


async def _spawn(inv: Invocation) -> anyio.abc.Process:
    if inv.server is not None and inv.server.alive:
        try:
            return await inv.server.spawn(inv.argv, inv.cwd, inv.env)
        except ServerGone as e:
            log.warning("forkserver_gone", run=inv.run, error=str(e))
    return await anyio.open_process(
        inv.argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=inv.cwd,
        env=inv.env,
        start_new_session=True,
    )


async def _execute(inv: Invocation, isolation: Isolation) -> RawRun:
    start = anyio.current_time()
    proc = await _spawn(inv)
    out, err = _Sink("stdout"), _Sink("stderr")
    timed_out = False
    killed_usage: tuple[float | None, int | None] = (None, None)
    try:
        async with anyio.create_task_group() as tg:
            assert proc.stdout is not None and proc.stderr is not None
            tg.start_soon(out.drain, proc.stdout)
            tg.start_soon(err.drain, proc.stderr)
            with anyio.move_on_after(inv.timeout_s) as deadline:
                await proc.wait()
            if deadline.cancelled_caught:
                timed_out = True
                killed_usage = _tree_usage(proc.pid)
                _kill_tree(proc, inv, isolation)
                with anyio.move_on_after(KILL_WAIT_S) as stuck:
                    await proc.wait()
                if stuck.cancelled_caught:
                    proc.kill()
                    await proc.wait()
            with anyio.move_on_after(EOF_GRACE_S) as grace:
                await out.done.wait()
                await err.done.wait()
            if grace.cancelled_caught:
                # Something outside the run's kill still holds the pipes open.
                tg.cancel_scope.cancel()
    except BaseException:
        with anyio.CancelScope(shield=True):
            _kill_tree(proc, inv, isolation)
            with anyio.move_on_after(KILL_WAIT_S):
                await proc.wait()
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await proc.aclose()
    duration = anyio.current_time() - start
    records, bad = _read_report(inv.report_path)
    rc = proc.returncode
    exit_code = rc if rc is not None and rc >= 0 else None
    sig = -rc if rc is not None and rc < 0 else None
    cpu_s, peak = killed_usage
    for r in records:
        if r["kind"] == "usage":
            cpu_s = float(r.get("cpu_s") or 0.0)
            peak = int(r.get("maxrss_kib") or 0) // 1024
    if timed_out:
        exit_code, sig = None, signal.SIGKILL  # what the supervisor sent
    return RawRun(
        exit_code=exit_code,
        signal=sig,
        timed_out=timed_out,
        duration=duration,
        stdout=out.text(),
        stderr=err.text(),
        records=records,
        bad_records=bad,
        cpu_s=cpu_s,
        peak_ram_mib=peak,
    )
