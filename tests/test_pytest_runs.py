"""Verdicts from pytest's own hooks, on real repos with every kind of outcome."""

from __future__ import annotations

import pytest

from aexec import Candidate, Policy, observe

from .conftest import MakeRepo, diff

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """What the run does and how it is judged, not the event loop: one backend. (The
    supervisor's, fork server's and cancellation's tests run on both.)"""
    return "asyncio"


MIXED = {
    "lib.py": "def double(x):\n    return 2 * x\n",
    "tests/test_mixed.py": """
        import pytest
        from lib import double

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture broke")

        def test_passes():
            assert double(2) == 4

        def test_fails():
            assert double(2) == 5

        def test_errors_in_setup(broken):
            pass

        @pytest.mark.skip(reason="not today")
        def test_skipped():
            pass

        @pytest.mark.xfail(reason="known")
        def test_xfails():
            assert False

        class TestGroup:
            @pytest.mark.parametrize("n", [1, 2])
            def test_param(self, n):
                assert double(n) == 2 * n
    """,
}


async def test_every_verdict_kind(make_repo: MakeRepo) -> None:
    repo = make_repo(MIXED)
    obs = await observe(Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests/test_mixed.py"]))
    verdicts = {t.test.split("::", 1)[1]: t.verdict for t in obs.test_results}
    assert verdicts == {
        "test_passes": "passed",
        "test_fails": "failed",
        "test_errors_in_setup": "errored",
        "test_skipped": "skipped",
        "test_xfails": "skipped",
        "TestGroup::test_param[1]": "passed",
        "TestGroup::test_param[2]": "passed",
    }
    assert obs.failure is not None and obs.failure.failure_class == "assertion"
    classes = sorted(f.failure_class for f in obs.failures)
    assert classes == ["assertion", "runtime"]  # the fixture's RuntimeError is kept as detail


@pytest.mark.parametrize(
    ("top", "klass"),
    [
        ("x = (\n", "syntax"),
        ("RATE = UNDEFINED\n", "compile"),
        ("import aexec_missing_module\n", "dependency"),
        ("len(5)\n", "compile"),
        ("blob = bytearray(1 << 40)\n", "resource"),  # more than the machine: MemoryError here
    ],
)
async def test_module_level_faults_at_collection(make_repo: MakeRepo, top: str, klass: str) -> None:
    repo = make_repo(MIXED)
    lib = (repo / "lib.py").read_text()
    patch = diff("lib.py", lib, top + lib)
    obs = await observe(
        Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests/test_mixed.py"], patch=patch)
    )
    assert obs.failure is not None, obs.stderr
    assert obs.failure.failure_class == klass
    assert obs.failure.location.startswith("lib.py:")
    assert obs.verdict == "fail"


@pytest.mark.parametrize(
    ("top", "klass"),
    [
        ("x = (\n", "syntax"),
        ("RATE = UNDEFINED\n", "compile"),
        ("import aexec_missing_module\n", "dependency"),
    ],
)
async def test_module_level_faults_in_what_a_conftest_imports(
    make_repo: MakeRepo, top: str, klass: str
) -> None:
    """pytest exits with status 4 ("ImportError while loading conftest") before any hook
    sees the exception: it is read from pytest's report, classified and located as a
    collection error would be (seen in the equivalence corpus: semver's conftest imports
    the package)."""
    repo = make_repo({**MIXED, "tests/conftest.py": "from lib import double\n"})
    lib = (repo / "lib.py").read_text()
    obs = await observe(
        Candidate(
            "run_suite",
            "patch",
            repo=str(repo),
            tests=["tests/test_mixed.py"],
            patch=diff("lib.py", lib, top + lib),
        )
    )
    assert obs.verdict == "fail" and not obs.flags.env_broken, (obs.verdict, obs.error)
    assert obs.failure is not None and obs.failure.failure_class == klass, obs.stderr
    assert obs.failure.location.startswith("lib.py:"), obs.failure
    assert obs.failure.message.startswith("tests/conftest.py: ")
    assert obs.test_results == ()  # plain pytest's junit lists no testcase either


async def test_a_module_that_fails_to_import_is_listed_errored_under_its_collect_nodeid(
    make_repo: MakeRepo,
) -> None:
    """Plain pytest's junit XML lists a module it could not collect as one ``error``
    testcase; aexec lists it too, under pytest's collect-report node id, without counting
    it as a test that ran: the failure, its class and the empty-success guard are those
    of the collection error."""
    repo = make_repo(
        {
            **MIXED,
            "lib2.py": "THING = UNDEFINED\n",
            "tests/test_broken.py": "from lib2 import THING\n\ndef test_never():\n    assert THING == 1\n",
        }
    )
    both = await observe(
        Candidate(
            "run_suite", "test_subset", repo=str(repo), tests=["tests/test_broken.py", "tests/test_mixed.py"]
        )
    )
    # pytest stops at a collection error ("Interrupted: 1 error during collection"):
    # no test of either module runs, in plain pytest as here
    assert [(t.test, t.verdict, t.f2p, t.p2p) for t in both.test_results] == [
        ("tests/test_broken.py", "errored", False, False)
    ]
    assert both.verdict == "fail" and not both.flags.empty_success and not both.flags.env_broken
    assert both.failure is not None and both.failure.failure_class == "compile"
    assert both.failure.message.startswith("tests/test_broken.py: ")
    assert [f.failure_class for f in both.failures] == ["compile"]  # no second failure for the entry

    # a repair of the module: its tests are FAIL_TO_PASS (absent before), the module's
    # entry is gone (pytest collected it)
    fixed = await observe(
        Candidate(
            "run_suite",
            "patch",
            repo=str(repo),
            tests=["tests/test_broken.py"],
            patch=diff("lib2.py", "THING = UNDEFINED\n", "THING = 1\n"),
        )
    )
    assert fixed.verdict == "pass"
    assert [(t.test, t.verdict, t.f2p) for t in fixed.test_results] == [
        ("tests/test_broken.py::test_never", "passed", True)
    ]


async def test_verdicts_before_a_timeout_survive_it(make_repo: MakeRepo) -> None:
    repo = make_repo(
        {
            "tests/test_slow.py": """
            import time

            def test_a_quick_one():
                assert True

            def test_b_hangs():
                time.sleep(60)

            def test_c_never_reached():
                assert True
        """,
        }
    )
    obs = await observe(
        Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests"], policy=Policy(timeout_s=3))
    )
    assert obs.timed_out and obs.exit_code is None
    assert obs.failure is not None and obs.failure.failure_class == "timeout"
    assert obs.failure.location == "tests/test_slow.py::test_b_hangs"
    assert [(t.test.rsplit("::", 1)[1], t.verdict) for t in obs.test_results] == [
        ("test_a_quick_one", "passed"),
        ("test_b_hangs", "errored"),
    ]


async def test_function_body_faults_are_classified_by_type(make_repo: MakeRepo) -> None:
    repo = make_repo(MIXED)
    lib = (repo / "lib.py").read_text()
    for body, klass in (
        ("    len(5)\n", "type"),
        ("    {}['k']\n", "runtime"),
        ("    import aexec_nope\n", "dependency"),
    ):
        patch = diff("lib.py", lib, lib.replace("    return 2 * x\n", body + "    return 2 * x\n"))
        obs = await observe(
            Candidate(
                "run_suite",
                "test_subset",
                repo=str(repo),
                tests=["tests/test_mixed.py::test_passes"],
                patch=patch,
            )
        )
        assert obs.failure is not None and obs.failure.failure_class == klass
        assert obs.failure.location == "lib.py:2"


async def test_build_check_compiles_the_tree_and_imports_touched_modules(make_repo: MakeRepo) -> None:
    repo = make_repo({"pkg/__init__.py": "", "pkg/core.py": "def f():\n    return 1\n"})
    core = (repo / "pkg/core.py").read_text()
    cases = {
        "empty_success": core + "# a comment\n",
        "syntax": core + "def g(:\n",
        "compile": "VALUE = MISSING\n" + core,
        "dependency": "import aexec_nope\n" + core,
    }
    for expected, new in cases.items():
        obs = await observe(
            Candidate("build_check", "patch", repo=str(repo), patch=diff("pkg/core.py", core, new))
        )
        assert obs.action == "compile_parse" and obs.environment.timeout_s == 60
        got = obs.failure.failure_class if obs.failure else obs.verdict
        assert got == expected, obs.stderr


async def test_skipping_conftest_is_tampering(make_repo: MakeRepo) -> None:
    repo = make_repo(MIXED)
    conftest = "import pytest\n\ndef pytest_collection_modifyitems(items):\n    for i in items:\n        i.add_marker(pytest.mark.skip)\n"
    obs = await observe(
        Candidate(
            "run_suite",
            "test_subset",
            repo=str(repo),
            tests=["tests/test_mixed.py"],
            patch=diff("conftest.py", "", conftest),
        )
    )
    assert obs.flags.tampered and obs.verdict == "tampered"
    assert all(t.verdict == "skipped" for t in obs.test_results)


async def test_a_failed_subtest_fails_its_test_and_pytest_fail_is_assertion(make_repo: MakeRepo) -> None:
    repo = make_repo(
        {
            "tests/test_sub.py": """
            import unittest

            import pytest

            class T(unittest.TestCase):
                def test_sub(self):
                    for i in range(3):
                        with self.subTest(i=i):
                            self.assertNotEqual(i, 1)

            def test_fail():
                pytest.fail("nope")
        """,
        }
    )
    obs = await observe(Candidate("run_suite", "test_subset", repo=str(repo), tests=["./tests/test_sub.py"]))
    verdicts = {t.test.rsplit("::", 1)[1]: t.verdict for t in obs.test_results}
    assert verdicts == {"test_sub": "failed", "test_fail": "failed"}
    assert obs.verdict == "fail"
    assert {f.failure_class for f in obs.failures} == {"assertion"}
