"""The kernel side of the boundary: namespaces, cgroups, the run's uid and rlimits
(Linux; through ctypes, because the driver is stdlib-only). The filesystem view is
`view`'s.

A module of the driver's package (see `aexec._driver`). Every step that fails
raises `BoxError`: the run must not go ahead with less.
"""

from __future__ import annotations

import _thread
import ctypes
import os
import resource
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from .wire import Box, Instructions

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
CLONE_NEWIPC, CLONE_NEWUTS = 0x08000000, 0x04000000
#: A run's own namespaces: PID, mount, network, and IPC (no SysV object or POSIX
#: message queue crosses between runs or outlives one) and UTS (its own hostname).
CLONE_RUN = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
HOSTNAME = b"aexec"
_SIOCSIFFLAGS, _IFF_UP, _IFF_LOOPBACK = 0x8914, 0x1, 0x8
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 0x400, 0x800, 0x200000
MNT_DETACH = 0x2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38

_libc = ctypes.CDLL(None, use_errno=True)


class BoxError(Exception):
    """A step of the boundary failed: the run must not go ahead without it."""


def _call(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise BoxError(f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    # (no list of the four, nor the message made, on each call: a forked init's steps)
    rc = _libc.mount(
        None if source is None else os.fsencode(source),
        os.fsencode(target),
        None if fstype is None else os.fsencode(fstype),
        ctypes.c_ulong(flags),
        None if data is None else os.fsencode(data),
    )
    if rc != 0:
        _call(rc, f"mount {target}")


def detach(target: str) -> None:
    """Detach the mount at ``target``, whole (an old root left there by pivot_root)."""
    _call(_libc.umount2(os.fsencode(target), MNT_DETACH), "detach the host's root")


def prctl(option: int, arg: int) -> None:
    rc = _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0)
    if rc != 0:
        _call(rc, f"prctl {option}")


def enter_cgroups(procs_files: list[str]) -> None:
    """This process into each run cgroup: its pid, one ``write`` per ``cgroup.procs``
    (on bare descriptors: a text file object per cgroup cost a forked init ~0.2 ms)."""
    pid = b"%d" % os.getpid()
    for path in procs_files:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        except OSError as e:
            raise BoxError(f"join cgroup {os.path.dirname(path)}: {e.strerror}") from None


def drop_privileges(box: Box) -> None:
    uid, gid = box["uid"], box["gid"]
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def unshare() -> None:
    """New PID (for the children), mount, network, IPC and UTS namespaces: a cold run's
    outer process."""
    _call(_libc.unshare(CLONE_RUN), "unshare")


#: struct ifreq (name[16], flags) that brings a fresh namespace's loopback up: built once,
#: as the driver loads (a fork server's runs share it).
_LO_UP = ctypes.create_string_buffer(
    b"lo".ljust(16, b"\0") + (_IFF_UP | _IFF_LOOPBACK).to_bytes(2, sys.byteorder), 40
)


def name_host() -> None:
    """The run's fixed hostname, and its own loopback up (as Docker's ``--network none``
    leaves it): a suite's local server works, nothing outside the run is reachable.

    One ioctl: a fresh network namespace's loopback has exactly ``IFF_LOOPBACK`` set,
    so its flags need not be read first."""
    _call(_libc.sethostname(HOSTNAME, len(HOSTNAME)), "sethostname")
    fd = _libc.socket(2, 2 | 0o2000000, 0)  # AF_INET, SOCK_DGRAM|SOCK_CLOEXEC: a handle for the ioctl
    _call(min(fd, 0), "socket")
    try:
        _call(_libc.ioctl(fd, _SIOCSIFFLAGS, _LO_UP), "loopback up")
    finally:
        os.close(fd)


def apply_limits(spec: Instructions) -> None:
    for name, value in spec["rlimits"].items():
        which = getattr(resource, name)
        resource.setrlimit(which, (value, value))


#: clone(2) by number, to fork straight into new namespaces (x86-64 and arm64; elsewhere
#: the run's outer process unshares them and forks the init, as a cold run does; so too
#: before 3.7, whose C API has no ``PyOS_BeforeFork`` for `fork_init` to call).
SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)
if not hasattr(ctypes.pythonapi, "PyOS_BeforeFork"):
    SYS_CLONE = None
#: libc through the Python API's calling convention: the GIL stays held across the
#: call, as ``os.fork`` holds it across ``fork()``.
_libc_gil = ctypes.PyDLL(None, use_errno=True)


def _resolve(lib: ctypes.CDLL, *names: str) -> None:
    """Look ``names`` up in ``lib`` now, as the driver loads: ctypes keeps a function
    once looked up, so a fork server's runs find it there. Looked up first in a forked
    child (a run's init or candidate), each cost that child ctypes' lookup in Python and
    ~40 copied pages, in every run. (One this libc has not got is looked up, and fails,
    where it is called, as before.)"""
    for name in names:
        hasattr(lib, name)


_resolve(_libc, "mount", "umount2", "prctl", "unshare", "sethostname", "socket", "ioctl")
_resolve(_libc_gil, "fork", "syscall")
if SYS_CLONE is not None:
    _resolve(ctypes.pythonapi, "PyOS_BeforeFork", "PyOS_AfterFork_Child", "PyOS_AfterFork_Parent")


#: What the fork server does before each fork of a run's init (`contain.keep_modules`).
BEFORE_FORK: list[Callable[[], None]] = []


def fork_init() -> int:
    """``os.fork()``, with the child in new PID, mount, network, IPC and UTS namespaces, whose
    init (pid 1) it is: what an outer process's ``unshare`` + ``fork`` gives, in one
    process fewer. The interpreter's own fork hooks run around it as around ``os.fork``."""
    assert SYS_CLONE is not None
    for hook in BEFORE_FORK:
        hook()
    flags = CLONE_RUN | signal.SIGCHLD
    ctypes.pythonapi.PyOS_BeforeFork()
    try:
        pid = _libc_gil.syscall(
            ctypes.c_long(SYS_CLONE),
            ctypes.c_ulong(flags),
            ctypes.c_long(0),
            ctypes.c_long(0),
            ctypes.c_long(0),
            ctypes.c_long(0),
        )
    except BaseException:
        ctypes.pythonapi.PyOS_AfterFork_Parent()
        raise
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"clone: {os.strerror(err)}")
    return int(pid)


def fork_again() -> int:
    """``os.fork()`` for a process that is itself a forked child, whose interpreter did
    its after-fork work when it was forked and has started no thread since (the run's
    init forking the candidate): the bare ``fork()``, without that work again in the
    child (the ``register_at_fork`` callbacks, threading's above all: ~150 copied pages
    and ~0.35 ms per run). What the child would have had anew it has from this process:
    the one thread's ident, its random state (fresh since this process's fork, and
    drawn from by nothing since), unlocked locks. Its native thread id is its own again.
    With another thread alive, or no ``PyOS_BeforeFork`` (3.6), it is ``os.fork()``."""
    if SYS_CLONE is None or _thread._count() != 0:
        return os.fork()
    pid = int(_libc_gil.fork())  # with the GIL held, as os.fork holds it
    if pid == 0:
        threading = sys.modules.get("threading")
        if threading is not None and hasattr(threading.main_thread(), "_set_native_id"):  # 3.8+
            threading.main_thread()._set_native_id()
    elif pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fork: {os.strerror(err)}")
    return pid
