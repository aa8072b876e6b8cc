"""SWE-bench's own per-(repo, version) specs (``MAP_REPO_VERSION_TO_SPECS`` of the
``swebench`` package, 4.1.0; the optional extra ``aexec[swebench]``, imported only here
and only when asked) read into an `EnvSpec` and the spec's test command, as data.

`from_spec` is pure. What SWE-bench's image runs before the tests is read, never run:

- ``pre_install``: a ``sed -i 's/A/B/'`` edit (or sphinx's ``grep -q X F && sed … ||
  sed …``) of ``setup.py`` / ``setup.cfg`` / ``pyproject.toml`` becomes one of the
  environment's ``edits`` (the pins the build resolves; the candidate's copy stays the
  checkout); ``sed -i 's/pytest/pytest -rA/' tox.ini`` only changes pytest's text
  report, which aexec does not read (its plugin reports each test): nothing to do;
  Django's locale setup (``locale-gen en_US.UTF-8``) is the run's locale (below);
- ``eval_commands``: ``export`` of the locale variables (``LANG``, ``LC_ALL``,
  ``LANGUAGE``) and ``PYTHONIOENCODING=utf8``, and ``locale-gen``: aexec runs every
  candidate under ``C.UTF-8``, whose encodings (filesystem, stdio, preferred) are
  UTF-8 as under SWE-bench's ``en_US.UTF-8``; `SpecEntry.note` says so.

- ``apt-get install -y PKGS`` (in ``pre_install``, or ``apt-pkgs``): the environment's
  ``apt``, unpacked into its own prefix (`aexec._environments.system`);
- ``packages: environment.yml``: the checkout's (``read``, `lookup`), read by
  `aexec._environments.conda`'s tables;
- matplotlib's download of Qhull's sources (``QHULL_…=``, ``wget``, ``mkdir``, ``tar``):
  Debian's Qhull and FreeType in the environment's ``apt``, which its in-place build
  links (`aexec._environments.inplace`); TeX Live is left out (`build_notes` says why).

A spec that needs more than that is an `EnvSpec` whose ``system`` says, in one line
each, what is missing (an ``env_broken`` ``unsupported`` observation when run): no
``environment.yml`` in the checkout, a conda package no table names, another command. A
Python the machine lacks (SWE-bench's 3.5) is said when the environment is built.

An install that builds C extensions in place (``setup.py build``, ``build_ext``,
``--no-build-isolation``, and the repos known to: astropy, scikit-learn) is an `EnvSpec`
with ``inplace``: built once per base and carried into each candidate's copy
(``aexec._environments.inplace``).

``packages`` other than ``requirements.txt`` / ``environment.yml`` is the conda package
list SWE-bench creates its environment with; plain ``name`` / ``name=version`` /
``name==version`` entries are read as pip requirements (the same names on PyPI).
Every environment gets ``setuptools<81`` (unless the spec pins setuptools): SWE-bench's
conda environments have a setuptools with ``pkg_resources``, which sphinx <= 5 imports.
The isolated builds of the repo's metadata are held to that setuptools, the spec's pin
or ``setuptools<81`` (``build_constraints``), as pip's legacy path builds a repo without
``pyproject.toml`` with the environment's (astropy 3's ``ah_bootstrap.py`` imports
``pkg_resources`` and ``setuptools.package_index``). An install that says ``--no-build-isolation`` or
``--no-use-pep517``, or a repo without ``pyproject.toml`` (pip's legacy path: ``setup.py
develop``), builds the metadata in the environment, after its packages
(``build_isolation: false``: scikit-learn's ``setup.py`` imports NumPy, astropy 3's
``setup_requires`` it).
The test command (``test_cmd``) is exposed as data (`SpecEntry`): choosing a runner
from it is not done here.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from .._errors import RequestError
from .conda import read as read_conda
from .edits import EditError, norm, parse
from .spec import SETUP_FILES, EnvSpec

__all__ = ["SpecEntry", "Table", "from_spec", "load_table", "lookup", "repo_of"]

#: Repos whose install builds C extensions in place (SWE-bench's install hides it).
C_EXTENSION_REPOS = frozenset({"astropy/astropy", "scikit-learn/scikit-learn", "matplotlib/matplotlib"})
#: matplotlib's ``pre_install`` downloads Qhull 2020.2's sources (``QHULL_…=``, ``wget``,
#: ``mkdir``, ``tar``) for its build, which downloads FreeType's too: Debian's Qhull 2020.2
#: and FreeType stand for them (the build links them: `aexec._environments.inplace`).
_QHULL_DOWNLOAD = re.compile(
    r'^(QHULL_\w+=\S+|wget -O "\$QHULL_TAR" .*|mkdir -p "\$QHULL_BUILD_DIR"|tar -xv?zf "\$QHULL_TAR" .*)$'
)
QHULL_APT = ("libqhull-dev", "libfreetype-dev", "pkg-config")
#: What SWE-bench's ``apt-get install -y`` brings that aexec's resolution
#: (``--no-install-recommends``) does not, and tests need: imagemagick's Ghostscript
#: (matplotlib compares PDF and EPS output through ``gs``; without it they skip).
RECOMMENDED = {"imagemagick": ("ghostscript",)}
#: Why TeX Live's apt packages (``texlive*``, ``cm-super``, ``dvipng``) are left out.
TEX_LEFT_OUT = (
    "TeX Live unpacked outside / has no formats (fmtutil is a maintainer script):"
    " left out with cm-super and dvipng, so matplotlib's usetex tests skip (an expected one is"
    " then unresolved)"
)
_IN_PLACE = re.compile(r"setup\.py (build|develop)|build_ext|--no-build-isolation")
#: pip builds the repo in the environment, after its packages (scikit-learn <= 1.4); as it
#: does a repo without ``pyproject.toml`` (its legacy path, ``setup.py develop``).
_NO_ISOLATION = re.compile(r"--no-build-isolation|--no-use-pep517")
_EXTRAS = re.compile(r"\.\[([^\]]+)\]")
_CONDA_PKG = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:(==?|<=?|>=?|!=)([A-Za-z0-9.*+!_-]+))?$")
#: SWE-bench's conda environments come with setuptools, one with ``pkg_resources``
#: (gone from 81 on), which the era's code imports (sphinx <= 5's entry points).
SETUPTOOLS = "setuptools<81"
_FALLBACK_PYTHON = "3.11"  # the EnvSpec of a spec with no Python: unsupported anyway
#: Django's locale setup (``pre_install`` of 1.7-2.2, ``eval_commands`` of 3.0-3.2).
_LOCALE_SETUP = frozenset(
    {
        "apt-get update && apt-get install -y locales",
        "echo 'en_US UTF-8' > /etc/locale.gen",
        "locale-gen en_US.UTF-8",
        "sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen",
    }
)
_EXPORT = re.compile(r"^export ([A-Za-z_][A-Za-z0-9_]*)=(\S*)$")
_LOCALE_VARS = frozenset({"LANG", "LC_ALL", "LANGUAGE", "LC_CTYPE", "LC_MESSAGES"})
#: An entry of the conda list, as pip can install here what conda installs:
#: - a bare name on a Python conda no longer builds for: its last build there (defaults'
#:   Cython for 3.6 is 0.29.x; PyPI's Cython 3 still ships 3.6 wheels, and scikit-learn
#:   0.20-0.22's .pyx do not compile with it);
#: - a pin conda built for a Python PyPI has no wheel of: the first patch release with
#:   one (scikit-learn 1.3-1.6 on 3.9: numpy 1.19.3, scipy 1.5.4; 1.19.2 and 1.5.2 would
#:   build from source, scipy with a Fortran compiler and a BLAS).
CONDA_AS_PIP = {
    "3.6": {"cython": "cython<3"},
    "3.9": {"numpy==1.19.2": "numpy==1.19.3", "scipy==1.5.2": "scipy==1.5.4"},
}
_PINNED = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==|<=|>=|~=|!=|<|>)")
_APT = re.compile(r"apt-get (?:-y )?install (?:-y )?(.*)$")


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
    #: What aexec does in place of SWE-bench's setup (the run's locale), for provenance.
    note: str | None = None


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


def from_spec(
    repo: str,
    spec: Mapping[str, Any],
    requirements_file: str = "requirements.txt",
    *,
    pyproject: bool = True,
    version: str | None = None,
    environment_yml: str | None = None,
) -> EnvSpec:
    """The `EnvSpec` of one SWE-bench spec (see the module docstring); ``packages:
    requirements.txt`` means ``requirements_file`` (SWE-bench's path for the repo),
    ``packages: environment.yml`` the text ``environment_yml`` (`aexec._environments.conda`);
    ``pyproject``: the checkout has a ``pyproject.toml``; ``version``: the instance's (the
    repo's version where its checkout's git has no tag)."""
    system: list[str] = []
    python = spec.get("python")
    if not isinstance(python, str) or not python:
        return EnvSpec(_FALLBACK_PYTHON, system=("not a Python spec (no `python`)",))
    install = str(spec.get("install") or "")
    packages = [str(p) for p in spec.get("pip_packages") or ()]
    requirements: list[str] = []
    apt_listed: list[str] = []
    listed = spec.get("packages")
    if listed == "requirements.txt":
        requirements.append(requirements_file)
    elif listed == "environment.yml":
        conda = read_conda(environment_yml) if environment_yml is not None else None
        if conda is None:
            system.append("conda: no environment.yml in the checkout")
        else:  # SWE-bench's pip_packages are installed after it: their pins win
            pinned = {_name(p) for p in packages}
            packages = [*(p for p in conda.packages if _name(p) not in pinned), *packages]
            apt_listed += conda.apt
            system += conda.unsupported
    elif isinstance(listed, str) and listed.strip():
        reqs, bad = _conda_packages(listed)
        reqs = [CONDA_AS_PIP.get(python, {}).get(r.lower(), r) for r in reqs]
        packages = [*reqs, *packages]
        system += [f"conda: {b}" for b in bad]
    apt = [*apt_listed, *(str(a) for a in spec.get("apt-pkgs") or ())]
    edits: list[str] = []
    other: list[str] = []
    for command in map(str, spec.get("pre_install") or ()):
        kind, what = _pre_install(command, requirements)
        if kind == "edit":
            edits.append(command)
        elif kind == "apt":
            apt += [p for a in what.split() for p in (a, *RECOMMENDED.get(a, ()))]
        elif kind == "qhull":
            apt += QHULL_APT
        elif kind == "other":
            other.append(what)
    if other:
        system.append(other[0] + (f" (and {len(other) - 1} more commands)" if len(other) > 1 else ""))
    # SWE-bench installs the repo after pip_packages: a package an edit re-pins in the
    # setup files is the install's (sphinx 3.0-4.4: Jinja2==3.0.3, then setup.py's Jinja2<3.0).
    # An edit of pyproject.toml pins its [build-system] requires (astropy's setuptools==68.0.0):
    # the build's, not the environment's, whose pip_packages pin stays.
    repinned = {
        norm(n) for c in edits if parse(c).path != "pyproject.toml" for n in _PINNED.findall(_replacements(c))
    }
    packages = [p for p in packages if _name(p) not in repinned]
    if not any(_name(p) == "setuptools" for p in packages):
        packages.append(SETUPTOOLS)
    for command in map(str, spec.get("eval_commands") or ()):
        if command not in _LOCALE_SETUP and _export(command) is None:
            system.append(f"eval_commands runs {command[:120]!r} before the tests")
        elif (exported := _export(command)) is not None and not _utf8_locale(*exported):
            system.append(f"eval_commands sets {command[7:][:120]}, which aexec's runs do not carry")
    inplace = repo in C_EXTENSION_REPOS or bool(_IN_PLACE.search(install))
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
            edits=tuple(edits),
            inplace=inplace,
            build_isolation=pyproject and _NO_ISOLATION.search(install) is None,
            build_constraints=tuple(p for p in packages if _name(p) == "setuptools" and p != "setuptools")
            or (SETUPTOOLS,),
            repo_version=version if version and re.match(r"^\d+(\.\d+)*$", version) else None,
            apt=tuple(dict.fromkeys(a for a in apt if _left_out(a) is None)),
        )
    except RequestError as e:  # e.g. Python "3.5" is a version, but not one EnvSpec takes
        return EnvSpec(_FALLBACK_PYTHON, system=(f"unreadable spec: {e}",))


def _name(requirement: str) -> str:
    """A requirement's project name, normalised (``Jinja2<3.0`` -> ``jinja2``)."""
    return norm(re.split(r"[^A-Za-z0-9._-]", requirement)[0])


