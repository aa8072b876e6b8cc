"""SWE-bench's spec table read into declared environments (issue 30), ``aexec swebench
--specs swebench`` grading through an environment aexec builds, and ``aexec env``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aexec._environments.spec import EnvSpec, from_json, pick_interpreter
from aexec._environments.swebench import Table, from_spec, lookup, repo_of
from aexec._errors import RequestError
from aexec._serde import candidate as read_request

from .conftest import MakeRepo, diff
from .test_built_envs import AS_OF, PROJ, SYSTEM, index, wheel  # noqa: F401 (a fixture)

# Entries as swebench 4.1.0's MAP_REPO_VERSION_TO_SPECS has them (cut).
ASTROPY = {
    "python": "3.9",
    "install": "python -m pip install -e .[test] --verbose",
    "pip_packages": ["numpy==1.25.2"],
}
REQUESTS = {
    "python": "3.9",
    "packages": "pytest",
    "install": "python -m pip install .",
    "test_cmd": "pytest -rA",
}
XARRAY = {
    "python": "3.10",
    "packages": "environment.yml",
    "install": "python -m pip install -e .",
    "no_use_env": True,
}
SPHINX = {
    "python": "3.9",
    "pip_packages": ["tox==4.16.0"],
    "install": "python -m pip install -e .[test]",
    "pre_install": ["sed -i 's/pytest/pytest -rA/' tox.ini", "apt-get update && apt-get install -y graphviz"],
    "test_cmd": "tox --current-env -epy39 -v --",
}
SKLEARN = {
    "python": "3.6",
    "packages": "numpy scipy cython=0.29 pytest",
    "install": "python setup.py build_ext -i",
}
DJANGO = {
    "python": "3.8",
    "packages": "requirements.txt",
    "install": "python -m pip install -e .",
    "test_cmd": ["./tests/runtests.py", "--parallel 1"],
}


def test_swebench_specs_read_into_environments() -> None:
    requests = EnvSpec("3.9", packages=("pytest", "setuptools<81"), build_constraints=("setuptools<81",))
    assert from_spec("psf/requests", REQUESTS) == requests
    flask = {
        **REQUESTS,
        "pip_packages": ["click==8.1.3"],
        "install": "python -m pip install -e '.[dev, async]'",
    }
    got = from_spec("pallets/flask", flask)
    assert (
        got.packages == ("pytest", "click==8.1.3", "setuptools<81")
        and got.extras == ("dev", "async")
        and not got.system
    )
    assert "conda: no environment.yml in the checkout" in from_spec("pydata/xarray", XARRAY).system
    sphinx = from_spec("sphinx-doc/sphinx", SPHINX)  # tox.ini's -rA: nothing to do
    assert sphinx.unsupported() is None and sphinx.apt == ("graphviz",)  # issue 43
    # Repos that build C extensions in place: built so (issue 30 goal 3).
    astropy = from_spec("astropy/astropy", ASTROPY)
    assert astropy.inplace and astropy.unsupported() is None and astropy.extras == ("test",)
    # The isolated builds' setuptools is the spec's (pip's legacy path builds with it).
    pinned = from_spec("astropy/astropy", {**ASTROPY, "pip_packages": ["setuptools==68.0.0"]})
    assert pinned.build_constraints == ("setuptools==68.0.0",) and astropy.build_constraints == (
        "setuptools<81",
    )
    sklearn = from_spec("scikit-learn/scikit-learn", SKLEARN)
    assert sklearn.packages == ("numpy", "scipy", "cython==0.29", "pytest", "setuptools<81")
    assert sklearn.inplace and sklearn.unsupported() is None
    assert not from_spec("psf/requests", REQUESTS).inplace
    qhull = ['wget -O "$QHULL_TAR" "$QHULL_URL"']
    mpl = from_spec(
        "matplotlib/matplotlib", {"python": "3.11", "install": "pip install -e .", "pre_install": qhull}
    )
    # matplotlib's Qhull download is Debian's Qhull (issue 43): built in place against it.
    assert mpl.inplace and mpl.unsupported() is None
    assert mpl.apt == ("libqhull-dev", "libfreetype-dev", "pkg-config")
    assert (
        from_spec("x/y", {"docker_specs": {}}).unsupported()
        == "needs more than pip: not a Python spec (no `python`)"
    )


def test_lookup_gives_the_requirements_path_the_checkout_has_and_the_test_command() -> None:
    table = Table(
        {"django/django": {"4.0": DJANGO}}, {"django/django": ("nope.txt", "tests/requirements/py3.txt")}
    )
    entry = lookup(table, "django/django", "4.0", lambda p: p == "tests/requirements/py3.txt")
    assert entry.environment.requirements == ("tests/requirements/py3.txt",)
    assert entry.test_cmd == "./tests/runtests.py && --parallel 1"
    missing = lookup(table, "django/django", "9.9")
    assert "SWE-bench has no spec for django/django 9.9" in (missing.environment.unsupported() or "")
    assert repo_of("django__django-11099") == "django/django"
    assert repo_of("pvlib__pvlib-python-1072") == "pvlib/pvlib-python"
    assert repo_of("calc-1") is None


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"python": "3"}, "environment.python must be a version"),
        ({"packages": ["x"]}, "environment: missing `python`"),
        ({"python": "3.11", "install": "editable"}, "environment.install must be one of deps, none"),
        (
            {"python": "3.11", "requirements": ["../etc/passwd"]},
            "environment.requirements[0] must be a path inside the repo",
        ),
        ({"python": "3.11", "exclude_newer": "yesterday"}, "environment.exclude_newer must be a date"),
        ({"python": "3.11", "packages": "pytest"}, "environment.packages must be a list of strings"),
        ({"python": "3.11", "pins": []}, "environment: unknown field 'pins'"),
        ({"python": "3.11", "inplace": "yes"}, "environment.inplace must be true or false, got 'yes'"),
        ({"python": "3.11", "build_isolation": 0}, "environment.build_isolation must be true or false"),
    ],
)
def test_a_bad_environment_is_one_line_naming_the_field(environment: dict[str, object], message: str) -> None:
    with pytest.raises(RequestError) as e:
        from_json(environment)
    assert message in str(e.value)


def test_environment_and_python_together_are_refused(tmp_path: Path) -> None:
    request = {"request_type": "run_suite", "artifact_shape": "test_subset", "repo": str(tmp_path)}
    with pytest.raises(RequestError, match=r"no `python`"):
        read_request({**request, "python": sys.executable, "environment": {"python": "3.11"}})
    got, _ = read_request({**request, "environment": {"python": "3.11", "extras": ["test"]}})
    assert got.environment == EnvSpec("3.11", extras=("test",))


@pytest.mark.usefixtures("index")
def test_env_build_ls_gc_from_the_command_line(make_repo: MakeRepo, tmp_path: Path) -> None:
    repo = make_repo(PROJ)
    cases = tmp_path / "cases.jsonl"
    line = {
        "request_type": "run_suite",
        "artifact_shape": "test_subset",
        "repo": str(repo),
        "tests": ["test_p.py"],
    }
    envs = [{"python": SYSTEM, "exclude_newer": AS_OF}, {"python": "2.7"}]
    cases.write_text("".join(json.dumps({**line, "environment": e}) + "\n" for e in envs * 2))
    root = tmp_path / "envs"

    def aexec(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "aexec", "env", *args, "--env-dir", str(root)],
            capture_output=True,
            text=True,
            env=os.environ,
            timeout=300,
            check=False,
        )

    built = aexec("build", str(cases))
    assert built.returncode == 1, built.stderr  # one of the two is unsupported
    assert "2 of 2 environments ready or broken (1 broken)" in built.stderr
    assert "env_broken unsupported: Python 2.7" in built.stderr and " built in " in built.stderr
    again = aexec("build", str(cases))
    assert " cached, Python " in again.stderr and " built in " not in again.stderr
    (root / "envs" / "deadbeef").mkdir()  # a build that died half way
    listed = aexec("ls")
    assert f"Python {SYSTEM}." in listed.stdout and "partial" in listed.stdout
    swept = aexec("gc")
    assert "deadbeef" in swept.stderr and not (root / "envs" / "deadbeef").exists()
    assert len(list((root / "envs").iterdir())) == 1


def test_swebench_specs_grade_gold_and_wrong_through_a_built_environment(
    make_repo: MakeRepo, tmp_path: Path
) -> None:
    """An instance with no `python`: SWE-bench's spec for psf/requests 2.0 (Python 3.9,
    pytest, the repo's own dependencies) is built, and the gold patch resolves."""
    pytest.importorskip("swebench.harness.constants")
    repo = make_repo(
        {
            "pyproject.toml": '[project]\nname = "reqlike"\nversion = "0"\n',
            "reqlike/__init__.py": "def get():\n    return 'old'\n",
            "test_reqlike.py": "import reqlike\n\ndef test_get():\n    assert reqlike.get() == 'new'\n",
        }
    )
    gold = diff("reqlike/__init__.py", "def get():\n    return 'old'\n", "def get():\n    return 'new'\n")
    wrong = diff("reqlike/__init__.py", "def get():\n    return 'old'\n", "def get():\n    return 'newer'\n")
    instances = [
        {
            "instance_id": i,
            "repo": str(repo),
            "version": v,
            "FAIL_TO_PASS": ["test_reqlike.py::test_get"],
            "PASS_TO_PASS": [],
        }
        for i, v in (("psf__requests-1", "2.0"), ("psf__requests-2", "2.0"), ("astropy__astropy-3", "5.1"))
    ]
    (tmp_path / "instances.json").write_text(json.dumps(instances))
    preds = [
        {"instance_id": i, "model_name_or_path": "m", "model_patch": p}
        for i, p in (("psf__requests-1", gold), ("psf__requests-2", wrong), ("astropy__astropy-3", gold))
    ]
    (tmp_path / "preds.json").write_text(json.dumps(preds))
    out = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "aexec",
            "swebench",
            str(tmp_path / "preds.json"),
            str(tmp_path / "instances.json"),
            "-o",
            str(out),
            "--specs",
            "swebench",
            "--no-cache",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "AEXEC_ENV_DIR": str(tmp_path / "envs")},
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["resolved_ids"] == ["psf__requests-1"], report["instances"]
    assert report["unresolved_ids"] == ["psf__requests-2"]
    # astropy 5.1's spec installs `.[test]`, an extra this repo does not declare: the
    # environment does not build, and that is the environment's, said so.
    assert report["error_ids"] == ["astropy__astropy-3"]
    broken = report["instances"]["astropy__astropy-3"]
    assert broken["flags"]["env_broken"] and "environment build: resolving" in broken["error"]


