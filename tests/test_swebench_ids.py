"""Issue 26, defects 2 and 10, on real pytest runs and real ``aexec swebench`` runs.

2. SWE-bench ships parametrized ids cut at their first space
   (``tests/test_ops.py::test_mul[two`` for ``test_mul[two three]``); its harness resolves
   them by prefix (swebench 5.0.2 ``_resolve_case``). An expected id no test answers to
   is named in the observation, with the reason.
10. A ``conftest.py`` that rewrites pytest's reports into passes does not get its passes
   into the report: ``tests_status`` says what aexec found.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from aexec import Candidate, observe
from aexec._records import ExpectedFailures, UnmatchedTest
from aexec._records import TestResult as Result
from aexec._serde import dumps, structure
from aexec._stages.grade import grade, selection, unmatched

from .test_swebench import (
    BUGGY,
    F2P,
    FORCE_PASS_CONFTEST,
    MORE,
    OPS,
    P2P,
    TEST_MORE,
    TEST_OPS,
    TESTS,
    diff_of,
    fix,
    make_git_repo,
    run_swebench,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """What the run does and how it is judged, not the event loop: one backend. (The
    supervisor's, fork server's and cancellation's tests run on both.)"""
    return "asyncio"


#: SWE-bench's form of ``test_mul[two three]`` and ``test_mul[one one]``.
CUT = ["tests/test_ops.py::test_mul[two", "tests/test_ops.py::test_mul[one"]
#: Cut short too, but no parameter of test_mul starts with it.
GHOST = "tests/test_ops.py::test_mul[three"


def test_a_cut_id_resolves_by_prefix_only_when_every_match_passed() -> None:
    c = Candidate("run_suite", "patch", repo="/r", fail_to_pass=["t.py::f[a", "t.py::g"], pass_to_pass=[])
    both = [Result("t.py::f[a b]", "passed"), Result("t.py::f[a c]", "passed"), Result("t.py::g", "passed")]
    assert grade(c, both, tampered=False, error=False) == (True, ExpectedFailures((), ()))
    assert unmatched(c, both) == ()
    # The matches disagree: SWE-bench's _resolve_case finds no key, and the id fails.
    split = [both[0], Result("t.py::f[a c]", "failed"), both[2]]
    assert grade(c, split, tampered=False, error=False) == (False, ExpectedFailures(("t.py::f[a",), ()))
    assert unmatched(c, split) == ()  # it matched tests; they did not all pass
    # An id whose brackets close is exact: no prefix match (``t.py::g`` is not ``t.py::gg``).
    other = [*both[:2], Result("t.py::gg", "passed")]
    assert grade(c, other, tampered=False, error=False) == (False, ExpectedFailures(("t.py::g",), ()))
    assert unmatched(c, other) == (UnmatchedTest("fail_to_pass", "t.py::g", "no test that ran has this id"),)


def test_an_unmatched_id_says_why() -> None:
    c = Candidate(
        "run_suite",
        "patch",
        repo="/r",
        fail_to_pass=["t.py::f[z", "u.py::h", "v.py::k"],
        pass_to_pass=["t.py::f[a b]"],
    )
    ran = [Result("t.py::f[a b]", "passed"), Result("u.py", "errored")]
    reasons = {u.test: (u.field, u.reason) for u in unmatched(c, ran) or ()}
    assert reasons["t.py::f[z"][0] == "fail_to_pass"
    assert "cut short" in reasons["t.py::f[z"][1] and "starts with it" in reasons["t.py::f[z"][1]
    assert reasons["u.py::h"][1] == "its file u.py did not collect"
    assert reasons["v.py::k"][1] == "no test of its file v.py ran"
    assert set(reasons) == {"t.py::f[z", "u.py::h", "v.py::k"}
    assert unmatched(c, []) == tuple(
        UnmatchedTest("fail_to_pass", n, "no test ran") for n in ("t.py::f[z", "u.py::h", "v.py::k")
    ) + (UnmatchedTest("pass_to_pass", "t.py::f[a b]", "no test ran"),)
    assert unmatched(Candidate("run_suite", "patch", repo="/r"), ran) is None


def test_a_cut_id_as_a_selector_selects_its_test_function() -> None:
    """pytest answers a cut id with "ERROR: not found": it is no node id. Its test
    function is, and runs every parameter the id may stand for."""
    c = Candidate("run_suite", "patch", repo="/r", tests=[CUT[0], "t.py::f[a b]", "u.py"], fail_to_pass=CUT)
    assert selection(c) == ("tests/test_ops.py::test_mul", "t.py::f[a b]", "u.py")


@pytest.fixture
def calc(tmp_path: Path) -> Path:
    return make_git_repo(tmp_path / "calc", {"calc/__init__.py": "", OPS: BUGGY, TESTS: TEST_OPS})


async def test_cut_ids_in_a_selection_run_and_resolve(calc: Path) -> None:
    obs = await observe(
        Candidate(
            "run_suite",
            "patch",
            id="cut",
            repo=str(calc),
            patch=fix(calc),
            tests=CUT,
            fail_to_pass=CUT,
            pass_to_pass=[],
        )
    )
    assert {t.test: t.verdict for t in obs.test_results} == {
        "tests/test_ops.py::test_mul[two three]": "passed",
        "tests/test_ops.py::test_mul[one one]": "passed",
    }
    assert obs.verdict == "pass" and obs.resolved is True and obs.expected_unmatched == ()


async def test_an_unmatched_id_is_named_in_the_observation(calc: Path) -> None:
    obs = await observe(
        Candidate(
            "run_suite",
            "patch",
            id="ghost",
            repo=str(calc),
            patch=fix(calc),
            fail_to_pass=[*CUT, GHOST],
            pass_to_pass=[],
        )
    )
    assert obs.verdict == "pass" and obs.resolved is False
    assert obs.expected_failures == ExpectedFailures((GHOST,), ())
    assert obs.expected_unmatched is not None and [(u.field, u.test) for u in obs.expected_unmatched] == [
        ("fail_to_pass", GHOST)
    ]
    assert "cut short" in obs.expected_unmatched[0].reason
    data = json.loads(dumps(obs))
    assert data["expected_unmatched"] == [
        {"field": "fail_to_pass", "test": GHOST, "reason": obs.expected_unmatched[0].reason}
    ]
    assert structure(data) == obs


async def test_a_report_rewriting_conftest_does_not_turn_failed_tests_into_passes(calc: Path) -> None:
    """The tests raised (aexec saw their exceptions); the conftest rewrote pytest's reports
    into passes. The test results, the grade and the failure agree with what ran."""
    test_patch = diff_of(calc, {MORE: TEST_MORE})
    cheat = diff_of(calc, {"tests/conftest.py": FORCE_PASS_CONFTEST})
    obs = await observe(
        Candidate(
            "run_suite",
            "patch",
            id="cheat",
            repo=str(calc),
            patch=cheat,
            test_patch=test_patch,
            fail_to_pass=F2P,
            pass_to_pass=P2P,
        )
    )
    assert obs.flags.tampered and obs.verdict == "tampered" and obs.resolved is False
    verdicts = {t.test: t.verdict for t in obs.test_results}
    assert verdicts == {**dict.fromkeys(F2P, "failed"), **dict.fromkeys(P2P, "passed")}
    assert obs.expected_failures == ExpectedFailures(tuple(F2P), ())
    assert {f.message.split(": ", 1)[0] for f in obs.failures} == set(F2P)


# --------------------------------------------------------------------------------------
# aexec swebench, end to end: one run, three instances
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def swebench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    root = tmp_path_factory.mktemp("swebench-ids")
    repo = make_git_repo(root / "calc", {"calc/__init__.py": "", OPS: BUGGY, TESTS: TEST_OPS})
    test_patch = diff_of(repo, {MORE: TEST_MORE})
    gold = fix(repo)
    cases = {
        # as SWE-bench ships sqlfluff-1625 and flask-5063: parametrized ids cut at a space
        "calc__cut-1": ([*CUT, F2P[2]], gold),
        "calc__cut-2": ([*CUT, GHOST], gold),
        "calc__cheat-3": (F2P, diff_of(repo, {"conftest.py": FORCE_PASS_CONFTEST})),
    }
    instances = [
        {
            "instance_id": ident,
            "repo": str(repo),
            "python": sys.executable,
            "test_patch": test_patch,
            "FAIL_TO_PASS": json.dumps(f2p),
            "PASS_TO_PASS": json.dumps(P2P),
        }
        for ident, (f2p, _) in cases.items()
    ]
    (root / "instances.json").write_text(json.dumps(instances))
    preds = [{"instance_id": i, "model_name_or_path": "m", "model_patch": p} for i, (_, p) in cases.items()]
    (root / "preds.json").write_text(json.dumps(preds))
    out = root / "report.json"
    done = run_swebench(root / "preds.json", root / "instances.json", out)
    report: dict[str, Any] = json.loads(out.read_text())
    return report, done.stderr


def test_swebench_resolves_cut_ids_as_swebench_does(swebench_run: tuple[dict[str, Any], str]) -> None:
    report, _ = swebench_run
    one = report["instances"]["calc__cut-1"]
    assert "calc__cut-1" in report["resolved_ids"], one
    assert one["tests_status"]["FAIL_TO_PASS"] == {"success": [*CUT, F2P[2]], "failure": []}
    assert one["expected_unmatched"] == []


def test_swebench_names_an_unmatched_id_and_why(swebench_run: tuple[dict[str, Any], str]) -> None:
    report, stderr = swebench_run
    two = report["instances"]["calc__cut-2"]
    assert "calc__cut-2" in report["unresolved_ids"]
    assert two["tests_status"]["FAIL_TO_PASS"] == {"success": CUT, "failure": [GHOST]}
    assert [(u["field"], u["test"]) for u in two["expected_unmatched"]] == [("fail_to_pass", GHOST)]
    assert "cut short" in two["expected_unmatched"][0]["reason"]
    # said on stderr without -v, naming the instance and the id
    lines = [line for line in stderr.splitlines() if GHOST in line]
    assert lines and "expected_unmatched" in lines[0] and "calc__cut-2" in lines[0], stderr


def test_swebench_tests_status_says_what_aexec_found(swebench_run: tuple[dict[str, Any], str]) -> None:
    report, _ = swebench_run
    three = report["instances"]["calc__cheat-3"]
    assert three["verdict"] == "tampered" and "calc__cheat-3" in report["unresolved_ids"]
    assert three["tests_status"]["FAIL_TO_PASS"] == {"success": [], "failure": F2P}
    assert three["tests_status"]["PASS_TO_PASS"] == {"success": P2P, "failure": []}
    failing = three["failure"]["message"].split(": ", 1)[0]
    assert failing in three["tests_status"]["FAIL_TO_PASS"]["failure"]
