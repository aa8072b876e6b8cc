"""Build a declared environment with uv, cached by content, one builder per key (I/O).

Blocking: the pipeline calls `ensure` in a worker thread. Under the environments' root::

    uv-cache/            uv's cache: every environment's files are hardlinks into it
    resolved/<rkey>.json the lock a resolution key resolved to (and its hash)
    envs/<ekey>/         a virtual environment; ``aexec-env.json`` in it marks it complete
    failed/<key>.json    a resolution or build that failed: not tried again (``aexec env gc`` forgets it)
    logs/<key>.log       uv's output of the last attempt
    locks/<key>          the file lock of each key: one builder per key across processes
    tmp/                 copies of a repo's base, where its setup code runs

Only the repo's base (the checkout the request names, never a candidate's patch) is
read, and its setup code runs in a copy under ``tmp/``. Every uv step runs confined
(`confine`): the root the only writable path (its parts other than ``uv-cache/`` and
``envs/`` hidden), as the build's own uid, the package index its only network. The
environment holds dependencies only, never the repo's files: with ``install: deps`` its
editable install names where every run's view holds the run's copy (`install_repo_view`).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping

import attrs

from .._driver.wire import REPO_VIEW
from .._log import get_logger
from .._stages.keys import environment_key, resolution_key, setup_key
from . import commits, confine, system
from .edits import apply as apply_edits
from .edits import included, repinned, without_pins
from .edits import paths as edit_paths
from .interpreters import find_interpreters
from .spec import SETUP_FILES, EnvBroken, EnvSpec, pick_interpreter, version_tuple
from .store import once, unique_bytes
from .uv import BUILD_TIMEOUT_S as BUILD_TIMEOUT_S  # re-exported: its callers import it here
from .uv import TAIL_LINES as TAIL_LINES
from .uv import uv_binary as uv_binary
from .uv import uv_step
from .versions import exclude_newer_of as exclude_newer_of  # re-exported: its callers import it here
from .versions import generated, scm_env

log = get_logger(__name__)

MARKER = "aexec-env.json"
#: uv's settings that change what a resolution finds: part of the resolution key.
INDEX_VARS = (
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_NO_INDEX",
)


@attrs.frozen
class Built:
    """A built environment: its key, its lock's hash, its interpreter."""

    key: str
    lock_hash: str
    #: The environment's own interpreter (``envs/<key>/bin/python``).
    python: str
    #: The interpreter it was made from, and its version.
    interpreter: str
    interpreter_version: str
    path: str
    #: Served from the cache (nothing built by this call).
    cached: bool
    seconds: float
    #: Bytes of the environment's files no other environment shares (not hardlinked).
    unique_bytes: int
    #: What the checkout's build writes and its runs need (`versions.generated`): each
    #: run's copy gets them (relative path, text).
    generated: tuple[tuple[str, str], ...] = ()


def default_root(cache_dir: str | None) -> str:
    """``<cache_dir>/envs``, or without a cache dir ``$XDG_CACHE_HOME/aexec/envs``."""
    if cache_dir is not None:
        return os.path.join(cache_dir, "envs")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "aexec", "envs")


def setup_hash(repo: str, spec: EnvSpec) -> str:
    """SHA-256 of the repo's setup files and the spec's requirement files (absent: None;
    at its ``setup_commit`` where the checkout's git has them), as its ``edits`` leave them."""
    files: dict[str, str | None] = {}
    for name in (*SETUP_FILES, *spec.requirements):
        at = spec.setup_commit if name in spec.requirements else None
        try:
            if (data := commits.show(repo, at, name) if at else None) is None:
                with open(os.path.join(repo, name), "rb") as f:
                    data = f.read()
            files[name] = hashlib.sha256(apply_edits(spec.edits, name, data)).hexdigest()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            if name in spec.requirements:
                raise EnvBroken("build", f"requirements file {name!r} is not in the repo") from None
            files[name] = None
    return setup_key(files)


