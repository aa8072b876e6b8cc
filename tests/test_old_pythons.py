"""The driver on the candidate's interpreter as old as SWE-bench's specs name (3.6 to 3.10).

The interpreters are pyenv's (``/root/.pyenv/versions``; a version not installed is
skipped, with the reason). Each gets a venv of its own, with the pytest its Python
supports (3.6: 7.0.1, 3.7: 7.4.4), shared by the module's tests. Every version runs a
snippet that passes and one that crashes; 3.6, 3.8 and 3.10 also run pytest suites
(pass, fail, error, a graded patch) and a ``unittest``-runner suite warm (forked from the
fork server, which must be serving that interpreter) and cold, with the same verdicts;
3.6 runs Django 3.2's own ``runtests.py`` (its sdist, downloaded once, as
``tests/test_runners.py`` does); a declared environment at 3.7 is built and graded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aexec import Candidate, ExecutionObservation, Options, observe_many
from aexec._boundary import DRIVER
from aexec._environments.build import uv_binary
from aexec._environments.spec import EnvSpec

from .conftest import diff
from .test_forkserver import served_pids

pytestmark = pytest.mark.anyio

PYENV = Path("/root/.pyenv/versions")
#: version -> (pyenv's build, the pytest that version gets)
VERSIONS = {
    "3.6": ("3.6.15", "pytest==7.0.1"),
    "3.7": ("3.7.16", "pytest==7.4.4"),
    "3.8": ("3.8.18", "pytest==8.3.5"),
    "3.9": ("3.9.18", "pytest==8.3.5"),
    "3.10": ("3.10.13", "pytest==8.3.5"),
}
HEAVY = ("3.6", "3.8", "3.10")
CACHE = Path(os.environ.get("AEXEC_RUNNERS_CACHE", Path.home() / ".cache" / "aexec-runners"))
DJANGO = "Django-3.2.25"


@pytest.fixture
def anyio_backend() -> str:
    """The candidate's interpreter is what varies here, not the supervisor's loop."""
    return "asyncio"


def _base(version: str) -> Path:
    python = PYENV / VERSIONS[version][0] / "bin" / "python"
    if not python.exists():
        pytest.skip(f"Python {VERSIONS[version][0]} is not installed at {python}")
    return python


@pytest.fixture(scope="module")
def pythons(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Per version, a venv (made once per module, on first use) with that version's pytest."""
    return {}


