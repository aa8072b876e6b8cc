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
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..._wire import Box, Instructions

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
CLONE_NEWIPC, CLONE_NEWUTS = 0x08000000, 0x04000000
#: A run's own namespaces: PID, mount, network, and IPC (no SysV object or POSIX
#: message queue crosses between runs or outlives one) and UTS (its own hostname).
CLONE_RUN = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
HOSTNAME = b"aexec"
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP, _IFF_RUNNING = 0x8913, 0x8914, 0x1, 0x40
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


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if x is None else os.fsencode(x) for x in (source, target, fstype, data)]
    _call(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


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


#: Where the new root is assembled before ``pivot_root``: a directory every Linux has,
#: covered in this namespace only (what lies under it is reached through fds held
#: before the cover).
STAGE = "/dev"
#: The view's /dev: these character devices (name, major, minor), mode 0666 …
DEV_NODES = (
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
)
#: … these links, and a fresh devpts instance (``/dev/pts``, ``/dev/ptmx``).
DEV_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
)
#: Where pivot_root puts the host's root in the view until it is detached: under a
#: directory of mode 000, which only root may traverse.
HOST = "/.aexec-host/root"
_host_attached = False
#: pivot_root(2) by number (glibc has no wrapper); elsewhere the view is refused.
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}.get(
    os.uname().machine
)


def build_view(box: Box) -> None:
    """In the new mount namespace: a new root holding only what the run needs.

    A tmpfs becomes the root (``pivot_root``; the host's root, out of reach, is then
    detached whole by `release_host`):
    read-only binds of ``box["readonly"]`` (the system directories and the toolchain's
    prefixes, symlinks made as links), ``box["etc"]`` as /etc, a /dev of a few nodes, a
    fresh /proc; the scratch root and the scratch tmp (over each tmp target) writable.
    Nothing else of the host is there: not its home directories, not the original repo,
    not another run's scratch root.
    """
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    umask = os.umask(0)
    held: list[int] = []
    try:
        _assemble(box, held)
    finally:
        for fd in held:
            os.close(fd)
        os.umask(umask)


def _assemble(box: Box, held: list[int]) -> None:
    def hold(path: str) -> int:
        held.append(os.open(path, os.O_PATH | os.O_CLOEXEC))
        return held[-1]

    # (path in the view, what goes there, its source): resolved on the host first.
    ops: list[tuple[str, str, Any]] = [("/proc", "proc", None), ("/dev", "dev", None)]
    for path in box["readonly"]:
        try:
            st = os.lstat(path)
        except OSError:
            continue  # not on this host (/lib32, say)
        if stat.S_ISLNK(st.st_mode):
            ops.append((path, "link", os.readlink(path)))
        else:
            ops.append((path, "ro", hold(path)))
    ops += [(path, "hide", None) for path in box["hidden"]]
    if box["etc"] is not None:
        ops.append(("/etc", "ro", hold(box["etc"])))
    # The scratch tmp is bound over the first tmp target; the others are links to it.
    writable = [(box["scratch_root"], hold(box["scratch_root"]))]
    if box["tmp_targets"]:
        first, *others = box["tmp_targets"]
        ops += [(target, "link", first) for target in others]
        writable.append((first, hold(box["tmp"])))
    ops += [(path, "rw", fd) for path, fd in writable]
    ops.sort(key=lambda op: op[0].split("/"))  # a parent before what is under it
    # Read-only first, sealed at once (one mount_setattr); then the writable binds, and
    # what lies under them (a venv under /tmp) read-only one by one.
    late = [op for op in ops if any(_under(op[0], path) for path, _ in writable)]
    mount("aexec-view", STAGE, "tmpfs", MS_NOSUID, "mode=0755,size=4m")
    _made.clear()
    _made.add(STAGE)
    for path, what, source in ops:
        if (path, what, source) in late:
            if not any(_under(path, p) and p != path for p, _ in writable):
                _mkdirs(STAGE + path)  # its mount point
            continue
        _place(STAGE + path, what, source)
    os.mkdir(STAGE + os.path.dirname(HOST), 0)  # only root may traverse it
    os.mkdir(STAGE + HOST, 0)
    readonly(STAGE)
    for path, what, source in late:
        _place(STAGE + path, what, source)
        if what == "ro":
            mount(None, STAGE + path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    if SYS_PIVOT_ROOT is None:
        raise BoxError(f"pivot_root: unknown on {os.uname().machine}")
    os.chdir(STAGE)
    _call(_libc.syscall(ctypes.c_long(SYS_PIVOT_ROOT), b".", os.fsencode(HOST[1:])), "pivot_root")
    os.chdir("/")
    # The host's root, now at HOST (out of the candidate's reach: its parent is mode
    # 000), is detached whole by the init once the candidate is forked (`release_host`):
    # a detach waits out an RCU grace period (milliseconds on a busy machine), which
    # need not delay the run.
    global _host_attached
    _host_attached = True
    # stdin (/dev/null, opened on the host's /dev) is the view's own /dev/null again:
    # as a fresh Popen's would be, it names /dev/null.
    try:
        st = os.fstat(0)
    except OSError:
        return
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3):
        fd = os.open("/dev/null", os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)


