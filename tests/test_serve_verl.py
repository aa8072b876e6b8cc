"""verl's reward path against ``aexec serve`` on loopback (issue 40): requests shaped as
verl's ``check_correctness`` sends them, scored from the fields verl reads, each score the
one SandboxFusion gives. The client and the cases are ``benchmarks/serve_verl.py``'s (the
full load runs there: 40 loops with 40 right answers, 100 requests over capacity)."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aexec.testing import ServeProcess

pytest.importorskip("starlette")
pytest.importorskip("hypercorn")

_path = Path(__file__).resolve().parents[1] / "benchmarks" / "serve_verl.py"
_spec = importlib.util.spec_from_file_location("serve_verl", _path)
assert _spec is not None and _spec.loader is not None
verl = importlib.util.module_from_spec(_spec)
sys.modules["serve_verl"] = verl
_spec.loader.exec_module(verl)


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    with ServeProcess("--jobs", "4") as s:
        yield s


def test_every_case_scores_as_sandboxfusion_scores_it(server: ServeProcess) -> None:
    """Right answers (one of 110 KB, past aexec's 64 KiB default: once cut, scored 0),
    wrong answers, a runtime error, a syntax error, a compile error, an infinite loop, a
    memory hog and bash (once a 422 verl cannot read), all at once."""
    cases = [verl.distinct(c, f"t-{c.name}") for c in verl.CASES]
    results = verl.drive(server.url, cases)
    got = {r.case.name: r.score for r in results}
    assert got == {c.name: c.score for c in verl.CASES}, [r for r in results if r.score != r.case.score]


def test_a_language_sandboxfusion_has_and_aexec_lacks_is_its_sandbox_error(server: ServeProcess) -> None:
    """go is one of SandboxFusion's languages: its own ``SandboxError`` answer, which verl
    reads (-1, as for any sandbox failure), not a 422 it cannot."""
    r = httpx.post(f"{server.url}/run_code", json={"code": "package main", "language": "go"}, timeout=30)
    assert r.status_code == 200
    answer = r.json()
    assert (answer["status"], answer["run_result"], answer["compile_result"]) == ("SandboxError", None, None)
    assert "go" in answer["message"]
    assert verl.score(answer, "") == -1


def test_a_request_that_cannot_start_in_time_is_504_and_one_over_the_queue_waits() -> None:
    """One run slot, no queue. A request behind a long run gets 504 with Retry-After once
    it could no longer end before verl gives up (its ``compile_timeout + run_timeout + 10``
    s), not a 429 verl never retries, nor held until verl has gone; short requests beyond
    the queue wait for the slot and are answered."""
    with ServeProcess("--jobs", "1", "--queue", "0") as s:
        hold = {"code": "import time\ntime.sleep(30)", "language": "python", "run_timeout": 12}
        holder = threading.Thread(
            target=lambda: httpx.post(f"{s.url}/run_code", json={**hold, "compile_timeout": 0.1}, timeout=60)
        )
        holder.start()
        deadline = time.monotonic() + 30
        while s.metrics()["running_slots"] < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        late = {"code": "print(1)", "language": "python", "run_timeout": 1, "compile_timeout": 0.1}
        start = time.monotonic()
        r = httpx.post(f"{s.url}/run_code", json=late, timeout=60)
        waited = time.monotonic() - start
        # 0.1 + 1 + 10 s of patience, less its 1 s deadline and 3 s of overhead: ~7.1 s
        assert (r.status_code, r.headers.get("retry-after")) == (504, "1"), r.text
        assert 5 < waited < 0.1 + 1 + 10, waited
        assert s.metrics()["refused_late"] == 1
        holder.join(60)
        # nothing running now: six at once, one slot and no queue, every one answered
        cases = [verl.distinct(verl.BY_NAME["py_right"], f"queue-{i}") for i in range(6)]
        results = verl.drive(s.url, cases)
        assert [r.score for r in results] == [True] * 6, results
        assert {h for r in results for h in r.http} == {200}


def test_python_programs_run_in_the_interpreter_the_server_is_given(tmp_path: Path) -> None:
    """``--python``: /run_code's Python programs run there, not in the server's venv."""
    other = Path("/usr/bin/python3")
    if not other.exists() or other.resolve() == Path(sys.executable).resolve():
        pytest.skip("no second interpreter here")
    with ServeProcess("--jobs", "1", "--python", str(other)) as s:
        code = "import sys; print(sys.executable)"
        r = httpx.post(f"{s.url}/run_code", json={"code": code, "language": "python"}, timeout=60).json()
        assert (r["status"], r["run_result"]["stdout"]) == ("Success", f"{other}\n"), r
    with pytest.raises(RuntimeError, match="--python"):
        ServeProcess("--python", str(tmp_path / "none"))


def test_a_declared_environment_is_built_before_the_server_listens() -> None:
    """``--environment``: built (or found built) at the start, its interpreter then runs
    /run_code's Python programs; one that cannot be built stops the start, naming it."""
    with pytest.raises(RuntimeError, match=r"--environment: .*3\.99"):
        ServeProcess("--environment", '{"python": "3.99"}')