@pytest.mark.usefixtures("index")
def test_a_sed_edit_of_setup_py_changes_the_pin_the_environment_resolves(
    make_repo: MakeRepo, tmp_path: Path
) -> None:
    """SWE-bench's ``pre_install: sed -i 's/A/B/' setup.py`` (sphinx's Jinja2<3.0): the
    build resolves the edited pin, its key differs from the unedited one's, and the
    checkout (the candidate's base) is not touched."""
    from aexec._environments.build import ensure

    setup_py = (
        "from setuptools import setup\n"
        "setup(name='proj', version='0', packages=['proj'], install_requires=['aexec_tinydep>=2'])\n"
    )
    repo = make_repo({"setup.py": setup_py, "proj/__init__.py": "X = 1\n"})
    root = str(tmp_path / "envs")
    edit = "sed -i 's/aexec_tinydep>=2/aexec_tinydep<2/' setup.py"
    edited = ensure(EnvSpec(SYSTEM, exclude_newer=AS_OF, edits=(edit,)), str(repo), root)
    plain = ensure(EnvSpec(SYSTEM, exclude_newer=AS_OF), str(repo), root)

    def version(python: str) -> str:
        code = "import aexec_tinydep; print(aexec_tinydep.V)"
        return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()

    assert version(edited.python) == "1.0" and version(plain.python) == "2.0"
    assert edited.key != plain.key
    assert (repo / "setup.py").read_text() == setup_py


