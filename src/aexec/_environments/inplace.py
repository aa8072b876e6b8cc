"""Repos that build C extensions in place (issue 30, goal 3): built once per base,
carried into each candidate's scratch copy, built again there when a patch touches a
compiled source.

Blocking: the pipeline calls `ensure_inplace` in a worker thread, after the environment
(`aexec._environments.build.ensure`). Under the environments' root::

    inplace/<key>/files/     the build's artifacts (``*.so``, generated sources, version
                             files), laid out as in the repo
    inplace/<key>/overlay/   the repo's build requirements the environment lacks
                             (``uv pip install --target``, pinned by the environment's lock)
    inplace/<key>/aexec-inplace.json   marks it complete: the artifacts' paths

The key (`aexec._stages.keys.inplace_key`): the environment's, the build requirements,
the build's argv, and the repo's compiled sources and build files by content. One
builder per key (`store.once`); a base that does not build is ``env_broken`` kind
``build`` with the log's tail (recorded: the next ask fails at once, never the
candidate's). The build runs ``python setup.py build_ext --inplace`` (what ``pip install
-e .`` does for the extensions) in a copy of the base under ``tmp/``: never the repo,
never a candidate's patch. It finds the environment's Debian packages (`library_env`:
their headers and libraries); a matplotlib checkout is told (``MPLSETUPCFG``) to link
them in place of the FreeType and Qhull sources its build would download.

A candidate's copy gets the artifacts before its patch (`carry`, with their times, so
that the build tools see them up to date); when a patch touches a compiled source or a
build file (`touches_build`), ``aexec._pipeline.run`` runs `build_argv` in that copy under
the run's boundary and deadline: its failure is the candidate's (class ``compile``).
"""

from __future__ import annotations

import contextlib
import fcntl
import filecmp
import glob
import hashlib
import os
import re
import shutil
import tempfile
import time
import tomllib
from collections.abc import Iterable, Mapping

import attrs

from .._boundary.trees import copy_ignore
from .._log import get_logger
from .._stages.keys import inplace_key
from . import confine, ft2font, system, versions
from .build import Built
from .edits import norm
from .spec import EnvBroken
from .store import fail, once, read_json
from .uv import BUILD_TIMEOUT_S, TAIL_LINES, uv_step

log = get_logger(__name__)

#: What a compiler (or Cython, or f2py) reads: a patch touching one means a rebuild.
COMPILED_SUFFIXES = frozenset(
    {".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx", ".pyx", ".pxd", ".pxi"}
    | {".f", ".f90", ".f95", ".for", ".f77", ".m", ".mm", ".cu", ".pyf"}
)
#: What the build tools do not track (``build_ext`` compares an extension's ``.so`` with
#: its listed sources only): a patch touching one rebuilds everything (``--force``).
UNTRACKED_SUFFIXES = frozenset({".h", ".hpp", ".hh", ".hxx", ".pxd", ".pxi"})
#: Files whose content decides what is built (astropy declares extensions in each
#: package's ``setup_package.py``).
BUILD_FILES = frozenset({"setup.py", "setup.cfg", "pyproject.toml", "setup_package.py", "MANIFEST.in"})
MARKER = "aexec-inplace.json"
#: matplotlib's ``setupext.py`` downloads FreeType's and Qhull's sources unless the file
#: ``MPLSETUPCFG`` names says to link the system's: the environment's Debian packages
#: (SWE-bench's ``pre_install`` downloads Qhull 2020.2, Debian's libqhull-dev is 2020.2).
#: No link-time optimisation: the same code, built in half the time.
MPLSETUP = "[libs]\nsystem_freetype = True\nsystem_qhull = True\nenable_lto = False\n"
MPLSETUP_NAME = "aexec-mplsetup.cfg"
#: Build requirements that stand for another package (the environment's version is used).
_ALIASES = {"oldest-supported-numpy": "numpy"}
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
#: Objects and caches of a build: not carried (``build_ext`` recompiles an extension it
#: relinks). ``build/lib*`` is: setuptools checks an extension's copy there against its
#: sources, and without it rebuilds every extension (astropy: minutes, not seconds).
_NOT_CARRIED = (".o", ".obj", ".pyc")
_HOST_PATH = ("/usr/local/bin", "/usr/bin", "/bin")


