"""Bytecode compiled once per repo for all of its runs (the issue-5 lever).

`compile_bytecode` runs the driver's ``--bytecode`` job with the runs' own interpreter:
checked-hash pycs of a pristine repo's modules and pytest's rewritten test modules,
which `make_view` lays over each run's view. A store keeps them by key: in the cache
dir (``bytecode/``), or in a directory of the `Observer`'s own.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterable

import anyio

from .._log import get_logger
from . import DRIVER
from .trees import python_sources, read_regular

log = get_logger(__name__)

#: A repo's modules are compiled once for all its runs only up to this much source;
#: past it, each run compiles what it imports, as a plain interpreter would.
BYTECODE_MAX_BYTES = 16 << 20
BYTECODE_TIMEOUT_S = 120.0


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


#: In each compiled repo: the SHA-256 of every file it holds, checked before it is used.
MANIFEST = "MANIFEST.sha256"


def _files(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        out += [os.path.relpath(os.path.join(dirpath, n), root) for n in sorted(filenames)]
    return [f for f in out if f != MANIFEST]


def _digests(root: str) -> dict[str, str]:
    out = {}
    for rel in _files(root):
        data = read_regular(os.path.join(root, rel))
        out[rel] = "" if data is None else hashlib.sha256(data).hexdigest()
    return out


def verified(out: str) -> bool:
    """Whether the compiled repo ``out`` holds exactly what its manifest says."""
    try:
        with open(os.path.join(out, MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest == _digests(out)


def _publish(tmp: str, out: str) -> bool:
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(_digests(tmp), f)
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


#: Compiled repos kept in a store (least recently used go first).
BYTECODE_KEPT = 64


def _remove_unless_dir(path: str) -> bool:
    """Remove (and log) what stands at ``path`` if it is not a directory (a file, a link,
    a FIFO); whether something was removed."""
    if os.path.lexists(path) and (os.path.islink(path) or not os.path.isdir(path)):
        log.warning("bytecode_store_damaged", path=path)
        os.unlink(path)
        return True
    return False


def touch(out: str, base: str) -> bool:
    """Whether ``out`` was compiled already and is intact (then marked recent, for
    pruning). A damaged one (a file changed, added or missing: `verified`) is removed,
    to be compiled again, and logged. A store that is not a directory is replaced."""
    _remove_unless_dir(base)
    os.makedirs(base, exist_ok=True)
    if _remove_unless_dir(out):
        return False
    try:
        os.utime(out)
    except FileNotFoundError:
        return False
    if verified(out):
        return True
    log.warning("bytecode_store_damaged", path=out)
    shutil.rmtree(out, ignore_errors=True)
    return False


def prune(base: str) -> None:
    """Keep the `BYTECODE_KEPT` most recently used compiled repos of a store."""
    entries = []
    for name in os.listdir(base):
        with contextlib.suppress(OSError):
            entries.append((os.stat(os.path.join(base, name)).st_mtime_ns, name))
    for _, name in sorted(entries)[: max(0, len(entries) - BYTECODE_KEPT)]:
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)
