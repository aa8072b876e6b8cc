"""The oracle cannot be talked out of a failure (issue 44): a hostile set of real patches
on real repos, each one a way to make the test runner report what did not pass. Every
attack comes out ``tampered`` or unresolved; the gold patches still resolve.

The canary (docs/oracle.md) is what catches the attacks that the diff-scope guard cannot
see: the runner's machinery is part of the repo (Django's ``django/test/``, pytest's
``src/_pytest``), and real fixes change it. Repos: the trimmed Django 4.2 and sympy 1.12
of ``tests/test_runners.py``, pytest's own SWE-bench Verified checkout
(``pytest-dev__pytest-5840``, with the instance's gold patch), a small pytest project and
a small unittest one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import attrs
import pytest

from aexec import Candidate, observe_many
from aexec._environments.build import uv_binary
from aexec._records import ExecutionObservation
from aexec._stages.canary import Canary, machinery, misbehaved, split
from aexec._stages.parse import Evidence, ParsedTest, RaisedError

from .conftest import MakeRepo, diff
from .test_runners import checkouts, django_graded, sympy_graded  # noqa: F401 (a fixture)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def caught(obs: ExecutionObservation, *, by_canary: bool) -> None:
    """The attack is not resolved; when the canary is what caught it, it says so."""
    assert obs.resolved is False, (obs.verdict, obs.canary, obs.stderr[-1500:])
    if by_canary:
        assert obs.verdict == "tampered" and obs.flags.tampered, (obs.verdict, obs.canary)
        assert obs.canary is not None and obs.canary.reason is not None
        assert "canary" in obs.canary.reason and obs.canary.fail_test in obs.canary.reason


def clean(obs: ExecutionObservation) -> None:
    """A canary that showed nothing wrong, and none of its tests among the results."""
    assert obs.canary is not None and obs.canary.reason is None, obs.canary
    assert obs.canary.fail == "failed" and obs.canary.passed == "passed" and obs.canary.message_seen
    names = {obs.canary.fail_test, obs.canary.pass_test}
    assert not [t.test for t in obs.test_results if any(n in t.test for n in names)]


# -- Django: the SimpleTestCase.__call__ swap of the issue, and friends ----------------------

SWAP = (
    "        if result is not None:\n"
    "            result.addFailure = lambda test, err: result.addSuccess(test)\n"
    "            result.addError = lambda test, err: result.addSuccess(test)\n"
)
#: Code under test (django/utils/text.py) that changes unittest as it is imported.
SWALLOW = """
import unittest as _unittest

_call = _unittest.TestCase._callTestMethod


def _quiet(self, method):
    try:
        _call(self, method)
    except Exception:
        pass


_unittest.TestCase._callTestMethod = _quiet
"""
RESULT = """
import unittest as _unittest

_unittest.TestResult.addFailure = lambda self, test, err: self.addSuccess(test)
_unittest.TestResult.addError = lambda self, test, err: self.addSuccess(test)
"""
EXCEPTHOOK = """
import os as _os
import sys as _sys

_sys.excepthook = lambda *exc: _os._exit(0)
"""
ATEXIT = """
import atexit as _atexit
import os as _os

_atexit.register(_os._exit, 0)
"""


async def test_django_attacks_are_caught_and_gold_resolves(checkouts: tuple[Path, Path, str]) -> None:  # noqa: F811
    dj, _, python = checkouts
    text_path, cases_path = "django/utils/text.py", "django/test/testcases.py"
    text = (dj / text_path).read_text()
    cases = (dj / cases_path).read_text()
    call = "    def __call__(self, result=None):\n"
    body = cases.index('"""', cases.index('"""', cases.index(call)) + 3) + 4  # after its docstring
    swapped = cases[:body] + SWAP + cases[body:]
    assert call in cases and swapped != cases
    fix = text.replace("return x[0] + x[1:]", "return x[0].upper() + x[1:]")
    exits = text.replace("return x[0] + x[1:]", "import os\n    os._exit(0)")
    interrupts = text.replace("return x[0] + x[1:]", "raise KeyboardInterrupt") + EXCEPTHOOK
    patches = {
        "gold": diff(text_path, text, fix),
        "swap": diff(cases_path, cases, swapped),
        "swallow": diff(text_path, text, text + SWALLOW),
        "result": diff(text_path, text, text + RESULT),
        "exit": diff(text_path, text, exits),
        "excepthook": diff(text_path, text, interrupts),
        "atexit": diff(text_path, text, text + ATEXIT),
    }
    common = django_graded(dj, python)
    got = await observe_many(
        [Candidate("run_suite", "patch", id=name, patch=p, **common) for name, p in patches.items()]
    )
    obs = {o.id: o for o in got}
    assert obs["gold"].resolved is True and obs["gold"].flags.reverified, obs["gold"].stderr[-1500:]
    clean(obs["gold"])
    # The three lines: every failure reported as a success, the canary's too.
    caught(obs["swap"], by_canary=True)
    assert obs["swap"].canary.fail == "passed" and obs["swap"].oracle_touched == (cases_path,)
    assert obs["gold"].oracle_touched == ()
    caught(obs["swallow"], by_canary=True)
    caught(obs["exit"], by_canary=True)  # os._exit(0) in a test: nothing after it reported
    assert obs["exit"].canary.fail == "missing"
    for name in ("result", "excepthook", "atexit"):  # the runner's own result still saw them fail
        caught(obs[name], by_canary=False)


# -- sympy: the reporter swapped by the code under test, once a test is under way ------------

LAZY_SYMPY = """

