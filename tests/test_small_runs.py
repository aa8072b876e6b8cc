"""Issue 42: a small Python job without a repo is prepared (and, when what its run left is
small, collected) on the loop's thread instead of in a worker thread (`small.small_job`,
`small.small_result`), and its small scratch root removed there (`small.remove_small`).
Real runs, each observed both ways: the observation must not tell which way it was
made, and no root is left when the call returns."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from aexec import Candidate, Policy, observe, observe_many
from aexec._boundary.isolation import detect_isolation
from aexec._pipeline import run, small
from aexec._pipeline.small import remove_small, small_tree
from aexec._records import ExecutionObservation
from aexec._stages.plan import Scratch

from .conftest import scratch_roots

pytestmark = pytest.mark.anyio
BOX = detect_isolation()
full_boundary = pytest.mark.skipif(
    not (BOX.namespaces and BOX.cgroups is not None), reason="needs root, namespaces and cgroups"
)

CASES = [
    Candidate("run_entry", "snippet", code="x = 1\n"),
    Candidate("run_entry", "snippet", code="print('out')\nimport sys\nprint('err', file=sys.stderr)\n"),
    Candidate("run_entry", "snippet", code="open('a.txt', 'w').write('hi')\nraise ValueError('boom')\n"),
    Candidate("run_entry", "snippet", code="import sys\nprint(sys.stdin.read().upper())\n", stdin="abc"),
    Candidate(
        "run_entry",
        "snippet",
        code="print(open('in.txt').read())\nopen('out.txt', 'w').write('back')\n",
        files={"in.txt": base64.b64encode(b"given").decode()},
        fetch_files=["out.txt"],
    ),
    # What the run leaves decides: 100 files are collected in a worker thread.
    Candidate("run_entry", "snippet", code="for i in range(100):\n    open(f'f{i}', 'w').close()\n"),
    # So does its output (past SMALL_OUTPUT_BYTES), and its inputs (past SMALL_INPUT_BYTES).
    Candidate("run_entry", "snippet", code="print('x' * 100_000)\n"),
    Candidate("run_entry", "snippet", code="x = 1\n" + "#" * (300 * 1024) + "\n"),
    Candidate("run_entry", "snippet", code="import time\ntime.sleep(5)\n", policy=Policy(timeout_s=0.5)),
]


def seen(o: ExecutionObservation) -> dict[str, Any]:
    """What a run's observation says of the candidate (not of this run's timing or root)."""
    return {
        "verdict": o.verdict,
        "exit_code": o.exit_code,
        "timed_out": o.timed_out,
        "stdout": o.stdout,
        "stderr": o.stderr.replace(o.environment.fs_boundary.scratch_root, "ROOT"),
        "exception": o.exception,
        "failure": None if o.failure is None else o.failure.failure_class,
        "changed_state": o.changed_state,
        "changes": o.changes,
        "files_out": o.files_out,
    }


@pytest.fixture
def on_the_loop(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Which way each prepare and collect went, as `run` decided."""
    taken: list[tuple[str, bool]] = []
    job, result = small.small_job, small.small_result

    def small_job(*args: Any) -> bool:
        taken.append(("prepare", out := job(*args)))
        return out

    def small_result(*args: Any) -> bool:
        taken.append(("collect", out := result(*args)))
        return out

    monkeypatch.setattr(run, "small_job", small_job)
    monkeypatch.setattr(run, "small_result", small_result)
    return taken


def left_behind(base: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f if line.split()[4].startswith(str(base))]
    return scratch_roots(base) + mounts


@full_boundary
async def test_a_small_run_on_the_loop_is_observed_as_in_a_thread(
    on_the_loop: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch, scratch_tmp: Path
) -> None:
    here = await observe_many(CASES, limit=2)
    assert left_behind(scratch_tmp) == []
    assert sorted(on_the_loop) == sorted(
        [("prepare", True)] * 8
        + [("prepare", False)]  # the 300 KiB program
        + [("collect", True)] * 5  # the timed-out run's too
        + [("collect", False)] * 3  # fetch_files, 100 files, 100 kB of output
    ), on_the_loop
    monkeypatch.setattr(run, "small_job", lambda *_: False)  # every prepare and collect in a thread
    threaded = await observe_many(CASES, limit=2)
    assert left_behind(scratch_tmp) == []
    assert [seen(o) for o in here] == [seen(o) for o in threaded]
    assert here[0].failure is None and here[1].stdout == "out\n" and "err" in here[1].stderr
    assert here[2].failure is not None and "ValueError" in (here[2].exception or "")
    assert here[3].stdout == "ABC\n" and here[4].stdout == "given\n"
    assert here[4].files_out == {"out.txt": base64.b64encode(b"back").decode()}
    assert "100 created" in here[5].changed_state and "stdout not kept" in here[6].stdout
    assert here[8].timed_out


@full_boundary
async def test_one_candidate_calls_leave_no_root_small_or_not(scratch_tmp: Path) -> None:
    # `observe`'s path: no workers; a small root removed at once, a large one in a hop.
    for code in ("x = 1\n", "for i in range(100):\n    open(f'f{i}', 'w').close()\n"):
        o = await observe(Candidate("run_entry", "snippet", code=code))
        assert o.failure is None, o.stderr
        assert left_behind(scratch_tmp) == []


def test_a_plain_directory_on_a_busy_file_system_is_not_small(tmp_path: Path) -> None:
    # No tmpfs of its own (the fallback without namespaces): its file system's inodes
    # are the host's (here the tests' tmp), so it is left for a worker thread, untouched.
    if small_tree(str(tmp_path)):
        pytest.skip("the tests' tmp is a near-empty file system of its own")
    root = tmp_path / "aexec-plain"
    (root / "work").mkdir(parents=True)
    scratches = [Scratch(str(root))]
    remove_small(scratches)
    assert scratches == [Scratch(str(root))] and (root / "work").is_dir()