def _pre_install(command: str, requirements: list[str]) -> tuple[str, str]:
    """What one ``pre_install`` command is to aexec: ``edit`` (of a setup file the build
    reads), ``noop`` (tox.ini's ``-rA``, the locale setup), ``apt`` (its packages), or
    ``other`` (one line saying what it needs)."""
    if command in _LOCALE_SETUP:
        return "noop", "the run's locale is C.UTF-8"
    if _QHULL_DOWNLOAD.match(command.strip()):
        return "qhull", "Debian's Qhull 2020.2 (libqhull-dev)"
    apt = _APT.search(command)
    if apt is not None and command.startswith("apt-get"):
        return "apt", " ".join(w for w in apt.group(1).split() if not w.startswith("-"))
    try:
        edit = parse(command)
    except EditError:
        return "other", f"pre_install runs {command[:120]!r}"
    if edit.path in (*SETUP_FILES, *requirements):
        return "edit", command
    subst = edit.subst
    if edit.path == "tox.ini" and edit.guard is None and subst.replacement == subst.pattern + " -rA":
        return "noop", "pytest's -rA only changes its text report, which aexec does not read"
    return "other", f"pre_install edits {edit.path} ({command[:120]!r}), a file the build does not read"


def _left_out(package: str) -> str | None:
    """Why an apt package is left out of the environment (`TEX_LEFT_OUT`), or None."""
    return TEX_LEFT_OUT if package.startswith("texlive") or package in ("cm-super", "dvipng") else None


