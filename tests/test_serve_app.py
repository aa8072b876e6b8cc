"""``aexec serve`` in-process on the test's anyio backend (both): aexec's own endpoints,
admission (429), the body cap, the bearer token, and a client that goes away (issue 31)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest

import aexec

pytest.importorskip("starlette")
pytest.importorskip("hypercorn")
from aexec._serve.server import ServeConfig, serve

from .conftest import live_pids_with

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def running(supervisor: aexec.Supervisor | None = None, **config: object) -> AsyncIterator[str]:
    """A server on a free loopback port, on this test's backend, stopped at the end."""
    stop = anyio.Event()
    url: list[str] = []
    ready = anyio.Event()

    def on_ready(u: str) -> None:
        url.append(u)
        ready.set()

    cfg = ServeConfig(**{"port": 0, "jobs": 2, "queue": 8, "grace": 1.0, **config})  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: serve(
                cfg, aexec.Options(), on_ready=on_ready, stop=stop, signals=False, supervisor=supervisor
            )
        )
        with anyio.fail_after(30):
            await ready.wait()
        try:
            yield url[0]
        finally:
            stop.set()


def snippet(code: str, **extra: object) -> dict[str, object]:
    return {"request_type": "run_entry", "artifact_shape": "snippet", "code": code, **extra}


async def post(client: httpx.AsyncClient, path: str, body: object) -> httpx.Response:
    return await client.post(path, content=json.dumps(body))


def sleeper(marker: str) -> str:
    """A candidate whose child process carries ``marker`` on its command line."""
    return f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'])"


async def test_observe_and_observe_many_in_input_order() -> None:
    async with running() as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        r = await client.post("/observe", content=json.dumps(snippet("print(6 * 7)", id="a")))
        assert r.status_code == 200
        obs = r.json()
        assert (obs["id"], obs["verdict"], obs["stdout"]) == ("a", "empty_success", "42\n")

        r = await client.post("/observe", content=b'{"request_type": "run_entry"}')
        assert (r.status_code, r.json()) == (400, {"error": "body: missing artifact_shape"})

        lines = [
            json.dumps(snippet("import time; time.sleep(1); print('slow')", id="slow")),
            "not json",
            json.dumps(snippet("raise KeyError('k')", id="fails")),
            json.dumps(snippet("print(1)", language="cobol")),
        ]
        answers = []
        async with client.stream("POST", "/observe_many", content="\n".join(lines) + "\n") as r:
            assert r.status_code == 200
            assert r.headers["content-type"] == "application/x-ndjson"
            async for line in r.aiter_lines():
                if line:
                    answers.append(json.loads(line))
        assert len(answers) == 4
        assert (answers[0]["id"], answers[0]["stdout"]) == ("slow", "slow\n")
        assert answers[1]["line"] == 2 and answers[1]["error"].startswith("line 2: bad JSON")
        assert (answers[2]["id"], answers[2]["failure"]["failure_class"]) == ("fails", "runtime")
        assert answers[3]["line"] == 4 and "unknown language 'cobol'" in answers[3]["error"]

        metrics = (await client.get("/metrics")).json()
        assert metrics["in_flight"] == 0
        assert metrics["done_by_verdict"] == {"empty_success": 2, "fail": 1}


@pytest.mark.parametrize("path", ["/observe", "/observe_many", "/run_code"])
async def test_a_client_that_goes_away_has_its_run_killed(path: str) -> None:
    marker = f"serve-gone-{uuid.uuid4().hex}"
    code = sleeper(marker)
    body = {"code": code, "language": "python"} if path == "/run_code" else snippet(code)
    async with running() as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            with anyio.move_on_after(20):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(post, client, path, body)
                    while not live_pids_with(marker):
                        await anyio.sleep(0.1)
                    tg.cancel_scope.cancel()  # the client gives up: its connection closes
        assert marker  # the run had started (the loop above saw it)
        deadline = time.monotonic() + 15
        while live_pids_with(marker) and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        assert live_pids_with(marker) == []
        async with httpx.AsyncClient(base_url=url) as client:
            for _ in range(50):
                if (await client.get("/metrics")).json()["in_flight"] == 0:
                    break
                await anyio.sleep(0.1)
            assert (await client.get("/metrics")).json()["in_flight"] == 0


