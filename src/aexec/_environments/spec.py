"""The declared environment of a request (`EnvSpec`): what to build, never how. Pure.

A ``run_suite`` request (or an ``aexec swebench`` instance) may carry ``environment``
instead of ``python``::

    {"python": "3.11", "requirements": ["requirements/test.txt"], "packages": ["numpy==1.26.4"],
     "extras": ["test"], "install": "deps", "exclude_newer": "2024-03-01T00:00:00Z"}

``install`` says what becomes of the repo itself: ``deps`` (the default) installs the
dependencies its ``pyproject.toml`` / ``setup.py`` / ``setup.cfg`` declare (with
``extras``) but never the repo, ``none`` installs only ``requirements`` and ``packages``.
The code under test is always the candidate's patched scratch copy, first on
``sys.path``. ``edits`` are ``sed -i 's/A/B/' setup.py`` edits (`aexec._environments.edits`,
read as data, never run) of the setup files the build reads: they change the pins it
resolves (and its key), never the candidate's copy. ``build_isolation: false`` builds
the repo's metadata in the environment after its packages (pip's ``--no-build-isolation``);
``build_constraints`` hold the isolated builds' requirements (``setuptools<81``);
``repo_version`` is the repo's version where its checkout's git has no tag. ``apt`` names
Debian packages unpacked into the environment's own prefix
(`aexec._environments.system`), never the host's. ``setup_commit`` (SWE-bench's
``environment_setup_commit``): the ``requirements`` files are read as that commit of the
checkout's git has them (`aexec._environments.commits`), not as its work tree does.
``system`` names what the environment cannot give (``conda: …``): such a spec is
``env_broken``, kind ``unsupported``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from .._errors import RequestError
from .edits import EditError, parse

__all__ = ["INSTALL_MODES", "MIN_PYTHON", "EnvBroken", "EnvSpec", "from_json", "pick_interpreter"]

INSTALL_MODES = ("deps", "none")
#: The oldest Python aexec's driver runs on (the package ``aexec/_driver/``).
MIN_PYTHON = (3, 6)
#: The files of a repo whose content decides its dependencies (with ``requirements``).
SETUP_FILES = ("pyproject.toml", "setup.py", "setup.cfg")

_VERSION = re.compile(r"^3\.\d{1,2}(\.\d{1,2})?$|^2\.7(\.\d{1,2})?$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$")
_RELEASE = re.compile(r"^\d+(\.\d+)*$")
_EXTRA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: Debian packages that do not work unpacked outside ``/`` (`aexec._environments.system`),
#: and why: the environment that names one is ``unsupported``.
NOT_RELOCATABLE = {
    "libenchant-2-dev": "Debian's libenchant-2 is built without relocation (its"
    " enchant_set_prefix_dir does nothing; no variable names a provider directory): it loads"
    " its spelling providers from /usr/lib/x86_64-linux-gnu/enchant-2 alone, which the host"
    " lacks and the run's view (read-only binds of the host's system directories) has no"
    " mount point for",
}
#: A Debian package's name (Policy 5.6.1): never an option to apt.
_DEB_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_FIELDS = (
    "python",
    "requirements",
    "packages",
    "extras",
    "install",
    "exclude_newer",
    "edits",
    "system",
    "inplace",
    "build_isolation",
    "build_constraints",
    "repo_version",
    "apt",
    "setup_commit",
)
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


class EnvBroken(Exception):
    """The declared environment cannot be had: ``unsupported`` here, or its ``build`` failed."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def _strings(name: str) -> Any:
    def check(_: object, __: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item.strip() or "\n" in item or "\0" in item:
                raise RequestError(f"environment.{name}[{i}] must be a non-empty one-line string")

    return check


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list | tuple) else value


def _check(spec: EnvSpec) -> None:
    if not isinstance(spec.python, str) or not _VERSION.match(spec.python):
        raise RequestError(
            f"environment.python must be a version like '3.11' or '3.11.7', got {spec.python!r}"
        )
    for name in ("requirements", "packages", "extras", "edits", "system", "build_constraints", "apt"):
        if not isinstance(getattr(spec, name), tuple):
            raise RequestError(f"environment.{name} must be a list of strings")
    for i, path in enumerate(spec.requirements):
        parts = path.replace("\\", "/").split("/")
        if path.startswith("/") or ".." in parts:
            raise RequestError(f"environment.requirements[{i}] must be a path inside the repo, got {path!r}")
    for i, extra in enumerate(spec.extras):
        if not _EXTRA.match(extra):
            raise RequestError(f"environment.extras[{i}] is not an extra's name: {extra!r}")
    for i, name in enumerate(spec.apt):
        if not _DEB_NAME.match(name):
            raise RequestError(f"environment.apt[{i}] is not a Debian package's name: {name!r}")
    for i, command in enumerate(spec.edits):
        try:
            path = parse(command).path
        except EditError as e:
            raise RequestError(f"environment.edits[{i}]: {e}") from None
        if path not in (*SETUP_FILES, *spec.requirements):
            raise RequestError(
                f"environment.edits[{i}] edits {path!r}: only the setup files the build reads"
                f" ({', '.join(SETUP_FILES)}, the requirements files) are edited"
            )
    for name in ("inplace", "build_isolation"):
        if not isinstance(getattr(spec, name), bool):
            raise RequestError(f"environment.{name} must be true or false, got {getattr(spec, name)!r}")
    if spec.repo_version is not None and not (
        isinstance(spec.repo_version, str) and _RELEASE.match(spec.repo_version)
    ):
        raise RequestError(
            f"environment.repo_version must be a version like '5.1', got {spec.repo_version!r}"
        )
    if spec.setup_commit is not None and not (
        isinstance(spec.setup_commit, str) and _COMMIT.match(spec.setup_commit)
    ):
        raise RequestError(
            f"environment.setup_commit must be a git commit's hex id, got {spec.setup_commit!r}"
        )
    if spec.install not in INSTALL_MODES:
        raise RequestError(
            f"environment.install must be one of {', '.join(INSTALL_MODES)}, got {spec.install!r}"
        )
    if spec.exclude_newer is not None and not (
        isinstance(spec.exclude_newer, str)
        and (spec.exclude_newer == "base" or _DATE.match(spec.exclude_newer))
    ):
        raise RequestError(
            f"environment.exclude_newer must be a date (RFC 3339) or 'base', got {spec.exclude_newer!r}"
        )


