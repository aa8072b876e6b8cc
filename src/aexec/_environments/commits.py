"""A checkout's files as one commit of its git has them (I/O: runs git).

SWE-bench builds an instance's environment from the requirement files (and conda
``environment.yml``) of its ``environment_setup_commit``, not of its base commit: a
checkout cloned with its history holds that commit's objects, and `show` reads a file
there (`Files`: that commit's where the checkout holds it, else the copy aexec ships of
it where it has one, `aexec._environments.setup_files`, else the work tree's). The
build writes those files into its copy of the repo (`check_out`), with the
files they include (``-r X``), before resolving.
"""

from __future__ import annotations

import os
import re
import subprocess

import attrs

from .edits import included
from .setup_files import SHIPPED

__all__ = ["Files", "check_out", "has", "show"]

_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


def _git(repo: str, *args: str) -> bytes | None:
    try:
        done = subprocess.run(["git", "-C", repo, *args], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def has(repo: str, commit: str) -> bool:
    """The checkout's git holds ``commit`` (a clone with its history; not an sdist's
    one-commit repo)."""
    return bool(_COMMIT.match(commit)) and _git(repo, "cat-file", "-e", f"{commit}^{{commit}}") is not None


def show(repo: str, commit: str, path: str) -> bytes | None:
    """The file ``path`` at ``commit`` of the checkout's git, or None (no such file, commit
    or git)."""
    if not _COMMIT.match(commit) or path.startswith(("/", "-")) or ".." in path.split("/"):
        return None
    return _git(repo, "show", f"{commit}:{path}")


def check_out(repo: str, commit: str, paths: tuple[str, ...], copy: str) -> None:
    """Write into ``copy`` the files ``paths`` (and the files they include, ``-r X``) as
    ``commit`` of ``repo``'s git has them (a path the commit lacks stays as the copy has it)."""
    seen: set[str] = set()
    todo = list(paths)
    while todo:
        path = os.path.normpath(todo.pop()).replace(os.sep, "/")
        if path in seen or path.startswith("../") or os.path.isabs(path):
            continue
        seen.add(path)
        data = show(repo, commit, path)
        if data is None:
            continue
        target = os.path.join(copy, path)
        if os.path.islink(target):  # never written through
            os.remove(target)
        if not os.path.realpath(target).startswith(os.path.realpath(copy) + os.sep):
            continue  # under a symlinked directory out of the copy
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)
        text = data.decode("utf-8", "surrogateescape")
        todo += [os.path.join(os.path.dirname(path), r) for r in included(text)]


@attrs.frozen
class Files:
    """A checkout's files as ``commit`` of its git has them (``asked``, where its git holds
    it), else as its work tree does."""

    checkout: str
    #: The commit asked for (SWE-bench's ``environment_setup_commit``), or None.
    asked: str | None = None
    #: The same, where the checkout's git holds it or aexec ships its files; None: the
    #: work tree is read.
    commit: str | None = None
    #: ``commit``'s files are aexec's copy (`SHIPPED`): the checkout's git lacks it.
    shipped: bool = False

    @classmethod
    def at(cls, checkout: str, asked: str | None) -> Files:
        if asked and has(checkout, asked):
            return cls(checkout, asked, asked)
        if asked and any(c == asked for c, _ in SHIPPED):
            return cls(checkout, asked, asked, shipped=True)
        return cls(checkout, asked, None)

    def read_bytes(self, path: str) -> bytes | None:
        if self.commit is not None and self.shipped:
            text = SHIPPED.get((self.commit, path))
            return None if text is None else text.encode()
        if self.commit is not None:
            return show(self.checkout, self.commit, path)
        try:
            with open(os.path.join(self.checkout, path), "rb") as f:
                return f.read()
        except OSError:
            return None

    def exists(self, path: str) -> bool:
        if self.commit is None:
            return os.path.isfile(os.path.join(self.checkout, path))
        return self.read_bytes(path) is not None

    def read(self, path: str) -> str | None:
        data = self.read_bytes(path)
        try:
            return None if data is None else data.decode("utf-8")
        except UnicodeDecodeError:
            return None
