"""The pipeline's judgement, on fabricated runs (issue 28, goal 6): `aexec.testing`.

Each test scripts what the runs said (`ScriptedSupervisor`) and checks the verdict the
real pipeline — scratch roots, views, plans, parsing, the guards — makes of it, in this
process, with no interpreter started (tests/unit's guard holds it to that). The
candidates that make real runs say the same are in tests/ (test_pytest_runs,
test_antigaming, test_exit, test_observe).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import aexec
from aexec import Candidate, Policy
from aexec._types import MESSAGE_CAP_CHARS, STREAM_CAP_BYTES, TRUNCATION_MARKER
from aexec.testing import ScriptedSupervisor, pytest_run, raw_run, scripted_observer, snippet_run

pytestmark = pytest.mark.anyio

TOTAL = "tests/test_cart.py::test_total"
EMPTY = "tests/test_cart.py::test_empty"


@pytest.fixture
def anyio_backend() -> str:
    """The judgement, not the event loop: one backend (the seam itself runs on both below)."""
    return "asyncio"


def suite(shop: Path) -> Candidate:
    return Candidate("run_suite", "test_subset", repo=str(shop), tests=["tests/test_cart.py"])


async def observe(candidate: Candidate, supervisor: ScriptedSupervisor) -> aexec.ExecutionObservation:
    async with scripted_observer(supervisor) as observer:
        [obs] = await aexec.observe_many([candidate], observer=observer)
    return obs


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_pass_is_confirmed_by_a_second_run_in_a_fresh_scratch_root(shop: Path) -> None:
    supervisor = ScriptedSupervisor(then=pytest_run({TOTAL: "passed", EMPTY: "passed"}))
    obs = await observe(suite(shop), supervisor)
    assert (obs.verdict, obs.failure, obs.flags.reverified) == ("pass", None, True)
    first, second = supervisor.invocations
    assert first.cwd != second.cwd, "the confirming run reused the first one's scratch root"
    assert [i["runner"] for i in supervisor.instructions] == ["pytest", "pytest"]
    assert [t.test for t in obs.test_results] == [TOTAL, EMPTY]


async def test_a_pass_the_confirming_run_does_not_repeat_is_not_a_pass(shop: Path) -> None:
    supervisor = ScriptedSupervisor(
        pytest_run({TOTAL: "passed", EMPTY: "passed"}),
        pytest_run({TOTAL: "failed", EMPTY: "passed"}),
        then=pytest_run({TOTAL: "failed", EMPTY: "passed"}),
    )
    obs = await observe(suite(shop), supervisor)
    assert (obs.verdict, obs.flags.nondeterministic, obs.flags.reverified) == ("fail", True, False)
    assert len(supervisor.invocations) == 2


async def test_a_suite_that_ran_no_test_is_an_empty_success(shop: Path) -> None:
    supervisor = ScriptedSupervisor(then=pytest_run({}))
    obs = await observe(suite(shop), supervisor)
    assert (obs.verdict, obs.flags.empty_success) == ("empty_success", True)
    assert len(supervisor.invocations) == 1, "an empty success needs no confirming run"


async def test_a_skipped_suite_is_an_empty_success_too(shop: Path) -> None:
    obs = await observe(suite(shop), ScriptedSupervisor(then=pytest_run({TOTAL: "skipped"})))
    assert obs.verdict == "empty_success"


async def test_a_failed_test_is_a_fail_with_an_assertion(shop: Path) -> None:
    failed = pytest_run({TOTAL: "failed", EMPTY: "passed"})
    obs = await observe(suite(shop), ScriptedSupervisor(then=failed))
    assert obs.verdict == "fail"
    assert {t.test: t.verdict for t in obs.test_results} == {TOTAL: "failed", EMPTY: "passed"}


async def test_a_run_killed_at_its_deadline_is_a_timeout_naming_the_test_it_ran(shop: Path) -> None:
    killed = pytest_run({EMPTY: "passed"}, running=TOTAL, timed_out=True)
    obs = await observe(suite(shop), ScriptedSupervisor(then=killed))
    assert obs.verdict == "fail"
    assert obs.failure is not None and obs.failure.failure_class == "timeout"
    assert {t.test: t.verdict for t in obs.test_results}[TOTAL] == "errored"


async def test_a_snippet_past_its_deadline_is_a_timeout() -> None:
    snippet = Candidate("run_entry", "snippet", code="while True: pass", policy=Policy(timeout_s=2))
    supervisor = ScriptedSupervisor(snippet_run(timed_out=True, duration=2.0))
    obs = await observe(snippet, supervisor)
    assert obs.verdict == "fail"
    assert obs.failure is not None and obs.failure.failure_class == "timeout"
    assert supervisor.invocations[0].timeout_s == 2


async def test_a_snippet_that_exits_cleanly_is_an_empty_success_with_its_output() -> None:
    """No test ran, so nothing is evidence of correctness: never ``pass``."""
    obs = await observe(
        Candidate("run_entry", "snippet", code="print(1)"), ScriptedSupervisor(snippet_run(stdout="1\n"))
    )
    assert (obs.verdict, obs.failure, obs.stdout) == ("empty_success", None, "1\n")


async def test_a_snippet_killed_by_a_signal_fails() -> None:
    obs = await observe(Candidate("run_entry", "snippet", code="x"), ScriptedSupervisor(raw_run(signal=9)))
    assert obs.verdict == "fail" and obs.failure is not None


async def test_output_the_supervisor_capped_is_kept_with_its_marker() -> None:
    cut = "x" * STREAM_CAP_BYTES + TRUNCATION_MARKER.format(dropped=10, stream="stdout", cap=STREAM_CAP_BYTES)
    obs = await observe(
        Candidate("run_entry", "snippet", code="x"), ScriptedSupervisor(snippet_run(stdout=cut))
    )
    assert obs.stdout == cut


async def test_an_exceptions_message_past_the_cap_is_cut_to_it() -> None:
    raised = snippet_run(
        exit_code=1,
        records=[
            {
                "kind": "exception",
                "phase": "run",
                "type": "builtins.ValueError",
                "bases": ["builtins.ValueError", "builtins.Exception", "builtins.BaseException"],
                "message": "y" * (10 * MESSAGE_CAP_CHARS),
                "frames": [],
            }
        ],
    )
    obs = await observe(Candidate("run_entry", "snippet", code="x"), ScriptedSupervisor(raised))
    assert obs.verdict == "fail" and obs.failure is not None
    assert "yyyy" in obs.failure.message and len(obs.failure.message) <= MESSAGE_CAP_CHARS + 64


async def test_a_run_not_scripted_is_that_candidates_one_line_error() -> None:
    obs = await observe(Candidate("run_entry", "snippet", code="print(1)"), ScriptedSupervisor())
    assert obs.verdict == "error"
    assert obs.error is not None and "run 1 was not scripted" in obs.error and "\n" not in obs.error


#: What the driver reports when the interpreter has no pytest: nothing of the candidate ran.
NO_PYTEST = raw_run(
    exit_code=1,
    records=[
        {
            "kind": "exception",
            "phase": "import",
            "type": "ModuleNotFoundError",
            "bases": ["ImportError", "Exception", "BaseException"],
            "message": "No module named 'pytest'",
            "frames": [],
        }
    ],
)


async def test_an_interpreter_without_pytest_is_the_environments_fault(shop: Path) -> None:
    """Not the candidate's failure: an ``error`` naming the environment, flagged."""
    obs = await observe(suite(shop), ScriptedSupervisor(then=NO_PYTEST))
    assert (obs.verdict, obs.flags.env_broken) == ("error", True), obs
    assert obs.env_fault is not None and obs.error is not None and obs.error.startswith("environment:")