async def test_busy_is_429_with_retry_after_and_the_body_and_token_are_checked() -> None:
    marker = f"serve-busy-{uuid.uuid4().hex}"
    async with running(jobs=1, queue=0, token="s3cret", max_body=4096) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as anonymous:
            assert (await anonymous.get("/health")).status_code == 200
            r = await anonymous.post("/run_code", json={"code": "print(1)", "language": "python"})
            assert (r.status_code, r.headers["www-authenticate"]) == (401, "Bearer")
        auth = {"Authorization": "Bearer s3cret"}
        async with httpx.AsyncClient(base_url=url, timeout=60, headers=auth) as client:
            r = await client.post("/run_code", json={"code": "x = 1\n" * 1000, "language": "python"})
            assert r.status_code == 413
            async with anyio.create_task_group() as tg:
                tg.start_soon(post, client, "/observe", snippet(sleeper(marker), policy={"timeout_s": 3}))
                with anyio.fail_after(20):
                    while not live_pids_with(marker):
                        await anyio.sleep(0.1)
                r = await post(client, "/observe", snippet("print(1)"))
                assert (r.status_code, r.headers["retry-after"]) == (429, "1")
            metrics = (await client.get("/metrics")).json()
            assert metrics["refused_busy"] == 1 and metrics["done_by_verdict"] == {"fail": 1}


async def test_concurrent_calls_on_one_observer_share_its_fork_server() -> None:
    """Two calls that start the same warm server at once: one starts it, both use it.
    (Before: each started its own, and the second replaced and closed the first while
    a run was on it — ``ServerGone``, an ``error`` observation for a good candidate.)"""
    async with aexec.observer(aexec.Options()) as own:
        results: list[aexec.ExecutionObservation] = []

        async def one(i: int) -> None:
            results.append(
                await aexec.observe(aexec.Candidate("run_entry", "snippet", code=f"print({i})"), observer=own)
            )

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i)
    assert sorted(o.stdout for o in results) == [f"{i}\n" for i in range(8)], [o.error for o in results]


class Broken:
    """A supervisor that fails: aexec's own failure, not the candidate's."""

    async def execute(self, invocation: aexec.Invocation) -> aexec.RawRun:
        raise RuntimeError("the supervisor broke")


async def test_sandbox_error_is_aexecs_own_failure_only() -> None:
    """``SandboxError`` when aexec could not observe the run (its ``error`` verdict), with
    the reason; a candidate that fails is ``Failed`` (tests/test_serve.py, every language)."""
    async with running(supervisor=Broken()) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        r = await client.post("/run_code", json={"code": "print(1)", "language": "python"})
        assert r.status_code == 200
        answer = r.json()
        assert answer["status"] == "SandboxError" and "the supervisor broke" in answer["message"], answer
        assert answer["run_result"] is None
        metrics = (await client.get("/metrics")).json()
        assert metrics["run_code_by_status"] == {"SandboxError": 1}


BAD_RUN_CODE = [
    ({"code": "print(1)", "language": "python", "run_timeout": 0}, "run_timeout"),
    ({"code": "print(1)", "language": "python", "run_timeout": 5000}, "run_timeout"),
    ({"code": "print(1)", "language": "python", "memory_limit_MB": 4}, "memory_limit_MB"),
    ({"code": "print(1)\x00", "language": "python"}, "code"),
    ({"language": "python"}, "code"),
    ({"code": "print(1)", "language": "brainfuck"}, "language"),
]


async def test_a_bad_run_code_request_is_sandboxfusions_422_naming_the_field() -> None:
    async with running() as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        for body, field in BAD_RUN_CODE:
            r = await client.post("/run_code", json=body)
            assert r.status_code == 422, (body, r.text)
            (detail,) = r.json()["detail"]
            assert detail["loc"] == ["body", field] and detail["msg"], (body, detail)
        assert (await client.post("/run_code", content=b"{")).status_code == 400


async def test_a_free_slot_goes_to_the_request_that_must_start_soonest() -> None:
    """A C++ request (7 s to start at verl's settings) behind a Python one (17 s) gets the
    next slot; one not given a slot by its deadline gives up and holds none (issue 40)."""
    from aexec._serve.gate import Gate, Slots

    slots = Slots(1)
    assert await slots.acquire(0.0, None)
    order: list[str] = []

    async def waiter(key: float, name: str) -> None:
        assert await slots.acquire(key, None)
        order.append(name)
        slots.release()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter, 17.0, "python")  # waits first, may wait longer
        await anyio.sleep(0.05)
        tg.start_soon(waiter, 7.0, "cpp")
        await anyio.sleep(0.05)
        slots.release()
    assert order == ["cpp", "python"] and slots.used == 0
    assert await slots.acquire(0.0, None)
    assert not await slots.acquire(0.0, anyio.current_time() + 0.05)
    slots.release()
    assert (slots.used, slots.waiting) == (0, [])
    # the expected overhead: the recent runs' third quartile and a second, within [3, 9] s
    gate = Gate(1, 0)
    assert gate.overhead() == 3.0
    gate.overheads.extend([0.1, 0.2, 4.0, 0.3])
    assert gate.overhead() == 5.0
    gate.overheads.extend([60.0] * 8)
    assert gate.overhead() == 9.0
