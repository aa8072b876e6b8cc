"""Reading trees: walking, hashing and snapshotting repos and scratch roots.

Every walk here sees only directories, regular files and symlinks: FIFOs, sockets and
devices are skipped (opening a FIFO would block for ever), and a file is opened
without following links and without blocking, then checked to be regular. All of it
is blocking I/O: the pipeline calls these in worker threads.
"""

from __future__ import annotations

import configparser
import difflib
import errno
import hashlib
import os
import stat
import tomllib
from collections.abc import Callable, Iterable, Iterator

from .._errors import AexecError
from .._records import Change
from .._types import (
    CHANGES_DIFF_CHARS,
    CHANGES_DIFF_FILE_BYTES,
    CHANGES_HASH_BYTES,
    CHANGES_LISTED,
)

#: Never copied into a view, never hashed: caches and VCS metadata, not code.
EXCLUDED_NAMES = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox"}
)


def _special(path: str) -> bool:
    """Neither a directory, a regular file nor a symlink (or gone)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return True
    return not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode))


def copy_ignore(directory: str, names: list[str]) -> set[str]:
    """``shutil.copytree``'s ``ignore`` for a view: excluded names, bytecode, special files."""
    return {
        n for n in names if n in EXCLUDED_NAMES or n.endswith(".pyc") or _special(os.path.join(directory, n))
    }


#: A walk stops past this many entries: a repo that large is refused, a scratch
#: snapshot is cut there (and says so).
WALK_CAP = 1_000_000
SNAPSHOT_CAP = 200_000


class TreeTooLarge(AexecError):
    """A walk met more entries than its cap."""


