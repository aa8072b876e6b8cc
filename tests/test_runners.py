"""The repo's own test runners (issue 29): ``unittest``, Django's ``tests/runtests.py`` and
sympy's ``bin/test``, on real runs of real Django 4.2 and sympy 1.12 checkouts (their
PyPI sdists, downloaded once into ``~/.cache/aexec-runners``; skipped only when PyPI
cannot be reached): per-test verdicts and SWE-bench's names, grading, the tamper guard
per runner, ``env_broken``, and the runner ``aexec swebench`` chooses.

Kept fast: a trimmed copy of each checkout (Django without its translations and most of
its tests; sympy whole), a handful of crafted test modules, one run per outcome set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pytest

from aexec import Candidate, Policy, RequestError, observe_many
from aexec._environments.build import uv_binary
from aexec._runners import RUNNERS, choose_runner, patch_paths, runner_for_instance, same_test
from aexec._stages.classify import route

from .conftest import diff

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """Real Django and sympy runs: one backend is enough (the pipeline is the same)."""
    return "asyncio"


CACHE = Path(os.environ.get("AEXEC_RUNNERS_CACHE", Path.home() / ".cache" / "aexec-runners"))
DJANGO, SYMPY = "Django-4.2.16", "sympy-1.12"


def _fetch() -> tuple[Path, Path, str]:
    """The two sdists unpacked, and an interpreter with their dependencies (once)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in (DJANGO, SYMPY):
        if not (CACHE / name).is_dir():
            spec = name.replace("-", "==", 1)
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", spec],
                cwd=CACHE,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                pytest.skip(f"PyPI unreachable: cannot download {spec}: {done.stderr.strip()[-200:]}")
            shutil.unpack_archive(str(CACHE / f"{name}.tar.gz"), str(CACHE))
    python = CACHE / "venv" / "bin" / "python"
    if not python.exists():
        venv.create(CACHE / "venv", with_pip=False)  # uv installs into it: no ensurepip
        done = subprocess.run(
            [uv_binary(), "pip", "install", "-q", "--python", str(python), "asgiref", "sqlparse", "mpmath"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            shutil.rmtree(CACHE / "venv")
            pytest.skip(f"PyPI unreachable: {done.stderr.strip()[-200:]}")
    return CACHE / DJANGO, CACHE / SYMPY, str(python)


# -- Django --------------------------------------------------------------------------

DJANGO_CASES = '''\
import unittest

from django.test import SimpleTestCase
from django.utils.text import capfirst


class Outcomes(SimpleTestCase):
    def test_a_pass(self):
        self.assertEqual(capfirst(""), "")

    def test_b_fail(self):
        self.assertEqual(capfirst("x"), "X")  # the injected bug

    def test_c_doc(self):
        """Capitalizes the first letter.

        More text."""
        self.assertEqual(len("x"), 1)

    @unittest.skip("not today")
    def test_d_skip(self):
        pass

    @unittest.expectedFailure
    def test_e_xfail(self):
        self.assertEqual(1, 2)

    @unittest.expectedFailure
    def test_f_xpass(self):
        pass


class SetUpError(SimpleTestCase):
    def setUp(self):
        raise RuntimeError("setUp broke")

    def test_g(self):
        pass
'''

HANG = """\
import time

from django.test import SimpleTestCase


class Hang(SimpleTestCase):
    def test_hang(self):
        time.sleep(600)
"""

FIX_TEST = """\
from django.test import SimpleTestCase
from django.utils.text import capfirst


class Fix(SimpleTestCase):
    def test_capfirst(self):
        self.assertEqual(capfirst("django"), "Django")

    def test_empty(self):
        self.assertEqual(capfirst(""), "")
"""


def _copy(src: Path, dst: Path, skip: object = None) -> None:
    def ignore(directory: str, names: list[str]) -> set[str]:
        return {n for n in names if callable(skip) and skip(os.path.join(directory, n))}

    shutil.copytree(src, dst, ignore=ignore, symlinks=True)


@pytest.fixture(scope="module")
def checkouts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A trimmed Django checkout (django/, runtests.py and its settings, crafted test
    modules) with a bug injected in ``capfirst``, the sympy checkout with a bug in
    ``ordinal``, and the interpreter."""
    django_src, sympy_src, python = _fetch()
    base = tmp_path_factory.mktemp("runners")
    dj = base / "django"

    def trim(path: str) -> bool:
        rel = os.path.relpath(path, django_src)
        locale = "/locale/" in f"/{rel}/" and not rel.startswith("django/conf/locale/en")
        return (
            locale and not rel.endswith(".py") and "." in os.path.basename(rel)
        ) or "/static/" in f"/{rel}/"

    _copy(django_src / "django", dj / "django", trim)
    (dj / "tests").mkdir()
    for name in ("runtests.py", "test_sqlite.py", "urls.py"):
        shutil.copy(django_src / "tests" / name, dj / "tests" / name)
    cases = dj / "tests" / "aexec_cases"
    cases.mkdir()
    (cases / "__init__.py").write_text("")
    (cases / "tests.py").write_text(DJANGO_CASES)
    (cases / "test_hang.py").write_text(HANG)
    (cases / "test_broken.py").write_text("import not_a_module_anywhere  # noqa\n")
    text = dj / "django" / "utils" / "text.py"
    text.write_text(text.read_text().replace("return x[0].upper() + x[1:]", "return x[0] + x[1:]"))
    sy = base / "sympy"
    _copy(sympy_src, sy, lambda p: os.path.basename(p) in ("doc", "examples", "data"))
    misc = sy / "sympy" / "utilities" / "misc.py"
    misc.write_text(
        misc.read_text().replace(
            "elif k % 10 == 2:\n        suffix = 'nd'", "elif k % 10 == 2:\n        suffix = 'th'"
        )
    )
    return dj, sy, python


def django_graded(dj: Path, python: str) -> dict[str, Any]:
    """A graded Django ``run_suite``'s arguments except its patch: the test patch adding
    ``Fix``, its FAIL_TO_PASS (``test_capfirst``, which the injected bug fails) and
    PASS_TO_PASS. SWE-bench's lists from a Python 3.9 image name tests the older way
    (the first); both ways are matched."""
    return dict(
        repo=str(dj),
        runner="django",
        python=python,
        test_patch=diff("tests/aexec_cases/test_fix.py", "", FIX_TEST),
        fail_to_pass=["test_capfirst (aexec_cases.test_fix.Fix)"],
        pass_to_pass=["test_empty (aexec_cases.test_fix.Fix.test_empty)"],
    )


def sympy_graded(sy: Path, python: str) -> dict[str, Any]:
    """A graded sympy ``run_suite``'s arguments except its patch (the injected ``ordinal`` bug)."""
    return dict(
        repo=str(sy),
        runner="sympy",
        python=python,
        test_patch=diff("sympy/utilities/tests/test_aexec_fix.py", "", SYMPY_FIX),
        fail_to_pass=["test_ordinal_two"],
        pass_to_pass=["test_ordinal_one"],
    )


async def _observe(*cands: Candidate) -> list:
    return list(await observe_many(list(cands)))


async def test_django_verdicts_names_and_a_timeout(checkouts: tuple[Path, Path, str]) -> None:
    dj, _, python = checkouts
    labels = ("aexec_cases.tests", "aexec_cases.test_broken", "aexec_cases.test_hang")
    (obs,) = await _observe(
        Candidate(
            "run_suite",
            "test_subset",
            repo=str(dj),
            tests=labels,
            runner="django",
            python=python,
            policy=Policy(timeout_s=10),
        )
    )
    got = {t.test: t.verdict for t in obs.test_results}
    where = "aexec_cases.tests.Outcomes"
    assert got == {
        f"test_a_pass ({where}.test_a_pass)": "passed",
        f"test_b_fail ({where}.test_b_fail)": "failed",
        "Capitalizes the first letter.": "passed",  # verbose unittest prints the docstring
        f"test_d_skip ({where}.test_d_skip)": "skipped",
        f"test_e_xfail ({where}.test_e_xfail)": "skipped",
        f"test_f_xpass ({where}.test_f_xpass)": "failed",
        "test_g (aexec_cases.tests.SetUpError.test_g)": "errored",
        "test_broken (unittest.loader._FailedTest.test_broken)": "errored",  # not importable
        "test_hang (aexec_cases.test_hang.Hang.test_hang)": "errored",  # killed at the deadline
    }
    assert obs.timed_out and obs.failure.failure_class == "timeout"
    assert obs.runner == "django" and obs.runner_reason == "the request's `runner`"
    # The plain command's own output is kept: what SWE-bench's log parser reads.
    assert f"test_a_pass ({where}.test_a_pass) ... ok" in obs.stderr


async def test_django_graded_gold_wrong_and_tampered(checkouts: tuple[Path, Path, str]) -> None:
    dj, _, python = checkouts
    source = (dj / "django" / "utils" / "text.py").read_text()
    gold = diff(
        "django/utils/text.py", source, source.replace("return x[0] + x[1:]", "return x[0].upper() + x[1:]")
    )
    wrong = diff("django/utils/text.py", source, source.replace("return x[0] + x[1:]", "return x.upper()"))
    runtests = (dj / "tests" / "runtests.py").read_text()
    # The runner reports every failure as a pass: SWE-bench's grading believes it.
    cheat = runtests.replace(
        "    TestRunner = get_runner(settings)\n",
        "    TestRunner = get_runner(settings)\n"
        "    import unittest\n"
        "    R = unittest.TextTestRunner.resultclass\n"
        "    R.addFailure = lambda self, test, err: R.addSuccess(self, test)\n",
    )
    assert cheat != runtests
    tamper = diff("tests/runtests.py", runtests, cheat)
    common = django_graded(dj, python)
    good, bad, cheated = await _observe(
        Candidate("run_suite", "patch", id="gold", patch=gold, **common),
        Candidate("run_suite", "patch", id="wrong", patch=wrong, **common),
        Candidate("run_suite", "patch", id="tamper", patch=wrong + tamper, **common),
    )
    assert good.resolved is True and good.flags.reverified
    assert {t.test: t.f2p for t in good.test_results}[
        "test_capfirst (aexec_cases.test_fix.Fix.test_capfirst)"
    ]
    assert bad.resolved is False
    assert bad.expected_failures.fail_to_pass == ("test_capfirst (aexec_cases.test_fix.Fix)",)
    assert cheated.flags.tampered and cheated.resolved is False


async def test_django_env_broken(checkouts: tuple[Path, Path, str]) -> None:
    """Django's runner cannot start (the interpreter lacks asgiref), and a test module
    imports what nobody has: each is the environment's, the unpatched repo failing alike."""
    dj, _, python = checkouts
    no_asgiref, missing = await _observe(
        Candidate("run_suite", "test_subset", repo=str(dj), tests=["aexec_cases.tests"], runner="django"),
        Candidate(
            "run_suite",
            "test_subset",
            repo=str(dj),
            tests=["aexec_cases.test_broken"],
            runner="django",
            python=python,
        ),
    )
    for obs, module in ((no_asgiref, "asgiref"), (missing, "not_a_module_anywhere")):
        assert obs.flags.env_broken and obs.verdict == "error", obs.stderr[-800:]
        assert obs.env_fault.kind == "missing_module" and module in obs.env_fault.message


# -- sympy ---------------------------------------------------------------------------

SYMPY_CASES = """\
from sympy.testing.pytest import XFAIL, skip
from sympy.utilities.misc import ordinal


def test_a_pass():
    assert ordinal(1) == "1st"


def test_b_fail():
    assert ordinal(1) == "1th"


def test_c_error():
    raise ValueError("boom")


def test_d_skip():
    skip("not today")


@XFAIL
def test_e_xfail():
    assert False
"""

BIN_TEST = """\
#!/usr/bin/env python
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
if "-C" in sys.argv:
    os.environ["SYMPY_USE_CACHE"] = "no"
import sympy

paths = [a for a in sys.argv[1:] if not a.startswith("-")]
sys.exit(0 if sympy.test(*paths, verbose="--verbose" in sys.argv) else 1)
"""

SYMPY_FIX = """\
from sympy.utilities.misc import ordinal


def test_ordinal_two():
    assert ordinal(2) == "2nd"


def test_ordinal_one():
    assert ordinal(1) == "1st"
"""


async def test_sympy_verdicts_and_names(checkouts: tuple[Path, Path, str]) -> None:
    _, sy, python = checkouts
    cases = "sympy/utilities/tests/test_aexec_cases.py"
    broken = "sympy/utilities/tests/test_aexec_broken.py"
    patch = diff(cases, "", SYMPY_CASES) + diff(broken, "", "import not_a_module_anywhere  # noqa\n")
    patch += diff("bin/test", "", BIN_TEST)  # a git checkout's entry point (the sdist has none)
    (obs,) = await _observe(
        Candidate(
            "run_suite",
            "test_subset",
            repo=str(sy),
            tests=[broken, cases],
            runner="sympy",
            python=python,
            test_patch=patch,
        )
    )
    got = {t.test: t.verdict for t in obs.test_results}
    assert got == {
        "test_a_pass": "passed",
        "test_b_fail": "failed",
        "test_c_error": "errored",
        "test_d_skip": "skipped",
        "test_e_xfail": "skipped",
        broken: "errored",  # failed to import: a collection error
    }
    assert "test_a_pass ok" in obs.stdout  # sympy's own verbose report, as SWE-bench reads it


async def test_sympy_graded_gold_and_tampered_runner(checkouts: tuple[Path, Path, str]) -> None:
    _, sy, python = checkouts
    misc = (sy / "sympy" / "utilities" / "misc.py").read_text()
    bug = "elif k % 10 == 2:\n        suffix = 'th'"
    gold = diff(
        "sympy/utilities/misc.py", misc, misc.replace(bug, "elif k % 10 == 2:\n        suffix = 'nd'")
    )
    runtests = (sy / "sympy" / "testing" / "runtests.py").read_text()
    cheat = runtests.replace("reporter.test_fail((t, v, tr))", "reporter.test_pass()")
    assert cheat != runtests
    tamper = diff("sympy/testing/runtests.py", runtests, cheat)
    common = sympy_graded(sy, python)
    good, cheated = await _observe(
        Candidate("run_suite", "patch", id="gold", patch=gold, **common),
        Candidate("run_suite", "patch", id="tamper", patch=tamper, **common),
    )
    assert good.resolved is True and good.flags.reverified, good.stdout[-600:]
    assert [t.test for t in good.test_results if t.f2p] == ["test_ordinal_two"]
    # The tampered runner reports the failing test as a pass; the guard still refuses it.
    assert {t.test: t.verdict for t in cheated.test_results}["test_ordinal_two"] == "passed"
    assert cheated.flags.tampered and cheated.resolved is False


# -- plain unittest, and what needs no run -------------------------------------------

UNITTEST_CASES = """\
import unittest

from calc import add


class Calc(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)
"""


async def test_unittest_runner_and_its_tamper_scope(make_repo: object) -> None:
    repo = make_repo(  # type: ignore[operator]
        {
            "calc.py": "def add(a, b):\n    return a - b\n",
            "tests/__init__.py": "# tests\n",
            "tests/test_calc.py": UNITTEST_CASES,
        }
    )
    gold = diff("calc.py", "def add(a, b):\n    return a - b\n", "def add(a, b):\n    return a + b\n")
    # A test package's __init__.py that rewrites failures into passes before any test runs.
    wrap = "import unittest\nunittest.TestResult.addFailure = unittest.TestResult.addSuccess\n"
    common = dict(repo=str(repo), runner="unittest", fail_to_pass=["test_add (tests.test_calc.Calc)"])
    good, cheated, site, sympy_missing, no_runtests = await _observe(
        Candidate("run_suite", "patch", id="gold", patch=gold, **common),
        Candidate(
            "run_suite", "patch", id="init", patch=diff("tests/__init__.py", "# tests\n", wrap), **common
        ),
        Candidate(
            "run_suite", "patch", id="site", patch=gold + diff("sitecustomize.py", "", "x = 1\n"), **common
        ),
        Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests/test_calc.py"], runner="sympy"),
        Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests"], runner="django"),
    )
    assert good.resolved is True and good.runner == "unittest"
    assert [t.test for t in good.test_results] == ["test_add (tests.test_calc.Calc.test_add)"]
    assert cheated.flags.tampered and not cheated.resolved
    assert site.flags.tampered and not site.resolved
    # No sympy anywhere: sympy's runner cannot start, the unpatched repo neither.
    assert sympy_missing.flags.env_broken and sympy_missing.env_fault.kind == "missing_module"
    # Not a Django checkout: its runner cannot start, on the unpatched repo too.
    assert no_runtests.flags.env_broken and no_runtests.env_fault.kind == "no_runner"
    assert "tests/runtests.py" in no_runtests.env_fault.message


def test_tamper_scope_per_runner() -> None:
    dj, sy, ut = RUNNERS["django"], RUNNERS["sympy"], RUNNERS["unittest"]
    for path in (
        "tests/runtests.py",
        "tests/test_sqlite.py",
        "tests/model_fields/__init__.py",
        "tests/x/models.py",
    ):
        assert dj.touches_oracle([path]), path
    for path in ("bin/test", "sympy/testing/runtests.py", "sympy/core/tests/test_basic.py", "conftest.py"):
        assert sy.touches_oracle([path]), path
    for runner in (dj, sy, ut):
        for path in ("sitecustomize.py", "src/usercustomize.py", "x.pth", "pkg/tests/__init__.py"):
            assert runner.touches_oracle([path]), (runner.name, path)
    assert not dj.touches_oracle(["django/utils/text.py", "django/test/runner.py", "django/test/__init__.py"])
    assert not sy.touches_oracle(["sympy/core/basic.py", "sympy/testing/__init__.py"])
    assert ut.touches_oracle(["test/__init__.py"]) and ut.touches_oracle(["pkg/test_util/__init__.py"])
    assert not ut.touches_oracle(["calc.py"])


def test_names_labels_and_the_runner_of_an_instance() -> None:
    assert same_test("test_x (a.b.C)", "test_x (a.b.C.test_x)")
    assert not same_test("test_x (a.b.C)", "test_y (a.b.C.test_y)")
    patch = "diff --git a/tests/model_fields/test_jsonfield.py b/tests/model_fields/test_jsonfield.py\n"
    patch += "diff --git a/tests/model_fields/data.json b/tests/model_fields/data.json\n"
    assert RUNNERS["django"].labels(patch_paths(patch), ()) == ("model_fields.test_jsonfield",)
    assert RUNNERS["django"].argv(["model_fields.test_jsonfield"]) == [
        "tests/runtests.py",
        "--verbosity",
        "2",
        "--settings=test_sqlite",
        "--parallel",
        "1",
        "model_fields.test_jsonfield",
    ]
    assert RUNNERS["sympy"].argv(["sympy/core/tests/test_basic.py"])[:3] == ["bin/test", "-C", "--verbose"]
    assert runner_for_instance("django/django", None)[0] == "django"
    assert runner_for_instance("sympy/sympy", None)[0] == "sympy"
    assert runner_for_instance("pallets/flask", None)[0] == "pytest"
    cmd = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose"
    assert runner_for_instance("x/y", cmd)[0] == "sympy"
    assert (
        runner_for_instance(None, "./tests/runtests.py --verbosity 2 --settings=test_sqlite")[0] == "django"
    )
    assert runner_for_instance(None, "python -m unittest -v")[0] == "unittest"
    assert choose_runner("django__django-11099", lambda p: False, "", ())[0] == "django"
    assert choose_runner("acme-1", lambda p: False, "", ("test_x (m.C)",))[0] == "unittest"
    with pytest.raises(RequestError, match="unknown runner"):
        Candidate("run_suite", "test_subset", repo=".", runner="nose")  # type: ignore[arg-type]
    with pytest.raises(RequestError, match="is for a Python run_suite"):
        route(Candidate("run_entry", "command", command=["true"], runner="django"))


def test_aexec_swebench_grades_a_unittest_instance(make_repo: object, tmp_path: Path) -> None:
    """``aexec swebench`` end to end on a plain-unittest project: the runner is chosen
    from the expected names, recorded with its reason, and the gold patch resolves."""
    import json

    from aexec import Options
    from aexec._swebench import main

    repo = make_repo({"calc.py": "def add(a, b):\n    return a - b\n", "tests/__init__.py": "# tests\n"})  # type: ignore[operator]
    test_patch = diff("tests/test_calc.py", "", UNITTEST_CASES)
    gold = diff("calc.py", "def add(a, b):\n    return a - b\n", "def add(a, b):\n    return a + b\n")
    instances = tmp_path / "instances.json"
    instances.write_text(
        json.dumps(
            [
                {
                    "instance_id": "calc-1",
                    "repo": str(repo),
                    "test_patch": test_patch,
                    "FAIL_TO_PASS": json.dumps(["test_add (tests.test_calc.Calc)"]),
                    "PASS_TO_PASS": "[]",
                }
            ]
        )
    )
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps([{"instance_id": "calc-1", "model_name_or_path": "m", "model_patch": gold}]))
    out = tmp_path / "report.json"
    assert main(str(preds), str(instances), str(out), options=Options(cache_dir=None)) == 0
    report = json.loads(out.read_text())
    assert report["resolved_ids"] == ["calc-1"]
    entry = report["instances"]["calc-1"]
    assert entry["runner"] == "unittest" and "unittest names" in entry["runner_reason"]