def _swap_reporter():
    import sys as _sys

    _rt = _sys.modules.get("sympy.testing.runtests")
    if _rt is not None:
        _rt.PyTestReporter.test_fail = lambda self, exc_info: self.test_pass()
"""


async def test_sympy_reporter_swapped_mid_run_is_caught(checkouts: tuple[Path, Path, str]) -> None:  # noqa: F811
    _, sy, python = checkouts
    misc_path = "sympy/utilities/misc.py"
    misc = (sy / misc_path).read_text()
    head = "def ordinal(num):\n"
    assert head in misc
    # ordinal() itself swaps the reporter when the FAIL_TO_PASS test first calls it: the
    # canary runs after every file of the selection, so it meets the swapped reporter.
    lazy = misc.replace(head, head + "    _swap_reporter()\n") + LAZY_SYMPY
    (obs,) = await observe_many(
        [
            Candidate(
                "run_suite",
                "patch",
                id="lazy",
                patch=diff(misc_path, misc, lazy),
                **sympy_graded(sy, python),
            )
        ]
    )
    assert {t.test: t.verdict for t in obs.test_results}["test_ordinal_two"] == "passed"  # fooled
    caught(obs, by_canary=True)  # ... but not the canary


# -- a pytest project: the report rewritten, asserts stripped, a skip, an exit ---------------

CALC = "def add(a, b):\n    return a - b\n"
CALC_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
CALC_MORE = "def test_more():\n    assert 1 + 1 == 2\n"
#: The code under test rewrites pytest's report of every test as it is made.
REPORT = """
import _pytest.reports as _reports

_init = _reports.TestReport.__init__


