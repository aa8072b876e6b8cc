"""A conda ``environment.yml`` read as data (issue 43): each table entry checked against
the registry it names, conda's pins as pip's, an unknown name ``unsupported`` with its
name, and a spec mapped to PyPI built for real.

The entries' checks ask PyPI (one ``uv pip compile --no-deps`` of every name) and apt
(one ``apt-get -s install``); each is skipped, saying why, where that cannot be reached.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aexec._environments import conda
from aexec._environments.build import uv_binary
from aexec._environments.swebench import Table, lookup, read_text

from .conftest import MakeRepo, built_or_skip

SYSTEM = f"{sys.version_info.major}.{sys.version_info.minor}"
PYPI_NAMES = sorted({*conda.SAME, *conda.RENAMED.values()})


@pytest.fixture(scope="module")
def on_pypi(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The names (normalised) PyPI resolves for Python 3.10 (or the tests skipped)."""
    reqs = tmp_path_factory.mktemp("pypi") / "names.in"
    reqs.write_text("\n".join(PYPI_NAMES) + "\n")
    done = subprocess.run(
        [uv_binary(), "pip", "compile", "--no-deps", "--python-version", "3.10", "-q", str(reqs)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"PyPI cannot be asked: {done.stderr.strip()[-300:]}")
    return {conda.key(ln.split("==")[0]) for ln in done.stdout.splitlines() if "==" in ln}


@pytest.mark.parametrize("name", sorted(conda.SAME) + sorted(conda.RENAMED))
def test_each_pypi_entry_is_on_pypi(name: str, on_pypi: set[str]) -> None:
    assert conda.key(conda.RENAMED.get(name, name)) in on_pypi


@pytest.mark.parametrize("name", sorted(conda.APT))
def test_each_apt_entry_is_a_debian_package(name: str) -> None:
    if shutil.which("apt-cache") is None:
        pytest.skip("no apt on this machine")
    for package in conda.APT[name]:
        shown = subprocess.run(["apt-cache", "show", package], capture_output=True, text=True, check=False)
        assert f"Package: {package}" in shown.stdout
    assert conda.read(f"dependencies: [{name}]") == conda.CondaEnv(apt=conda.APT[name])


@pytest.mark.parametrize("name", sorted(conda.PROVIDED) + sorted(conda.ABSENT) + sorted(conda.GUI))
def test_each_entry_installed_by_nothing_installs_nothing(name: str) -> None:
    got = conda.read(f"dependencies: [{name}]")
    assert got.packages == got.apt == got.unsupported == ()
    assert bool(got.left_out) == (name in conda.ABSENT or name in conda.GUI)


def test_each_absent_entry_is_not_on_pypi(tmp_path: Path) -> None:
    for name in conda.ABSENT:
        done = subprocess.run(
            [uv_binary(), "pip", "compile", "--no-deps", "-q", "-"],
            input=name,
            capture_output=True,
            text=True,
            check=False,
        )
        if "not found in the package registry" not in done.stderr and done.returncode == 0:
            pytest.fail(f"{name} is on PyPI now: map it")
        if done.returncode != 0 and not re.search(r"not found|No solution", done.stderr):
            pytest.skip(f"PyPI cannot be asked: {done.stderr.strip()[-200:]}")


@pytest.mark.parametrize(
    ("conda_pin", "pip_pin"),
    [
        ("numpy", "numpy"),
        ("numpy=1.2", "numpy==1.2.*"),
        ("pip=20.2", ""),  # conda's tooling: nothing
        ("h5py=2", "h5py==2.*"),
        ("pytest==7.4.*", "pytest==7.4.*"),
        ("numpy>=1.20,<1.24", "numpy>=1.20,<1.24"),
        ("fsspec!=2021.7.0", "fsspec!=2021.7.0"),
        ("dask-core<2021.02.0", "dask<2021.02.0"),
        ("scipy 1.5.*", "scipy==1.5.*"),
        ("scipy=1.5.2=py39_0", "scipy==1.5.2.*"),
        ("conda-forge::pandas<2", "pandas<2"),
        ("nbconvert[execute]!=6.0.0,!=6.0.1", "nbconvert[execute]!=6.0.0,!=6.0.1"),
    ],
)
def test_condas_pins_are_pips(conda_pin: str, pip_pin: str) -> None:
    got = conda.read(f"dependencies: ['{conda_pin}']")
    assert got.packages == ((pip_pin,) if pip_pin else ()) and got.unsupported == ()


def test_an_unknown_or_unsayable_entry_is_unsupported_by_name() -> None:
    got = conda.read(
        "dependencies:\n  - numpy\n  - gdal-conda-only>=3\n  - pip:\n    - git+https://x/y.git\n"
    )
    assert got.packages == ("numpy",)
    assert got.unsupported == (
        "conda: gdal-conda-only (in no table of PyPI or Debian names)",
        "environment.yml's pip: git+https://x/y.git (not a requirement by name)",
    )
    assert conda.read("dependencies: ['numpy 1.2|1.3']").unsupported[0].startswith("conda: numpy 1.2|1.3")
    assert "not YAML" in conda.read("dependencies: [").unsupported[0]


def test_xarrays_environment_yml_as_swebench_reads_it(make_repo: MakeRepo) -> None:
    """xarray's ``ci/requirements/environment.yml`` (2022; cut): SWE-bench's pip_packages
    pins win over its names; cdms2 left out, said in the note."""
    yml = (
        "name: xarray-tests\nchannels: [conda-forge, nodefaults]\ndependencies:\n"
        "  - cdms2\n  - dask-core\n  - hdf5\n  - iris\n  - numpy\n  - pandas\n  - pip\n"
        "  - pip:\n      - numbagg\n"
    )
    repo = make_repo({"ci/requirements/environment.yml": yml})
    spec = {"python": "3.10", "packages": "environment.yml", "install": "python -m pip install -e .",
            "pip_packages": ["numpy==1.23.0", "dask==2022.8.1"]}  # fmt: skip
    table = Table(
        {"pydata/xarray": {"2022.06": spec}}, {}, {"pydata/xarray": ("ci/requirements/environment.yml",)}
    )
    entry = lookup(table, "pydata/xarray", "2022.06", read=functools.partial(read_text, str(repo)))
    env = entry.environment
    assert env.unsupported() is None and env.apt == ()
    assert env.packages == (
        "scitools-iris",
        "pandas",
        "numbagg",
        "numpy==1.23.0",
        "dask==2022.8.1",
        "setuptools<81",
    )
    assert entry.note is not None and "cdms2" in entry.note


def test_matplotlibs_environment_yml_as_swebench_reads_it(make_repo: MakeRepo) -> None:
    """matplotlib 3.7.1's ``environment.yml`` (cut): its GUI toolkits left out, said in the
    note with what stands for SWE-bench's TeX Live and Qhull download (issue 43)."""
    yml = (
        "name: mpl-dev\nchannels: [conda-forge]\ndependencies:\n  - cairocffi\n  - numpy>=1.20\n"
        "  - pygobject\n  - pyqt\n  - wxpython\n  - colorspacious\n  - graphviz\n  - sphinx-design\n"
        "  - pip\n  - pip:\n      - pikepdf\n  - flake8>=3.8\n  - gtk4\n"
        "  - nbconvert[execute]!=6.0.0,!=6.0.1\n  - pytest-xdist\n"
    )
    repo = make_repo({"environment.yml": yml, "setupext.py": "MPLSETUPCFG\n"})
    qhull = ['QHULL_TAR="/tmp/qhull-2020-src-8.0.2.tgz"', 'wget -O "$QHULL_TAR" "$QHULL_URL"']
    spec = {"python": "3.11", "packages": "environment.yml", "install": "python -m pip install -e .",
            "pre_install": ["apt-get install -y imagemagick texlive cm-super", *qhull],
            "pip_packages": ["numpy==1.25.2", "setuptools==68.1.2"]}  # fmt: skip
    table = Table(
        {"matplotlib/matplotlib": {"3.7": spec}}, {}, {"matplotlib/matplotlib": ("environment.yml",)}
    )
    entry = lookup(table, "matplotlib/matplotlib", "3.7", read=functools.partial(read_text, str(repo)))
    env = entry.environment
    assert env.unsupported() is None and env.inplace
    assert env.apt == (
        "graphviz",
        "imagemagick",
        "ghostscript",
        "libqhull-dev",
        "libfreetype-dev",
        "pkg-config",
    )
    assert env.packages == (
        "cairocffi",
        "PyQt5",
        "colorspacious",
        "sphinx-design",
        "pikepdf",
        "flake8>=3.8",
        "nbconvert[execute]!=6.0.0,!=6.0.1",
        "pytest-xdist",
        "numpy==1.25.2",
        "setuptools==68.1.2",
    )
    note = entry.note or ""
    assert all(w in note for w in ("pygobject", "wxpython", "gtk4", "TeX Live", "FreeType 2.6.1"))


def test_a_conda_spec_mapped_to_pypi_builds(make_repo: MakeRepo, tmp_path: Path) -> None:
    yml = "dependencies:\n  - python=3.11\n  - pip\n  - six=1.16\n  - pip:\n      - toolz==0.12.0\n"
    repo = make_repo({"environment.yml": yml})
    spec = {"python": SYSTEM, "packages": "environment.yml", "install": ""}
    table = Table({"o/r": {"1.0": spec}})
    env = lookup(table, "o/r", "1.0", read=functools.partial(read_text, str(repo))).environment
    assert env.packages == ("six==1.16.*", "toolz==0.12.0", "setuptools<81")
    built = built_or_skip(env, str(repo), str(tmp_path / "envs"))
    lock = (Path(built.path) / "aexec-lock.txt").read_text()
    assert "six==1.16.0" in lock and "toolz==0.12.0" in lock
    done = subprocess.run(
        [built.python, "-c", "import six, toolz; print(six.__version__)"], capture_output=True, text=True
    )
    assert done.stdout.strip() == "1.16.0"
