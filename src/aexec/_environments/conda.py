"""A conda ``environment.yml`` read as data: pip requirements, Debian packages, and what
cannot be had (pure; SWE-bench's xarray and matplotlib specs).

Each dependency is looked up in the tables below, never guessed: a name PyPI has
(`SAME`, or under another name: `RENAMED`) becomes a pip requirement with conda's pin
translated (`pin`) and its extras kept (``nbconvert[execute]``); a C library PyPI's
wheels carry, or conda's own tooling, is nothing to install (`PROVIDED`); a program
Debian has becomes one of the environment's ``apt`` packages (`APT`); a package neither
PyPI nor Debian has is left out with its reason where the tests that use it skip without
it (`ABSENT`), and so is a GUI toolkit PyPI has no Linux wheel of (`GUI`). Any other
name is ``unsupported``, naming it. The ``pip:`` list is read as pip requirements.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import yaml

__all__ = ["ABSENT", "APT", "GUI", "PROVIDED", "RENAMED", "SAME", "CondaEnv", "pin", "read"]

#: conda-forge names PyPI has under the same name (case and ``_``/``-`` aside).
SAME = frozenset(
    [
        "aiobotocore",
        "array-api-strict",
        "black",
        "boto3",
        "bottleneck",
        "cairocffi",
        "cartopy",
        "cfgrib",
        "cftime",
        "colorspacious",
        "colour-science",
        "contourpy",
        "coverage",
        "cycler",
        "dask",
        "dask-expr",
        "distributed",
        "flox",
        "flake8",
        "flake8-docstrings",
        "fonttools",
        "fsspec",
        "h5netcdf",
        "h5py",
        "hypothesis",
        "importlib-resources",
        "importlib_metadata",
        "ipykernel",
        "ipython",
        "ipywidgets",
        "joblib",
        "kiwisolver",
        "lxml",
        "meson-python",
        "mypy",
        "nbconvert",
        "nbformat",
        "nc-time-axis",
        "ninja",
        "netcdf4",
        "numba",
        "numbagg",
        "numexpr",
        "numpy",
        "numpydoc",
        "opt_einsum",
        "packaging",
        "pandas",
        "pandas-stubs",
        "pikepdf",
        "pillow",
        "pint",
        "pooch",
        "pre-commit",
        "psutil",
        "pseudonetcdf",
        "pyarrow",
        "pybind11",
        "pydap",
        "pydata-sphinx-theme",
        "pydocstyle",
        "pystemmer",
        "pyparsing",
        "pytest",
        "pytest-asyncio",
        "pytest-cov",
        "pytest-env",
        "pytest-github-actions-annotate-failures",
        "pytest-playwright",
        "pytest-mypy-plugins",
        "pytest-rerunfailures",
        "pytest-timeout",
        "pytest-xdist",
        "python-dateutil",
        "pytz",
        "pyyaml",
        "rasterio",
        "ruff",
        "scipy",
        "seaborn",
        "setuptools",
        "setuptools_scm",
        "six",
        "sparse",
        "sphinx",
        "sphinx-copybutton",
        "sphinx-design",
        "sphinx-gallery",
        "sphinx-tags",
        "toolz",
        "tox",
        "tornado",
        "typing_extensions",
        "zarr",
        "types-colorama",
        "types-docutils",
        "types-psutil",
        "types-pygments",
        "types-python-dateutil",
        "types-pytz",
        "types-pyyaml",
        "types-requests",
        "types-setuptools",
    ]
)
#: conda-forge name -> PyPI's.
RENAMED = {
    "dask-core": "dask",
    "matplotlib-base": "matplotlib",
    "iris": "scitools-iris",
    "pytables": "tables",
    "pyqt": "PyQt5",
    "python-graphviz": "graphviz",
    "msgpack-python": "msgpack",
}
#: conda-forge names nothing need be installed for, and why.
PROVIDED = {
    "python": "the spec's Python",
    "pip": "uv installs the environment",
    "hdf5": "a C library h5py's and netCDF4's wheels carry",
    "libnetcdf": "a C library netCDF4's wheels carry",
    "c-compiler": "the machine's compiler",
    "cxx-compiler": "the machine's compiler",
}
#: conda-forge name -> the Debian packages that are it.
APT = {
    "graphviz": ("graphviz",),
    "pkg-config": ("pkg-config",),
    "ffmpeg": ("ffmpeg",),
    "imagemagick": ("imagemagick",),
    "ghostscript": ("ghostscript",),
}
#: conda-forge names neither PyPI nor Debian has, left out: the tests that import them skip.
ABSENT = {
    "cdms2": "conda-forge only (no PyPI release): xarray's tests that need it skip "
    "(an expected one is then unresolved)",
}
#: conda-forge's GUI toolkits, left out: PyPI has no Linux wheel of them (sdists that build
#: against GTK's or wxWidgets' development files); matplotlib's tests of their backends
#: skip without them (and without a display, as in SWE-bench's image).
GUI = {
    "pygobject": "no Linux wheel on PyPI: matplotlib's GTK backends' tests skip",
    "gtk4": "conda-forge's GTK 4: matplotlib's GTK 4 backends' tests skip",
    "wxpython": "no Linux wheel on PyPI: matplotlib's wx backends' tests skip",
}
_ENTRY = re.compile(r"^(?:[\w.-]+::)?([A-Za-z0-9_][A-Za-z0-9._-]*)(\[[A-Za-z0-9_,.-]+\])?\s*(.*)$")
_PEP440_OP = re.compile(r"^(==|>=|<=|!=|~=|<|>)")
_PIP_REQ = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?\s*([<>=!~][^;#]*)?$")


@attrs.frozen
class CondaEnv:
    """An ``environment.yml`` as aexec builds it."""

    #: pip requirements (conda's pins translated, then the ``pip:`` list).
    packages: tuple[str, ...] = ()
    #: Debian packages (`APT`).
    apt: tuple[str, ...] = ()
    #: One line each: what cannot be had (the environment is ``unsupported``).
    unsupported: tuple[str, ...] = ()
    #: One line each: what is left out (`ABSENT`), for the instance's note.
    left_out: tuple[str, ...] = ()


def key(name: str) -> str:
    """A name as the tables hold it: lower case, ``_`` and ``.`` as ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


