"""The judge (``aexec._stages.judge``) on fabricated results: every guard of a job's
observation, without running anything. Pure: no process, no file."""

from __future__ import annotations

import attrs
import pytest

from aexec._errors import PatchError
from aexec._records import Candidate, Environment
from aexec._stages import judge
from aexec._stages.assemble import Run
from aexec._stages.classify import Classification, Runner, route
from aexec._stages.judge import Need, Outcome, Patches, Results
from aexec._stages.parse import Evidence, ParsedTest, RaisedError
from aexec._stages.policy import declare

PATCH = "--- a/src/m.py\n+++ b/src/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
TEST_PATCH = "--- a/tests/test_m.py\n+++ b/tests/test_m.py\n@@ -1 +1 @@\n-\n+def test_new(): pass\n"


@attrs.frozen
class FakeJob:
    """What the judge reads of a job (``aexec._pipeline.session.Job``), made by hand."""

    candidate: Candidate
    classification: Classification
    runner: Runner
    env: Environment
    patches: Patches = attrs.field(factory=Patches)
    repo_modules: frozenset[str] = frozenset()
    guarded: bool = True
    version: str = "v" * 64
    key: str = "k" * 64
    aexec_version: str = "test"


def job(*, patched: bool = True, guarded: bool = True, **fields: object) -> FakeJob:
    """A pytest ``run_suite`` of a repo, with a patch touching ``src/m.py`` unless not ``patched``."""
    candidate = Candidate(
        request_type="run_suite",
        artifact_shape="test_subset",
        id="c1",
        repo="/nonexistent/repo",
        patch=PATCH if patched else None,
        **fields,
    )
    classification, runner = route(candidate)
    env = declare(
        classification.mode,
        candidate.policy,
        toolchain="python3",
        toolchain_version="3",
        enforced={"filesystem": "test"},
        repo_view="copy",
        max_cores=1.0,
        request_type="run_suite",
    )
    touched = ("src/m.py",) if patched else ()
    oracle = ("tests/test_m.py",) if candidate.test_patch else ()
    return FakeJob(candidate, classification, runner, env, Patches(touched, oracle), guarded=guarded)


def evidence(tests: dict[str, str], *, exit_code: int | None = None, **fields: object) -> Evidence:
    verdicts = tuple(ParsedTest(n, v) for n, v in tests.items())
    failed = any(v in ("failed", "errored") for v in tests.values())
    code = exit_code if exit_code is not None else (1 if failed else 0 if tests else 5)
    values: dict[str, object] = {
        "runner": "pytest",
        "exit_code": code,
        "signal": None,
        "timed_out": False,
        "duration": 0.5,
        "tests": verdicts,
        "errors": (),
        "in_flight": None,
        "pytest_exit": code,
        "parse_uncertain": False,
    }
    values.update(fields)
    return Evidence(**values)


def ran(ev: Evidence, *, root: str = "/scratch/1", stderr: str = "", **fields: object) -> Outcome:
    run = Run(
        evidence=ev,
        stdout="",
        stderr=stderr,
        cwd=f"{root}/work",
        scratch_root=root,
        changed_state="no changes",
        cpu_s=0.1,
        peak_ram_mib=10,
    )
    return Outcome(run, **fields)


def missing_numpy() -> Evidence:
    """Collection of the tests failed on a module neither the repo nor the interpreter has."""
    error = RaisedError(
        type="ModuleNotFoundError",
        bases=("builtins.ModuleNotFoundError", "builtins.ImportError", "builtins.Exception"),
        message="No module named 'numpy'",
        frames=(),
        phase="collect",
        nodeid="tests/test_m.py",
    )
    ev = evidence({}, exit_code=2, errors=(error,))
    return attrs.evolve(ev, tests=(ParsedTest("tests/test_m.py", "errored", collection=True),))


PASS = {"tests/test_m.py::test_a": "passed", "tests/test_m.py::test_b": "passed"}


def test_a_patched_suite_runs_its_before_run_beside_its_run() -> None:
    assert judge.first_runs(job()) == (
        Need("first", patched=True, shared=False),
        Need("before", patched=False, shared=True),
    )


def test_an_unpatched_suite_is_the_calls_one_unpatched_run() -> None:
    assert judge.first_runs(job(patched=False)) == (Need("first", patched=False, shared=True),)


