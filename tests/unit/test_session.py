"""What a call's `Session` makes once and shares between its jobs, on fabricated runs
(`aexec.testing`): no process is started, the counts are of the real calls."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

import aexec
from aexec import Candidate
from aexec._boundary.isolation import Isolation
from aexec._pipeline import session
from aexec._stages.plan import view_readonly
from aexec.testing import ScriptedSupervisor, scripted_observer, snippet_run

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """The session's bookkeeping, not the event loop: one backend."""
    return "asyncio"


async def test_the_boundary_record_is_made_once_per_view_not_per_job() -> None:
    """Issue 28, goal 7: every job recomputed what its view binds read-only (``view_readonly``)
    to write the environment's ``enforced`` record, though the jobs of a call share one
    toolchain: ~0.2 ms of the event loop per trivial snippet. Since issue 42 the record
    is the observer's: one for every call it makes. The observer is told it has
    namespaces (the boundary whose record names the view; the scripted one has none, and
    probing for them would start a process); the session's real calls for the record are
    counted with a profiler, not patched."""
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call" and frame.f_code is view_readonly.__code__:
            calls += frame.f_back is not None and frame.f_back.f_code.co_filename == session.__file__

    cands = [Candidate("run_entry", "snippet", id=f"c{i}", code=f"print({i})") for i in range(3)]
    async with scripted_observer(ScriptedSupervisor(then=snippet_run())) as o:
        o._isolation = Isolation(namespaces=True)
        sys.setprofile(profile)
        threading.setprofile(profile)
        try:
            first = await aexec.observe_many(cands[:1], observer=o)
            # issue 42: the record is the observer's, not each call's (`aexec serve`
            # makes a call per request)
            got = await aexec.observe_many(cands, observer=o)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    assert [x.verdict for x in got] == ["empty_success"] * 3
    assert "also read-only (toolchain, declared)" in got[0].environment.enforced["filesystem"]
    assert len({id(x.environment.enforced) for x in [*first, *got]}) == 1
    assert calls == 1, f"the view's record was made {calls} times for 4 jobs of one toolchain in 2 calls"
