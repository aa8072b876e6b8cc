"""Which kernel mechanisms the boundary can use here, probed once per `Observer`.

* **namespaces** (root): the driver unshares PID, network, mount, IPC and UTS
  namespaces, builds a new root holding only what the run needs (the system
  directories, the toolchain, the scratch root), and drops the candidate to a fresh
  unprivileged uid, under a seccomp syscall filter where the machine can load it
  (``aexec/_driver/seccomp.py``; probed here by loading it). Killing the namespace's init kills everything in it, and the
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
import sys

import attrs

from .._log import get_logger
from . import DRIVER
from .cgroups import Cgroups, probe_cgroups

log = get_logger(__name__)


#: What a run's view holds (``aexec._driver.view.build_view``); the toolchain's
#: own prefixes are added per interpreter (``aexec._pipeline.session``).
FILESYSTEM = (
    "mount_namespace, own root (pivot_root onto a tmpfs; the host's root detached) holding only: "
    "read-only /usr, /bin, /sbin, /lib* and a cut /etc (users, name lookup, ld.so, alternatives, "
    "certificates, time zone, toolchain config); /dev of null, zero, full, random, urandom, tty, "
    "a fresh pts; a fresh /proc; the scratch root writable (work, home, tmp; /tmp, /var/tmp, "
    "/dev/shm are its tmp); nothing else of the host (no /home, /root, /srv, /opt, /mnt, other "
    "runs' scratch roots, the original repo; the copy holds no .git)"
)


@attrs.frozen
class Isolation:
    """Which kernel mechanisms a run gets; ``enforced`` is what observations record."""

    #: PID + network + mount namespaces, own root, unprivileged uid, tmpfs scratch.
    namespaces: bool
    cgroups: Cgroups | None = None
    #: What the candidate's syscall filter denies (``seccomp: deny-list vN, K calls``),
    #: or None: not installable here (unknown architecture, kernel without it).
    seccomp: str | None = None

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
                "filesystem": FILESYSTEM,
                "user": "unprivileged uid per run, no_new_privs, no capabilities",
                "disk": "scratch root on a tmpfs sized repo + disk cap; RLIMIT_FSIZE per file",
                "processes": "RLIMIT_NPROC for the run's own uid",
                "ipc": "ipc_namespace per run (own SysV objects and POSIX message queues)",
                "hostname": "uts_namespace per run, hostname 'aexec'",
                "syscalls": (
                    f"{self.seccomp} (EPERM; clone and unshare of namespaces EPERM, clone3"
                    " ENOSYS; other ABIs killed)"
                    if self.seccomp
                    else "none: no seccomp filter loads here (unknown architecture or kernel)"
                ),
            }
        else:
            out |= {
                "process_tree": "process_group",
                "network": "none",
                "filesystem": "scratch copy of the repo (host paths not write-protected)",
                "user": "aexec's own user",
                "ipc": "the host's",
                "hostname": "the host's",
                "syscalls": "none",
            }
        if self.cgroups is not None:
            out |= self.cgroups.describe()
            if self.namespaces and self.cgroups.memory:
                out["disk"] += "; its files are memory: they count against ram_cap_mib too"
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


def _probe_seccomp() -> str | None:
    try:
        done = subprocess.run(
            # The driver's filter: installs itself, checks it holds, prints what it denies.
            [sys.executable, "-s", DRIVER, "--seccomp-probe"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def detect_isolation(*, namespaces: bool = True, cgroups: bool = True) -> Isolation:
    """Probe what the kernel allows, using only the mechanisms not forbidden
    (``namespaces=False`` / ``cgroups=False``: to test the fallbacks, or where one
    misbehaves). Each missing mechanism logs one warning. Blocking (a few ms): callers
    on an event loop run it in a worker thread.
    """
    ns = namespaces and _probe_namespaces()
    filtered = _probe_seccomp() if ns else None
    cg = probe_cgroups() if cgroups else None
    if not ns:
        log.warning(
            "isolation_degraded",
            mechanism="namespaces",
            reason="not root, namespaces unavailable or turned off: process-group kill, network and host files unprotected",
        )
    if ns and filtered is None:
        log.warning(
            "isolation_degraded",
            mechanism="seccomp",
            reason="the syscall filter does not load here (unknown architecture or kernel): none is installed",
        )
    if cg is None:
        log.warning(
            "isolation_degraded",
            mechanism="cgroups",
            reason="no writable cgroup tree, or turned off: no core cap, tree memory cap or cgroup.kill",
        )
    return Isolation(namespaces=ns, cgroups=cg, seccomp=filtered)