def test_empty_success_is_never_a_pass_and_asks_for_no_rerun() -> None:
    j = job()
    results = Results(first=ran(evidence({})), before=Outcome(verdicts={}))
    assert judge.next_runs(j, results) == ()
    obs = judge.conclude(j, results)
    assert obs.verdict == "empty_success"
    assert obs.flags.empty_success and not obs.flags.reverified


def test_a_pass_is_confirmed_in_a_fresh_scratch_root_before_it_is_believed() -> None:
    j = job()
    results = Results(first=ran(evidence(PASS)), before=Outcome(verdicts={}))
    assert judge.next_runs(j, results) == (Need("confirm", patched=True, shared=False),)
    agreed = results.with_outcome("confirm", ran(evidence(PASS), root="/scratch/2"))
    assert judge.next_runs(j, agreed) == ()
    obs = judge.conclude(j, agreed)
    assert obs.verdict == "pass" and obs.flags.reverified and not obs.flags.nondeterministic
    assert obs.environment.fs_boundary.scratch_root == "/scratch/1"


def test_a_confirming_rerun_that_disagrees_makes_the_run_nondeterministic() -> None:
    j = job()
    results = Results(first=ran(evidence(PASS)), before=Outcome(verdicts={}))
    flaky = {**PASS, "tests/test_m.py::test_b": "failed"}
    disagreed = results.with_outcome("confirm", ran(evidence(flaky), root="/scratch/2"))
    obs = judge.conclude(j, disagreed)
    assert obs.verdict == "fail"
    assert obs.flags.nondeterministic and not obs.flags.reverified
    assert {r.test: r.verdict for r in obs.test_results}["tests/test_m.py::test_b"] == "failed"
    assert obs.environment.fs_boundary.scratch_root == "/scratch/2"  # the re-run's, merged


def test_a_confirming_rerun_that_no_longer_applies_is_aexecs_error_not_a_verdict() -> None:
    j = job()
    results = Results(first=ran(evidence(PASS)), confirm=Outcome(refused="corrupt patch"))
    with pytest.raises(PatchError, match="corrupt patch"):
        judge.conclude(j, results)


def test_without_the_antigaming_guards_a_pass_is_not_rerun() -> None:
    j = job(guarded=False)
    results = Results(first=ran(evidence(PASS)), before=Outcome(verdicts={}))
    assert judge.next_runs(j, results) == ()
    assert judge.conclude(j, results).verdict == "pass"


def test_a_patch_that_touches_a_selected_test_file_is_tampered() -> None:
    j = attrs.evolve(job(tests=("tests/test_m.py",)), patches=Patches(("tests/test_m.py",)))
    results = Results(first=ran(evidence(PASS)), before=Outcome(verdicts={}))
    results = results.with_outcome("confirm", ran(evidence(PASS)))
    obs = judge.conclude(j, results)
    assert obs.verdict == "tampered" and obs.flags.tampered


def test_a_patch_that_changes_pytests_configuration_is_tampered() -> None:
    results = Results(first=ran(evidence(PASS), config_changed=True), confirm=ran(evidence(PASS)))
    assert judge.conclude(job(), results).verdict == "tampered"


def test_a_patch_that_touches_the_oracles_files_is_tampered() -> None:
    j = job(test_patch=TEST_PATCH)
    j = attrs.evolve(j, patches=Patches(("src/m.py", "tests/test_m.py"), ("tests/test_m.py",)))
    results = Results(first=ran(evidence(PASS)), confirm=ran(evidence(PASS)))
    assert judge.conclude(j, results).verdict == "tampered"


def test_a_tampering_patch_asks_for_no_pristine_run_whatever_its_run_shows() -> None:
    j = attrs.evolve(job(), patches=Patches(("src/m.py", "conftest.py")))
    results = Results(first=ran(missing_numpy()), before=Outcome(verdicts={}))
    assert judge.next_runs(j, results) == ()
    obs = judge.conclude(j, results)
    assert obs.verdict == "tampered" and not obs.flags.env_broken


def test_an_env_fault_is_the_environments_when_the_pristine_run_fails_the_same_way() -> None:
    j = job()
    results = Results(first=ran(missing_numpy()), before=Outcome(verdicts={}))
    assert judge.next_runs(j, results) == (Need("pristine", patched=False, shared=True),)
    results = results.with_outcome("pristine", ran(missing_numpy(), root="/scratch/0"))
    assert judge.next_runs(j, results) == ()
    obs = judge.conclude(j, results)
    assert obs.verdict == "error" and obs.flags.env_broken
    assert obs.env_fault is not None and obs.env_fault.kind == "missing_module"
    assert obs.error is not None and "numpy" in obs.error