def _project_file(copy: str) -> str | None:
    """The file uv reads the repo's own dependencies from, or None."""
    pyproject = os.path.join(copy, "pyproject.toml")
    text = ""
    with contextlib.suppress(OSError, UnicodeDecodeError), open(pyproject, encoding="utf-8") as f:
        text = f.read()
    if re.search(r"^\[project\]", text, re.M):
        return pyproject
    for name in ("setup.py", "setup.cfg"):
        if os.path.isfile(os.path.join(copy, name)):
            return os.path.join(copy, name)
    return pyproject if re.search(r"^\[build-system\]", text, re.M) else None


def _local(line: str, work: str) -> bool:
    """A lock line naming a local path (``-e .``, ``./x``, ``file:``): the repo or a part."""
    req = line.strip()
    return req.startswith(("-e", "--editable", ".", "/")) or "file:" in req or work in req


def _resolve(
    spec: EnvSpec, repo: str, interpreter: str, exclude: str | None, root: str, rkey: str
) -> tuple[str, dict[str, str]]:
    """The lock (``name==version`` lines) of ``spec`` for ``repo``'s base, by ``uv pip compile``
    in a copy of the repo under ``tmp/`` (its setup code may run), and the modules that build
    wrote (`versions.generated`)."""
    os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
    work = tempfile.mkdtemp(prefix="resolve-", dir=os.path.join(root, "tmp"))
    try:
        copy = os.path.join(work, "repo")
        shutil.copytree(repo, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        if spec.setup_commit:  # SWE-bench's requirement files are its environment_setup_commit's
            commits.check_out(repo, spec.setup_commit, spec.requirements, copy)
        _prepare(copy, spec)
        lines = [*spec.packages, "pytest"]  # the runs need pytest; a pin elsewhere wins
        lines += [f"-r {os.path.join(copy, r)}" for r in spec.requirements]
        with open(os.path.join(work, "requirements.in"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        inputs = [os.path.join(work, "requirements.in")]
        project = _project_file(copy) if spec.install == "deps" else None
        if project is not None:
            inputs.append(project)
        extras = [a for e in spec.extras for a in ("--extra", e)] if project is not None else []
        out = os.path.join(work, "lock.txt")
        compile_ = ["pip", "compile", "--quiet", "--no-header", "--no-annotate"]
        compile_ += [*(["--exclude-newer", exclude] if exclude else [])]
        if spec.build_constraints:
            with open(os.path.join(work, "build-constraints.txt"), "w", encoding="utf-8") as f:
                f.write("\n".join(spec.build_constraints) + "\n")
            compile_ += ["--build-constraints", os.path.join(work, "build-constraints.txt")]
        python = interpreter
        if project is not None and not spec.build_isolation:
            python = _build_env(root, rkey, work, compile_, interpreter)
            compile_ += ["--no-build-isolation"]
        argv = [*compile_, "--python", python, *extras, "-o", out, *inputs]
        # Paths as pip reads them; the copy is all it may write (besides uv's cache). A
        # checkout's version is git's, which the copy lacks (`versions`).
        step = "resolving (uv pip compile)"
        uv_step(
            root,
            rkey,
            step,
            argv,
            cwd=copy,
            writable=[work],
            python=interpreter,
            extra_env=scm_env(repo, spec.repo_version),
        )
        with open(out, encoding="utf-8") as f:
            # A line naming the copy is the repo itself (``-e .`` in a requirements
            # file): never installed, the code under test is the candidate's copy.
            lock = "".join(ln for ln in f if ln.strip() and not ln.startswith("#") and not _local(ln, work))
        return lock, generated(copy, repo) if project is not None else {}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _build_env(root: str, rkey: str, work: str, compile_: list[str], interpreter: str) -> str:
    """As pip's ``--no-build-isolation`` after the spec's packages: a venv in ``work`` of
    ``requirements.in`` (and ``wheel`` and ``pip``, which setuptools' legacy builds and its
    ``setup_requires`` call; not the repo, ``-e .``), in which the repo's metadata is built."""
    venv, lock = os.path.join(work, "build-env"), os.path.join(work, "build-lock.txt")
    with open(os.path.join(work, "build.in"), "w", encoding="utf-8") as f:
        f.write(f"-r {os.path.join(work, 'requirements.in')}\nwheel\npip\n")
    argv = [*compile_, "--python", interpreter, "-o", lock, f.name]
    uv_step(
        root,
        rkey,
        "resolving the build's packages",
        argv,
        cwd=os.path.join(work, "repo"),
        writable=[work],
        python=interpreter,
    )
    with open(lock, encoding="utf-8") as f:
        kept = [ln for ln in f if ln.strip() and not ln.startswith("#") and not _local(ln, work)]
    with open(lock, "w", encoding="utf-8") as f:
        f.writelines(kept)
    for step, argv in [
        ("creating the build's environment (uv venv)", ["venv", "--quiet", "--python", interpreter, venv]),
        ("installing it", ["pip", "install", "--quiet", "--no-deps", "--python", venv, "-r", lock]),
    ]:
        uv_step(root, rkey, step, argv, cwd=work, writable=[work], python=interpreter)
    return os.path.join(venv, "bin", "python")


def _prepare(copy: str, spec: EnvSpec) -> None:
    """Make the spec's ``edits`` to ``copy``'s setup files; drop from its requirement files (and
    those they include) the lines for what ``spec.packages`` pins (installed after, it wins)."""
    names, seen, top = repinned(spec.packages), set(), os.path.realpath(copy)
    todo = [*edit_paths(spec.edits), *(spec.requirements if names else ())]
    while todo:
        path = os.path.realpath(os.path.join(top, todo.pop()))
        if path in seen or not path.startswith(top + os.sep) or not os.path.isfile(path):
            continue  # a symlink out of the copy is not written through
        seen.add(path)
        with open(path, "rb") as f:
            data = apply_edits(spec.edits, name := os.path.relpath(path, top), f.read())
        if names and name not in SETUP_FILES:
            text = data.decode("utf-8", "surrogateescape")
            todo += [os.path.relpath(os.path.join(os.path.dirname(path), r), top) for r in included(text)]
            data = without_pins(text, names).encode("utf-8", "surrogateescape")
        with open(path, "wb") as f:
            f.write(data)


def _lock_of(
    spec: EnvSpec, repo: str, interpreter: str, exclude: str | None, root: str, rkey: str
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The resolution key's lock and generated modules: from ``resolved/``, or resolved once
    (under its lock)."""

    def resolve() -> dict[str, object]:
        lock, made = _resolve(spec, repo, interpreter, exclude, root, rkey)
        return {"lock": lock, "lock_hash": hashlib.sha256(lock.encode()).hexdigest(), "generated": made}

    record = once(root, rkey, os.path.join(root, "resolved", rkey + ".json"), resolve)[1]
    made = record.get("generated")
    files = tuple(sorted((str(k), str(v)) for k, v in made.items())) if isinstance(made, dict) else ()
    return str(record["lock"]), files


#: The editable install's file in site-packages (``.pth``: read by every interpreter
#: start), and the module its one line imports.
REPO_PTH = "aexec-repo.pth"
REPO_FINDER = "aexec_repo_view"
#: Where the install puts the repo on ``sys.path``, and so part of the environment's key.
REPO_AT = REPO_VIEW + " (its root and src/, ahead of site-packages)"
_FINDER_SOURCE = f"""\
\"\"\"aexec: the repo under test, installed for every process of a run (as pip install -e).

Its root and src/ where the run's view holds the run's copy, ahead of site-packages, as
``setup.py develop`` put them: the copy wins over a release of the same package the
environment holds (pytest's own repo, whose runs need a pytest). Outside a view the
paths do not exist: nothing is added.\"\"\"
import os
import sys


def install():
    paths = [p for p in ({REPO_VIEW!r}, {REPO_VIEW + "/src"!r}) if os.path.isdir(p) and p not in sys.path]
    sites = [n for n, p in enumerate(sys.path) if os.path.basename(p) == "site-packages"]
    at = sites[0] if sites else len(sys.path)
    sys.path[at:at] = paths


install()
"""


def install_repo_view(env: str) -> None:
    """The repo installed as ``pip install -e .`` does, for every process of a run: a
    ``.pth`` importing `REPO_FINDER`, which puts where the run's view holds its copy
    (`aexec._driver.view`) on ``sys.path`` ahead of site-packages."""
    for site in glob.glob(os.path.join(env, "lib", "python*", "site-packages")):
        with open(os.path.join(site, REPO_FINDER + ".py"), "w", encoding="utf-8") as f:
            f.write(_FINDER_SOURCE)
        with open(os.path.join(site, REPO_PTH), "w", encoding="utf-8") as f:
            f.write(f"import {REPO_FINDER}\n")


def ensure(spec: EnvSpec, repo: str, root: str) -> Built:
    """The environment ``spec`` declares for ``repo``'s base: from the cache, or built
    (once per key, whoever else asks at the same time). Raises `EnvBroken`: kind
    ``unsupported`` (no interpreter, more than pip) or ``build`` (uv failed; recorded, so
    the next ask fails at once). ``UV_OFFLINE=1`` builds from uv's cache alone."""
    start = time.monotonic()
    repo, root = os.path.abspath(repo), os.path.abspath(root)
    reason = spec.unsupported()
    if reason is not None:
        raise EnvBroken("unsupported", reason)
    found = find_interpreters()
    interpreter = pick_interpreter(spec.python, found)
    if interpreter is None:
        have = ", ".join(sorted(found, key=version_tuple)) or "none"
        raise EnvBroken(
            "unsupported", f"Python {spec.python}: no such interpreter on this machine (found: {have})"
        )
    version = next(v for v, p in found.items() if p == interpreter)
    ident = f"{interpreter} {version}"
    setup = setup_hash(repo, spec)
    exclude = exclude_newer_of(spec, repo)
    index = {v: os.environ[v] for v in INDEX_VARS if os.environ.get(v)}
    rkey = resolution_key(
        spec={**spec.as_json(), "exclude_newer": exclude}, interpreter=ident, setup_hash=setup, index=index
    )
    lock, made = _lock_of(spec, repo, interpreter, exclude, root, rkey)
    lock_hash = hashlib.sha256(lock.encode()).hexdigest()
    repo_at = REPO_AT if spec.install == "deps" else None
    debs = system.resolve(spec.apt, root) if spec.apt else None
    key = environment_key(
        interpreter=ident, lock_hash=lock_hash, setup_hash=setup, repo_at=repo_at, system=debs
    )
    path = os.path.join(root, "envs", key)
    python = os.path.join(path, "bin", "python")

    def done(cached: bool, marker: Mapping[str, object]) -> Built:
        with contextlib.suppress(OSError):
            os.utime(os.path.join(path, MARKER))  # last use, for `aexec env gc --unused-days`
        size = marker.get("unique_bytes")
        return Built(
            key,
            lock_hash,
            python,
            interpreter,
            version,
            path,
            cached,
            time.monotonic() - start,
            size if isinstance(size, int) else 0,
            made,
        )

    def build() -> dict[str, object]:
        shutil.rmtree(path, ignore_errors=True)  # a build that died half way
        os.makedirs(os.path.join(root, "envs"), exist_ok=True)
        log.info("environment_building", key=key[:12], python=version)
        uv_step(
            root,
            key,
            "creating the environment (uv venv)",
            ["venv", "--quiet", "--python", interpreter, path],
            cwd=root,
            writable=[path],
            python=interpreter,
        )
        lockfile = os.path.join(path, "aexec-lock.txt")
        with open(lockfile, "w", encoding="utf-8") as f:
            f.write(lock)
        # Compiled as pip does: blinker 1.4's escapes warn, an error under filterwarnings=error
        argv = ["pip", "install", "--quiet", "--no-deps", "--python", python]
        argv += ["--compile-bytecode"] if version_tuple(version) >= (3, 7) else []  # uv's needs 3.7
        argv += ["-r", lockfile]
        uv_step(root, key, "installing (uv pip install)", argv, cwd=root, writable=[path], python=interpreter)
        if repo_at is not None:
            install_repo_view(path)
        unpacked = system.install(debs, path, root) if debs else None
        confine.seal(path)  # root's: no later build changes it
        marker = {
            "key": key,
            "lock_hash": lock_hash,
            "interpreter": interpreter,
            "python_version": version,
            "spec": spec.as_json(),
            "resolution": rkey,
            "seconds": round(time.monotonic() - start, 3),
            "unique_bytes": unique_bytes(path),
            **({"system": unpacked} if unpacked else {}),
        }
        log.info("environment_built", key=key[:12], seconds=marker["seconds"])
        return marker

    return done(*once(root, key, os.path.join(path, MARKER), build))