_SAME = frozenset(map(key, SAME))
_RENAMED = {key(k): v for k, v in RENAMED.items()}


def pin(constraint: str) -> str | None:
    """conda's version constraint as pip's (``=1.2`` is ``==1.2.*``, ``1.2`` too; ``>=``,
    ``<``, ``!=``, ``==`` as they are; ``,`` joins; a build string is dropped); None for
    what pip cannot say (``|``)."""
    constraint = constraint.strip()
    if not constraint:
        return ""
    if "|" in constraint:
        return None
    out = []
    for part in constraint.replace(" ", "").split(","):
        if _PEP440_OP.match(part):
            out.append(part)
            continue
        version = part[1:] if part.startswith("=") else part
        version = version.split("=")[0]  # ``=1.2=py_0``: the build string
        out.append(f"=={version}" if version.endswith("*") else f"=={version}.*")
    return ",".join(out)


def _conda(item: str, env: dict[str, list[str]]) -> None:
    m = _ENTRY.match(item.strip())
    name, extras, spec = (m.group(1), m.group(2) or "", m.group(3)) if m else (item, "", "")
    k = key(name)
    if m is None or (translated := pin(spec)) is None:
        env["unsupported"].append(f"conda: {item} (not a constraint pip can say)")
    elif k in PROVIDED:
        return
    elif k in APT:
        env["apt"] += APT[k]
    elif k in ABSENT or k in GUI:
        env["left_out"].append(f"conda's {name}: {ABSENT.get(k) or GUI[k]}")
    elif k in _SAME or k in _RENAMED:
        env["packages"].append(_RENAMED.get(k, name) + extras + translated)
    else:
        env["unsupported"].append(f"conda: {name} (in no table of PyPI or Debian names)")


def read(text: str) -> CondaEnv:
    """An ``environment.yml``'s ``dependencies`` (see the module docstring)."""
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return CondaEnv(unsupported=(f"environment.yml is not YAML: {str(e).splitlines()[0]}",))
    deps = data.get("dependencies") if isinstance(data, dict) else None
    env: dict[str, list[str]] = {"packages": [], "apt": [], "unsupported": [], "left_out": []}
    for dep in deps if isinstance(deps, list) else []:
        if isinstance(dep, str):
            _conda(dep, env)
        elif isinstance(dep, dict) and isinstance(dep.get("pip"), list):
            for req in map(str, dep["pip"]):
                if _PIP_REQ.match(req.strip()):
                    env["packages"].append(req.strip())
                else:
                    env["unsupported"].append(f"environment.yml's pip: {req} (not a requirement by name)")
        else:
            env["unsupported"].append(f"environment.yml: {dep!r} (not a package)")
    return CondaEnv(**{k: tuple(dict.fromkeys(v)) for k, v in env.items()})
