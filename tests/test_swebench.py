"""SWE-bench-style grading (issue 18, goal 4), on real git repos and real pytest runs:
``resolved``, ``expected_failures``, the oracle ``test_patch``, the tamper guard, and
``aexec swebench`` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from aexec import Candidate, RequestError, observe, observe_many
from aexec._records import ExpectedFailures
from aexec._records import TestResult as Result
from aexec._serde import candidate as candidate_from_json
from aexec._serde import dumps, structure
from aexec._stages.grade import grade, selection

from .conftest import aexec_in_process

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """What the run does and how it is judged, not the event loop: one backend. (The
    supervisor's, fork server's and cancellation's tests run on both.)"""
    return "asyncio"


OPS = "calc/ops.py"
TESTS = "tests/test_ops.py"
MORE = "tests/test_more.py"

BUGGY = """\
def add(a, b):
    return a + b


def mul(a, b):
    return a + b
"""

TEST_OPS = """\
import pytest

from calc.ops import add, mul


def test_add():
    assert add(2, 3) == 5


@pytest.mark.parametrize("a, b, want", [(2, 3, 6), (1, 1, 1)], ids=["two three", "one one"])
def test_mul(a, b, want):
    assert mul(a, b) == want
"""

# The oracle's new test file: one test the bug fails, one it passes.
TEST_MORE = """\
from calc.ops import mul


def test_mul_zero():
    assert mul(0, 5) == 0


def test_mul_zeros():
    assert mul(0, 0) == 0
"""

F2P = [
    "tests/test_ops.py::test_mul[two three]",
    "tests/test_ops.py::test_mul[one one]",
    "tests/test_more.py::test_mul_zero",
]
P2P = ["tests/test_ops.py::test_add", "tests/test_more.py::test_mul_zeros"]

FORCE_PASS_CONFTEST = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


def make_git_repo(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    return root


def diff_of(repo: Path, files: dict[str, str]) -> str:
    """The real ``git diff`` of writing ``files`` into ``repo``; the repo is put back."""
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    out = git(repo, "diff", "--cached")
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-qfd")
    return out


def run_swebench(preds: Path, instances: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``aexec swebench PREDS INSTANCES -o OUT --no-cache`` as a user runs it; it must exit 0."""
    done = subprocess.run(
        [sys.executable, "-m", "aexec", "swebench", str(preds), str(instances), "-o", str(out), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def calc(tmp_path: Path) -> Path:
    return make_git_repo(tmp_path / "calc", {"calc/__init__.py": "", OPS: BUGGY, TESTS: TEST_OPS})


@pytest.fixture
def test_patch(calc: Path) -> str:
    return diff_of(calc, {MORE: TEST_MORE})


FIXED = BUGGY.replace("def mul(a, b):\n    return a + b", "def mul(a, b):\n    return a * b")
# Breaks add (a PASS_TO_PASS test) and gets mul(0, x) wrong.
WRONG = BUGGY.replace(
    "    return a + b\n\n\ndef mul(a, b):\n    return a + b",
    "    return a - b\n\n\ndef mul(a, b):\n    return a * b + (a == 0)",
)


def fix(calc: Path) -> str:
    return diff_of(calc, {OPS: FIXED})


def stale_patch(calc: Path) -> str:
    """A test patch whose removed line is not in the repo: it cannot apply."""
    edit = diff_of(calc, {TESTS: TEST_OPS.replace("add(2, 3) == 5", "add(2, 3) == 5  # checked")})
    assert "-    assert add(2, 3) == 5\n" in edit
    return edit.replace("-    assert add(2, 3) == 5\n", "-    assert add(9, 9) == 5\n")


def graded(calc: Path, ident: str, patch: str | None, test_patch: str | None, **kw: object) -> Candidate:
    fields: dict[str, object] = {"fail_to_pass": F2P, "pass_to_pass": P2P} | kw
    shape = "patch" if patch is not None else "test_subset"
    return Candidate(
        "run_suite",
        shape,
        id=ident,
        repo=str(calc),
        patch=patch,
        test_patch=test_patch,
        **fields,  # type: ignore[arg-type]
    )


async def test_resolved_with_a_test_patch_that_adds_the_f2p_test(calc: Path, test_patch: str) -> None:
    gold = fix(calc)
    assert "+    return a * b" in gold and WRONG != BUGGY
    wrong = diff_of(calc, {OPS: WRONG})
    obs_gold, obs_wrong, obs_none = await observe_many(
        [
            graded(calc, "gold", gold, test_patch),
            graded(calc, "wrong", wrong, test_patch),
            graded(calc, "unpatched", None, test_patch),
        ]
    )
    # No `tests`: the files the expected node ids name were run, the oracle's new one too.
    results = {t.test: t for t in obs_gold.test_results}
    assert set(results) == set(F2P) | set(P2P)
    assert obs_gold.verdict == "pass" and obs_gold.flags.reverified and not obs_gold.flags.tampered
    assert obs_gold.resolved is True
    assert obs_gold.expected_failures == ExpectedFailures((), ())
    # The before-run is the unpatched repo *with* the oracle (SWE-bench's F2P): the
    # oracle's test that the bug passes is PASS_TO_PASS, not "absent before".
    assert results["tests/test_more.py::test_mul_zeros"].p2p
    assert all(results[t].f2p for t in F2P)

    assert obs_wrong.resolved is False
    assert obs_wrong.expected_failures == ExpectedFailures(
        fail_to_pass=("tests/test_more.py::test_mul_zero",),
        pass_to_pass=("tests/test_ops.py::test_add", "tests/test_more.py::test_mul_zeros"),
    )
    assert obs_none.resolved is False
    assert obs_none.expected_failures is not None and obs_none.expected_failures.fail_to_pass == tuple(F2P)
    assert obs_none.expected_failures.pass_to_pass == ()
    # The repo itself was never written to.
    assert not (calc / MORE).exists() and git(calc, "status", "--porcelain") == ""


async def test_without_an_expectation_resolved_is_null(calc: Path) -> None:
    obs = await observe(Candidate("run_suite", "patch", repo=str(calc), tests=[TESTS], patch=fix(calc)))
    assert obs.verdict == "pass" and obs.resolved is None and obs.expected_failures is None
    assert json.loads(dumps(obs))["resolved"] is None


async def test_a_parametrized_node_id_with_spaces_is_selected_and_graded(calc: Path) -> None:
    only = "tests/test_ops.py::test_mul[two three]"
    obs = await observe(
        graded(calc, "one", fix(calc), None, tests=[only], fail_to_pass=[only], pass_to_pass=[])
    )
    assert [t.test for t in obs.test_results] == [only]
    assert obs.resolved is True and obs.verdict == "pass"
    wrong = await observe(
        graded(calc, "wrong", None, None, tests=[only], fail_to_pass=[only], pass_to_pass=[])
    )
    assert wrong.resolved is False and wrong.expected_failures == ExpectedFailures((only,), ())


async def test_a_conftest_only_patch_is_tampered_and_not_resolved(calc: Path, test_patch: str) -> None:
    """SWE-bench #631: a patch that only adds a conftest.py forcing every test to pass."""
    cheat = diff_of(calc, {"tests/conftest.py": FORCE_PASS_CONFTEST})
    obs = await observe(graded(calc, "cheat", cheat, test_patch))
    assert obs.flags.tampered and obs.verdict == "tampered"
    assert obs.resolved is False
    # pytest's reports said "passed"; the tests raised, and aexec says what ran (issue 26).
    assert obs.expected_failures == ExpectedFailures(tuple(F2P), ())


async def test_a_candidate_that_edits_the_oracles_files_is_overruled_and_tampered(
    calc: Path, test_patch: str
) -> None:
    """The candidate writes its own tests/test_more.py (the file the oracle adds): the
    oracle's version is the one that runs, and the candidate is flagged."""
    own = diff_of(calc, {MORE: "def test_mul_zero():\n    pass\n\n\ndef test_mul_zeros():\n    pass\n"})
    obs = await observe(graded(calc, "own-tests", own, test_patch))
    verdicts = {t.test: t.verdict for t in obs.test_results}
    assert verdicts["tests/test_more.py::test_mul_zero"] == "failed"  # the oracle's test ran
    assert obs.flags.tampered and obs.resolved is False


async def test_a_test_patch_that_does_not_apply_is_the_instances_error(calc: Path) -> None:
    stale = stale_patch(calc)
    obs = await observe(graded(calc, "stale", fix(calc), stale, fail_to_pass=[P2P[0]], pass_to_pass=[]))
    assert obs.verdict == "error" and obs.failure is None
    assert obs.error is not None and "test_patch does not apply" in obs.error
    assert "not of the candidate" in obs.error
    assert obs.resolved is False and obs.test_results == ()


async def test_an_expected_test_never_collected_does_not_pass(calc: Path) -> None:
    ghost = "tests/test_ops.py::test_div"
    obs = await observe(graded(calc, "ghost", fix(calc), None, fail_to_pass=[F2P[0], ghost], pass_to_pass=[]))
    assert ghost not in {t.test for t in obs.test_results}
    assert obs.verdict == "pass" and obs.resolved is False
    assert obs.expected_failures == ExpectedFailures((ghost,), ())


async def test_the_grading_fields_are_in_the_cache_key(calc: Path, test_patch: str) -> None:
    gold = fix(calc)
    a, b, c = await observe_many(
        [
            graded(calc, "a", gold, test_patch),
            graded(calc, "b", gold, None, fail_to_pass=F2P[:2], pass_to_pass=P2P[:1]),
            graded(calc, "c", gold, test_patch, pass_to_pass=P2P[:1]),
        ]
    )
    assert len({a.cache_key, b.cache_key, c.cache_key}) == 3
    assert not (a.cache_hit or b.cache_hit or c.cache_hit)


def test_grading_is_pure_and_counts_absent_ids() -> None:
    c = Candidate(
        "run_suite", "patch", repo="/r", fail_to_pass=["t.py::a", "t.py::b[x y]"], pass_to_pass=["u.py::c"]
    )
    assert selection(c) == ("t.py", "u.py")
    results = [
        Result("t.py::a", "passed"),
        Result("t.py::b[x y]", "failed"),
        Result("u.py::c", "passed"),
    ]
    assert grade(c, results, tampered=False, error=False) == (False, ExpectedFailures(("t.py::b[x y]",), ()))
    results[1] = Result("t.py::b[x y]", "passed")
    assert grade(c, results, tampered=False, error=False) == (True, ExpectedFailures((), ()))
    assert grade(c, results, tampered=True, error=False)[0] is False
    assert grade(c, results[:2], tampered=False, error=False) == (False, ExpectedFailures((), ("u.py::c",)))
    assert grade(
        attrs.evolve(c, fail_to_pass=None, pass_to_pass=None), results, tampered=False, error=False
    ) == (
        None,
        None,
    )


def test_the_fields_round_trip_and_bad_ones_are_named(calc: Path) -> None:
    req = {"request_type": "run_suite", "artifact_shape": "patch", "repo": str(calc)}
    c, ignored = candidate_from_json(req | {"fail_to_pass": F2P, "pass_to_pass": [], "test_patch": "x"})
    assert c.fail_to_pass == tuple(F2P) and c.pass_to_pass == () and c.test_patch == "x" and not ignored
    with pytest.raises(RequestError, match="fail_to_pass"):
        candidate_from_json(req | {"fail_to_pass": "tests/test_ops.py::test_add"})
    with pytest.raises(RequestError, match="test_patch"):
        candidate_from_json(req | {"test_patch": ["x"]})


async def test_bad_expectations_are_rejected_before_anything_runs(calc: Path) -> None:
    with pytest.raises(RequestError, match=r"fail_to_pass\[1\]: 'tests/test_nope.py' does not exist"):
        await observe(graded(calc, "x", None, None, fail_to_pass=[F2P[0], "tests/test_nope.py::t"]))
    with pytest.raises(RequestError, match="both empty"):
        await observe(graded(calc, "x", None, None, fail_to_pass=[], pass_to_pass=[]))
    with pytest.raises(RequestError, match="need a run_suite"):
        await observe(Candidate("run_entry", "snippet", code="pass", fail_to_pass=["a.py::t"]))


async def test_an_observation_with_a_grade_round_trips(calc: Path) -> None:
    obs = await observe(
        graded(
            calc,
            "rt",
            fix(calc),
            None,
            fail_to_pass=[F2P[0], "tests/test_ops.py::nope"],
            pass_to_pass=P2P[:1],
        )
    )
    data = json.loads(dumps(obs))
    assert data["resolved"] is False
    assert data["expected_failures"] == {
        "fail_to_pass": ["tests/test_ops.py::nope"],
        "pass_to_pass": [],
    }
    assert structure(data) == obs


# --------------------------------------------------------------------------------------
# aexec swebench, end to end
# --------------------------------------------------------------------------------------


def test_swebench_command_end_to_end(tmp_path: Path, calc: Path, test_patch: str) -> None:
    gold = fix(calc)
    stale = stale_patch(calc)
    data = tmp_path / "data"
    data.mkdir()
    instances = [
        {
            "instance_id": f"calc__calc-{n}",
            "repo": "../calc",  # relative to the instances file
            "python": sys.executable,
            "test_patch": tp,
            # as SWE-bench ships them: JSON-encoded strings
            "FAIL_TO_PASS": json.dumps(F2P if n < 5 else F2P[:2]),
            "PASS_TO_PASS": json.dumps(P2P if n < 5 else P2P[:1]),
        }
        for n, tp in ((1, test_patch), (2, test_patch), (3, test_patch), (4, test_patch), (5, stale))
    ]
    (data / "instances.json").write_text(json.dumps(instances))
    preds = [
        {"instance_id": "calc__calc-1", "model_name_or_path": "m", "model_patch": gold},
        {"instance_id": "calc__calc-2", "model_name_or_path": "m", "model_patch": ""},
        {
            "instance_id": "calc__calc-3",
            "model_name_or_path": "m",
            "model_patch": diff_of(calc, {"conftest.py": FORCE_PASS_CONFTEST}),
        },
        {"instance_id": "calc__calc-5", "model_name_or_path": "m", "model_patch": gold},
        {"instance_id": "calc__calc-99", "model_name_or_path": "m", "model_patch": gold},
    ]
    (data / "preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    out = tmp_path / "report.json"
    done = run_swebench(data / "preds.jsonl", data / "instances.json", out)
    assert "no instance 'calc__calc-99'" in done.stderr
    report = json.loads(out.read_text())
    assert report["schema_version"] == 2
    assert report["total_instances"] == 5 and report["submitted_instances"] == 4
    assert report["resolved_ids"] == ["calc__calc-1"]
    assert report["unresolved_ids"] == ["calc__calc-3"]
    assert report["empty_patch_ids"] == ["calc__calc-2"]
    assert report["error_ids"] == ["calc__calc-5"]
    assert report["incomplete_ids"] == ["calc__calc-4"]
    assert report["completed_ids"] == ["calc__calc-1", "calc__calc-3"]
    assert report["unknown_prediction_ids"] == ["calc__calc-99"]
    counts = {
        k: report[k]
        for k in (
            "completed_instances",
            "resolved_instances",
            "unresolved_instances",
            "empty_patch_instances",
            "error_instances",
        )
    }
    assert counts == {
        "completed_instances": 2,
        "resolved_instances": 1,
        "unresolved_instances": 1,
        "empty_patch_instances": 1,
        "error_instances": 1,
    }
    one, three, five = (report["instances"][f"calc__calc-{n}"] for n in (1, 3, 5))
    assert one["resolved"] and one["tests_status"]["FAIL_TO_PASS"] == {"success": F2P, "failure": []}
    assert three["verdict"] == "tampered" and three["flags"]["tampered"]
    assert not five["patch_successfully_applied"] and "test_patch does not apply" in five["error"]


@pytest.mark.parametrize(
    ("record", "words"),
    [
        (
            {"repo": "calc", "test_patch": "", "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"},
            "missing `instance_id`",
        ),
        (
            {"instance_id": "i", "repo": "calc", "FAIL_TO_PASS": "not json", "PASS_TO_PASS": "[]"},
            "(i): `FAIL_TO_PASS` is a string but not",
        ),
        (
            {"instance_id": "i", "repo": "calc", "FAIL_TO_PASS": [1], "PASS_TO_PASS": "[]"},
            "(i): `FAIL_TO_PASS` must be a list",
        ),
        ({"instance_id": "i", "FAIL_TO_PASS": [], "PASS_TO_PASS": []}, "(i): missing `repo`"),
    ],
)
def test_swebench_bad_instances_get_one_line_naming_file_record_and_field(
    tmp_path: Path, record: dict[str, object], words: str
) -> None:
    inst = tmp_path / "instances.jsonl"
    inst.write_text(
        json.dumps({"instance_id": "ok", "repo": ".", "FAIL_TO_PASS": [], "PASS_TO_PASS": []})
        + "\n"
        + json.dumps(record)
        + "\n"
    )
    preds = tmp_path / "preds.json"
    preds.write_text("[]")
    done = aexec_in_process("swebench", str(preds), str(inst), "-o", str(tmp_path / "r.json"))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{inst}:2" in lines[0] and words in lines[0], lines
    assert not (tmp_path / "r.json").exists()