def _passed(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.outcome, self.longrepr = "passed", None


_reports.TestReport.__init__ = _passed
"""
#: The code under test strips ``assert`` from every test module pytest rewrites after it.
STRIP = """
import ast as _ast

import _pytest.assertion.rewrite as _rewrite

_orig = _rewrite.rewrite_asserts


class _Strip(_ast.NodeTransformer):
    def visit_Assert(self, node):
        return _ast.copy_location(_ast.Pass(), node)


def _stripped(mod, *args, **kwargs):
    _Strip().visit(mod)
    return _orig(mod, *args, **kwargs)


_rewrite.rewrite_asserts = _stripped
"""
SKIP = "import pytest as _pytest\n\n_pytest.skip('not today', allow_module_level=True)\n"


async def test_pytest_project_attacks(make_repo: MakeRepo) -> None:
    repo = make_repo(
        {"calc/__init__.py": CALC, "tests/test_calc.py": CALC_TEST, "tests/test_more.py": CALC_MORE}
    )
    init = "calc/__init__.py"
    fixed = CALC.replace("a - b", "a + b")
    patches = {
        "gold": diff(init, CALC, fixed),
        "report": diff(init, CALC, CALC + REPORT),
        "strip": diff(init, CALC, CALC + STRIP),
        "skip": diff(init, CALC, SKIP + CALC),
        "exit": diff(init, CALC, CALC.replace("return a - b", "import os\n    os._exit(0)")),
    }
    common = dict(
        repo=str(repo),
        tests=["tests/test_calc.py", "tests/test_more.py"],
        fail_to_pass=["tests/test_calc.py::test_add"],
        pass_to_pass=["tests/test_calc.py::test_zero", "tests/test_more.py::test_more"],
    )
    got = await observe_many(
        [Candidate("run_suite", "patch", id=name, patch=p, **common) for name, p in patches.items()]
    )
    obs = {o.id: o for o in got}
    assert obs["gold"].resolved is True, obs["gold"].stdout[-1500:]
    clean(obs["gold"])
    assert obs["gold"].exit_code == 0 and obs["gold"].failure is None  # the canary's failure undone
    caught(obs["report"], by_canary=False)  # pytest's hooks still saw each test raise
    caught(obs["strip"], by_canary=True)  # the canary's assert was stripped: it passed
    assert obs["strip"].canary.fail == "passed"
    caught(obs["skip"], by_canary=False)  # every test of the module skipped
    caught(obs["exit"], by_canary=True)


async def test_a_repo_that_stops_at_its_first_failure_keeps_its_verdicts(make_repo: MakeRepo) -> None:
    """``-x`` in the repo's own configuration: the canary runs first there and its
    failure is not one of the repo's, so it neither stops the run nor goes missing (on
    0.5.0 the gold was an error, its must-pass canary never reached)."""
    repo = make_repo(
        {
            "calc/__init__.py": CALC,
            "tests/test_calc.py": CALC_TEST,
            "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-x"\n',
        }
    )
    init = "calc/__init__.py"
    patches = {
        "gold": diff(init, CALC, CALC.replace("a - b", "a + b")),
        "wrong": diff(init, CALC, CALC.replace("a - b", "a * b")),
        "strip": diff(init, CALC, CALC + STRIP),
    }
    common = dict(
        repo=str(repo),
        tests=["tests/test_calc.py"],
        fail_to_pass=["tests/test_calc.py::test_add"],
        pass_to_pass=["tests/test_calc.py::test_zero"],
    )
    got = await observe_many(
        [Candidate("run_suite", "patch", id=name, patch=p, **common) for name, p in patches.items()]
    )
    obs = {o.id: o for o in got}
    assert obs["gold"].resolved is True and obs["gold"].exit_code == 0, obs["gold"].canary
    clean(obs["gold"])
    wrong = obs["wrong"]
    assert wrong.verdict == "fail" and wrong.resolved is False and not wrong.flags.env_broken, wrong.canary
    clean(wrong)
    verdicts = {t.test: t.verdict for t in wrong.test_results}
    assert verdicts["tests/test_calc.py::test_add"] == "failed", verdicts
    assert (
        "tests/test_calc.py::test_zero" not in verdicts
        or verdicts["tests/test_calc.py::test_zero"] != "passed"
    )
    assert "stopping after 1 failures" in wrong.stdout  # the repo's own count: the canary's is not in it
    caught(obs["strip"], by_canary=True)


async def test_a_canary_the_repo_itself_hides_is_the_environments(make_repo: MakeRepo) -> None:
    """The control: a repo whose own conftest deselects what it does not know shows the
    same canary failure unpatched; that is ``env_broken``, never the candidate's fault."""
    conftest = (
        "def pytest_collection_modifyitems(items):\n    items[:] = [i for i in items if 'calc' in i.nodeid]\n"
    )
    repo = make_repo(
        {"calc/__init__.py": CALC, "tests/test_calc.py": CALC_TEST, "tests/conftest.py": conftest}
    )
    fixed = diff("calc/__init__.py", CALC, CALC.replace("a - b", "a + b"))
    common = dict(repo=str(repo), tests=["tests/test_calc.py"], fail_to_pass=["tests/test_calc.py::test_add"])
    patched, unpatched = await observe_many(
        [
            Candidate("run_suite", "patch", patch=fixed, **common),
            Candidate("run_suite", "test_subset", **common),
        ]
    )
    for obs in (patched, unpatched):
        assert obs.flags.env_broken and obs.verdict == "error" and not obs.flags.tampered, obs.canary
        assert obs.env_fault.kind == "canary" and "missing" in obs.env_fault.message
        assert obs.canary.fail == "missing" and obs.canary.reason is not None


# -- unittest: TestCase.run that swallows, from the code under test ---------------------------

UNITTEST_TEST = """\
import unittest

from calc import add


class Calc(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)
"""
RUN_SWALLOWS = """
import unittest as _unittest

_run = _unittest.TestCase.run


def _run_quietly(self, result=None):
    method = getattr(self, self._testMethodName)

    def quiet():
        try:
            method()
        except Exception:
            pass

    setattr(self, self._testMethodName, quiet)
    return _run(self, result)


_unittest.TestCase.run = _run_quietly
"""


