"""One execution in three phases (``aexec._pipeline.run``): prepare in one worker-thread
hop, supervise, collect in one hop; a refused patch and the scratch root come back as
data, and every root is removed once its observation is out. Real runs."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

import aexec
from aexec import Candidate

from .conftest import CountingSupervisor, MakeRepo, diff, scratch_roots

pytestmark = pytest.mark.anyio

SOURCE = "def f():\n    return 1\n"
TESTS = "from m import f\n\n\ndef test_f():\n    assert f() == 2\n"


def patched(repo: Path, value: int) -> Candidate:
    """A patch that makes the repo's one test fail another way (no pass: no re-run)."""
    return Candidate(
        request_type="run_suite",
        artifact_shape="patch",
        id=value,
        repo=str(repo),
        tests=("tests/test_m.py",),
        patch=diff("m.py", SOURCE, SOURCE.replace("1", str(value))),
    )


class Hops:
    """Counts the worker-thread hops made on the way through ``aexec._pipeline.run``,
    the supervisor's own and the bytecode store's (once per call) aside."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real: Callable[..., Any] = anyio.to_thread.run_sync

        async def counting(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
            files = [(f.filename, f.name) for f in traceback.extract_stack()]
            in_run = any(p.endswith("_pipeline/run.py") and n != "remove_scratches" for p, n in files)
            elsewhere = any(p.endswith(("_boundary/supervise.py", "_pipeline/session.py")) for p, _ in files)
            self.count += in_run and not elsewhere
            return await real(fn, *args, **kw)

        monkeypatch.setattr(anyio.to_thread, "run_sync", counting)


async def test_an_execution_costs_two_thread_hops(
    make_repo: MakeRepo, scratch_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo({"m.py": SOURCE, "tests/test_m.py": TESTS})
    counting = CountingSupervisor()
    hops = Hops(monkeypatch)
    got = await aexec.observe_many([patched(repo, 3), patched(repo, 4)], supervisor=counting)
    assert [o.verdict for o in got] == ["fail", "fail"]
    assert counting.runs == 3  # two patched runs and their one shared before-run
    assert hops.count == 2 * counting.runs  # prepare and collect, nothing else
    assert scratch_roots(scratch_tmp) == []


async def test_a_refused_patch_ran_nothing_and_left_no_scratch_root(
    make_repo: MakeRepo, scratch_tmp: Path
) -> None:
    repo = make_repo({"m.py": SOURCE, "tests/test_m.py": TESTS})
    wrong = diff("m.py", "def g():\n    return 1\n", "def g():\n    return 2\n")
    candidate = Candidate(
        request_type="run_suite",
        artifact_shape="patch",
        repo=str(repo),
        tests=("tests/test_m.py",),
        patch=wrong,
    )
    counting = CountingSupervisor()
    (obs,) = await aexec.observe_many([candidate], supervisor=counting)
    assert obs.verdict == "fail" and obs.failure is not None
    assert obs.failure.message.startswith("patch does not apply: ")
    assert counting.runs <= 1  # at most the before-run beside it, if not cancelled in time
    assert scratch_roots(scratch_tmp) == []