def _scan(root: str, cap: int, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of every non-directory under ``root``, directories entered depth first
    in name order without recursion (any depth) and without following links; directories
    named in ``skip`` are not entered. Raises `TreeTooLarge` past ``cap`` entries."""
    stack = [root]
    seen = 0
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for entry in entries:
            seen += 1
            if seen > cap:
                raise TreeTooLarge(f"{root}: more than {cap} entries")
            try:
                if entry.is_dir(follow_symlinks=False):  # the entry's type: no lstat
                    if entry.name not in skip:
                        subdirs.append(entry.path)
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            yield entry.path, st
        stack.extend(reversed(subdirs))


def relative_to(root: str) -> Callable[[str], str]:
    """``os.path.relpath(path, root)`` for what `_scan` yields under ``root``: its tail after
    ``os.path.join(root, "")``, without relpath's two abspaths (~10 µs a file); else relpath."""
    prefix = os.path.join(root, "")
    return lambda path: path[len(prefix) :] if path.startswith(prefix) else os.path.relpath(path, root)


def walk(root: str, cap: int = WALK_CAP) -> Iterator[str]:
    """Every regular file and symlink under ``root`` (symlinked dirs not entered), in name
    order, excluded names and bytecode left out; special files skipped."""
    for path, st in _scan(root, cap, EXCLUDED_NAMES):
        if path.endswith(".pyc") or not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            continue
        yield path


def read_regular(path: str, limit: int = -1) -> bytes | None:
    """The contents of a regular file (at most ``limit`` bytes), or None if it is not one:
    opened without following links or blocking, so a FIFO swapped in cannot hang us."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read(limit)


def hash_tree(root: str) -> str:
    """SHA-256 over every path and content of a tree (symlinks by their target)."""
    h = hashlib.sha256()
    relative = relative_to(root)
    for path in walk(root):
        h.update(relative(path).encode("utf-8", "surrogateescape") + b"\0")
        if os.path.islink(path):
            h.update(b"L" + os.readlink(path).encode("utf-8", "surrogateescape"))
        else:
            h.update(read_regular(path) or b"")
        h.update(b"\0")
    return h.hexdigest()


def python_sources(root: str) -> tuple[list[str], int]:
    """The regular ``.py`` files a view of ``root`` holds (repo-relative), and their size."""
    files, size = [], 0
    relative = relative_to(root)
    for path in walk(root):
        st = os.lstat(path)
        if path.endswith(".py") and stat.S_ISREG(st.st_mode):
            files.append(relative(path))
            size += st.st_size
    return files, size


#: Files whose pytest sections are configuration, with the section that matters.
PYTEST_CONFIGS: dict[str, tuple[str, ...]] = {
    "pytest.ini": (),
    ".pytest.ini": (),
    "pytest.toml": (),
    ".pytest.toml": (),
    "tox.ini": ("pytest",),
    "setup.cfg": ("tool:pytest",),
    "pyproject.toml": ("tool", "pytest"),
}


def pytest_config(root: str, name: str) -> str | None:
    """The pytest-relevant part of one config file in ``root``, as comparable text."""
    raw = read_regular(os.path.join(root, name))
    if raw is None:
        return None
    section = PYTEST_CONFIGS[name]
    if not section:
        return raw.decode("utf-8", "replace")
    text = raw.decode("utf-8", "replace")
    try:
        if name == "pyproject.toml":
            return repr(tomllib.loads(text).get("tool", {}).get("pytest"))
        cp = configparser.RawConfigParser()
        cp.read_string(text)
        return repr(dict(cp.items(section[0]))) if cp.has_section(section[0]) else None
    except (tomllib.TOMLDecodeError, configparser.Error):
        return "<unparseable>\n" + text  # unreadable config: compare it whole


#: A file read for what it defines (`texts_naming`) is read up to this size.
NAMING_FILE_BYTES = 4 << 20


def texts_naming(root: str, words: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(repo-relative path, text) of each Python file and pytest configuration file under
    ``root`` whose text contains one of ``words``."""
    words = [w for w in words if w]
    if not words:
        return
    for path in walk(root):
        if not (path.endswith(".py") or os.path.basename(path) in PYTEST_CONFIGS):
            continue
        raw = read_regular(path, NAMING_FILE_BYTES)
        if raw is None:
            continue
        text = raw.decode("utf-8", "replace")
        if any(w in text for w in words):
            yield relative_to(root)(path), text


def snapshot(root: str, cap: int = SNAPSHOT_CAP) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file under a scratch root, the private dir excluded; at
    most ``cap`` files (a cut snapshot holds `SNAPSHOT_CUT` as a key)."""
    out: dict[str, tuple[int, int]] = {}
    relative = relative_to(root)
    try:
        for path, st in _scan(root, cap):
            rel = relative(path)
            if not rel.startswith(".aexec" + os.sep):
                out[rel] = (st.st_size, st.st_mtime_ns)
    except TreeTooLarge:
        out[SNAPSHOT_CUT] = (cap, 0)
    return out


#: The key a cut snapshot carries.
SNAPSHOT_CUT = "\0cut"


def changed_state(before: dict[str, tuple[int, int]], root: str) -> str:
    """What a run changed under ``root`` since ``before`` (`snapshot`), as the summary."""
    return describe_changes(before, snapshot(root))


def describe_changes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> str:
    """The summary of ``changed_state``: what was created, modified, deleted."""
    cut = SNAPSHOT_CUT in before or SNAPSHOT_CUT in after
    before = {k: v for k, v in before.items() if k != SNAPSHOT_CUT}
    after = {k: v for k, v in after.items() if k != SNAPSHOT_CUT}
    created = sorted(set(after) - set(before))
    deleted = sorted(set(before) - set(after))
    modified = sorted(p for p in set(before) & set(after) if before[p] != after[p])
    if not (created or deleted or modified):
        return "no files written" + (f" (more than {SNAPSHOT_CAP} files: not all compared)" if cut else "")
    parts = []
    for label, paths in (("created", created), ("modified", modified), ("deleted", deleted)):
        if paths:
            shown = ", ".join(paths[:20]) + (f", … (+{len(paths) - 20})" if len(paths) > 20 else "")
            parts.append(f"{len(paths)} {label}: {shown}")
    written = sum(after[p][0] for p in created + modified)
    note = f"; more than {SNAPSHOT_CAP} files: the rest not compared" if cut else ""
    return "; ".join(parts) + f" ({written} bytes in created/modified files){note}"


def _excluded(rel: str, exclude: tuple[str, ...]) -> bool:
    return any(rel == e or (e.endswith(("/", "*")) and rel.startswith(e.rstrip("*"))) for e in exclude)


def without(snap: dict[str, tuple[int, int]], exclude: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """``snap`` without aexec's own files (``exclude``: paths, ``dir/`` or ``prefix*``)."""
    return {p: v for p, v in snap.items() if not _excluded(p, exclude)} if exclude else snap


def _text(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def list_changes(
    root: str,
    before: dict[str, tuple[int, int]],
    after: dict[str, tuple[int, int]],
    baseline: Callable[[str], bytes | None],
) -> tuple[tuple[Change, ...], int]:
    """What a run changed under ``root``, path by path, sorted: ``(changes, omitted)``.

    ``before``/``after`` are `snapshot`s (aexec's own files already taken out). Only
    changed files are read, within the caps: at most `CHANGES_LISTED` paths (``omitted``
    counts the rest), `CHANGES_HASH_BYTES` hashed in all (a file past it has no
    ``sha256``); a text file of at most `CHANGES_DIFF_FILE_BYTES` whose earlier text
    ``baseline(path)`` knows (None: unknown; ``b""``: it did not exist) gets a unified
    diff, cut at `CHANGES_DIFF_CHARS` and marked ``diff_cut``.
    """
    kinds = {p: "added" for p in after.keys() - before.keys()}
    kinds.update({p: "deleted" for p in before.keys() - after.keys()})
    kinds.update({p: "modified" for p in before.keys() & after.keys() if before[p] != after[p]})
    paths = sorted(kinds)
    budget = CHANGES_HASH_BYTES
    out: list[Change] = []
    for rel in paths[:CHANGES_LISTED]:
        kind = kinds[rel]
        if kind == "deleted":
            out.append(Change(rel, kind, None, None))
            continue
        size = after[rel][0]
        data = read_regular(os.path.join(root, rel), budget + 1) if size <= budget else None
        if data is None or len(data) > budget:
            out.append(Change(rel, kind, size, None))
            continue
        budget -= len(data)
        digest = hashlib.sha256(data).hexdigest()
        diff, cut = None, False
        new = _text(data) if len(data) <= CHANGES_DIFF_FILE_BYTES else None
        old_bytes = b"" if kind == "added" else baseline(rel)
        old = None if old_bytes is None or len(old_bytes) > CHANGES_DIFF_FILE_BYTES else _text(old_bytes)
        if new is not None and old is not None:
            lines = difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                fromfile="/dev/null" if kind == "added" else f"a/{rel}",
                tofile=f"b/{rel}",
            )
            text = "".join(
                ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines
            )
            cut = len(text) > CHANGES_DIFF_CHARS
            diff = text[:CHANGES_DIFF_CHARS]
        out.append(Change(rel, kind, size, digest, diff, cut))
    return tuple(out), max(0, len(paths) - CHANGES_LISTED)


# -- a run's files in and out (``files``, ``fetch_files``): never through a link ----------


def _open_dir(root: str, parts: list[str], *, make: bool) -> int:
    """An fd of ``root/parts…``, each part opened without following a link (made if
    ``make``); raises OSError if one is not a directory."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if make:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_inside(root: str, rel: str, data: bytes) -> None:
    """Write ``data`` at ``root/rel`` (a checked relative path), making its directories;
    no link on the way is followed, so a repo's link cannot send it outside ``root``."""
    *dirs, name = rel.split("/")
    dfd = _open_dir(root, dirs, make=True)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o644, dir_fd=dfd)
    finally:
        os.close(dfd)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def read_inside(root: str, rel: str, limit: int) -> bytes | None:
    """The regular file ``root/rel`` if it has at most ``limit`` bytes, else None (absent,
    not a regular file, a link on the way, or too big); never blocks on a FIFO."""
    *dirs, name = rel.split("/")
    try:
        dfd = _open_dir(root, dirs, make=False)
    except OSError:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return None
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data = f.read(limit + 1)
    return None if len(data) > limit else data


def read_inside_strict(root: str, rel: str, limit: int) -> bytes:
    """`read_inside`, with the reason it cannot: FileNotFoundError, IsADirectoryError,
    PermissionError (a link or a special file on the way), ValueError (over ``limit``)."""
    *dirs, name = rel.split("/")
    try:
        dfd = _open_dir(root, dirs, make=False)
    except FileNotFoundError:
        raise
    except OSError:
        raise PermissionError(f"{rel!r}: a link or a file on the way") from None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PermissionError(f"{rel!r} is a link") from None
        raise type(e)(e.errno, e.strerror, rel) from None
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", rel)
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(f"{rel!r} is not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{rel!r} is over {limit} bytes")
    return data