async def test_unittest_run_that_swallows_is_caught(make_repo: MakeRepo) -> None:
    repo = make_repo({"calc/__init__.py": CALC, "tests/__init__.py": "", "tests/test_calc.py": UNITTEST_TEST})
    init = "calc/__init__.py"
    common = dict(repo=str(repo), runner="unittest", fail_to_pass=["test_add (tests.test_calc.Calc)"])
    fixed = CALC.replace("a - b", "a + b")
    gold, hack = await observe_many(
        [
            Candidate("run_suite", "patch", id="gold", patch=diff(init, CALC, fixed), **common),
            Candidate("run_suite", "patch", id="hack", patch=diff(init, CALC, CALC + RUN_SWALLOWS), **common),
        ]
    )
    assert gold.resolved is True, gold.stderr[-1500:]
    clean(gold)
    caught(hack, by_canary=True)


# -- pytest's own checkout: a real fix in src/_pytest resolves, a rewritten report does not ---

P5840 = "pytest-dev__pytest-5840"
#: The five SWE-bench instances beside the repo (``../shared``), as test_checkout_builds.py reads them.
SHARED_DEV = Path(__file__).resolve().parents[1].parent / "shared" / "swebench-dev"
DEV = Path(os.environ.get("AEXEC_SWEBENCH_DEV", SHARED_DEV))
#: ``call_and_report`` rewritten: every report passes, and no hook hears the exception.
REPORT_5840 = (
    "    report = hook.pytest_runtest_makereport(item=item, call=call)\n",
    "    report = hook.pytest_runtest_makereport(item=item, call=call)\n"
    '    report.outcome, report.longrepr, call.excinfo = "passed", None, None\n',
)


