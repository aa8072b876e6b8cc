"""SWE-bench's own per-(repo, version) specs (``MAP_REPO_VERSION_TO_SPECS`` of the
``swebench`` package, 4.1.0; the optional extra ``aexec[swebench]``, imported only here
and only when asked) read into an `EnvSpec` and the spec's test command, as data.

`from_spec` is pure: a spec that needs more than pip is an `EnvSpec` whose ``system``
says why (an ``env_broken`` ``unsupported`` observation when run):

- ``packages: environment.yml`` (a conda environment), ``apt-pkgs``, a ``pre_install``
  command (``apt-get``, or a ``sed`` edit of the repo's files, which aexec never makes);
- matplotlib (its specs need apt's ffmpeg and friends, and its build downloads qhull).

An install that builds C extensions in place (``setup.py build``, ``build_ext``,
``--no-build-isolation``, and the repos known to: astropy, scikit-learn) is an `EnvSpec`
with ``inplace``: built once per base and carried into each candidate's copy
(``aexec._environments.inplace``).

``packages`` other than ``requirements.txt`` / ``environment.yml`` is the conda package
list SWE-bench creates its environment with; plain ``name`` / ``name=version`` /
``name==version`` entries are read as pip requirements (the same names on PyPI).
The test command (``test_cmd``) and ``eval_commands`` are exposed as data
(`SpecEntry`): choosing a runner from them is not done here.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from .._errors import RequestError
from .spec import EnvSpec

__all__ = ["SpecEntry", "Table", "from_spec", "load_table", "lookup", "repo_of"]

#: Repos whose install builds C extensions in place (SWE-bench's install hides it).
C_EXTENSION_REPOS = frozenset({"astropy/astropy", "scikit-learn/scikit-learn", "matplotlib/matplotlib"})
#: Of those, the ones whose in-place build needs more than pip (apt packages, a download).
UNSUPPORTED_BUILDS = {"matplotlib/matplotlib": "apt's ffmpeg, imagemagick, … and a qhull download"}
_IN_PLACE = re.compile(r"setup\.py (build|develop)|build_ext|--no-build-isolation")
_EXTRAS = re.compile(r"\.\[([^\]]+)\]")
_CONDA_PKG = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:(==?|<=?|>=?|!=)([A-Za-z0-9.*+!_-]+))?$")
_FALLBACK_PYTHON = "3.11"  # the EnvSpec of a spec with no Python: unsupported anyway


@attrs.frozen
class SpecEntry:
    """One (repo, version) of SWE-bench's table, read: the environment and the test command."""

    repo: str
    version: str
    environment: EnvSpec
    #: The spec's ``test_cmd`` (one command; a list is joined with `` && ``).
    test_cmd: str
    #: Commands SWE-bench runs before the tests (environment variables, locales).
    eval_commands: tuple[str, ...] = ()


def _conda_packages(text: str) -> tuple[list[str], list[str]]:
    """(pip requirements, what is not one) of a conda package list."""
    reqs, bad = [], []
    for item in shlex.split(text):
        m = _CONDA_PKG.match(item)
        if m is None:
            bad.append(item)
        else:
            name, op, version = m.groups()
            reqs.append(name if op is None else f"{name}{'==' if op == '=' else op}{version}")
    return reqs, bad


def from_spec(repo: str, spec: Mapping[str, Any], requirements_file: str = "requirements.txt") -> EnvSpec:
    """The `EnvSpec` of one SWE-bench spec (see the module docstring); ``packages:
    requirements.txt`` means ``requirements_file`` (SWE-bench's path for the repo)."""
    system: list[str] = []
    python = spec.get("python")
    if not isinstance(python, str) or not python:
        return EnvSpec(_FALLBACK_PYTHON, system=("not a Python spec (no `python`)",))
    install = str(spec.get("install") or "")
    packages = [str(p) for p in spec.get("pip_packages") or ()]
    requirements: list[str] = []
    listed = spec.get("packages")
    if listed == "requirements.txt":
        requirements.append(requirements_file)
    elif listed == "environment.yml":
        system.append("conda: environment.yml")
    elif isinstance(listed, str) and listed.strip():
        reqs, bad = _conda_packages(listed)
        packages = [*reqs, *packages]
        system += [f"conda: {b}" for b in bad]
    apt = spec.get("apt-pkgs") or ()
    if apt:
        system.append(f"apt: {' '.join(map(str, apt))}")
    for command in spec.get("pre_install") or ():
        kind = "apt" if "apt-get" in str(command) else "pre_install"
        system.append(f"{kind}: {str(command)[:120]}")
    inplace = repo in C_EXTENSION_REPOS or bool(_IN_PLACE.search(install))
    if repo in UNSUPPORTED_BUILDS:
        system.append(f"builds C extensions in place with {UNSUPPORTED_BUILDS[repo]}")
    extras = tuple(e.strip() for m in _EXTRAS.findall(install) for e in m.split(",") if e.strip())
    mode = "deps" if install else "none"
    try:
        return EnvSpec(
            python,
            tuple(requirements),
            tuple(packages),
            extras,
            mode,
            system=tuple(dict.fromkeys(system)),
            inplace=inplace,
        )
    except RequestError as e:  # e.g. Python "3.5" is a version, but not one EnvSpec takes
        return EnvSpec(_FALLBACK_PYTHON, system=(f"unreadable spec: {e}",))


@attrs.frozen
class Table:
    """SWE-bench's spec table, and where each repo keeps its ``requirements.txt``."""

    specs: Mapping[str, Mapping[str, Mapping[str, Any]]]
    requirements: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)


def load_table() -> Table:
    """``MAP_REPO_VERSION_TO_SPECS`` (and ``MAP_REPO_TO_REQS_PATHS``) of the installed
    ``swebench``; `RequestError` without it."""
    try:
        from swebench.harness import constants
    except ImportError as e:
        raise RequestError(
            f"--specs swebench needs the swebench package (pip install 'aexec[swebench]'): {e}"
        ) from None
    paths = getattr(constants, "MAP_REPO_TO_REQS_PATHS", {})
    return Table(constants.MAP_REPO_VERSION_TO_SPECS, {r: tuple(p) for r, p in paths.items()})


def repo_of(instance_id: str) -> str | None:
    """SWE-bench's ``owner/name`` of an instance id ``owner__name-1234``, or None."""
    m = re.match(r"^([^_/]+(?:_[^_/]+)*)__(.+)-\d+$", instance_id)
    return f"{m.group(1)}/{m.group(2)}" if m else None


def lookup(
    table: Table, repo: str, version: str, exists: Callable[[str], bool] = lambda _: True
) -> SpecEntry:
    """The (repo, version) entry; one not in the table is an unsupported environment.
    ``exists`` says whether the checkout has a path: SWE-bench reads the first of the
    repo's requirement paths that exists."""
    spec = table.specs.get(repo, {}).get(version)
    if spec is None:
        env = EnvSpec(_FALLBACK_PYTHON, system=(f"SWE-bench has no spec for {repo} {version}",))
        return SpecEntry(repo, version, env, "")
    cmd = spec.get("test_cmd") or ""
    test_cmd = " && ".join(map(str, cmd)) if isinstance(cmd, list) else str(cmd)
    evals = tuple(str(c) for c in spec.get("eval_commands") or ())
    paths = table.requirements.get(repo, ("requirements.txt",))
    found = next((p for p in paths if exists(p)), paths[0] if paths else "requirements.txt")
    return SpecEntry(repo, version, from_spec(repo, spec, found), test_cmd, evals)
