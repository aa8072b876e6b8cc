"""Goal 4: what outlives a call is owned, and given back (issue 17).

An `aexec.Observer` keeps its warm fork servers and its compiled-bytecode store between
calls and gives them back when its ``async with`` ends; `aexec.aclose` does the same for
the observers shared by calls made without one. No ``atexit`` hook does it instead.
"""

from __future__ import annotations

import ast
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aexec
from aexec import Candidate, Options, observe_many

from .conftest import CountingSupervisor, MakeRepo

pytestmark = pytest.mark.anyio

SRC = Path(aexec.__file__).parent


def fork_servers() -> set[int]:
    """Live children of this process (any thread's) running the driver's ``--serve``."""
    found = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                children = f.read().split()
        except OSError:
            continue
        for pid in children:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as c:
                    argv = c.read().split(b"\0")
                with open(f"/proc/{pid}/stat") as s:
                    state = s.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z" and any(a.endswith(b"_driver/__main__.py") for a in argv) and b"--serve" in argv:
                found.add(int(pid))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as s:
            return s.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def bytecode_stores(base: Path) -> list[Path]:
    return [p for p in base.iterdir() if "-bytecode-" in p.name]


def work(make_repo: MakeRepo, n: int) -> list[Candidate]:
    """A suite run on a repo (a pytest server, the bytecode store) and a snippet (a bare server)."""
    repo = make_repo(
        {
            "mod.py": f"VALUE = {n}\n",
            "test_mod.py": f"import mod\ndef test_v():\n    assert mod.VALUE == {n}\n",
        }
    )
    return [
        Candidate("run_suite", "test_subset", repo=str(repo), tests=["test_mod.py"]),
        Candidate("run_entry", "snippet", code=f"print({n})"),
    ]


async def test_an_observer_keeps_its_servers_warm_and_gives_everything_back(
    make_repo: MakeRepo, tmp_path: Path
) -> None:
    base = tmp_path / "scratch"
    base.mkdir()
    before = fork_servers()
    counting = CountingSupervisor()
    async with aexec.observer(Options(scratch_dir=str(base)), supervisor=counting) as o:
        first = await observe_many(work(make_repo, 1), observer=o)
        assert [x.verdict for x in first] == ["pass", "empty_success"], [x.stderr for x in first]
        servers = fork_servers() - before
        assert len(servers) == 2, "one warm server per mode (pytest, bare)"
        (store,) = bytecode_stores(base)
        assert any(store.rglob("*.pyc")), "the repo was compiled into the observer's store"
        runs, served = counting.runs, counting.served

        second = await observe_many(work(make_repo, 2), observer=o)
        assert [x.verdict for x in second] == ["pass", "empty_success"]
        assert fork_servers() - before == servers, "the second call started servers of its own"
        assert counting.runs > runs and counting.served - served == counting.runs - runs, (
            "a run of the second call was not forked by a warm server"
        )
        assert bytecode_stores(base) == [store]
    assert not any(alive(pid) for pid in servers), "a fork server outlived its observer"
    assert not store.exists(), "the observer's bytecode store outlived it"
    assert os.listdir(base) == [], "the observer left something in its scratch base"


async def test_aclose_gives_back_what_the_shared_observers_kept(make_repo: MakeRepo, tmp_path: Path) -> None:
    base = tmp_path / "scratch"
    base.mkdir()
    before = fork_servers()
    opts = Options(scratch_dir=str(base))  # options of this test's own: a shared observer of its own
    first = await observe_many(work(make_repo, 1), options=opts)
    assert [x.verdict for x in first] == ["pass", "empty_success"]
    servers = fork_servers() - before
    assert len(servers) == 2
    (store,) = bytecode_stores(base)
    await observe_many(work(make_repo, 2), options=opts)
    assert fork_servers() - before == servers, "calls sharing options share warm servers"

    await aexec.aclose()
    assert not any(alive(pid) for pid in servers), "a shared fork server outlived aclose"
    assert not store.exists() and os.listdir(base) == []
    # a later call starts afresh, and is given back again
    again = await observe_many(work(make_repo, 3), options=opts)
    assert [x.verdict for x in again] == ["pass", "empty_success"]
    restarted = fork_servers() - before
    assert restarted and not restarted & servers
    await aexec.aclose()
    assert not any(alive(pid) for pid in restarted)


def test_no_atexit_hooks_remain() -> None:
    """Resources are given back by their owner's close, not at interpreter exit."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.parent.name == "_driver":
            continue  # runs inside the candidate, whose atexit callbacks it runs at its exit
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                names = [node.value.id] if node.value.id == "atexit" else []
            elif isinstance(node, ast.Attribute) and node.attr == "finalize":
                names = ["weakref.finalize"]
            if any(n.split(".")[0] == "atexit" or n == "weakref.finalize" for n in names):
                offenders.append(f"{path.relative_to(SRC)}:{getattr(node, 'lineno', 0)}")
    assert offenders == []
    assert any(SRC.rglob("*.py"))


async def test_the_observer_is_the_client(tmp_path: Path) -> None:
    """Issue 28, goal 5: ``Observer.observe_many`` is the real method (made with its
    defaults: no version to pass), and it checks the candidates before anything runs."""
    counting = CountingSupervisor()
    async with aexec.Observer(Options(scratch_dir=str(tmp_path)), supervisor=counting) as o:
        ok, boom = await o.observe_many(
            [
                Candidate("run_entry", "snippet", id="ok", code="print('hi')"),
                Candidate("run_entry", "snippet", id="boom", code="raise SystemExit(3)"),
            ]
        )
        assert (ok.verdict, ok.stdout, ok.aexec_version) == ("empty_success", "hi\n", aexec.__version__)
        assert boom.verdict == "fail" and boom.exit_code == 3
        runs = counting.runs
        with pytest.raises(aexec.RequestError, match=r"candidate 1 \('bad'\): .*`code`"):
            await o.observe_many(
                [
                    Candidate("run_entry", "snippet", code="print(1)"),
                    Candidate("run_entry", "snippet", id="bad"),
                ]
            )
        assert counting.runs == runs, "a run started before every candidate was checked"


async def test_a_candidate_is_checked_and_its_interpreter_resolved_once(tmp_path: Path) -> None:
    """Issue 28: validation and interpreter resolution ran twice (``_api.validate``, then
    ``Session.job``). The real functions' calls are counted with a profiler, not patched."""
    from aexec._pipeline.toolchain import resolve_python
    from aexec._stages import grade

    watched = {resolve_python.__code__: "resolve_python", grade.check.__code__: "grade.check"}
    calls = {name: 0 for name in watched.values()}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in watched:
            calls[watched[frame.f_code]] += 1

    cands = [Candidate("run_entry", "snippet", id=f"c{i}", code=f"print({i})") for i in range(3)]
    async with aexec.observer(Options(scratch_dir=str(tmp_path))) as o:
        await observe_many(cands[:1], observer=o)  # warm: probes made once per observer are not counted
        got = await _observe_profiled(cands, o, profile)
    assert [x.verdict for x in got] == ["empty_success"] * 3
    assert calls == {"resolve_python": 3, "grade.check": 3}


async def _observe_profiled(
    cands: list[Candidate], o: aexec.Observer, profile: Callable[[Any, str, Any], None]
) -> list[aexec.ExecutionObservation]:
    """``observe_many`` with ``profile`` watching every call, in this thread and the workers'."""
    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        return await observe_many(cands, observer=o)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