@pytest.mark.usefixtures("index")
def test_a_pinned_package_wins_over_the_requirement_files_pin(make_repo: MakeRepo, tmp_path: Path) -> None:
    """SWE-bench installs ``pip_packages`` after the repo's requirements file (Flask 2.0:
    ``MarkupSafe==2.1.3`` after ``requirements/dev.txt``'s ``markupsafe==2.0.1``): the
    pin in ``packages`` wins, also in a file the requirements file includes."""
    from aexec._environments.build import ensure

    repo = make_repo(
        {
            "requirements/dev.txt": "-r tests.txt\n",
            "requirements/tests.txt": "aexec_tinydep==1.0\n",
            "proj/__init__.py": "X = 1\n",
        }
    )
    spec = EnvSpec(
        SYSTEM,
        requirements=("requirements/dev.txt",),
        packages=("aexec_tinydep==2.0",),
        install="none",
        exclude_newer=AS_OF,
    )
    built = ensure(spec, str(repo), str(tmp_path / "envs"))
    code = "import aexec_tinydep; print(aexec_tinydep.V)"
    got = subprocess.run([built.python, "-c", code], capture_output=True, text=True, check=True)
    assert got.stdout.strip() == "2.0"
    assert (repo / "requirements" / "tests.txt").read_text() == "aexec_tinydep==1.0\n"


