"""What a pytest start imports in the fork server's interpreter and environment
(`modules`): learnt by starting pytest on an empty directory in a child (`learn`, about
1.5 s of CPU), then kept on disk by what the answer rests on (`fingerprint`), so that
every later server of the same interpreter and environment reads it instead.

What the answer rests on: the interpreter (its path and realpath, ``sys.version``), its
``sys.path`` and what each entry holds (every name in it, and the mtime and size of its
distributions' ``dist-info``/``egg-info`` and its ``.pth`` files: installing, upgrading
or removing one changes it; not its ``__pycache__``, which the first start writes), the start-up environment but for what the child
is given afresh (``HOME``, ``TMPDIR``), the pytest configuration files pytest could find
above the empty directory, and the child's script; and the code of what it imported,
which none of that sees change when a module is edited where it is (an editable
plugin's source, a file in site-packages): the `stamps` (mtime and size) of the files
behind every module the child had imported. An entry holds the whole material and
those stamps, and is used only if the material is equal and no file is `changed`: an
entry of another environment, a corrupt one, one whose list is not all names, one
whose files changed since, or one not owned by this uid is learnt afresh. Nothing
here imports a distribution, nor anything a cold pytest start does not (no ``hashlib``:
the file's name is a non-cryptographic digest, the material check is the guard).

The directory is aexec's (``--serve``'s last argument, the library's
``Options.startup_dir``); no run's view holds it. One that cannot be made or written
costs a learning per server, nothing else.

A module of the driver's package (see `aexec._driver`).
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

#: Run by `learn` in a child: pytest started on an empty directory, then the modules it
#: imported, in order, and the `stamps` of the files behind them, written to the file
#: named by argv[1].
SCRIPT = """\
import json, os, sys, pytest
pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "--rootdir", ".", "."])
files, stamps = [getattr(m, "__file__", None) for m in list(sys.modules.values())], []
for path in dict.fromkeys(os.path.abspath(p) for p in files if isinstance(p, str)):
    try:
        st = os.stat(path)
        stamps.append([path, st.st_mtime_ns, st.st_size])
    except OSError:
        stamps.append([path, -1, -1])
with open(sys.argv[1], "w") as f:
    json.dump({"modules": list(sys.modules), "files": stamps}, f)
"""
#: Bumped when an entry's meaning changes.
FORMAT = 2
#: Set afresh for the child (`learn`): not part of what the answer rests on.
PER_CHILD_ENV = ("HOME", "TMPDIR")
#: What pytest reads in the directories above the one it starts on.
CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg", "conftest.py")
#: The names in a ``sys.path`` directory whose mtime and size count too (of the rest
#: only the name does): distributions, ``.pth`` files, the start-up hooks.
STAMPED = (".dist-info", ".egg-info", ".egg-link", ".egg", ".pth", "sitecustomize.py", "usercustomize.py")
#: Entries kept in the directory; beyond, the least recently written go.
KEEP = 256


def _stat(path: str) -> list[int]:
    try:
        st = os.stat(path)
    except OSError:
        return [-1, -1]
    return [st.st_mtime_ns, st.st_size]


def module_files(modules: Iterable[object]) -> list[str]:
    """The files behind these modules (each one's ``__file__``: source, bytecode or
    extension; absolute, for a reader in another cwd), each once, in order."""
    seen: dict[str, None] = {}
    for module in modules:
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            seen[os.path.abspath(path)] = None
    return list(seen)


def stamps(files: Iterable[str]) -> list[list[object]]:
    """``[path, mtime_ns, size]`` of each file (-1, -1: gone): what a module's code is
    while they are unchanged (`changed`)."""
    return [[path, *_stat(path)] for path in files]


def changed(stamped: Iterable[list[object]]) -> str | None:
    """The first of the `stamps` whose file is no longer so (edited, replaced, gone,
    come back), or None: all unchanged."""
    for path, *was in stamped:
        if _stat(str(path)) != was:
            return str(path)
    return None


def _listing(path: str) -> list[list[object]]:
    """Every name in a ``sys.path`` directory, and the mtime and size of each that
    installs or configures something (`STAMPED`)."""
    out: list[list[object]] = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name == "__pycache__":
                    continue  # the first import of a top-level module writes it
                if entry.name.endswith(STAMPED):
                    out.append([entry.name, *_stat(entry.path)])
                else:
                    out.append([entry.name])
    except OSError:  # not a directory (a zip), or gone
        pass
    out.sort(key=lambda e: str(e[0]))
    return out


def fingerprint(
    path: Iterable[str], environ: Mapping[str, str], executable: str, version: str, tmp: str
) -> str:
    """What `learn`'s answer rests on (see the module docstring), as one string:
    ``sys.path``, the start-up environment, the interpreter, its version and the
    directory the child's empty directory is made in."""
    path = list(path)
    parents = []
    here = os.path.abspath(tmp)
    while True:
        parents.append([here, [[n, *_stat(os.path.join(here, n))] for n in CONFIG_FILES]])
        up = os.path.dirname(here)
        if up == here:
            break
        here = up
    return json.dumps(
        [
            FORMAT,
            SCRIPT,
            executable,
            os.path.realpath(executable),
            version,
            sorted([k, v] for k, v in environ.items() if k not in PER_CHILD_ENV),
            # A directory by its listing (its own mtime moves with a new __pycache__),
            # anything else (a zip) by its stat.
            [[p, [] if os.path.isdir(p) else _stat(p), _listing(p)] for p in path],
            parents,
        ],
        separators=(",", ":"),
    )