@attrs.frozen
class EnvSpec:
    """A declared environment (see the module docstring); checked as it is made."""

    python: str
    requirements: tuple[str, ...] = attrs.field(
        default=(), converter=_tuple, validator=_strings("requirements")
    )
    packages: tuple[str, ...] = attrs.field(default=(), converter=_tuple, validator=_strings("packages"))
    extras: tuple[str, ...] = attrs.field(default=(), converter=_tuple, validator=_strings("extras"))
    install: str = "deps"
    #: Resolve as of this date (RFC 3339), or ``base``: the repo's HEAD commit time.
    exclude_newer: str | None = None
    #: What it needs that cannot be had (``conda: cdms2``): unsupported here.
    system: tuple[str, ...] = attrs.field(default=(), converter=_tuple, validator=_strings("system"))
    #: ``sed -i`` edits of the setup files, made before resolving (`aexec._environments.edits`).
    edits: tuple[str, ...] = attrs.field(default=(), converter=_tuple, validator=_strings("edits"))
    #: The repo builds C extensions in place (``setup.py build_ext --inplace``): built once
    #: per base and carried into each candidate's copy (``aexec._environments.inplace``).
    inplace: bool = False
    #: False: the repo's own metadata is built in the environment, after its packages
    #: (pip's ``--no-build-isolation``), not in an isolated build environment.
    build_isolation: bool = True
    #: What the isolated builds' own requirements are held to (``uv --build-constraints``).
    build_constraints: tuple[str, ...] = attrs.field(
        default=(), converter=_tuple, validator=_strings("build_constraints")
    )
    #: The repo's version where its checkout's ``PKG-INFO`` and git tags give none
    #: (``aexec._environments.versions``): SWE-bench's ``version`` of the instance.
    repo_version: str | None = None
    #: Debian packages unpacked into the environment's prefix (with what apt says they
    #: need and the host lacks), on the run's PATH and LD_LIBRARY_PATH.
    apt: tuple[str, ...] = attrs.field(default=(), converter=_tuple, validator=_strings("apt"))
    #: The commit of the repo's git whose ``requirements`` files the build reads.
    setup_commit: str | None = None

    def __attrs_post_init__(self) -> None:
        _check(self)

    def as_json(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "requirements": list(self.requirements),
            "packages": list(self.packages),
            "extras": list(self.extras),
            "install": self.install,
            "exclude_newer": self.exclude_newer,
            **({"edits": list(self.edits)} if self.edits else {}),
            "system": list(self.system),
            **({"inplace": True} if self.inplace else {}),
            **({"build_isolation": False} if not self.build_isolation else {}),
            **({"build_constraints": list(self.build_constraints)} if self.build_constraints else {}),
            **({"repo_version": self.repo_version} if self.repo_version else {}),
            **({"apt": list(self.apt)} if self.apt else {}),
            **({"setup_commit": self.setup_commit} if self.setup_commit else {}),
        }

    def unsupported(self) -> str | None:
        """Why no interpreter-independent reading of the spec can be built here, or None."""
        if self.system:
            return f"needs more than pip: {'; '.join(self.system)}"
        fixed = [f"apt's {p}: {NOT_RELOCATABLE[p]}" for p in self.apt if p in NOT_RELOCATABLE]
        if fixed:
            return fixed[0]
        if version_tuple(self.python)[:2] < MIN_PYTHON:
            return (
                f"Python {self.python}: aexec's driver runs on Python"
                f" {'.'.join(map(str, MIN_PYTHON))} or later"
            )
        return None


def from_json(data: Any) -> EnvSpec:
    """A request's ``environment`` object → `EnvSpec`; `RequestError` naming the field."""
    if isinstance(data, EnvSpec):
        return data
    if not isinstance(data, Mapping):
        raise RequestError(f"environment must be an object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise RequestError(f"environment: unknown field {unknown[0]!r} (expected {', '.join(_FIELDS)})")
    if "python" not in data:
        raise RequestError("environment: missing `python` (a version like '3.11')")
    fields = {k: v for k, v in data.items() if v is not None}
    for name in ("requirements", "packages", "extras", "edits", "system", "build_constraints", "apt"):
        if name in fields and not isinstance(fields[name], list):
            raise RequestError(f"environment.{name} must be a list of strings")
    return EnvSpec(**fields)


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def pick_interpreter(version: str, found: Mapping[str, str]) -> str | None:
    """The path, among ``found`` (full version → interpreter), that ``version`` names: the
    same full version, or the newest patch release of ``X.Y``; None if there is none."""
    want = version_tuple(version)
    matches = sorted(
        (version_tuple(v), path) for v, path in found.items() if version_tuple(v)[: len(want)] == want
    )
    return matches[-1][1] if matches else None