#: Directories known to exist while a view is assembled (os.makedirs on an existing
#: path raises and catches an exception per level: most of a view's Python time).
_made: set[str] = set()


def _mkdirs(path: str) -> None:
    if path not in _made:
        os.makedirs(path, mode=0o755, exist_ok=True)
        while path not in _made and path != "/":
            _made.add(path)
            path = os.path.dirname(path)


def _place(where: str, what: str, source: Any) -> None:
    """Put one thing of the view at ``where`` (under the stage)."""
    if what == "link":
        _mkdirs(os.path.dirname(where))
        os.symlink(source, where)
    elif what == "proc":  # of the new PID namespace: the host's processes are not there
        os.mkdir(where, 0o755)
        _made.add(where)
        mount("proc", where, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    elif what == "dev":
        _make_dev(where)
    elif what == "hide":  # under a bound tree, where it exists: nothing is created
        mount("aexec-hidden", where, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4k")
    else:
        # The mount point: made in the new root, or in the scratch tmp bound above it; a
        # path under a bound host directory is there already (nothing of the host is
        # ever created).
        if stat.S_ISDIR(os.fstat(source).st_mode):
            _mkdirs(where)
        elif not os.path.lexists(where):
            _mkdirs(os.path.dirname(where))
            os.close(os.open(where, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        mount(f"/proc/self/fd/{source}", where, None, MS_BIND | MS_REC)


def _make_dev(where: str) -> None:
    os.mkdir(where, 0o755)
    _made.add(where)
    for name, major, minor in DEV_NODES:
        os.mknod(f"{where}/{name}", 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    for name, target in DEV_LINKS:
        os.symlink(target, f"{where}/{name}")
    os.mkdir(f"{where}/pts", 0o755)
    mount("devpts", f"{where}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")


def _setattr(path: str, recursive: bool, set_: int, clear: int) -> bool:
    """mount_setattr(2) on ``path``: False where the kernel has not got it."""
    if _SYS_MOUNT_SETATTR is None:
        return False
    attr = _MountAttr(set_, clear, 0, 0)
    rc = _libc.syscall(
        ctypes.c_long(_SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.c_uint(AT_RECURSIVE if recursive else 0),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    if rc == 0:
        return True
    if ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM):  # EPERM: seccomp may deny it
        _call(rc, f"mount_setattr {path}")
    return False


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def readonly(root: str) -> None:
    """Every mount under ``root`` read-only and nosuid, its other flags kept."""
    if _setattr(root, True, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0):
        return
    for point, flags in mounts():  # an older kernel: one remount per mount
        if _under(point, root):
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | flags)


def release_host() -> None:
    """In the init, once the candidate is forked: detach the host's root from the view,
    whole (until then it is out of the candidate's reach)."""
    global _host_attached
    if _host_attached:
        _call(_libc.umount2(os.fsencode(HOST), MNT_DETACH), "detach the host's root")
        _host_attached = False


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
    """The run's fixed hostname, and its own loopback up (as Docker's ``--network none``
    leaves it): a suite's local server works, nothing outside the run is reachable."""
    _call(_libc.sethostname(HOSTNAME, len(HOSTNAME)), "sethostname")
    fd = _libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM: a handle for the interface ioctls
    _call(min(fd, 0), "socket")
    try:
        ifreq = ctypes.create_string_buffer(b"lo", 40)  # struct ifreq: name[16], flags
        _call(_libc.ioctl(fd, _SIOCGIFFLAGS, ifreq), "loopback flags")
        flags = int.from_bytes(ifreq.raw[16:18], sys.byteorder) | _IFF_UP | _IFF_RUNNING
        ifreq = ctypes.create_string_buffer(ifreq.raw[:16] + flags.to_bytes(2, sys.byteorder), 40)
        _call(_libc.ioctl(fd, _SIOCSIFFLAGS, ifreq), "loopback up")
    finally:
        os.close(fd)


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