def _replacements(command: str) -> str:
    edit = parse(command)
    return " ".join(s.replacement for s in (edit.subst, edit.otherwise) if s is not None)


def _export(command: str) -> tuple[str, str] | None:
    m = _EXPORT.match(command.strip())
    return None if m is None else (m.group(1), m.group(2).strip("'\""))


def _utf8_locale(name: str, value: str) -> bool:
    """An exported variable aexec's ``C.UTF-8`` runs stand in for: a UTF-8 locale (or
    ``LANGUAGE=en_US:en``: C's messages are English), ``PYTHONIOENCODING=utf8``."""
    if name == "PYTHONIOENCODING":
        return value.lower().replace("-", "") == "utf8"
    if name == "LANGUAGE":
        return all(p.split("_")[0] in ("en", "C") for p in value.split(":"))
    return name in _LOCALE_VARS and value.lower().replace("-", "").endswith(".utf8")


def run_note(spec: Mapping[str, Any]) -> str | None:
    """What aexec runs in place of a spec's locale setup and exports, or None."""
    exported = [e for c in spec.get("eval_commands") or () if (e := _export(str(c))) is not None]
    if not exported:
        return None
    said = ", ".join(f"{n}={v}" for n, v in exported)
    return f"SWE-bench's eval_commands export {said}: aexec runs under LANG=LC_ALL=C.UTF-8 (UTF-8, as theirs)"


