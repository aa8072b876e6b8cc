"""Which kernel mechanisms the boundary can use here, probed once per `Observer`.

* **namespaces** (root): the driver unshares PID, network and mount namespaces, makes
  the host read-only but the scratch dirs, and drops the candidate to a fresh
  unprivileged uid. Killing the namespace's init kills everything in it, and the
  driver dies with aexec (``PR_SET_PDEATHSIG``).
* **cgroups** (root, a writable cgroup tree): a cgroup per run with a CPU quota, a
  memory cap for the whole tree, a process cap, and ``cgroup.kill``.
* otherwise a new session, killed by process group, and rlimits only.

``Isolation.enforced`` records, per mechanism, what was applied; nothing weaker is ever
described as stronger. See ``docs/isolation.md``.
"""

from __future__ import annotations

import os
import subprocess

import attrs

from .._log import get_logger
from .cgroups import Cgroups, probe_cgroups

log = get_logger(__name__)


@attrs.frozen
class Isolation:
    """Which kernel mechanisms a run gets; ``enforced`` is what observations record."""

    #: PID + network + mount namespaces, read-only host, unprivileged uid, tmpfs scratch.
    namespaces: bool
    cgroups: Cgroups | None = None

    @property
    def enforced(self) -> dict[str, str]:
        out = {
            # A memory cgroup (`Cgroups.describe`) replaces it where one holds.
            "ram": "RLIMIT_AS per process at the RAM cap (thread stacks count against it)",
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


def detect_isolation(*, namespaces: bool = True, cgroups: bool = True) -> Isolation:
    """Probe what the kernel allows, using only the mechanisms not forbidden
    (``namespaces=False`` / ``cgroups=False``: to test the fallbacks, or where one
    misbehaves). Each missing mechanism logs one warning. Blocking (a few ms): callers
    on an event loop run it in a worker thread.
    """
    ns = namespaces and _probe_namespaces()
    cg = probe_cgroups() if cgroups else None
    if not ns:
        log.warning(
            "isolation_degraded",
            mechanism="namespaces",
            reason="not root, namespaces unavailable or turned off: process-group kill, network and host files unprotected",
        )
    if cg is None:
        log.warning(
            "isolation_degraded",
            mechanism="cgroups",
            reason="no writable cgroup tree, or turned off: no core cap, tree memory cap or cgroup.kill",
        )
    return Isolation(namespaces=ns, cgroups=cg)
