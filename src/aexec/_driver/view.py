"""The run's filesystem view: a new root holding only what the run needs (Linux; the
kernel's mount calls are `mounts`').

A module of the driver's package (see `aexec._driver`).
Two ways to the same view, each ending in ``pivot_root``:

* `build_view` alone (a cold run): the init assembles it whole in its mount namespace:
  a tmpfs, one read-only bind per system directory and toolchain prefix (symlinks made
  as links), the cut /etc, a /dev of a few nodes, sealed read-only at once; then the
  run's own mounts (a fresh /proc and devpts, the scratch root and tmp writable, a
  hidden repo, the copy of the repo at ``wire.REPO_VIEW`` too).
* `build_view` with a template (a fork server's run): the read-only part is assembled
  ONCE per server and view (`template`) as a detached mount tree (``fsmount``,
  ``open_tree`` + ``move_mount``, ``mount_setattr``), sealed read-only and private.
  Each run's init clones it (one ``open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)``: new
  mounts of the same trees), attaches the clone and adds the run's own mounts to it
  alone. The clones share the template's tmpfs, read-only in every mount of it and
  holding no name of any run: a scratch root's mount point is made in the run's own tmp
  (under /tmp) or in a tmpfs of the run's own over the scratch base. Where the kernel
  cannot clone a detached tree (before Linux 6.15), the template is not made and every
  run assembles its view whole. The template is made by `template` (the server's part).

Every step that fails raises ``kernel.BoxError``: the run must not go ahead with less.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any

from . import kernel, mounts, wire

if TYPE_CHECKING:
    from .wire import Box

#: Where the new root is assembled before ``pivot_root``: a directory every Linux has,
#: covered in this namespace only (what lies under it is reached through fds held
#: before the cover).
STAGE = "/dev"
#: The view's /dev: these character devices (name, major, minor), mode 0666 …
DEV_NODES = (
    ("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0),
)  # fmt: skip
#: … these links, and a fresh devpts instance (``/dev/pts``, ``/dev/ptmx``).
DEV_LINKS = (
    ("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx"),
)  # fmt: skip
_DEVPTS = "newinstance,ptmxmode=0666,mode=0620"
#: Where pivot_root puts the host's root in the view until it is detached: under a
#: directory of mode 000, which only root may traverse.
HOST = "/.aexec-host/root"
_host_attached = False

#: (path in the view, what goes there, its source).
if TYPE_CHECKING:  # annotations only (3.8 cannot subscript tuple)
    Op = tuple[str, str, Any]


def plan(box: Box, hold: Any) -> tuple[list[Op], list[Op], list[str]]:
    """What the view holds, parents first; the part of it under a writable path, placed
    once those are (``late``); the writable paths. Sources are resolved on the host
    (``hold``: an O_PATH fd)."""
    ops: list[Op] = [("/proc", "proc", None), ("/dev", "dev", None)]
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
    if box["repo_view"] is not None:  # the path an environment's editable install names
        writable.append((wire.REPO_VIEW, hold(box["repo_view"])))
    ops += [(path, "rw", fd) for path, fd in writable]
    ops.sort(key=lambda op: op[0].split("/"))  # a parent before what is under it
    paths = [path for path, _ in writable]
    late = [op for op in ops if any(mounts.under(op[0], path) for path in paths)]
    return ops, late, paths


def build_view(box: Box, template: int | None = None) -> None:
    """In the new mount namespace: a new root holding only what the run needs, from the
    server's ``template`` where there is one (see the module docstring).

    The scratch root and the scratch tmp (over each tmp target) are writable, all else
    read-only. Nothing else of the host is there: not its home directories, not the
    original repo, not another run's scratch root.
    """
    # Every mount private first: nothing mounted, moved or detached here reaches the host.
    kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE)
    umask = os.umask(0)
    held: list[int] = []

    def hold(path: str) -> int:
        held.append(os.open(path, os.O_PATH | os.O_CLOEXEC))
        return held[-1]

    try:
        start_at(STAGE)
        if template is None:
            _assemble(box, hold)
        else:
            _from_template(box, template, held)
        _enter()
    finally:
        for fd in held:
            os.close(fd)
        os.umask(umask)


def _assemble(box: Box, hold: Any) -> None:
    ops, late, writable = plan(box, hold)
    # Read-only first, sealed at once (one mount_setattr); then the writable binds, and
    # what lies under them (a venv under /tmp) read-only one by one.
    kernel.mount("aexec-view", STAGE, "tmpfs", kernel.MS_NOSUID, "mode=0755,size=4m")
    for path, what, source in ops:
        if (path, what, source) in late:
            if not any(mounts.under(path, p) and p != path for p in writable):
                mkdirs(STAGE + path)  # its mount point
            continue
        place(STAGE + path, what, source)
    os.mkdir(STAGE + os.path.dirname(HOST), 0)  # only root may traverse it
    os.mkdir(STAGE + HOST, 0)
    mounts.readonly(STAGE)
    _place_late(late)


def _place_late(late: list[Op]) -> None:
    for path, what, source in late:
        place(STAGE + path, what, source)
        if what == "ro":
            kernel.mount(
                None,
                STAGE + path,
                None,
                kernel.MS_REMOUNT | kernel.MS_BIND | kernel.MS_RDONLY | kernel.MS_NOSUID | kernel.MS_NODEV,
            )


def _enter() -> None:
    """`pivot` into the stage; the host's root, left at `HOST`, is detached later."""
    mounts.pivot(STAGE, HOST)
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


