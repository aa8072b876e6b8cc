"""Scratch roots and repository views: the filesystem side of a run.

Every run gets a fresh scratch root (``tempfile.mkdtemp``, so ``TMPDIR`` is honoured)::

    <scratch_root>/work    the candidate's cwd: a copy of the repo, patched (or empty)
    <scratch_root>/home    HOME
    <scratch_root>/tmp     TMPDIR (and, inside the boundary, /tmp, /var/tmp, /dev/shm)
    <scratch_root>/.aexec  the driver's spec, the snippet, the report (not the candidate's)

With the full boundary (root) the scratch root is a tmpfs of its own, shrunk after the
view is made to what the view holds plus the disk cap, so a candidate cannot write more
than the cap anywhere; ``work``, ``home`` and ``tmp`` belong to the run's own uid.
Scratch roots are named ``aexec-<pid>-…``: those of a dead aexec are swept at start.

The original repository is only read. Patches are applied with ``git apply``, which
applies all of a patch or none of it.
"""

from __future__ import annotations

import configparser
import ctypes
import fnmatch
import hashlib
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import structlog

log = structlog.get_logger(__name__)

#: Never copied into a view, never hashed: caches and VCS metadata, not code.
EXCLUDED_NAMES = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox"}
)
DRIVER = str(Path(__file__).with_name("_driver.py"))


class PatchError(Exception):
    """The patch cannot be applied; the message says why. Becomes a failure observation."""


@attrs.frozen
class Scratch:
    root: str

    @property
    def work(self) -> str:
        return os.path.join(self.root, "work")

    @property
    def private(self) -> str:
        return os.path.join(self.root, ".aexec")

    @property
    def home(self) -> str:
        return os.path.join(self.root, "home")

    @property
    def tmp(self) -> str:
        return os.path.join(self.root, "tmp")


_libc = ctypes.CDLL(None, use_errno=True)
_MS_REMOUNT, _MNT_DETACH = 0x20, 0x2
SCRATCH_PREFIX = "aexec-"


def _mount_tmpfs(target: str, options: str, remount: bool = False) -> None:
    flags = _MS_REMOUNT if remount else 0
    rc = _libc.mount(b"aexec", os.fsencode(target), b"tmpfs", ctypes.c_ulong(flags), options.encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {target}: {os.strerror(err)}")


def make_scratch(tmpfs: bool = False) -> Scratch:
    root = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
    if tmpfs:
        try:
            _mount_tmpfs(root, "mode=0755,size=50%")
        except OSError:
            os.rmdir(root)
            raise
    s = Scratch(root)
    for d in (s.private, s.home, s.tmp):
        os.mkdir(d)
    if tmpfs:
        # The report lives here: a full scratch disk must not silence the driver.
        _mount_tmpfs(s.private, "mode=0755,size=24m")
    return s


def seal_scratch(scratch: Scratch, uid: int, disk_bytes: int) -> None:
    """Hand the writable dirs to the run's uid; cap the tmpfs at what it holds + the disk cap."""
    for top in (scratch.work, scratch.home, scratch.tmp):
        os.chown(top, uid, uid, follow_symlinks=False)
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)
    st = os.statvfs(scratch.root)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    _mount_tmpfs(scratch.root, f"size={used + disk_bytes}", remount=True)


def run_uid() -> int:
    """A fresh uid for one run, in a range no distribution hands out."""
    return (1 << 20) + secrets.randbelow(1 << 24)


def _is_mount(path: str) -> bool:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            return any(line.split()[4] == path for line in f)
    except OSError:
        return False


def sweep_stale_scratch() -> None:
    """Remove the scratch roots of an aexec that died before removing them (e.g. SIGKILL)."""
    base = tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        owner = name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        if not (name.startswith(SCRATCH_PREFIX) and owner.isdigit()):
            continue
        try:
            os.kill(int(owner), 0)
            continue  # its aexec is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        remove_scratch(Scratch(os.path.join(base, name)))