def test_an_env_fault_the_pristine_repo_does_not_show_is_the_candidates() -> None:
    j = job()
    results = Results(first=ran(missing_numpy()), before=Outcome(verdicts={}))
    results = results.with_outcome("pristine", ran(evidence(PASS), root="/scratch/0"))
    obs = judge.conclude(j, results)
    assert obs.verdict == "fail" and not obs.flags.env_broken and obs.env_fault is None


def test_an_unpatched_candidates_own_run_is_its_pristine_run() -> None:
    j = job(patched=False)
    results = Results(first=ran(missing_numpy()))
    assert judge.next_runs(j, results) == ()
    obs = judge.conclude(j, results)
    assert obs.verdict == "error" and obs.flags.env_broken


def test_a_module_of_the_repo_is_never_the_environments_fault() -> None:
    j = attrs.evolve(job(), repo_modules=frozenset({"numpy"}))
    results = Results(first=ran(missing_numpy()), before=Outcome(verdicts={}))
    assert judge.next_runs(j, results) == ()
    assert judge.conclude(j, results).verdict == "fail"


def test_fail_to_pass_is_read_against_the_before_run() -> None:
    j = job(fail_to_pass=("tests/test_m.py::test_a",), pass_to_pass=("tests/test_m.py::test_b",))
    before = {"tests/test_m.py::test_a": "failed", "tests/test_m.py::test_b": "passed"}
    results = Results(first=ran(evidence(PASS)), before=Outcome(verdicts=before))
    results = results.with_outcome("confirm", ran(evidence(PASS)))
    obs = judge.conclude(j, results)
    tags = {r.test: (r.f2p, r.p2p) for r in obs.test_results}
    assert tags == {"tests/test_m.py::test_a": (True, False), "tests/test_m.py::test_b": (False, True)}
    assert obs.resolved is True


def test_a_grade_that_would_resolve_is_confirmed_even_when_other_tests_fail() -> None:
    j = job(fail_to_pass=("tests/test_m.py::test_a",))
    first = {"tests/test_m.py::test_a": "passed", "tests/test_m.py::test_c": "failed"}
    results = Results(first=ran(evidence(first)), before=Outcome(verdicts={}))
    assert judge.next_runs(j, results) == (Need("confirm", patched=True, shared=False),)
    # a failing suite re-run for its grade agrees test by test
    again = results.with_outcome("confirm", ran(evidence(first)))
    obs = judge.conclude(j, again)
    assert obs.flags.reverified and obs.resolved is True and obs.verdict == "fail"


def test_a_patch_that_does_not_apply_ran_nothing() -> None:
    j = job()
    results = Results(first=Outcome(refused="patch failed: src/m.py:1"))
    assert judge.next_runs(j, results) == ()
    obs = judge.conclude(j, results)
    assert obs.verdict == "fail" and obs.failure is not None
    assert obs.failure.failure_class == "compile"
    assert obs.failure.message.startswith("patch does not apply: ")


def test_a_patch_that_cannot_be_read_runs_nothing() -> None:
    j = attrs.evolve(job(), patches=Patches(unreadable="patch is empty"))
    assert judge.first_runs(j) == ()
    obs = judge.conclude(j, Results())
    assert obs.verdict == "fail" and obs.failure is not None
    assert obs.failure.message == "patch refused: patch is empty"


@pytest.mark.parametrize("where", ["unreadable", "first", "before"])
def test_an_oracle_that_does_not_apply_is_the_instances_error(where: str) -> None:
    j = job(test_patch=TEST_PATCH, fail_to_pass=("tests/test_m.py::test_a",))
    if where == "unreadable":
        j = attrs.evolve(j, patches=Patches(oracle_unreadable="corrupt"))
        assert judge.first_runs(j) == ()
        results = Results()
    elif where == "first":
        results = Results(first=Outcome(oracle_refused="corrupt"))
    else:
        results = Results(first=ran(evidence(PASS)), before=Outcome(oracle_refused="corrupt"))
    assert judge.next_runs(j, results) == ()
    obs = judge.conclude(j, results)
    assert obs.verdict == "error" and obs.resolved is False
    assert obs.error == judge.ORACLE + "corrupt"