def build_notes(spec: Mapping[str, Any]) -> list[str]:
    """What aexec's environment has in place of SWE-bench's (apt packages left out, the
    libraries matplotlib's build links in place of its downloads), one line each."""
    notes: list[str] = []
    for command in map(str, spec.get("pre_install") or ()):
        kind, what = _pre_install(command, [])
        if kind == "apt":
            notes += [r for a in what.split() if (r := _left_out(a)) is not None]
        elif kind == "qhull":
            notes.append(
                "matplotlib is built against Debian's Qhull 2020.2 and FreeType, its ft2font a release"
                " wheel's (FreeType 2.6.1, as SWE-bench's build) where that has the checkout's sources"
                " (environment.inplace_note says which; with Debian's, text in image comparisons differs)"
            )
    return list(dict.fromkeys(notes))


@attrs.frozen
class Table:
    """SWE-bench's spec table, and where each repo keeps its ``requirements.txt``."""

    specs: Mapping[str, Mapping[str, Mapping[str, Any]]]
    requirements: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    #: Where each repo keeps its conda ``environment.yml`` (``MAP_REPO_TO_ENV_YML_PATHS``).
    environment_ymls: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)


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
    ymls = getattr(constants, "MAP_REPO_TO_ENV_YML_PATHS", {})
    return Table(
        constants.MAP_REPO_VERSION_TO_SPECS,
        {r: tuple(p) for r, p in paths.items()},
        {r: tuple(p) for r, p in ymls.items()},
    )