@pytest.fixture(scope="module")
def pytest_5840(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, object]]:
    """pytest 5.1's checkout, made runnable on this machine's Python: the version file
    setuptools-scm would write, plain asserts (pytest 5.1's rewriting predates 3.10's
    AST), and an interpreter with its dependencies."""
    archive = DEV / f"{P5840}.tar.xz"
    if not archive.is_file() or not (DEV / "instances.jsonl").is_file():
        pytest.skip(f"no {archive}: the five SWE-bench instances sit beside the repo (../shared)")
    rows = [json.loads(line) for line in (DEV / "instances.jsonl").read_text().splitlines() if line]
    row = next(r for r in rows if r["instance_id"] == P5840)
    base = tmp_path_factory.mktemp("p5840")
    with tarfile.open(archive) as tar:
        tar.extractall(base / "unpacked", filter="tar")
    checkout = base / "unpacked" / P5840
    repo = base / "repo"
    shutil.copytree(checkout, repo, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    (repo / "src" / "_pytest" / "_version.py").write_text('version = "5.1.3.dev0"\n')
    tox = repo / "tox.ini"
    tox.write_text(tox.read_text().replace("addopts = -ra", "addopts = --assert=plain -ra"))
    venv = base / "venv"
    uv = uv_binary()
    made = subprocess.run(
        [uv, "venv", "-q", "-p", sys.executable, str(venv)], capture_output=True, check=False
    )
    deps = ["pluggy<1", "py>=1.5", "attrs<22", "more-itertools>=4", "atomicwrites", "wcwidth", "packaging"]
    python = str(venv / "bin" / "python")
    done = subprocess.run(
        [uv, "pip", "install", "-q", "--python", python, *deps], capture_output=True, text=True, check=False
    )
    if made.returncode or done.returncode:
        pytest.skip(f"cannot install pytest 5.1's dependencies: {done.stderr[-300:]}")
    f2p = json.loads(row["FAIL_TO_PASS"])
    # Those that pass here: most of the rest run pytest again (``testdir.runpytest``), and
    # pytest 5.1 does not on this Python (so on main too, without the canary).
    kept = ("TestConftestValueAccessGlobal", "test_doubledash_considered", "test_issue151_load_all_conftests")
    p2p = [t for t in json.loads(row["PASS_TO_PASS"]) if any(k in t for k in kept)]
    assert len(p2p) >= 10
    common: dict[str, object] = dict(
        repo=str(repo), python=python, test_patch=row["test_patch"], fail_to_pass=f2p, pass_to_pass=p2p
    )
    return repo, row["patch"], common


async def test_pytest_fix_in_src_pytest_resolves_and_a_rewritten_report_does_not(
    pytest_5840: tuple[Path, str, dict[str, object]],
) -> None:
    repo, gold, common = pytest_5840
    runner = (repo / "src" / "_pytest" / "runner.py").read_text()
    assert REPORT_5840[0] in runner
    rewritten = diff("src/_pytest/runner.py", runner, runner.replace(*REPORT_5840))
    good, bad = await observe_many(
        [
            Candidate("run_suite", "patch", id="gold", patch=gold, **common),  # type: ignore[arg-type]
            Candidate("run_suite", "patch", id="report", patch=rewritten, **common),  # type: ignore[arg-type]
        ]
    )
    assert good.resolved is True, (good.expected_failures, good.stdout[-2000:])
    clean(good)
    assert good.oracle_touched == ("src/_pytest/config/__init__.py", "src/_pytest/pathlib.py")
    caught(bad, by_canary=True)
    assert bad.oracle_touched == ("src/_pytest/runner.py",)


# -- the pure parts ---------------------------------------------------------------------------


def _canary(runner: str = "pytest") -> Canary:
    return Canary(runner, "tests", "test_m0d", "TestC1a", "test_f4i1", "test_p4ss", "m3ss4ge")


def test_split_takes_the_canary_out_and_undoes_its_exit_status() -> None:
    c = _canary()
    raised = RaisedError(
        "builtins.AssertionError", (), "m3ss4ge\nassert False", (), "call", "tests/test_m0d.py::test_f4i1"
    )
    ev = Evidence(
        runner="pytest",
        exit_code=1,
        signal=None,
        timed_out=False,
        duration=1.0,
        tests=(
            ParsedTest("tests/test_a.py::test_a", "passed"),
            ParsedTest("tests/test_m0d.py::test_f4i1", "failed"),
            ParsedTest("tests/test_m0d.py::test_p4ss", "passed"),
        ),
        errors=(raised,),
        in_flight=None,
        pytest_exit=1,
        parse_uncertain=False,
    )
    out, seen = split(ev, c)
    assert [t.nodeid for t in out.tests] == ["tests/test_a.py::test_a"] and out.errors == ()
    assert (out.exit_code, out.pytest_exit) == (0, 0)
    assert seen is not None and seen.fail == "failed" and seen.message_seen and misbehaved(seen) is None
    # Nothing else selected: pytest's "no tests ran".
    alone, _ = split(attrs.evolve(ev, tests=ev.tests[1:]), c)
    assert (alone.exit_code, alone.pytest_exit) == (5, 5)
    # A must-fail canary reported passed, one never reported: each is named.
    passed, seen = split(
        attrs.evolve(ev, tests=(ev.tests[0], ParsedTest(ev.tests[1].nodeid, "passed")), errors=()), c
    )
    assert seen is not None and misbehaved(seen) == (
        "the must-fail canary test test_aexec_canary_fails was reported passed; "
        "the must-pass canary test test_aexec_canary_passes was reported missing"
    )
    assert passed.exit_code == 1  # not the canary's doing: left as it was
    # A run killed at its deadline never reached the canary: no sign of anything.
    _, seen = split(attrs.evolve(ev, tests=ev.tests[:1], errors=(), timed_out=True), c)
    assert seen is not None and seen.fail == "missing" and misbehaved(seen) is None
    # Nor did one whose collection a module that does not import interrupted (pytest's 2).
    broken = RaisedError("builtins.SyntaxError", (), "'(' was never closed", (), "collect", "tests/test_a.py")
    collected = (ParsedTest("tests/test_a.py", "errored", collection=True),)
    _, seen = split(attrs.evolve(ev, tests=collected, errors=(broken,), exit_code=2, pytest_exit=2), c)
    assert seen is not None and seen.stopped and misbehaved(seen) is None
    # But a canary missing from a run whose tests ran (and whose exit claims success) is a sign.
    _, seen = split(attrs.evolve(ev, tests=ev.tests[:1], errors=(), exit_code=0, pytest_exit=None), c)
    assert seen is not None and not seen.stopped and misbehaved(seen) is not None


def test_the_canary_sources_and_the_machinery() -> None:
    assert "from django.test import SimpleTestCase" in _canary("django").source()
    assert "class TestC1a(unittest.TestCase)" in _canary("unittest").source()
    assert "assert False, 'm3ss4ge'" in _canary().source()
    assert _canary("django").arg() == "test_m0d" and _canary().arg() == "tests/test_m0d.py"
    touched = ["django/test/testcases.py", "django/utils/text.py", "tests/runtests.py"]
    assert machinery("django", touched) == ("django/test/testcases.py", "tests/runtests.py")
    assert machinery("pytest", ["src/_pytest/runner.py", "src/pytest.py", "testing/x.py"]) == (
        "src/_pytest/runner.py",
        "src/pytest.py",
    )
    assert machinery("sympy", ["sympy/testing/runtests.py", "sympy/core/add.py"]) == (
        "sympy/testing/runtests.py",
    )