def masks(needed: Iterable[str]) -> list[list[Any]]:
    """Directories others cannot traverse on the way to what a run needs, for the driver.

    Each is ``[hidden_dir, [needed paths under it]]``: inside the boundary the hidden
    directory is covered by an empty tmpfs holding only the needed paths (the
    interpreter in ``/root/.pyenv``, say), so the run's unprivileged uid reaches them
    and nothing else of it.
    """
    found: dict[str, list[str]] = {}
    for path in dict.fromkeys(os.path.abspath(p) for p in needed):
        parts = Path(path).parts
        for i in range(2, len(parts)):
            ancestor = os.path.join(*parts[:i])
            try:
                mode = os.stat(ancestor).st_mode
            except OSError:
                break
            if not mode & 0o001:
                found.setdefault(ancestor, []).append(path)
                break
    return [[hidden, paths] for hidden, paths in sorted(found.items())]


def write_private(scratch: Scratch, name: str, text: str) -> str:
    """A small file in the scratch root's private dir (a few KiB: not worth a thread)."""
    path = os.path.join(scratch.private, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def remove_scratch(scratch: Scratch) -> None:
    if _is_mount(scratch.root):
        _libc.umount2(os.fsencode(scratch.root), _MNT_DETACH)
    try:
        shutil.rmtree(scratch.root)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    # A candidate may have made a directory unwritable: make it ours again, then retry.
    for dirpath, dirnames, _ in os.walk(scratch.root):
        for d in dirnames:
            try:
                os.chmod(os.path.join(dirpath, d), 0o700, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
    shutil.rmtree(scratch.root, ignore_errors=True)
    if os.path.exists(scratch.root):
        log.warning("scratch_not_removed", scratch_root=scratch.root)


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in EXCLUDED_NAMES or n.endswith(".pyc")}


def _walk(root: str) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_NAMES)
        for name in sorted(filenames):
            if not name.endswith(".pyc"):
                yield os.path.join(dirpath, name)
        for d in dirnames:
            full = os.path.join(dirpath, d)
            if os.path.islink(full):
                yield full


def hash_tree(root: str) -> str:
    """SHA-256 over every path and content of a tree (symlinks by their target)."""
    h = hashlib.sha256()
    for path in _walk(root):
        rel = os.path.relpath(path, root)
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        if os.path.islink(path):
            h.update(b"L" + os.readlink(path).encode("utf-8", "surrogateescape"))
        else:
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def artifact_version(
    repo_hash: str | None, patch: str | None, code: str | None, command: Iterable[str] | None
) -> str:
    h = hashlib.sha256()
    for part in (repo_hash, patch, code, None if command is None else "\0".join(command)):
        h.update(b"-" if part is None else b"+" + part.encode("utf-8", "surrogateescape"))
        h.update(b"\x1e")
    return h.hexdigest()


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


def make_view(scratch: Scratch, repo: str | None, bytecode: str | None = None) -> None:
    """The run's cwd: a copy of ``repo`` (or empty), with ``bytecode``'s ``__pycache__``
    dirs (`compile_bytecode`) laid over it."""
    if repo is None:
        os.mkdir(scratch.work)
    else:
        shutil.copytree(repo, scratch.work, symlinks=True, ignore=_ignore)
        if bytecode is not None:
            shutil.copytree(bytecode, scratch.work, dirs_exist_ok=True)


#: A repo's modules are compiled once for all its runs only up to this much source;
#: past it, each run compiles what it imports, as a plain interpreter would.
BYTECODE_MAX_BYTES = 16 << 20
BYTECODE_TIMEOUT_S = 120.0


def python_sources(root: str) -> tuple[list[str], int]:
    """The regular ``.py`` files a view of ``root`` holds (repo-relative), and their size."""
    files, size = [], 0
    for path in _walk(root):
        st = os.lstat(path)
        if path.endswith(".py") and stat.S_ISREG(st.st_mode):
            files.append(os.path.relpath(path, root))
            size += st.st_size
    return files, size


#: Test modules pytest finds by its default ``python_files``.
TEST_FILES = ("test_*.py", "*_test.py")


def rewritten_sources(files: Iterable[str], tests: Iterable[str] | None) -> list[str]:
    """Which of ``files`` pytest's assertion rewriter would rewrite for the selection
    ``tests`` (None: the whole suite): conftest files, the files named, and test modules
    under the directories named. Rewriting is slow, so only these are rewritten ahead."""
    named = None if tests is None else {os.path.normpath(t.split("::", 1)[0]) for t in tests}
    whole = named is None or "." in named
    out = []
    for f in files:
        base = os.path.basename(f)
        testlike = any(fnmatch.fnmatch(base, p) for p in TEST_FILES)
        selected = named is not None and f in named
        under = testlike and (whole or any(f.startswith(d + os.sep) for d in named or ()))
        if base == "conftest.py" or selected or under:
            out.append(f)
    return out


