"""Run cgroups: one per run, under aexec's own, on cgroup v1 and v2 alike.

A run's cgroups hold it to a CPU quota (``cpu_cap_cores``), a memory cap for the whole
tree at the declared RAM cap, its scratch tmpfs's files included (as Docker's
``--memory`` with ``--tmpfs``; where it holds, it is the run's only memory cap: no
RLIMIT_AS, which would count every thread's stack reservation as used), and a process
cap; ``cgroup.kill`` (v2) kills everything in them at once, and on a v1-only machine the
processes listed in them are killed one by one. ``cpu.stat`` and ``cpu.pressure`` tell
`Admission` whether a run is busy; `Cgroups.memory_held` tells the supervisor when a run
is at its memory cap (it kills it then, before the kernel stalls it in reclaim), and
``memory.events`` (v2) or ``memory.oom_control`` (v1) whether the kernel's OOM killer ran.

Run cgroups are named ``aexec-<supervisor pid>-<run>``: those of a dead supervisor are
swept by ``aexec._boundary.leftovers``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import attrs

from .._log import get_logger

log = get_logger(__name__)

_CPU_PERIOD_US = 100_000
#: How often the supervisor reads a run's memory use (`Cgroups.memory_held`).
MEMORY_POLL_S = 0.1
#: A run holding this close to its memory cap (or an eighth of a small cap) is at it:
#: past this, the kernel reclaims the file pages the run executes from and stalls it.
NEAR_CAP_BYTES = 32 << 20


def at_cap(memory_bytes: int) -> int:
    """What a run with this memory cap holds when it is at its cap (`NEAR_CAP_BYTES`)."""
    return memory_bytes - min(NEAR_CAP_BYTES, memory_bytes // 8)


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
    #: Each root joined with "/", made once: a run's paths are asked for ~9 times a run.
    _prefixes: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)

    @_prefixes.default
    def _joined(self) -> tuple[str, ...]:
        return tuple(os.path.join(root, "") for root in self.roots())

    def roots(self) -> list[str]:
        """aexec's own cgroup directories, one per hierarchy."""
        roots = list(dict.fromkeys(self.v1.values()))
        if self.v2 is not None:
            roots.append(self.v2)
        return roots

    def dirs(self, run: str) -> list[str]:
        name = _name(run)
        return [prefix + name for prefix in self._prefixes]

    def procs_files(self, run: str) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs(run)]

    @property
    def memory(self) -> bool:
        """A run's memory cgroup holds (v1 or v2): RLIMIT_AS is then not set."""
        return "memory" in self.v1 or "memory" in self.v2_controllers

    def describe(self) -> dict[str, str]:
        have = set(self.v1) | set(self.v2_controllers)
        out = {}
        if "cpu" in have:
            out["cpu"] = "cgroup CPU quota of cpu_cap_cores (RLIMIT_CPU as a backstop)"
        if self.memory:
            out["ram"] = (
                "memory cgroup at ram_cap_mib: the whole tree (every process and thread, its"
                " scratch tmpfs files included, as Docker's --memory with --tmpfs); the supervisor"
                f" reads the cgroup every {MEMORY_POLL_S:g} s and kills the tree (cgroup.kill, or"
                " each of cgroup.procs on v1) once what it holds besides reclaimable file cache"
                f" is within {NEAR_CAP_BYTES >> 20} MiB of the cap (an eighth of a cap under"
                f" {NEAR_CAP_BYTES >> 17} MiB), before the kernel stalls it in reclaim, or once the"
                " kernel's OOM killer has taken any process of it; either is resource; no RLIMIT_AS"
            )
        if "pids" in have:
            out["processes"] = "pids cgroup"
        return out

    def create(self, run: str, caps: Caps) -> None:
        quota = max(1000, round(caps.cpu_cores * _CPU_PERIOD_US))
        writes: list[tuple[str, str]] = []
        # Best effort: swap is capped with RAM where the kernel accounts it (v1 memsw).
        optional: list[tuple[str, str]] = []
        for kind, root in self.v1.items():
            d = os.path.join(root, _name(run))
            if kind == "cpu":
                writes += [
                    (f"{d}/cpu.cfs_period_us", str(_CPU_PERIOD_US)),
                    (f"{d}/cpu.cfs_quota_us", str(quota)),
                ]
            elif kind == "memory":
                writes.append((f"{d}/memory.limit_in_bytes", str(caps.memory_bytes)))
                optional.append((f"{d}/memory.memsw.limit_in_bytes", str(caps.memory_bytes)))
            elif kind == "pids":
                writes.append((f"{d}/pids.max", str(caps.pids)))
        if self.v2 is not None:
            d = os.path.join(self.v2, _name(run))
            if "cpu" in self.v2_controllers:
                writes.append((f"{d}/cpu.max", f"{quota} {_CPU_PERIOD_US}"))
            if "memory" in self.v2_controllers:
                writes += [(f"{d}/memory.max", str(caps.memory_bytes)), (f"{d}/memory.swap.max", "0")]
            if "pids" in self.v2_controllers:
                writes.append((f"{d}/pids.max", str(caps.pids)))
        for d in self.dirs(run):
            with contextlib.suppress(FileExistsError):
                os.mkdir(d)
        for path, value in writes:
            _write_or_raise(path, value)
        for path, value in optional:
            _write(path, value)

    def kill(self, run: str) -> None:
        """Kill every process of the run's cgroups; none can leave them."""
        dirs = self.dirs(run)
        # cgroup.kill is v2's (its directory is last): tried first, where v1's
        # directories would each cost a failed open.
        if self.v2 is not None and _write(os.path.join(dirs[-1], "cgroup.kill"), "1"):
            return
        for d in dirs:  # no cgroup.kill: a v1-only machine
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
        d = os.path.join(self.v2, _name(run))
        try:
            usage = next(
                int(line.split()[1])
                for line in _read(os.path.join(d, "cpu.stat")).splitlines()
                if line.startswith("usage_usec ")
            )
        except (OSError, ValueError, IndexError, StopIteration):
            return None
        waited = 0
        try:
            some = _read(os.path.join(d, "cpu.pressure")).splitlines()[0]
            waited = int(some.rsplit("total=", 1)[1])
        except (OSError, ValueError, IndexError):
            pass  # no PSI in this kernel: usage alone
        return (usage + waited) / 1e6

    def oom_killed(self, run: str) -> bool:
        """The run's memory cgroup hit its cap: the OOM killer ran (v2 ``memory.events``
        ``oom`` / ``oom_kill``) or killed something (v1 ``memory.oom_control`` ``oom_kill``)."""
        name = _name(run)
        files = []
        if "memory" in self.v1:
            files.append(os.path.join(self.v1["memory"], name, "memory.oom_control"))
        if self.v2 is not None and "memory" in self.v2_controllers:
            files.append(os.path.join(self.v2, name, "memory.events"))
        for path in files:
            try:
                text = _read(path)
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key in ("oom", "oom_kill") and value.strip() not in ("", "0"):
                    return True
        return False

    def memory_held(self, run: str, floor: int) -> int | None:
        """What the run's tree holds (bytes) if it may be ``floor`` or more, else None.

        Held is the memory cgroup's usage less its file cache (``active_file`` and
        ``inactive_file``, which reclaim drops; tmpfs pages are not on those lists):
        anonymous memory, tmpfs files, kernel memory. The usage alone is read first, and
        ``memory.stat`` only when that is ``floor`` or more.
        """
        name = _name(run)
        if "memory" in self.v1:
            d, usage_file, prefix = os.path.join(self.v1["memory"], name), "memory.usage_in_bytes", "total_"
        elif self.v2 is not None and "memory" in self.v2_controllers:
            d, usage_file, prefix = os.path.join(self.v2, name), "memory.current", ""
        else:
            return None
        try:
            usage = int(_read(os.path.join(d, usage_file)))
            if usage < floor:
                return None
            stat = dict(line.split() for line in _read(os.path.join(d, "memory.stat")).splitlines())
            return usage - int(stat[f"{prefix}active_file"]) - int(stat[f"{prefix}inactive_file"])
        except (OSError, ValueError, KeyError):
            return None

    def memory_peak(self, run: str) -> int | None:
        """The most the run's memory cgroup has held (bytes): v1 ``memory.max_usage_in_bytes``,
        v2 ``memory.peak`` (Linux 5.19+)."""
        name = _name(run)
        if "memory" in self.v1:
            path = os.path.join(self.v1["memory"], name, "memory.max_usage_in_bytes")
        elif self.v2 is not None and "memory" in self.v2_controllers:
            path = os.path.join(self.v2, name, "memory.peak")
        else:
            return None
        try:
            return int(_read(path))
        except (OSError, ValueError):
            return None

    def remove(self, run: str) -> None:
        remove_cgroups(self.dirs(run))

    def try_remove(self, run: str) -> bool:
        """Remove the run's cgroups if each is empty now: one ``rmdir`` each, never a
        wait (`remove` waits for killed processes to leave). True if none is left."""
        left = False
        for d in self.dirs(run):
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:
                left = True
        return not left


