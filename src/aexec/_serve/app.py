"""The ASGI application of ``aexec serve`` (Starlette, on anyio: either backend).

Endpoints: ``POST /run_code`` (SandboxFusion's, `sandboxfusion`), ``POST /observe`` (one
request of the JSONL contract in, its observation out), ``POST /observe_many`` (JSONL in,
observations out in input order as they are made), ``GET /health``, ``GET /metrics``,
``GET /openapi.json``, and the session routes (``/sessions...``, `sessions`).

What keeps it standing (`Gate`, in `gate`): at most ``jobs`` runs at once, at most
``queue`` more waiting; an ``/observe`` request beyond that gets ``429`` with
``Retry-After``, never an unbounded queue; a ``/run_code`` request waits, but never past
the moment its run could no longer end before its client gives up: then ``504`` with
``Retry-After``, which SandboxFusion's clients (verl's) retry. Bodies over ``max_body``
bytes get ``413``. With a token every endpoint but ``/health`` needs
``Authorization: Bearer <token>``. A client that disconnects has its
runs cancelled: aexec kills their process trees and removes their scratch roots.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._api import VERSION, observe, observe_many, validate
from .._errors import RequestError
from .._jsonl import lines, parse_line
from .._log import get_logger
from .._pipeline.observer import Observer
from .._records import Candidate, ExecutionObservation
from .._serde import dumps
from . import sandboxfusion
from .gate import Gate, Refused, answered
from .openapi import OPENAPI
from .sessions import Sessions
from .sessions import routes as session_routes

log = get_logger(__name__)


@attrs.frozen
class Settings:
    observer: Observer
    jobs: int
    queue: int
    max_body: int = 16 * 1024 * 1024
    token: str | None = None
    #: The interpreter ``/run_code``'s Python programs run in (None: the server's own).
    python: str | None = None
    #: Open sessions at most (`sessions`), and the idle seconds after which one is closed.
    sessions: int = 4
    session_idle_s: float = 900.0


async def _body(request: Request, cap: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > cap:
        raise Refused(413, f"request body of {length} bytes; at most {cap}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise Refused(413, f"request body over {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def cancel_on_disconnect(receive: Receive, work: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
    """Run ``work()`` until it ends or the client goes away (then it is cancelled, which
    kills its runs' process trees); (the client left, the result)."""
    result: Any = None
    left = False
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            nonlocal left
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    left = True
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(watch)
        result = await work()
        tg.cancel_scope.cancel()
    return left, result


def _json(data: bytes, where: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise Refused(
            400, f"{where}: bad JSON: {str(e).splitlines()[0] if str(e) else 'nested too deeply'}"
        ) from None


def _observe_line(raw: bytes, where: str) -> Candidate:
    candidate, _ = parse_line(raw, where)
    try:
        validate(candidate)
    except RequestError as e:
        raise RequestError(f"{where}: {e}") from None
    return candidate


def build(settings: Settings) -> Starlette:
    """The application over one shared `Observer` (its warm interpreters serve every request)."""
    gate = Gate(settings.jobs, settings.queue)
    obs_ = settings.observer

    def count(o: ExecutionObservation) -> None:
        gate.done[o.verdict] += 1

    async def observed(
        request: Request, candidate: Candidate, start_by: float | None = None
    ) -> ExecutionObservation | None:
        """``candidate`` observed in one admitted slot, counted; None if the client left.
        With ``start_by``, it waits for a place and a slot until then (else 504)."""

        async def work() -> ExecutionObservation:
            started = anyio.current_time()
            try:
                o = await observe(candidate, observer=obs_)
            except BaseException:  # the client left: past its deadline, the run's excess is its overhead
                excess = anyio.current_time() - started - (candidate.policy.timeout_s or 0.0)
                gate.overheads.append(max(0.0, excess))
                raise
            if o.timed_out:  # the worst case a request is admitted for: its run to the deadline
                gate.overheads.append(anyio.current_time() - started - o.duration)
            return o

        async def admitted() -> ExecutionObservation | Refused:
            try:
                return await gate.run(1, work, admitted=start_by is None, start_by=start_by)  # type: ignore[no-any-return]
            except Refused as e:  # raised out here, not inside the task group
                return e

        if start_by is None:
            gate.admit(1)
        left, o = await cancel_on_disconnect(request.receive, admitted)
        if isinstance(o, Refused):
            raise o
        if left:
            return None
        count(o)
        return o  # type: ignore[no-any-return]

    async def run_code(request: Request) -> Response:
        arrived = anyio.current_time()
        body = _json(await _body(request, settings.max_body), "body")
        try:
            candidate = sandboxfusion.request(body, python=settings.python)
            validate(candidate)
        except sandboxfusion.Invalid as e:
            return JSONResponse(e.body(), 422)
        except sandboxfusion.Unavailable as e:
            gate.sandboxfusion["SandboxError"] += 1
            return JSONResponse(e.body())
        except RequestError as e:  # what only the pipeline's checks see (a NUL in the code)
            return JSONResponse(sandboxfusion.Invalid("code", str(e).splitlines()[0], None).body(), 422)

        o = await observed(
            request, candidate, arrived + sandboxfusion.start_within(body, candidate, gate.overhead())
        )
        if o is None:
            return Response(status_code=499)
        answer = sandboxfusion.response(o, candidate.language)
        gate.sandboxfusion[answer["status"]] += 1
        return JSONResponse(answer)

    async def observe_one(request: Request) -> Response:
        raw = await _body(request, settings.max_body)
        numbered = lines(raw)
        if len(numbered) != 1:
            raise Refused(400, f"body: one request expected, got {len(numbered)} (use /observe_many)")
        try:
            candidate = _observe_line(numbered[0][1], "body")
        except RequestError as e:
            raise Refused(400, str(e).splitlines()[0]) from None

        o = await observed(request, candidate)
        if o is None:
            return Response(status_code=499)
        return Response(dumps(o), media_type="application/json")

    async def observe_batch(request: Request) -> Response:
        raw = await _body(request, settings.max_body)
        entries: list[Candidate | str] = []
        for number, line in lines(raw):
            try:
                entries.append(_observe_line(line, f"line {number}"))
            except RequestError as e:
                entries.append(str(e).splitlines()[0])
        gate.admit(sum(isinstance(e, Candidate) for e in entries))  # before the answer starts
        return _Stream(entries, gate, obs_)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "aexec": VERSION})

    async def metrics(request: Request) -> Response:
        return JSONResponse(gate.metrics())

    async def openapi(request: Request) -> Response:
        return JSONResponse(OPENAPI)

    routes = [
        Route("/run_code", answered(run_code), methods=["POST"]),
        Route("/observe", answered(observe_one), methods=["POST"]),
        Route("/observe_many", answered(observe_batch), methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
    sessions = Sessions(obs_, settings.sessions, settings.session_idle_s)
    routes += session_routes(sessions, gate, settings.max_body, _body, _json, cancel_on_disconnect)
    app = Starlette(routes=routes)
    app.state.sessions = sessions  # closed by the server when it stops
    app.add_middleware(_Access, token=settings.token)
    return app


class _Stream(Response):
    """``/observe_many``'s answer: one JSON line per request line, in input order, each
    sent as soon as it and every line before it are made. A bad line is answered with
    ``{"line": N, "error": ...}`` in its place; the others are still observed."""

    media_type = "application/x-ndjson"

    def __init__(self, entries: list[Candidate | str], gate: Gate, observer: Observer) -> None:
        super().__init__(media_type=self.media_type)
        self.entries = entries
        self.gate = gate
        self.observer = observer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        good = [(i, e) for i, e in enumerate(self.entries) if isinstance(e, Candidate)]
        pending: dict[int, str] = {
            i: json.dumps({"line": i + 1, "error": e}, ensure_ascii=False)
            for i, e in enumerate(self.entries)
            if isinstance(e, str)
        }
        tx, rx = anyio.create_memory_object_stream[tuple[int, str]](max_buffer_size=len(good) + 1)
        following = 0

        def made(k: int, o: ExecutionObservation) -> None:
            self.gate.done[o.verdict] += 1
            tx.send_nowait((good[k][0], dumps(o)))

        async def work() -> None:
            with tx:
                await self.gate.run(
                    len(good),
                    lambda: observe_many(
                        [c for _, c in good],
                        observer=self.observer,
                        limit=max(1, min(len(good), self.gate.jobs)),
                        on_observation=made,
                    ),
                    admitted=True,
                )

        async def flush() -> None:
            nonlocal following
            out = []
            while following in pending:
                out.append(pending.pop(following).encode("utf-8") + b"\n")
                following += 1
            if out:
                await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})

        async def write() -> None:
            # No content-length: the lines are sent as they are made (chunked).
            headers = [(b"content-type", b"application/x-ndjson")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await flush()
            async with rx:
                async for i, line in rx:
                    pending[i] = line
                    await flush()
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def both() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await work()

        await cancel_on_disconnect(receive, both)


class _Access:
    """The bearer token check and one structlog access event per request."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        path = scope.get("path", "")
        if self.token is not None and path != "/health" and not self._authorized(scope):
            answer = JSONResponse(
                {"error": "a bearer token is required (Authorization: Bearer <token>)"},
                401,
                headers={"WWW-Authenticate": "Bearer"},
            )
            await answer(scope, receive, sending)
        else:
            try:
                await self.app(scope, receive, sending)
            except Exception:
                log.exception("http_error", method=scope.get("method"), path=path)
                raise
        client = scope.get("client") or ("", 0)
        log.info(
            "http_request",
            method=scope.get("method"),
            path=path,
            status=status,
            ms=round((time.perf_counter() - start) * 1000, 1),
            client=client[0],
        )

    def _authorized(self, scope: Scope) -> bool:
        assert self.token is not None
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                given = value.decode("latin-1")
                return hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode())
        return False
