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
