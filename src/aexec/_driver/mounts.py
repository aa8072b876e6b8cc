"""The kernel's mount calls (Linux; through ctypes, because the driver is stdlib-only),
for the run's view (`view`), the fork server's template of it (`template`) and the
build's jail: the new mount API (``open_tree``, ``move_mount``, ``fsopen``/``fsmount``,
``mount_setattr``), ``pivot_root``, the mount table and the read-only seal.

A module of the driver's package (see `aexec._driver`). Every call that fails raises
``kernel.BoxError``.
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Any

from . import kernel

_PER_MOUNT_FLAGS = {
    "nosuid": kernel.MS_NOSUID, "nodev": kernel.MS_NODEV, "noexec": kernel.MS_NOEXEC,
    "noatime": kernel.MS_NOATIME, "nodiratime": kernel.MS_NODIRATIME, "relatime": kernel.MS_RELATIME,
}  # fmt: skip

_libc = ctypes.CDLL(None, use_errno=True)
kernel._resolve(_libc, "syscall")  # see there
_MACHINE = os.uname().machine
#: The mount API's calls (Linux 5.2; mount_setattr 5.12) have one number on every
#: architecture but alpha; elsewhere the per-mount ways are used.
NEW_API = _MACHINE in ("x86_64", "aarch64", "riscv64", "ppc64le", "s390x")
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT = 428, 429, 430, 431, 432
SYS_MOUNT_SETATTR = 442
AT_FDCWD, AT_EMPTY_PATH, AT_RECURSIVE = -100, 0x1000, 0x8000
OPEN_TREE_CLONE, MOVE_MOUNT_F_EMPTY_PATH = 0x1, 0x4
FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE, FSOPEN_CLOEXEC, FSMOUNT_CLOEXEC = 1, 6, 1, 1
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x1, 0x2
#: pivot_root(2) by number (glibc has no wrapper); elsewhere the view is refused.
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}.get(_MACHINE)


class _MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def syscall(nr: int, what: str, *args: Any) -> int:
    """Linux syscall ``nr`` by number; raises ``kernel.BoxError`` naming ``what``."""
    rc = int(_libc.syscall(ctypes.c_long(nr), *args))
    if rc < 0:
        raise kernel.BoxError(f"{what}: {os.strerror(ctypes.get_errno())}")
    return rc


def clone_tree(fd: int, path: str = "") -> int:
    """A detached copy of the mount tree at ``fd`` (``path`` under it; "" for itself)."""
    flags = OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC | (0 if path else AT_EMPTY_PATH)
    return syscall(SYS_OPEN_TREE, f"clone {path or 'the view'}", fd, os.fsencode(path), ctypes.c_uint(flags))


def attach(tree: int, where: str) -> None:
    """Put the detached tree ``tree`` at ``where`` (a path, which may lead into another
    detached tree through /proc/self/fd)."""
    flags = ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH)
    syscall(SYS_MOVE_MOUNT, f"attach {where}", tree, b"", AT_FDCWD, os.fsencode(where), flags)


def set_attr(fd: int, path: str, recursive: bool, set_: int, propagation: int = 0) -> bool:
    """mount_setattr(2) on ``path`` under ``fd`` ("" for ``fd`` itself): False where the
    kernel has not got it."""
    if not NEW_API:
        return False
    attr = _MountAttr(set_, 0, propagation, 0)
    flags = (AT_RECURSIVE if recursive else 0) | (0 if path else AT_EMPTY_PATH)
    rc = _libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR), fd, os.fsencode(path), ctypes.c_uint(flags), ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )  # fmt: skip
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err not in (errno.ENOSYS, errno.EPERM):  # EPERM: seccomp may deny it
        raise kernel.BoxError(f"mount_setattr {path}: {os.strerror(err)}")
    return False


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


def under(path: str, root: str) -> bool:
    """``path`` is ``root`` or lies below it (as strings: neither is resolved)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def readonly(root: str) -> None:
    """Every mount under ``root`` read-only and nosuid, its other flags kept."""
    if set_attr(AT_FDCWD, root, True, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID):
        return
    for point, flags in mounts():  # an older kernel: one remount per mount
        if under(point, root):
            flags |= kernel.MS_REMOUNT | kernel.MS_BIND | kernel.MS_RDONLY | kernel.MS_NOSUID
            kernel.mount(None, point, None, flags)


def pivot(stage: str, old: str) -> None:
    """``pivot_root`` into ``stage``, the old root left at ``old`` until `kernel.detach`."""
    if SYS_PIVOT_ROOT is None:
        raise kernel.BoxError(f"pivot_root: unknown on {_MACHINE}")
    os.chdir(stage)
    syscall(SYS_PIVOT_ROOT, "pivot_root", b".", os.fsencode(old[1:]))
    os.chdir("/")
