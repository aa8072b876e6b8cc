"""The version a checkout's own build would give itself (I/O: reads files, runs git).

A checkout is not an sdist: it has no ``PKG-INFO``, and a repo whose version comes from
git (setuptools-scm: pytest, astropy ≥ 4.3, xarray, pvlib, matplotlib, …) fails to build
its metadata where the build cannot see ``.git``: the builds run in a copy of the repo
without it. `scm_env` gives them the version setuptools-scm would compute from the
checkout's git (``SETUPTOOLS_SCM_PRETEND_VERSION_FOR_<NAME>``), see `version`;
`generated` finds the modules that build writes (its version file), which the runs need.
"""

from __future__ import annotations

import configparser
import contextlib
import os
import re
import subprocess
import tomllib

from .spec import EnvBroken, EnvSpec

_RELEASE = re.compile(r"^\d+(\.\d+)*$")
_DESCRIBE = re.compile(r"^(.+)-(\d+)-g([0-9a-f]+)$")
_SETUP_NAME = re.compile(r"""\bname\s*=\s*['"]([A-Za-z0-9][A-Za-z0-9._-]*)['"]""", re.I)


def _git(repo: str, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", repo, *args], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def version(repo: str, untagged: str | None = None) -> str:
    """``PKG-INFO``'s version (an sdist); else what setuptools-scm's default scheme makes of
    ``git describe``: the tag at HEAD, or the next release's ``.devN+gHASH`` (``5.1.2`` and
    14 commits: ``5.1.3.dev14+g73c5b7f4b``, as SWE-bench's clone with its tags gives);
    a checkout with no tag: ``untagged`` (SWE-bench's ``version``: its clone has the tags),
    else ``0.1.devN+gHASH`` (what setuptools-scm gives it); no git: ``0.0.0``."""
    with (
        contextlib.suppress(OSError, UnicodeDecodeError),
        open(os.path.join(repo, "PKG-INFO"), encoding="utf-8") as f,
    ):
        for line in f:
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    described = _git(repo, "describe", "--tags", "--long", "--match", "*[0-9]*")
    m = _DESCRIBE.match(described or "")
    if m is not None:
        tag, distance, sha = m.group(1).lstrip("v"), int(m.group(2)), m.group(3)
        if distance == 0:
            return tag
        if _RELEASE.match(tag):
            parts = tag.split(".")
            return ".".join([*parts[:-1], str(int(parts[-1]) + 1)]) + f".dev{distance}+g{sha}"
        return f"{tag}+{distance}.g{sha}"
    if untagged:
        return untagged
    sha, count = _git(repo, "rev-parse", "--short", "HEAD"), _git(repo, "rev-list", "--count", "HEAD")
    return f"0.1.dev{count}+g{sha}" if sha and count else "0.0.0"


#: What a build leaves beside a repo's files and no run needs.
_BUILD_DIRS = frozenset({".git", ".eggs", "build", "dist", "__pycache__"})


def generated(built: str, repo: str, limit: int = 1 << 16) -> dict[str, str]:
    """The Python modules a build of ``repo``'s copy ``built`` wrote that the checkout lacks
    (setuptools-scm's ``write_to``: pytest's ``src/_pytest/_version.py``, which an sdist
    ships and ``pip install -e .`` writes): relative path -> text."""
    out: dict[str, str] = {}
    for top, dirs, files in os.walk(built):
        dirs[:] = sorted(d for d in dirs if d not in _BUILD_DIRS and not d.endswith(".egg-info"))
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, built)
            if (
                os.path.islink(path)
                or os.path.lexists(os.path.join(repo, rel))
                or os.path.getsize(path) > limit
            ):
                continue
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                out[rel] = f.read()
    return out


def dist_name(repo: str) -> str | None:
    """The distribution's name: ``pyproject.toml``'s ``[project]``, ``setup.cfg``'s
    ``[metadata]``, else a literal ``name='…'`` in ``setup.py``; None if none says."""
    with contextlib.suppress(OSError, ValueError), open(os.path.join(repo, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f).get("project")
        if isinstance(project, dict) and isinstance(project.get("name"), str):
            return str(project["name"])
    cfg = configparser.ConfigParser(interpolation=None)
    with contextlib.suppress(OSError, configparser.Error, UnicodeDecodeError):
        cfg.read(os.path.join(repo, "setup.cfg"), encoding="utf-8")
        if cfg.get("metadata", "name", fallback="").strip():
            return cfg.get("metadata", "name").strip()
    with contextlib.suppress(OSError, UnicodeDecodeError), open(os.path.join(repo, "setup.py")) as f:
        m = _SETUP_NAME.search(f.read())
        return m.group(1) if m else None
    return None


def scm_env(repo: str, untagged: str | None = None) -> dict[str, str]:
    """What a build of ``repo``'s copy is told its version is: setuptools-scm's variable
    for the repo's own distribution (a dependency built from its sdist keeps its own
    version), or, the name unknown, the variable for every build."""
    name = dist_name(repo)
    key = "SETUPTOOLS_SCM_PRETEND_VERSION"
    if name is not None:
        key += "_FOR_" + re.sub(r"[-_.]+", "_", name).upper()
    return {key: version(repo, untagged)}


def exclude_newer_of(spec: EnvSpec, repo: str) -> str | None:
    """The date ``spec`` resolves as of: its ``exclude_newer``, ``base`` the HEAD commit's."""
    if spec.exclude_newer != "base":
        return spec.exclude_newer
    try:
        done = subprocess.run(
            ["git", "-C", repo, "log", "-1", "--format=%cI", "HEAD"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError as e:
        raise EnvBroken("build", f"exclude_newer 'base': git cannot run ({e})") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise EnvBroken("build", "exclude_newer 'base': the repo is not a git checkout with a commit")
    return done.stdout.strip()