def entry_name(material: str) -> str:
    """The file of the entry for ``material``: a digest of it (two of Python's int
    hashes, which are not randomized), only to find it; the entry's material decides.
    ``material`` is ASCII (`fingerprint`'s JSON escapes the rest)."""
    data = material.encode()
    big, little = hash(int.from_bytes(data, "big")), hash(int.from_bytes(data, "little"))
    return f"{big & (2**64 - 1):016x}{little & (2**64 - 1):016x}.json"


def read(directory: str, material: str) -> list[str] | None:
    """The list kept for ``material``, or None: none kept, unreadable, not this uid's,
    of other material, not a list of names, or a file behind the modules of the start
    it was learnt from is no longer as it was then (`changed`)."""
    try:
        with open(os.path.join(directory, entry_name(material)), encoding="utf-8") as f:
            if os.fstat(f.fileno()).st_uid != os.geteuid():
                return None
            entry = json.load(f)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or entry.get("material") != material:
        return None
    names, files = entry.get("modules"), entry.get("files")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    if not isinstance(files, list) or not all(_is_stamp(f) for f in files) or changed(files):
        return None
    return names


def _is_stamp(item: object) -> bool:
    return (
        isinstance(item, list)
        and len(item) == 3
        and isinstance(item[0], str)
        and all(type(n) is int for n in item[1:])
    )


def write(directory: str, material: str, names: list[str], files: list[list[object]]) -> None:
    """Keep ``names`` for ``material``, with the `stamps` of the ``files`` they rest on
    (atomically: a reader finds the whole entry or none); the oldest entries beyond
    `KEEP` go. Never fails: not kept is learnt again."""
    path = os.path.join(directory, entry_name(material))
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"material": material, "modules": names, "files": files}, f)
        os.replace(tmp, path)
        kept = [os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".json")]
        if len(kept) > KEEP:
            kept.sort(key=lambda p: _stat(p)[0])
            for old in kept[: len(kept) - KEEP]:
                os.unlink(old)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def learn() -> tuple[list[str], list[list[object]]] | None:
    """The modules a pytest start imports in this interpreter and environment, and the
    `stamps` of the files behind them, from a child (None if that cannot be learnt
    within a few seconds)."""
    import shutil
    import subprocess
    import tempfile

    home = tempfile.mkdtemp(prefix="aexec-startup-")
    out = os.path.join(home, "modules.json")
    try:
        subprocess.run(
            [sys.executable, "-s", "-c", SCRIPT, out],
            cwd=home,
            env=dict(os.environ, HOME=home, TMPDIR=home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=20,
            check=False,
        )
        with open(out, encoding="utf-8") as f:
            learnt = json.load(f)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if not isinstance(learnt, dict):
        return None
    names, files = learnt.get("modules"), learnt.get("files")
    if not isinstance(names, list) or not isinstance(files, list) or not all(_is_stamp(f) for f in files):
        return None
    return [n for n in names if isinstance(n, str) and n != "__main__" and not n.startswith("_pytest")], files


def modules(directory: str | None) -> tuple[list[str], str]:
    """What a pytest start imports here (see the module docstring), and how it was
    known: ``cached``, ``computed`` (and kept in ``directory`` where it could be), or
    ``failed`` (none)."""
    material = None
    if directory:
        import tempfile

        try:
            material = fingerprint(sys.path, os.environ, sys.executable, sys.version, tempfile.gettempdir())
        except (OSError, ValueError):
            pass
        names = None if material is None else read(directory, material)
        if names is not None:
            return names, "cached"
    learnt = learn()
    if learnt is None:
        return [], "failed"
    if directory and material is not None:
        write(directory, material, *learnt)
    return learnt[0], "computed"