def start_at(root: str) -> None:
    """A new assembly under ``root`` (which exists): forget the directories made before."""
    _made.clear()
    _made.add(root)


def mkdirs(path: str) -> None:
    if path not in _made:
        os.makedirs(path, mode=0o755, exist_ok=True)
        while path not in _made and path != "/":
            _made.add(path)
            path = os.path.dirname(path)


def place(where: str, what: str, source: Any, bind: Any = None) -> None:
    """Put one thing of the view at ``where`` (under the stage, or under a template
    through /proc/self/fd, whose binds are made by ``bind``)."""
    if what == "link":
        mkdirs(os.path.dirname(where))
        os.symlink(source, where)
    elif what == "proc":  # of the new PID namespace: the host's processes are not there
        os.mkdir(where, 0o755)
        _made.add(where)
        if bind is None:
            kernel.mount("proc", where, "proc", kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC)
    elif what == "dev":
        _make_dev(where, pts=bind is None)
    elif what == "hide":  # under a bound tree, where it exists: nothing is created
        kernel.mount("aexec-hidden", where, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, "mode=0755,size=4k")
    else:
        # The mount point: made in the new root, or in the scratch tmp bound above it; a
        # path under a bound host directory is there already (nothing of the host is
        # ever created).
        if stat.S_ISDIR(os.fstat(source).st_mode):
            mkdirs(where)
        elif not os.path.lexists(where):
            mkdirs(os.path.dirname(where))
            os.close(os.open(where, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        if bind is None:
            kernel.mount(f"/proc/self/fd/{source}", where, None, kernel.MS_BIND | kernel.MS_REC)
        else:
            bind(source, where)


def _make_dev(where: str, pts: bool = True) -> None:
    os.mkdir(where, 0o755)
    _made.add(where)
    for name, major, minor in DEV_NODES:
        os.mknod(f"{where}/{name}", 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    for name, target in DEV_LINKS:
        os.symlink(target, f"{where}/{name}")
    os.mkdir(f"{where}/pts", 0o755)
    if pts:
        kernel.mount("devpts", f"{where}/pts", "devpts", kernel.MS_NOSUID | kernel.MS_NOEXEC, _DEVPTS)


def scratch_base(box: Box) -> str | None:
    """Where a run's scratch root gets its mount point: None in the run's own tmp (the
    scratch root is under the first tmp target), else its parent directory, over which
    each run mounts a tmpfs of its own."""
    targets = box["tmp_targets"]
    if targets and mounts.under(box["scratch_root"], targets[0]):
        return None
    return os.path.dirname(box["scratch_root"])


def _from_template(box: Box, tree: int, held: list[int]) -> None:
    """A clone of the server's template at the stage, then the run's own mounts on it
    (few calls: each Python step of a forked init costs it copied pages)."""
    first = box["tmp_targets"][0] if box["tmp_targets"] else None
    scratch_root = box["scratch_root"]
    # Opened before the stage covers /dev (a scratch base under /dev/shm, say).
    root_fd = os.open(scratch_root, os.O_PATH | os.O_CLOEXEC)
    held.append(root_fd)
    if first is not None:
        tmp_fd = os.open(box["tmp"], os.O_PATH | os.O_CLOEXEC)
        held.append(tmp_fd)
    clone = mounts.clone_tree(tree)
    held += [clone, tree]  # the server's template too: nothing of it reaches the candidate
    mounts.attach(clone, STAGE)
    # Read-only, as the seal leaves them in a view assembled whole.
    kernel.mount(
        "proc",
        STAGE + "/proc",
        "proc",
        kernel.MS_RDONLY | kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC,
    )
    kernel.mount(
        "devpts",
        STAGE + "/dev/pts",
        "devpts",
        kernel.MS_RDONLY | kernel.MS_NOSUID | kernel.MS_NOEXEC,
        _DEVPTS,
    )
    for path in box["hidden"]:
        kernel.mount(
            "aexec-hidden",
            STAGE + path,
            "tmpfs",
            kernel.MS_RDONLY | kernel.MS_NOSUID | kernel.MS_NODEV,
            "mode=0755,size=4k",
        )
    if first is not None:
        kernel.mount(f"/proc/self/fd/{tmp_fd}", STAGE + first, None, kernel.MS_BIND | kernel.MS_REC)
    base = scratch_base(box)
    if base is None:  # under the tmp target: its mount point is made in the run's own tmp
        try:
            os.mkdir(STAGE + scratch_root, 0o755)
        except FileExistsError:
            pass
        except FileNotFoundError:
            mkdirs(STAGE + scratch_root)
    else:  # in a tmpfs of this run's own over the scratch base
        kernel.mount(
            "aexec-base", STAGE + base, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, "mode=0755,size=4k"
        )
        os.mkdir(STAGE + scratch_root, 0o755)
        kernel.mount(
            None,
            STAGE + base,
            None,
            kernel.MS_REMOUNT | kernel.MS_BIND | kernel.MS_RDONLY | kernel.MS_NOSUID | kernel.MS_NODEV,
        )
    kernel.mount(f"/proc/self/fd/{root_fd}", STAGE + scratch_root, None, kernel.MS_BIND | kernel.MS_REC)
    if box["repo_view"] is not None:  # on the mount point every template has
        kernel.mount(STAGE + box["repo_view"], STAGE + wire.REPO_VIEW, None, kernel.MS_BIND | kernel.MS_REC)
    if first is not None:  # what the view binds under the tmp target (a venv under /tmp)
        extra = [p for p in box["readonly"] if mounts.under(p, first) and os.path.lexists(p)]
        if extra:
            _place_late(sorted(_host_op(p, os.open(p, os.O_PATH | os.O_CLOEXEC), held) for p in extra))


def _host_op(path: str, fd: int, held: list[int]) -> Op:
    held.append(fd)
    return (path, "link", os.readlink(path)) if os.path.islink(path) else (path, "ro", fd)


def release_host() -> None:
    """In the init, once the candidate is forked: detach the host's root from the view,
    whole (until then it is out of the candidate's reach)."""
    global _host_attached
    if _host_attached:
        kernel.detach(HOST)
        _host_attached = False