def read_text(checkout: str, path: str) -> str | None:
    """A checkout's file as text (`lookup`'s ``read``), or None."""
    try:
        with open(os.path.join(checkout, path), encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def repo_of(instance_id: str) -> str | None:
    """SWE-bench's ``owner/name`` of an instance id ``owner__name-1234``, or None."""
    m = re.match(r"^([^_/]+(?:_[^_/]+)*)__(.+)-\d+$", instance_id)
    return f"{m.group(1)}/{m.group(2)}" if m else None


def lookup(
    table: Table,
    repo: str,
    version: str,
    exists: Callable[[str], bool] = lambda _: True,
    read: Callable[[str], str | None] = lambda _: None,
) -> SpecEntry:
    """The (repo, version) entry; one not in the table is an unsupported environment.
    ``exists`` says whether the checkout has a path: SWE-bench reads the first of the
    repo's requirement paths that exists; ``read`` gives a path's text (None: absent),
    of the first of its ``environment.yml`` paths the checkout has."""
    spec = table.specs.get(repo, {}).get(version)
    if spec is None:
        env = EnvSpec(_FALLBACK_PYTHON, system=(f"SWE-bench has no spec for {repo} {version}",))
        return SpecEntry(repo, version, env, "")
    cmd = spec.get("test_cmd") or ""
    test_cmd = " && ".join(map(str, cmd)) if isinstance(cmd, list) else str(cmd)
    evals = tuple(str(c) for c in spec.get("eval_commands") or ())
    paths = table.requirements.get(repo, ("requirements.txt",))
    found = next((p for p in paths if exists(p)), paths[0] if paths else "requirements.txt")
    yml = next(
        (t for p in table.environment_ymls.get(repo, ("environment.yml",)) if (t := read(p)) is not None),
        None,
    )
    note = "; ".join(n for n in (run_note(spec), *build_notes(spec)) if n) or None
    if spec.get("packages") == "environment.yml" and yml is not None:
        note = "; ".join(n for n in (note, *read_conda(yml).left_out) if n) or None
    env = from_spec(
        repo, spec, found, pyproject=exists("pyproject.toml"), version=version, environment_yml=yml
    )
    return SpecEntry(repo, version, env, test_cmd, evals, note)