def _name(run: str) -> str:
    """A run's cgroup directory's name, in every hierarchy."""
    return f"{CGROUP_PREFIX}{os.getpid()}-{run}"


def _read(path: str) -> str:
    """A cgroup file's text (ASCII), read without the io layers' objects."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii")


def _write_or_raise(path: str, value: str) -> None:
    """One ``write`` of ``value`` (a cgroup file takes a value in one write)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _write(path: str, value: str) -> bool:
    try:
        _write_or_raise(path, value)
    except OSError:
        return False
    return True


def _pids(cgroup_dir: str) -> list[int]:
    try:
        return [int(p) for p in _read(os.path.join(cgroup_dir, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return []


def remove_cgroups(dirs: list[str]) -> None:
    """Remove run cgroups, killing what is left in them first."""
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


def own_cgroups() -> Cgroups | None:
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
            enabled = _read(os.path.join(v2, "cgroup.subtree_control")).split()
        except OSError:
            enabled = []
        v2_controllers = frozenset(c for c in enabled if c in ("cpu", "memory", "pids") and c not in v1)
    return Cgroups(v1=v1, v2=v2, v2_controllers=v2_controllers)


def probe_cgroups() -> Cgroups | None:
    """This process's cgroups, if a run cgroup can be made under them (root, writable tree)."""
    found = own_cgroups()
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
    return found if ok else None
