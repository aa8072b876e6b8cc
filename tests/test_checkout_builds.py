"""Environments built from git checkouts, as SWE-bench's image builds them (issue 39,
defect 3). A checkout is not an sdist: no ``PKG-INFO``, versions from git; a spec
whose install says ``--no-build-isolation`` is built after its packages; an isolated
build's setuptools has ``pkg_resources``, as in SWE-bench's era.

Real uv, real builds: the real pytest-5840 checkout of ``../shared/swebench-dev`` (beside
the repo's root, as CI has it), and small git repos that reproduce each failure mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import attrs
import pytest

from aexec._environments import versions
from aexec._environments.build import ensure
from aexec._environments.spec import EnvBroken
from aexec._environments.swebench import Table, from_spec, lookup

from .conftest import MakeRepo
from .test_built_envs import SYSTEM, index  # noqa: F401 (a fixture)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "swebench-dev"
PYTEST_5840 = "pytest-dev__pytest-5840"
PEP517 = (
    '[build-system]\nrequires = ["setuptools", "wheel"]\n'  # the legacy backend: setup.py's dir on sys.path
)


def git(repo: Path, *args: str) -> str:
    argv = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def checkout(make_repo: MakeRepo, files: dict[str, str]) -> Path:
    """A git checkout of ``files``: one commit, no tags (as ``../shared/swebench-dev``'s)."""
    repo = make_repo(files)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return repo


def lock_of(path: str) -> dict[str, str]:
    lines = (Path(path) / "aexec-lock.txt").read_text().splitlines()
    return dict(line.split("==", 1) for line in lines if "==" in line)


@pytest.fixture(scope="module")
def pytest_5840(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """The real pytest-5840 checkout (setuptools-scm, no tags, no PKG-INFO), and its row."""
    archive = SHARED / f"{PYTEST_5840}.tar.xz"
    if not archive.is_file():
        pytest.skip(f"no {archive}: the five SWE-bench instances sit beside the repo (../shared)")
    where = tmp_path_factory.mktemp("checkout")
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="tar")
    rows = (json.loads(line) for line in (SHARED / "instances.jsonl").read_text().splitlines())
    return where / PYTEST_5840, next(r for r in rows if r["instance_id"] == PYTEST_5840)


def test_a_setuptools_scm_checkout_builds_from_swebench_s_spec(
    pytest_5840: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    """pytest 5.1 takes its version from git: the build's copy (no ``.git``, no ``PKG-INFO``)
    was ``setuptools-scm was unable to detect version``. Now told git's version, it builds
    with the spec's pins and the repo's own ``install_requires``, and keeps the version
    module setuptools-scm writes (``write_to``), which the checkout lacks."""
    from aexec._environments.swebench import load_table, lookup

    pytest.importorskip("swebench")
    repo, row = pytest_5840
    entry = lookup(load_table(), str(row["repo"]), str(row["version"]), lambda p: (repo / p).is_file())
    assert not (repo / "PKG-INFO").exists() and "use_scm_version" in (repo / "setup.py").read_text()
    built = ensure(entry.environment, str(repo), str(tmp_path / "envs"))
    lock = lock_of(built.path)
    assert lock["attrs"] == "23.1.0" and lock["pluggy"] == "0.13.1"  # the spec's pip_packages
    assert "atomicwrites" in lock and "more-itertools" in lock  # setup.py's install_requires
    assert int(lock["setuptools"].split(".")[0]) < 81
    # No tag in the checkout: the instance's version (tox.ini's minversion = 2.0 must hold).
    made = dict(built.generated)
    assert list(made) == ["src/_pytest/_version.py"] and "version = '5.1'" in made["src/_pytest/_version.py"]


@pytest.mark.slow
def test_the_gold_patch_of_a_setuptools_scm_checkout_resolves(
    pytest_5840: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    """``aexec swebench --specs swebench`` on the row and its checkout: the environment builds
    and gold's FAIL_TO_PASS pass (the tests import ``_pytest._version``, which only the build
    writes); the empty patch is not resolved. (Gold is resolved only once the repo is
    installed: ``test_conftest_global_import`` runs ``python`` in a subprocess, which imports
    the installed pytest, not the checkout's: issue 39's defect 5.)"""
    pytest.importorskip("swebench")
    repo, row = pytest_5840
    instances, report = tmp_path / "instances.json", tmp_path / "report.json"
    instances.write_text(json.dumps([{**row, "repo": str(repo), "repo_name": row["repo"]}]))
    for name, patch in (("gold", row["patch"]), ("empty", "")):
        preds = tmp_path / f"{name}.json"
        preds.write_text(
            json.dumps([{"instance_id": PYTEST_5840, "model_name_or_path": name, "model_patch": patch}])
        )
        argv = [sys.executable, "-m", "aexec", "swebench", str(preds), str(instances), "-o", str(report)]
        argv += ["--specs", "swebench", "--no-cache"]
        env = {**os.environ, "AEXEC_ENV_DIR": str(tmp_path / "envs")}
        done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        got = json.loads(report.read_text())
        detail = got["instances"][PYTEST_5840]
        assert PYTEST_5840 not in got["resolved_ids"] or name == "gold"
        if name == "gold":
            assert not detail["flags"]["env_broken"] and detail["error"] is None, detail["error"]
            f2p = detail["tests_status"]["FAIL_TO_PASS"]
            assert not f2p["failure"] and len(f2p["success"]) == 2, detail["failure"]


def test_the_version_is_what_setuptools_scm_makes_of_the_checkout_s_git(
    pytest_5840: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    """No tag (the dev set's checkouts): the instance's version if given, else setuptools-scm's
    own ``0.1.devN+gHASH``; a tag at HEAD: the tag; commits after it: the next release's
    ``.devN`` (SWE-bench's clone, with its tags)."""
    repo, _ = pytest_5840
    sha = git(repo, "rev-parse", "--short", "HEAD")
    assert versions.scm_env(str(repo)) == {"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PYTEST": f"0.1.dev1+g{sha}"}
    assert versions.version(str(repo), "5.1") == "5.1"
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    git(clone, "tag", "5.1.2")
    assert versions.version(str(clone), "5.1") == "5.1.2"
    git(clone, "commit", "-q", "--allow-empty", "-m", "after")
    assert versions.version(str(clone)) == f"5.1.3.dev1+g{git(clone, 'rev-parse', '--short', 'HEAD')}"


@pytest.mark.usefixtures("index")
def test_a_setup_py_importing_pkg_resources_builds_in_isolation(make_repo: MakeRepo, tmp_path: Path) -> None:
    """astropy's ``ah_bootstrap.py`` imports ``pkg_resources`` before ``setup()``: an
    isolated build's setuptools (the newest: none from 81 on) is held to the spec's
    (``setuptools<81`` when it pins none), as in SWE-bench's era."""
    repo = checkout(
        make_repo,
        {
            "pyproject.toml": PEP517,
            "ah_bootstrap.py": "import pkg_resources\n",
            "setup.py": "import ah_bootstrap\nfrom setuptools import setup\n"
            "setup(name='proj', version='3.1', packages=['proj'], install_requires=['aexec_shadow'])\n",
            "proj/__init__.py": "",
        },
    )
    spec = from_spec("owner/proj", {"python": SYSTEM, "install": "python -m pip install -e ."})
    assert spec.build_isolation and spec.build_constraints == ("setuptools<81",)
    built = ensure(spec, str(repo), str(tmp_path / "envs"))
    assert lock_of(built.path)["aexec-shadow"] == "1.0"


SETUP_IMPORTING = (
    "import aexec_tinydep  # 'Numerical Python (NumPy) is not installed' without it\n"
    "from setuptools import setup\n"
    "setup(name='proj', version='0.22', packages=['proj'], install_requires=['aexec_shadow'])\n"
)


@pytest.mark.usefixtures("index")
@pytest.mark.parametrize(
    ("install", "pyproject"),
    [
        ("python -m pip install -v --no-use-pep517 --no-build-isolation -e .", PEP517),
        ("python -m pip install -e .", None),  # pip's legacy path: setup.py develop, in the env
    ],
    ids=["no-build-isolation", "no-pyproject"],
)
def test_a_setup_py_needing_the_spec_s_packages_is_built_after_them(
    make_repo: MakeRepo, tmp_path: Path, install: str, pyproject: str | None
) -> None:
    """scikit-learn 0.22's ``setup.py`` imports NumPy to give its metadata (its install says
    ``--no-build-isolation``); astropy 3.1's (no ``pyproject.toml``: pip's legacy path)
    ``setup_requires`` it. As SWE-bench's pip, the metadata is built where the spec's
    packages are (``aexec_tinydep`` stands for NumPy), not in an isolated build without them."""
    files = {"setup.py": SETUP_IMPORTING, "proj/__init__.py": ""}
    repo = checkout(make_repo, {**files, **({"pyproject.toml": pyproject} if pyproject else {})})
    raw = {"python": SYSTEM, "install": install, "pip_packages": ["aexec_tinydep<2"]}
    entry = lookup(Table({"owner/proj": {"0.22": raw}}), "owner/proj", "0.22", lambda p: (repo / p).is_file())
    spec = entry.environment
    assert not spec.build_isolation
    built = ensure(spec, str(repo), str(tmp_path / "envs"))
    lock = lock_of(built.path)
    assert lock["aexec-tinydep"] == "1.0" and lock["aexec-shadow"] == "1.0"
    # Built in isolation, as before, the same repo cannot give its metadata.
    with pytest.raises(EnvBroken, match="aexec_tinydep"):
        ensure(attrs.evolve(spec, build_isolation=True), str(repo), str(tmp_path / "e2"))