def python_of(pythons: dict[str, str], version: str, tmp: Path, *extra: str) -> str:
    key = " ".join((version, *extra))
    if key not in pythons:
        base = _base(version)
        where = tmp / f"venv-{version}-{len(pythons)}"
        subprocess.run([str(base), "-m", "venv", "--without-pip", str(where)], check=True)
        python = str(where / "bin" / "python")
        # uv, not `pip --python`: today's pip no longer runs on 3.6.
        done = subprocess.run(
            [uv_binary(), "pip", "install", "-q", "--python", python, VERSIONS[version][1], *extra],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot install {VERSIONS[version][1]} for {version}: {done.stderr.strip()[-300:]}")
        pythons[key] = python
    return pythons[key]


@pytest.fixture(scope="module")
def venv_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("old-pythons")


@pytest.mark.parametrize("version", list(VERSIONS))
async def test_a_snippet_passes_and_a_crash_is_a_runtime_failure(
    version: str, pythons: dict[str, str], venv_dir: Path
) -> None:
    python = python_of(pythons, version, venv_dir)
    ok, crash = await observe_many(
        [
            Candidate("run_entry", "snippet", code="import sys; print(sys.version_info[:2])", python=python),
            Candidate(
                "run_entry", "snippet", code="def f():\n    raise ValueError('boom')\nf()\n", python=python
            ),
        ]
    )
    major, minor = version.split(".")
    assert ok.exit_code == 0 and ok.stdout == f"({major}, {minor})\n" and ok.failure is None, ok
    assert f"CPython {VERSIONS[version][0]}" in ok.environment.toolchain_version
    assert crash.verdict == "fail" and crash.failure is not None, crash
    assert crash.failure.failure_class == "runtime" and "ValueError: boom" in crash.failure.message, crash
    if (int(major), int(minor)) < (3, 8):
        # Its modules were compiled without their types, once: the code is kept beside them.
        kept = Path(DRIVER).parent / "__pycache__" / f"runners.aexec-compat-cpython-{major}{minor}.bin"
        assert kept.is_file()


LIB = "def double(x):\n    return x + 1\n"
TESTS = """\
import pytest
from lib import double

def test_two():
    assert double(1) == 2

def test_four():
    assert double(2) == 4

@pytest.fixture
def broken():
    raise RuntimeError("setup broke")

def test_setup_error(broken):
    pass
"""
UNITTESTS = """\
import unittest
from lib import double

class Double(unittest.TestCase):
    def test_two(self):
        self.assertEqual(double(1), 2)

    def test_four(self):
        self.assertEqual(double(2), 4)
"""


def _verdicts(obs: ExecutionObservation) -> dict[str, str]:
    return {r.test: r.verdict for r in obs.test_results}


@pytest.mark.parametrize("version", HEAVY)
async def test_suites_warm_and_cold(version: str, pythons: dict[str, str], venv_dir: Path) -> None:
    python = python_of(pythons, version, venv_dir)
    repo = venv_dir / f"repo-{version}"
    (repo / "tests").mkdir(parents=True)
    (repo / "lib.py").write_text(LIB)
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_lib.py").write_text(TESTS)
    (repo / "tests" / "test_unit.py").write_text(UNITTESTS)
    gold = diff("lib.py", LIB, "def double(x):\n    return 2 * x\n")
    four, two = "tests/test_lib.py::test_four", "tests/test_lib.py::test_two"
    cands = [
        Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests/test_lib.py"], python=python),
        Candidate(
            "run_suite",
            "test_subset",
            repo=str(repo),
            tests=[four, two],
            python=python,
            patch=gold,
            fail_to_pass=[four],
            pass_to_pass=[two],
        ),
        Candidate(
            "run_suite",
            "test_subset",
            repo=str(repo),
            tests=["tests.test_unit"],
            python=python,
            runner="unittest",
        ),
    ]
    warm = await observe_many(cands)
    exes = {os.path.realpath(f"/proc/{pid}/exe") for pid in served_pids()}
    assert os.path.realpath(_base(version)) in exes, exes  # the runs were forked from its server
    cold = await observe_many(cands, options=Options(forkserver=False))
    for suite, graded, unit in (warm, cold):
        assert suite.verdict == "fail", suite
        assert _verdicts(suite) == {
            two: "passed",
            four: "failed",
            "tests/test_lib.py::test_setup_error": "errored",
        }
        assert graded.verdict == "pass" and graded.resolved is True, graded
        assert _verdicts(graded) == {four: "passed", two: "passed"}
        assert unit.verdict == "fail" and unit.runner == "unittest", unit
        # Before 3.11 unittest names a test ``name (module.Class)``, as SWE-bench's logs do.
        assert _verdicts(unit) == {
            "test_four (tests.test_unit.Double)": "failed",
            "test_two (tests.test_unit.Double)": "passed",
        }


async def test_a_declared_environment_at_37_is_built_and_graded(venv_dir: Path) -> None:
    _base("3.7")
    repo = venv_dir / "declared"
    repo.mkdir()
    (repo / "lib.py").write_text(LIB)
    (repo / "test_lib.py").write_text(TESTS)
    env = EnvSpec("3.7", packages=("pytest==7.4.4",), install="none")
    four = "test_lib.py::test_four"
    cands = [
        Candidate("run_suite", "test_subset", repo=str(repo), tests=[four], environment=env, patch=patch)
        for patch in (diff("lib.py", LIB, "def double(x):\n    return 2 * x\n"), None)
    ]
    gold, base = await observe_many(cands, options=Options(env_dir=str(venv_dir / "envs")))
    assert gold.verdict == "pass" and "CPython 3.7" in gold.environment.toolchain_version, gold
    assert base.verdict == "fail" and _verdicts(base) == {four: "failed"}, base


DJANGO_TESTS = '''\
from django.test import SimpleTestCase
from django.utils.text import capfirst


class Outcomes(SimpleTestCase):
    def test_pass(self):
        self.assertEqual(capfirst(""), "")

    def test_fail(self):
        self.assertEqual(capfirst("x"), "X")  # the injected bug

    def test_doc(self):
        """Capitalizes the first letter."""
        self.assertEqual(len("x"), 1)
'''


@pytest.fixture(scope="module")
def django32(venv_dir: Path) -> Path:
    """Django 3.2's sdist (downloaded once into the runners' cache), trimmed, with a bug
    injected in ``capfirst`` and a crafted test module."""
    _base("3.6")
    CACHE.mkdir(parents=True, exist_ok=True)
    src = CACHE / DJANGO
    if not src.is_dir():
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                "Django==3.2.25",
            ],
            cwd=CACHE,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"PyPI unreachable: cannot download Django 3.2: {done.stderr.strip()[-200:]}")
        shutil.unpack_archive(str(CACHE / f"{DJANGO}.tar.gz"), str(CACHE))
    dj = venv_dir / "django"

    def trim(directory: str, names: list[str]) -> set[str]:
        """Translations but English and the locale's modules, and static files: not read."""
        rel = os.path.relpath(directory, src)
        locale = "/locale/" in f"/{rel}/" and not rel.startswith("django/conf/locale/en")
        return {n for n in names if (locale and "." in n and not n.endswith(".py")) or n == "static"}

    shutil.copytree(src / "django", dj / "django", ignore=trim)
    (dj / "tests").mkdir()
    for name in ("runtests.py", "test_sqlite.py", "urls.py"):
        shutil.copy(src / "tests" / name, dj / "tests" / name)
    (dj / "tests" / "aexec_cases").mkdir()
    (dj / "tests" / "aexec_cases" / "__init__.py").write_text("")
    (dj / "tests" / "aexec_cases" / "tests.py").write_text(DJANGO_TESTS)
    text = dj / "django" / "utils" / "text.py"
    bug = text.read_text().replace("return x and str(x)[0].upper() + str(x)[1:]", "return x")
    assert bug != text.read_text()
    text.write_text(bug)
    return dj


async def test_django_32s_own_runner_on_36(
    django32: Path, pythons: dict[str, str], venv_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    python = python_of(pythons, "3.6", venv_dir, "asgiref<3.5", "pytz", "sqlparse<0.5")
    (obs,) = await observe_many(
        [
            Candidate(
                "run_suite",
                "test_subset",
                repo=str(django32),
                tests=["aexec_cases.tests"],
                runner="django",
                python=python,
            )
        ]
    )
    assert obs.verdict == "fail" and obs.runner == "django", obs
    # SWE-bench's names: ``name (module.Class)``, a docstring's first line where there is one.
    assert _verdicts(obs) == {
        "test_pass (aexec_cases.tests.Outcomes)": "passed",
        "test_fail (aexec_cases.tests.Outcomes)": "failed",
        "Capitalizes the first letter.": "passed",
    }, obs
    # The repo's bytecode job (a repo this size gets one) writes no pyc on 3.6 and does not fail.
    assert "bytecode_failed" not in caplog.text