@pytest.mark.usefixtures("index")
def test_dependencies_are_compiled_at_install_as_pip_does(make_repo: MakeRepo, tmp_path: Path) -> None:
    """pip (SWE-bench's images) compiles what it installs; a dependency whose source warns
    when compiled (blinker 1.4's invalid escapes) then imports under warnings as errors
    (Flask 2.0's ``filterwarnings = error``) as it does there."""
    from aexec._environments.build import ensure

    wheel(tmp_path / "wheels", "aexec_warndep", "1.0", {"aexec_warndep/__init__.py": 'P = "\\*"\n'})
    repo = make_repo({"proj/__init__.py": "X = 1\n"})
    spec = EnvSpec(SYSTEM, packages=("aexec_warndep==1.0",), install="none", exclude_newer=AS_OF)
    built = ensure(spec, str(repo), str(tmp_path / "envs"))
    got = subprocess.run(
        [built.python, "-W", "error", "-c", "import aexec_warndep; print(aexec_warndep.P)"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert got.returncode == 0 and got.stdout.strip() == "\\*", got.stderr


@pytest.mark.usefixtures("index")
def test_a_python_36_environment_builds_without_uvs_bytecode_compiler(
    make_repo: MakeRepo, tmp_path: Path
) -> None:
    """SWE-bench's Django 3.0-3.2 run on Python 3.6, where uv's bytecode compiler cannot
    run (it needs 3.7's ``py_compile.PycInvalidationMode``): the environment still builds."""
    from aexec._environments.build import ensure, find_interpreters

    if pick_interpreter("3.6", find_interpreters()) is None:
        pytest.skip("no Python 3.6 on this machine")
    repo = make_repo({"proj/__init__.py": "X = 1\n"})
    spec = EnvSpec("3.6", packages=("aexec_tinydep==1.0",), install="none", exclude_newer=AS_OF)
    built = ensure(spec, str(repo), str(tmp_path / "envs"))
    code = "import aexec_tinydep, sys; print(aexec_tinydep.V, sys.version_info[:2])"
    got = subprocess.run([built.python, "-c", code], capture_output=True, text=True, check=True)
    assert got.stdout.strip() == "1.0 (3, 6)"
