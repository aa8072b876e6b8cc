"""The judgement of patches on fabricated runs (`aexec.testing`): FAIL_TO_PASS and
PASS_TO_PASS, and the tamper guard. No interpreter starts — only ``git apply``, which is
why these are not in tests/unit. Which run is which is read from the scratch view the
run was handed: the fix's line is there, or it is not."""

from __future__ import annotations

from pathlib import Path

import pytest

import aexec
from aexec import Candidate
from aexec._boundary.supervise import Invocation
from aexec._driver.wire import Instructions
from aexec._raw import RawRun
from aexec.testing import ScriptedSupervisor, pytest_run, scripted_observer

from .conftest import EXAMPLES, diff

pytestmark = pytest.mark.anyio

FIX = (EXAMPLES / "shop-fix.diff").read_text()
TOTAL = "tests/test_cart.py::test_total"
EMPTY = "tests/test_cart.py::test_empty"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def fixed(invocation: Invocation) -> bool:
    return "(1 - discount)" in (Path(invocation.cwd) / "shop" / "cart.py").read_text()


SEEN: list[bool] = []


def by_fix(invocation: Invocation, instructions: Instructions) -> RawRun:
    """The suite as it would run: test_total fails before the fix and passes after it."""
    SEEN.append(fixed(invocation))
    return pytest_run({TOTAL: "passed" if SEEN[-1] else "failed", EMPTY: "passed"})


async def observe(candidate: Candidate, supervisor: ScriptedSupervisor) -> aexec.ExecutionObservation:
    async with scripted_observer(supervisor) as observer:
        [obs] = await aexec.observe_many([candidate], observer=observer)
    return obs


async def test_the_fix_turns_fail_to_pass_and_keeps_pass_to_pass(shop: Path) -> None:
    SEEN.clear()
    supervisor = ScriptedSupervisor(then=by_fix)
    obs = await observe(
        Candidate("run_suite", "patch", repo=str(shop), tests=["tests/test_cart.py"], patch=FIX), supervisor
    )
    assert obs.verdict == "pass", obs
    got = {t.test: (t.verdict, t.f2p, t.p2p) for t in obs.test_results}
    assert got == {TOTAL: ("passed", True, False), EMPTY: ("passed", False, True)}
    assert sorted(SEEN) == [False, True, True], "the unpatched run, the patched one, its confirmation"


async def test_a_patch_that_edits_the_selected_tests_is_tampering(shop: Path) -> None:
    old = (shop / "tests" / "test_cart.py").read_text()
    cheat = diff("tests/test_cart.py", old, old.replace("def test_total", "def _not_a_test"))
    supervisor = ScriptedSupervisor(then=pytest_run({EMPTY: "passed"}))
    obs = await observe(
        Candidate("run_suite", "patch", repo=str(shop), tests=["tests/test_cart.py"], patch=cheat), supervisor
    )
    assert (obs.verdict, obs.flags.tampered) == ("tampered", True)