@attrs.frozen
class InPlace:
    """A base's extensions, built: where the artifacts are and what a rebuild needs."""

    key: str
    #: The artifacts, laid out as in the repo (``files``: their relative paths).
    artifacts: str
    files: tuple[str, ...]
    #: The build requirements the environment lacked (on ``PYTHONPATH`` for a build).
    overlay: str
    #: What ``setuptools_scm`` is told the version is (a copy has no git history: `versions`).
    version: str
    cached: bool
    seconds: float
    #: What else a build's process is given (`library_env`: the environment's libraries).
    extra: tuple[tuple[str, str], ...] = ()
    #: matplotlib's ft2font: which it is (`ft2font.adopt`), and the files that decided it.
    ft2font: str | None = None
    ft2font_sources: tuple[str, ...] = ()

    def build_env(self) -> dict[str, str]:
        """What a build adds to its process's environment."""
        return {
            "PYTHONPATH": self.overlay,
            "SETUPTOOLS_SCM_PRETEND_VERSION": self.version,
            **dict(self.extra),
        }


def mplsetup(repo: str) -> str | None:
    """The build configuration a matplotlib checkout (its ``setupext.py`` reads
    ``MPLSETUPCFG``) is built with (`MPLSETUP`), or None for any other repo."""
    path = os.path.join(repo, "setupext.py")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        return MPLSETUP if "MPLSETUPCFG" in f.read() else None


def library_env(prefix: str, overlay: str, config: str | None) -> dict[str, str]:
    """What a build compiling against the Debian packages unpacked at ``prefix`` (the
    environment's ``system``) is given: their headers and libraries (``CPPFLAGS``,
    ``LDFLAGS``; FreeType's headers are in ``freetype2``), and with ``config``
    matplotlib's ``MPLSETUPCFG``, written in ``overlay``."""
    env: dict[str, str] = {}
    if config is not None:
        env["MPLSETUPCFG"] = os.path.join(overlay, MPLSETUP_NAME)
    include = [os.path.join(prefix, "usr", "include", d) for d in ("", "freetype2")]
    include = [d.rstrip("/") for d in include if os.path.isdir(d)]
    libs = [
        d for d in sorted(glob.glob(os.path.join(prefix, "usr", "lib", "*-linux-gnu"))) if os.path.isdir(d)
    ]
    if include:
        env["CPPFLAGS"] = " ".join(f"-I{d}" for d in include)
    if libs:
        env["LDFLAGS"] = " ".join(f"-L{d}" for d in libs)
    return env


def _compiled(path: str) -> bool:
    return os.path.splitext(path)[1].lower() in COMPILED_SUFFIXES or os.path.basename(path) in BUILD_FILES


def touches_build(paths: Iterable[str]) -> bool:
    """Does a patch touching ``paths`` change what the in-place build makes?"""
    return any(_compiled(p) for p in paths)


def build_argv(python: str, touched: Iterable[str] = (), jobs: int = 1) -> list[str]:
    """The in-place build: ``--force`` when ``touched`` holds a file the build tools do not
    track (a header, a ``.pxd``, a build file)."""
    touched = list(touched)
    force = any(
        os.path.splitext(p)[1].lower() in UNTRACKED_SUFFIXES or os.path.basename(p) in BUILD_FILES
        for p in touched
    )
    argv = [python, "setup.py", "build_ext", "--inplace"]
    return [*argv, *(["--force"] if force else []), *(["--parallel", str(jobs)] if jobs > 1 else [])]


