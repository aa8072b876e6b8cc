"""The fork server's templates of the view: the read-only part of a run's new root,
assembled once per view as a detached mount tree (``fsmount``, ``open_tree`` +
``move_mount``, ``mount_setattr``), sealed read-only, nosuid and private, which each
run's init clones (`view.build_view`).

A module of the driver's package (see `aexec._driver`). With ``AEXEC_VIEW_TEMPLATE=0`` in the fork server's environment no
template is made and every run assembles its view whole, as a cold run does
(``benchmarks/peers.py --boundary-cost`` compares the two).
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING, Any

from . import kernel, mounts, view, wire

if TYPE_CHECKING:
    from .wire import Box


def template_key(box: Box) -> tuple[Any, ...]:
    """What a template rests on: runs with the same key share one."""
    return (tuple(box["readonly"]), box["etc"], tuple(box["tmp_targets"]), view.scratch_base(box))


#: The server's templates by `template_key` (None: this view cannot have one).
templates: dict[tuple[Any, ...], int | None] = {}
_TEMPLATES_KEPT = 8


def template(box: Box) -> int | None:
    """The fork server's template for runs like ``box`` (made on first use: a detached,
    sealed, private mount tree of the view's read-only part), or None where there can be
    none: the kernel cannot clone a detached tree, or the scratch base lies where the
    template cannot hold its mount point (under a bound tree)."""
    if os.environ.get("AEXEC_VIEW_TEMPLATE") == "0":  # an ablation (``peers.py --boundary-cost``)
        return None
    key = template_key(box)
    if key in templates:
        return templates[key]
    if len(templates) >= _TEMPLATES_KEPT:
        close_templates()
    try:
        made: int | None = _make_template(box)
    except (OSError, kernel.BoxError):
        made = None
    templates[key] = made
    return made


def close_templates(keep: int | None = None) -> None:
    """Close the templates' fds but ``keep`` (a run's init holds only its own)."""
    for fd in templates.values():
        if fd is not None and fd != keep:
            os.close(fd)
    templates.clear()


def _make_template(box: Box) -> int | None:
    if not mounts.NEW_API:
        return None
    base = view.scratch_base(box)
    special = ("/proc", "/dev", "/etc", os.path.dirname(view.HOST), *box["tmp_targets"])
    if base is not None and any(
        mounts.under(base, p) or mounts.under(p, base) for p in (*box["readonly"], *special)
    ):
        return None
    fs = mounts.syscall(mounts.SYS_FSOPEN, "fsopen tmpfs", b"tmpfs", ctypes.c_uint(mounts.FSOPEN_CLOEXEC))
    try:
        for key, value in ((b"source", b"aexec-view"), (b"mode", b"0755"), (b"size", b"4m")):
            mounts.syscall(
                mounts.SYS_FSCONFIG, "fsconfig", fs, ctypes.c_uint(mounts.FSCONFIG_SET_STRING), key, value, 0
            )
        mounts.syscall(
            mounts.SYS_FSCONFIG, "fsconfig", fs, ctypes.c_uint(mounts.FSCONFIG_CMD_CREATE), None, None, 0
        )
        tree = mounts.syscall(
            mounts.SYS_FSMOUNT,
            "fsmount",
            fs,
            ctypes.c_uint(mounts.FSMOUNT_CLOEXEC),
            ctypes.c_uint(mounts.MOUNT_ATTR_NOSUID),
        )
    finally:
        os.close(fs)
    held: list[int] = []
    umask = os.umask(0)
    try:
        _fill_template(box, tree, base, held)
        # Sealed: read-only, nosuid and private (no mount event crosses to or from the
        # host's trees), every mount of it; a clone keeps that.
        if not mounts.set_attr(
            tree, "", True, mounts.MOUNT_ATTR_RDONLY | mounts.MOUNT_ATTR_NOSUID, kernel.MS_PRIVATE
        ):
            raise kernel.BoxError("mount_setattr: not here")
        os.close(mounts.clone_tree(tree))  # the kernel can clone a detached tree (Linux 6.15)
    except BaseException:
        os.close(tree)
        raise
    finally:
        for fd in held:
            os.close(fd)
        os.umask(umask)
    return tree


def _fill_template(box: Box, tree: int, base: str | None, held: list[int]) -> None:
    root = f"/proc/self/fd/{tree}"

    def hold(path: str) -> int:
        held.append(os.open(path, os.O_PATH | os.O_CLOEXEC))
        return held[-1]

    def bind(source: int, where: str) -> None:
        clone = mounts.clone_tree(source)
        try:
            mounts.set_attr(clone, "", True, 0, kernel.MS_PRIVATE)
            mounts.attach(clone, where)
        finally:
            os.close(clone)

    ops, late, writable = view.plan(box, hold)
    view.start_at(root)
    for path, what, source in ops:
        if what == "hide":
            continue  # the run's own (its repo)
        if (path, what, source) in late:
            if not any(mounts.under(path, p) and p != path for p in writable) and path != box["scratch_root"]:
                view.mkdirs(root + path)  # a tmp target's mount point
            continue
        view.place(root + path, what, source, bind)
    if base is not None:
        view.mkdirs(root + base)  # each run mounts a tmpfs of its own over it
    view.mkdirs(root + wire.REPO_VIEW)  # a run with a repo binds its copy there
    os.mkdir(root + os.path.dirname(view.HOST), 0)  # only root may traverse it
    os.mkdir(root + view.HOST, 0)