def _publish(tmp: str, out: str) -> bool:
    os.makedirs(tmp, exist_ok=True)
    try:
        os.rename(tmp, out)
    except OSError:  # another call made it first
        return os.path.isdir(out)
    return True


async def compile_bytecode(python: str, repo: str, tests: Iterable[str] | None, out: str) -> bool:
    """Compile ``repo``'s modules once, with the runs' own interpreter, into ``out``.

    ``out`` mirrors the repo's directories with the ``__pycache__`` files a run would
    otherwise compile afresh (`make_view` lays them over each view): checked-hash pycs
    of every module, and pytest's rewritten pycs of what a run of the selection ``tests``
    rewrites (see ``_driver.write_bytecode``). Nothing of the repo runs: only the
    compiler reads it. False when there is nothing worth compiling or the compiler
    failed; runs then compile for themselves.
    """
    files, size = await anyio.to_thread.run_sync(python_sources, repo)
    if not files or size > BYTECODE_MAX_BYTES:
        return False
    tmp = f"{out}.tmp-{secrets.token_hex(4)}"
    job = json.dumps({"root": repo, "out": tmp, "files": files, "rewrite": rewritten_sources(files, tests)})
    ok = False
    try:
        with anyio.move_on_after(BYTECODE_TIMEOUT_S):
            done = await anyio.run_process(
                [python, "-I", DRIVER, "--bytecode"],
                input=job.encode("utf-8", "surrogateescape"),
                cwd="/",
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                check=False,
            )
            ok = done.returncode == 0
            if not ok:
                log.warning("bytecode_failed", repo=repo, error=done.stderr.decode(errors="replace")[-300:])
        if ok:
            ok = await anyio.to_thread.run_sync(_publish, tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ok


async def apply_patch(scratch: Scratch, patch: str) -> None:
    done = await anyio.run_process(
        ["git", "apply", "--whitespace=nowarn", "-p1", "-"],
        input=patch.encode("utf-8", "surrogateescape"),
        cwd=scratch.work,
        env=_git_env(),
        check=False,
    )
    if done.returncode != 0:
        raise PatchError(done.stderr.decode(errors="replace").strip() or "git apply failed")


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
    path = os.path.join(root, name)
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        raw = f.read()
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


def changed_state(before: dict[str, tuple[int, int]], root: str) -> str:
    after = snapshot(root)
    created = sorted(set(after) - set(before))
    deleted = sorted(set(before) - set(after))
    modified = sorted(p for p in set(before) & set(after) if before[p] != after[p])
    if not (created or deleted or modified):
        return "no files written"
    parts = []
    for label, paths in (("created", created), ("modified", modified), ("deleted", deleted)):
        if paths:
            shown = ", ".join(paths[:20]) + (f", … (+{len(paths) - 20})" if len(paths) > 20 else "")
            parts.append(f"{len(paths)} {label}: {shown}")
    written = sum(after[p][0] for p in created + modified)
    return "; ".join(parts) + f" ({written} bytes in created/modified files)"


def snapshot(root: str) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file under a scratch root, the private dir excluded."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root:
            dirnames[:] = [d for d in dirnames if d != ".aexec"]
        for name in filenames:
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            out[os.path.relpath(full, root)] = (st.st_size, st.st_mtime_ns)
    return out


def candidate_env(scratch: Scratch, python: str) -> dict[str, str]:
    """The whole environment a candidate sees: declared, minimal, none of the host's."""
    bindir = os.path.dirname(python)
    return {
        "PATH": os.pathsep.join(dict.fromkeys([bindir, "/usr/local/bin", "/usr/bin", "/bin"])),
        "HOME": scratch.home,
        "USER": "aexec",
        "LOGNAME": "aexec",
        "TMPDIR": scratch.tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "NO_COLOR": "1",
        # glibc reserves 64 MiB of address space per thread arena; under RLIMIT_AS a
        # few threads would otherwise look like a memory cap being hit.
        "MALLOC_ARENA_MAX": "2",
    }


def import_roots(root: str) -> list[str]:
    """sys.path entries for a repo view: its root, and ``src/`` in a src layout."""
    roots = [root]
    src = os.path.join(root, "src")
    if os.path.isdir(src):
        roots.append(src)
    return roots


def default_python() -> str:
    return sys.executable
