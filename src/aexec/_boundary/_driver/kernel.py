"""The kernel side of the boundary: namespaces, the mount view, cgroups, the run's uid
and rlimits (Linux; through ctypes, because the driver is stdlib-only).

Part of the driver (`aexec._boundary.driver` loads it by path). Every step that fails
raises `BoxError`: the run must not go ahead with less.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import stat
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..._wire import Box, Instructions

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
CLONE_NEWIPC, CLONE_NEWUTS = 0x08000000, 0x04000000
#: A run's own namespaces: PID, mount, network, and IPC (no SysV object or POSIX
#: message queue crosses between runs or outlives one) and UTS (its own hostname).
CLONE_RUN = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
HOSTNAME = b"aexec"
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 0x400, 0x800, 0x200000
MNT_DETACH = 0x2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
_PER_MOUNT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
}

_libc = ctypes.CDLL(None, use_errno=True)
#: mount_setattr(2) (Linux 5.12): one call makes a whole mount tree read-only. Its
#: number is 442 on every architecture but alpha; elsewhere the per-mount loop is used.
_SYS_MOUNT_SETATTR = (
    442 if os.uname().machine in ("x86_64", "aarch64", "riscv64", "ppc64le", "s390x") else None
)
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x1, 0x2


class _MountAttr(ctypes.Structure):
    _fields_ = [  # ctypes wants a list
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class BoxError(Exception):
    """A step of the boundary failed: the run must not go ahead without it."""


def _call(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise BoxError(f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    enc = [None if x is None else os.fsencode(x) for x in (source, target, fstype)]
    _call(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), None), f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _call(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def _unescape(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal
    out, i = [], 0
    while i < len(path):
        if path[i] == "\\" and path[i + 1 : i + 4].isdigit():
            out.append(chr(int(path[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def mounts() -> list[tuple[str, int]]:
    """(mount point, per-mount flags) of every mount this process sees, parents first."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            flags = 0
            for opt in fields[5].split(","):
                flags |= _PER_MOUNT_FLAGS.get(opt, 0)
            found.append((_unescape(fields[4]), flags))
    return found


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _bind(source: str, target: str, *, readonly: bool) -> None:
    mount(source, target, None, MS_BIND | MS_REC)
    extra = MS_RDONLY if readonly else 0
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_NOSUID | extra)


def build_view(box: Box) -> None:
    """In the new mount namespace: the whole host read-only, the scratch dirs writable."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Other runs' scratch roots (siblings under the same base) must not be readable.
    # Under a tmp target (the default: /tmp) the scratch tmp bound over it below covers
    # them, whole; elsewhere they leave this view one by one (a detach costs an RCU
    # grace period, and a busy machine has dozens of them).
    own, siblings = box["scratch_root"], box["sibling_prefix"]
    covered = any(_under(own, t) and os.path.isdir(t) for t in box["tmp_targets"])
    for point, _ in [] if covered else mounts():
        if point.startswith(siblings) and not _under(point, own):
            _libc.umount2(os.fsencode(point), MNT_DETACH)  # fails only if already gone
    # Held open: binding /tmp may cover these paths (the scratch root, an interpreter).
    keep = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in box["keep"]}
    tmp = os.open(box["tmp"], os.O_PATH | os.O_DIRECTORY)
    # A /proc of the new PID namespace: the host's processes are not even visible.
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # Directories others cannot traverse (e.g. /root holding the interpreter) are
    # covered by a fresh tmpfs holding only what the candidate needs from them, bound
    # back through fds opened before the cover (the scratch root may be among them).
    for mask in box["masks"]:
        hidden, needed = mask["hidden"], mask["paths"]
        held = {path: os.open(path, os.O_PATH) for path in needed}
        mount("aexec-mask", hidden, "tmpfs", MS_NOSUID | MS_NODEV)
        os.chmod(hidden, 0o755)
        for path, fd in sorted(held.items()):
            if not any(_under(path, p) for p in needed if p != path):
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    os.makedirs(path, mode=0o755, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                    open(path, "a").close()
                mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            os.close(fd)
    readonly_everywhere()
    for path in box["writable"]:
        _bind(path, path, readonly=False)
    for target in box["tmp_targets"]:
        if os.path.isdir(target):
            _bind(f"/proc/self/fd/{tmp}", target, readonly=False)
    # What lives under /tmp on the host is covered now: put it back in place.
    for path, fd in keep.items():
        here = os.fstat(fd)
        try:
            seen = os.stat(path)
            same = (seen.st_dev, seen.st_ino) == (here.st_dev, here.st_ino)
        except OSError:
            same = False
        if not same:
            os.makedirs(path, mode=0o755, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            if path != box["scratch_root"]:
                mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
        os.close(fd)
    os.close(tmp)


def readonly_everywhere() -> None:
    """Every mount of this namespace read-only and nosuid, its other flags kept."""
    if _SYS_MOUNT_SETATTR is not None:
        # One call for the whole tree, atomic against mounts coming and going.
        attr = _MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
        rc = _libc.syscall(
            ctypes.c_long(_SYS_MOUNT_SETATTR),
            ctypes.c_int(AT_FDCWD),
            ctypes.c_char_p(b"/"),
            ctypes.c_uint(AT_RECURSIVE),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        )
        if rc == 0:
            return
        if ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM):  # EPERM: seccomp may deny it
            _call(rc, "mount_setattr / read-only")
    for point, flags in mounts():  # an older kernel: one remount per mount
        try:
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | flags)
        except BoxError:
            # Gone since the list was read (another run's scratch root, removed on the
            # host, leaves this namespace too) or hidden by a mask: unreachable anyway.
            if os.path.exists(point) and any(p == point for p, _ in mounts()):
                raise


def enter_cgroups(procs_files: list[str]) -> None:
    for path in procs_files:
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
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


def name_host() -> None:
    """In the run's own UTS namespace: the same fixed hostname for every run."""
    _call(_libc.sethostname(HOSTNAME, len(HOSTNAME)), "sethostname")


def apply_limits(spec: Instructions) -> None:
    for name, value in spec["rlimits"].items():
        which = getattr(resource, name)
        resource.setrlimit(which, (value, value))


#: clone(2) by number, to fork straight into new namespaces (x86-64 and arm64; elsewhere
#: the run's outer process unshares them and forks the init, as a cold run does).
SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)
#: libc through the Python API's calling convention: the GIL stays held across the
#: call, as ``os.fork`` holds it across ``fork()``.
_libc_gil = ctypes.PyDLL(None, use_errno=True)


def fork_init() -> int:
    """``os.fork()``, with the child in new PID, mount, network, IPC and UTS namespaces, whose
    init (pid 1) it is: what an outer process's ``unshare`` + ``fork`` gives, in one
    process fewer. The interpreter's own fork hooks run around it as around ``os.fork``."""
    assert SYS_CLONE is not None
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
