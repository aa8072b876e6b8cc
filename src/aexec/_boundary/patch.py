"""Patches: the paths a unified diff touches, and applying it to a view with ``git apply``
(which applies all of a patch or none of it). Never run on the original repository."""

from __future__ import annotations

import os
import subprocess
import tempfile

from .._errors import PatchError
from .._stages.plan import Scratch

__all__ = ["PatchError", "apply_patch", "patch_paths"]


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CEILING_DIRECTORIES"] = "/"
    return env


def patch_paths(patch: str) -> list[str]:
    """The repo-relative paths a patch touches, as ``git apply`` reads them (no I/O on a repo)."""
    if not patch.strip():
        raise PatchError("patch is empty")
    with tempfile.TemporaryDirectory(prefix="aexec-numstat-") as d:
        done = subprocess.run(
            ["git", "apply", "--numstat", "-z", "-"],
            input=patch.encode("utf-8", "surrogateescape"),
            capture_output=True,
            cwd=d,
            env=_git_env(),
            check=False,
        )
    if done.returncode != 0:
        raise PatchError(done.stderr.decode(errors="replace").strip() or "git apply cannot read it")
    fields = [f.decode("utf-8", "surrogateescape") for f in done.stdout.split(b"\0")]
    paths: list[str] = []
    i = 0
    while i < len(fields):
        f = fields[i]
        if not f:
            i += 1
            continue
        _, _, name = f.split("\t", 2)
        if name:
            paths.append(name)
            i += 1
        else:  # a rename or copy: "added\tdeleted\t\0from\0to\0"
            paths.extend(fields[i + 1 : i + 3])
            i += 3
    for p in paths:
        parts = p.split("/")
        if p.startswith("/") or ".." in parts:
            raise PatchError(f"patch path {p!r} escapes the repository")
    return paths


def apply_patch(scratch: Scratch, patch: str) -> None:
    """Apply ``patch`` to the view (blocking: called in the run's prepare hop)."""
    done = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-p1", "-"],
        input=patch.encode("utf-8", "surrogateescape"),
        capture_output=True,
        cwd=scratch.work,
        env=_git_env(),
        check=False,
    )
    if done.returncode != 0:
        raise PatchError(done.stderr.decode(errors="replace").strip() or "git apply failed")


# -- a workspace's patch against its base (``aexec._pipeline.workspace``) -------------------

#: Never part of a workspace's patch: what a view leaves out of the copy (`copy_ignore`).
_EXCLUDE = "__pycache__/\n*.pyc\n.pytest_cache/\n.mypy_cache/\n.ruff_cache/\n.tox/\n.hg/\n.svn/\n"


def _git(git_dir: str, work_tree: str, index: str, *args: str) -> str:
    env = {**_git_env(), "GIT_DIR": git_dir, "GIT_WORK_TREE": work_tree, "GIT_INDEX_FILE": index}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, HOME=git_dir)
    done = subprocess.run(["git", *args], capture_output=True, cwd=work_tree, env=env, check=False)
    if done.returncode != 0:
        raise PatchError(done.stderr.decode(errors="replace").strip() or f"git {args[0]} failed")
    return done.stdout.decode("utf-8", "surrogateescape")


def base_tree(git_dir: str, repo: str) -> str:
    """Record ``repo`` as it is (what a view copies of it) in a fresh object store at
    ``git_dir``; the tree's id. The repo is only read."""
    subprocess.run(["git", "init", "-q", "--bare", git_dir], check=True, env=_git_env(), capture_output=True)
    with open(os.path.join(git_dir, "info", "exclude"), "w", encoding="utf-8") as f:
        f.write(_EXCLUDE)
    index = os.path.join(git_dir, "base.index")
    _git(git_dir, repo, index, "add", "-A", ".")
    return _git(git_dir, repo, index, "write-tree").strip()


def diff_against(git_dir: str, tree: str, work: str) -> str:
    """The patch that turns ``tree`` (`base_tree`) into ``work``, as ``git apply -p1``
    reads it (binary files included); ``""`` when nothing differs. Links are recorded
    as links, never followed; FIFOs and sockets are skipped."""
    index = os.path.join(git_dir, "work.index")
    if os.path.exists(index):
        os.unlink(index)
    _git(git_dir, work, index, "add", "-A", ".")
    return _git(
        git_dir,
        work,
        index,
        "diff",
        "--cached",
        "--binary",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        tree,
    )
