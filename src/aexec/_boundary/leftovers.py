"""What a dead aexec left behind: scratch roots, their tmpfs mounts, run cgroups.

All are named after the aexec process that made them (``aexec-<pid>-…``); a name whose
pid is no longer alive is stale and removed. Where they are:

* **mounts** — in this mount namespace's table (``/proc/self/mountinfo``), wherever the
  TMPDIR of the dead process was: found without knowing it;
* **cgroups** — under aexec's own cgroup, found by name;
* **scratch directories** (without the kernel boundary they are plain directories) —
  under the scratch bases a process used, which it records in a **registry** outside
  any TMPDIR (`default_registry`): one small JSON file per process, with its start time
  so a reused pid is not mistaken for it.

An `Observer` registers itself and sweeps when it starts; ``aexec gc`` sweeps on demand.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import tempfile

from .._stages.plan import Scratch
from .cgroups import CGROUP_PREFIX, Cgroups, remove_cgroups
from .scratch import SCRATCH_PREFIX, remove_scratch


def owner_alive(name: str, prefix: str) -> bool | None:
    """Whether the aexec that named ``name`` (``<prefix><pid>-…``) still runs; None if
    ``name`` is not such a name."""
    owner = name[len(prefix) :].split("-", 1)[0]
    if not (name.startswith(prefix) and owner.isdigit()):
        return None
    try:
        os.kill(int(owner), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def default_registry() -> str:
    """``/run/aexec`` as root; otherwise a directory in the user's cache."""
    if os.geteuid() == 0 and os.path.isdir("/run"):
        return "/run/aexec"
    return os.path.join(os.path.expanduser("~"), ".cache", "aexec", "run")


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def register(registry: str, scratch_base: str) -> None:
    """Record that this process makes scratch roots under ``scratch_base``."""
    os.makedirs(registry, mode=0o700, exist_ok=True)
    path = os.path.join(registry, f"{os.getpid()}.json")
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
        if entry.get("start") != _start_time(os.getpid()):
            entry = {}
    except (OSError, ValueError):
        entry = {}
    bases = sorted({*entry.get("scratch_bases", []), os.path.abspath(scratch_base)})
    entry = {"pid": os.getpid(), "start": _start_time(os.getpid()), "scratch_bases": bases}
    fd, tmp = tempfile.mkstemp(dir=registry, prefix=".tmp-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(entry, f)
    os.replace(tmp, path)


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), path)


def sweep_mounts() -> list[str]:
    """Detach every scratch mount (``…/aexec-<pid>-…``) whose aexec is dead."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            points = [_unescape(line.split()[4]) for line in f]
    except OSError:
        return []
    swept = []
    for point in points:
        names = [n for n in point.split("/") if n.startswith(SCRATCH_PREFIX)]
        if names and owner_alive(names[0], SCRATCH_PREFIX) is False:
            _libc.umount2(os.fsencode(point), _MNT_DETACH)  # fails only if already gone
            swept.append(point)
    return swept


def sweep_registry(registry: str) -> list[str]:
    """Sweep the scratch bases of every registered aexec that died; drop their entries."""
    try:
        names = os.listdir(registry)
    except OSError:
        return []
    swept = []
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(registry, name)
        try:
            with open(path, encoding="utf-8") as f:
                entry = json.load(f)
            pid, start, bases = int(entry["pid"]), entry["start"], list(entry["scratch_bases"])
        except FileNotFoundError:
            continue  # another aexec swept it a moment ago
        except (OSError, ValueError, KeyError, TypeError):
            _unlink(path)  # unreadable: nothing to act on
            continue
        if _start_time(pid) == start and start is not None:
            continue  # still running
        for base in bases:
            swept += sweep_scratch(str(base))
        _unlink(path)
    return swept


def _unlink(path: str) -> None:
    """Remove a registry entry another aexec may be sweeping at the same moment."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def sweep_scratch(base: str) -> list[str]:
    """Remove the scratch roots under ``base`` of aexec processes that died; returns them."""
    try:
        names = os.listdir(base)
    except OSError:
        return []
    swept = []
    for name in names:
        if owner_alive(name, SCRATCH_PREFIX) is False:
            remove_scratch(Scratch(os.path.join(base, name)))
            swept.append(os.path.join(base, name))
    return swept


def sweep_cgroups(cgroups: Cgroups) -> list[str]:
    """Remove the run cgroups of aexec processes that died; returns them."""
    swept = []
    for root in cgroups.roots():
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            if owner_alive(name, CGROUP_PREFIX) is False:
                remove_cgroups([os.path.join(root, name)])
                swept.append(os.path.join(root, name))
    return swept


def sweep_leftovers(registry: str, *scratch_bases: str) -> list[str]:
    """Everything dead aexec processes left that can be found without cgroups: their
    mounts, the scratch bases they registered, and ``scratch_bases``."""
    swept = sweep_mounts() + sweep_registry(registry)
    for base in scratch_bases:
        swept += sweep_scratch(base)
    return swept