def sources(repo: str) -> dict[str, str]:
    """The repo's compiled sources and build files: relative path -> SHA-256."""
    out: dict[str, str] = {}
    for top, dirs, files in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if d not in copy_ignore(top, dirs))
        for name in files:
            path = os.path.join(top, name)
            if _compiled(name) and os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    out[os.path.relpath(path, repo)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _norm(name: str) -> str:
    name = norm(name)
    return _ALIASES.get(name, name)


def build_requires(repo: str) -> list[str]:
    """``[build-system] requires`` of the repo's ``pyproject.toml`` (PEP 518's default
    without one); `EnvBroken` ``build`` if it cannot be read."""
    path = os.path.join(repo, "pyproject.toml")
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return ["setuptools>=40.8.0", "wheel"]
    except (OSError, ValueError) as e:
        raise EnvBroken("build", f"pyproject.toml cannot be read: {e}") from None
    system = data.get("build-system")
    requires = system.get("requires") if isinstance(system, dict) else None
    if not isinstance(requires, list):
        return ["setuptools>=40.8.0", "wheel"]
    return [str(r) for r in requires]


def lacking(requires: Iterable[str], lock: str) -> list[str]:
    """The requirements whose package the lock (``name==version`` lines) does not pin: the
    environment's own versions are the build's, as with ``--no-build-isolation``."""
    have = {_norm(m.group(1)) for line in lock.splitlines() if (m := _NAME.match(line))}
    return [r for r in requires if (m := _NAME.match(r)) and _norm(m.group(1)) not in have]


def run_build(
    argv: list[str], cwd: str, python: str, extra: dict[str, str], timeout: float, root: str
) -> tuple[int | None, str]:
    """Run the base's build in its private copy ``cwd`` (under ``root``'s ``tmp/``) as a
    build step is run (`confine`: the copy's directory the only path it writes, the
    environment and its overlay read, the package index its only network): (exit, output)."""
    env = {
        "PATH": os.pathsep.join([os.path.dirname(python), *_HOST_PATH]),
        "HOME": cwd,
        "TMPDIR": cwd,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        **extra,
    }
    work = os.path.dirname(cwd)
    hidden = [os.path.join(root, n) for n in sorted(os.listdir(root)) if n not in ("envs", "inplace")]
    done = confine.run(
        argv,
        env=env,
        cwd=cwd,
        writable=[root, work],
        owned=[work],
        hidden=hidden,
        programs=[python],
        scratch=os.path.join(root, "tmp"),
        timeout=timeout,
    )
    if done.boundary is not None:  # aexec's or the machine's, not the base's: not recorded
        raise EnvBroken("build", f"the in-place build's boundary could not be made ({done.boundary})")
    return done.returncode, done.output


def tail(output: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])


def artifacts(built: str, repo: str) -> list[str]:
    """What the build added or changed in ``built`` (a copy of ``repo``): relative paths."""
    out: list[str] = []
    for top, dirs, files in os.walk(built):
        dirs[:] = sorted(d for d in dirs if d not in copy_ignore(top, dirs))
        for name in sorted(files):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, built)
            if name.endswith(_NOT_CARRIED) or not os.path.isfile(path) or os.path.islink(path):
                continue
            old = os.path.join(repo, rel)
            if not os.path.isfile(old) or not filecmp.cmp(old, path, shallow=True):
                out.append(rel)
    return out


def carry(inplace: InPlace, work: str) -> None:
    """Copy the base's artifacts into a candidate's copy ``work`` (times kept: a build
    there sees them newer than the sources it did not patch)."""
    for rel in inplace.files:
        dst = os.path.join(work, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.lexists(dst):
            os.unlink(dst)
        shutil.copy2(os.path.join(inplace.artifacts, rel), dst)


def ensure_inplace(
    built: Built, repo: str, root: str, *, exclude_newer: str | None = None, repo_version: str | None = None
) -> InPlace:
    """``repo``'s base with its extensions built in place, for environment ``built``: from
    the cache, or built once per key (whoever else asks). Raises `EnvBroken` ``build``.
    ``repo_version``: the checkout's version where git has no tag (`ft2font.adopt`'s hint)."""
    start = time.monotonic()
    repo, root = os.path.abspath(repo), os.path.abspath(root)
    if not os.path.isfile(os.path.join(repo, "setup.py")):
        raise EnvBroken(
            "unsupported",
            "an in-place build without setup.py (meson-python, scikit-build, …) is not supported",
        )
    with open(os.path.join(built.path, "aexec-lock.txt"), encoding="utf-8") as f:
        lock = f.read()
    requires = lacking(build_requires(repo), lock)
    # The key names what is built, not how many compilers build it (the machine's cores).
    config = mplsetup(repo)
    named = [*build_argv("python"), *([f"MPLSETUPCFG={config}", ft2font.KEY_TAG] if config else [])]
    key = inplace_key(environment=built.key, requires=requires, sources=sources(repo), argv=named)
    argv = build_argv(built.python, jobs=max(1, min(4, os.cpu_count() or 1)))
    home = os.path.join(root, "inplace", key)
    files, overlay = os.path.join(home, "files"), os.path.join(home, "overlay")
    extra = library_env(os.path.join(built.path, system.PREFIX), overlay, config)
    paths = system.run_env(built.python)

    def done(cached: bool, marker: dict[str, object]) -> InPlace:
        if cached:
            with contextlib.suppress(OSError):
                os.utime(os.path.join(home, MARKER))  # last use, for `aexec env ls`
        listed = marker.get("files")
        made = tuple(str(p) for p in listed) if isinstance(listed, list) else ()
        version = str(marker.get("version", "0.0.0"))
        took = time.monotonic() - start
        env = tuple(sorted(extra.items()))
        return InPlace(key, files, made, overlay, version, cached, took, env, *ft2font.recorded(marker))

    def build() -> dict[str, object]:
        shutil.rmtree(home, ignore_errors=True)  # a build that died half way
        os.makedirs(home)
        log.info("inplace_building", key=key[:12], requires=requires)
        if requires:
            uv = ["pip", "install", "--quiet", "--target", overlay, "--python", built.python, "-c"]
            uv += [os.path.join(built.path, "aexec-lock.txt")]
            uv += [*(["--exclude-newer", exclude_newer] if exclude_newer else []), *requires]
            step = "installing the build requirements (uv pip install --target)"
            uv_step(root, key, step, uv, cwd=root, writable=[overlay], python=built.interpreter)
        else:
            os.makedirs(overlay)
        if config is not None:
            with open(os.path.join(overlay, MPLSETUP_NAME), "w", encoding="utf-8") as f:
                f.write(config)
        confine.seal(overlay)  # root's: the base's build and the candidates' only read it
        version = versions.version(repo)
        os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
        work = tempfile.mkdtemp(prefix="inplace-", dir=os.path.join(root, "tmp"))
        try:
            copy = os.path.join(work, "repo")
            shutil.copytree(repo, copy, symlinks=True, ignore=copy_ignore)
            given = {"PYTHONPATH": overlay, "SETUPTOOLS_SCM_PRETEND_VERSION": version, **extra}
            if paths.get("PATH"):  # the environment's programs (pkg-config) before the host's
                given["PATH"] = os.pathsep.join([paths["PATH"], os.path.dirname(built.python), *_HOST_PATH])
            if paths.get("LD_LIBRARY_PATH"):
                given["LD_LIBRARY_PATH"] = paths["LD_LIBRARY_PATH"]
            rc, output = run_build(argv, copy, built.python, given, BUILD_TIMEOUT_S, root)
            logfile = os.path.join(root, "logs", key + ".log")
            os.makedirs(os.path.dirname(logfile), exist_ok=True)
            with open(logfile, "a", encoding="utf-8") as f:
                f.write(f"$ {' '.join(argv[1:])}\n{output}\n")
            if rc != 0:
                said = tail(output.replace(work, "<tmp>"))
                raise fail(
                    root,
                    key,
                    "build",
                    f"the in-place build failed (exit {rc}); log {logfile}; its tail:\n{said}",
                )
            adopted = None
            if config is not None:  # matplotlib: FreeType 2.6.1's ft2font where a release has it
                hint, py = versions.version(repo, repo_version), built.interpreter_version

                def check(args: list[str], env: Mapping[str, str]) -> tuple[int | None, str]:
                    return run_build([built.python, *args], copy, built.python, {**given, **env}, 600.0, root)

                adopted = ft2font.adopt(copy, repo, root, hint, py, check)
            found = artifacts(copy, repo)
            for rel in found:
                os.makedirs(os.path.dirname(os.path.join(files, rel)), exist_ok=True)
                shutil.copy2(os.path.join(copy, rel), os.path.join(files, rel))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        marker: dict[str, object] = {"key": key, "environment": built.key, "files": found, "version": version}
        marker["requires"] = requires
        if adopted is not None:
            marker["ft2font"] = attrs.asdict(adopted)
        marker["seconds"] = round(time.monotonic() - start, 3)
        log.info("inplace_built", key=key[:12], files=len(found), seconds=marker["seconds"])
        return marker

    return done(*once(root, key, os.path.join(home, MARKER), build))


def gc_inplace(root: str) -> list[str]:
    """Remove the in-place builds no environment uses (theirs is gone) and the partial
    ones no builder holds: the paths removed (``aexec env gc``)."""
    removed: list[str] = []
    base = os.path.join(root, "inplace")
    os.makedirs(os.path.join(root, "locks"), exist_ok=True)
    for key in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        marker = read_json(os.path.join(base, key, MARKER))
        env = None if marker is None else marker.get("environment")
        if marker is not None and os.path.isdir(os.path.join(root, "envs", str(env))):
            continue
        fd = os.open(os.path.join(root, "locks", key), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # being built now
            os.close(fd)
            continue
        try:
            shutil.rmtree(os.path.join(base, key), ignore_errors=True)
            removed.append(os.path.join(base, key))
        finally:
            os.close(fd)
    return removed
