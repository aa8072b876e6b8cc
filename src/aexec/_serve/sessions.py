"""``aexec serve``'s sessions (issue 41): the library's `Workspace` over HTTP.

``POST /sessions`` opens one (``{"repo", "python", "environment", "policy"}``, each
optional) and answers ``{"id": ...}``; ``POST /sessions/{id}/exec`` runs one command in
it (``{"argv", "input", "cwd", "env", "timeout"}``) and answers its observation, as
``/observe`` does; ``PUT``/``GET /sessions/{id}/files/{path}`` write and read a file
(raw bytes; a path leaving the workspace is ``403``, a missing file ``404``);
``GET /sessions/{id}/diff`` is its patch; ``DELETE /sessions/{id}`` closes it.

At most ``cap`` sessions are open at once (``429`` past it); one unused for ``idle_s``
seconds is closed when another opens. A command takes a run slot as ``/observe`` does
(``429`` when every place is taken). Every session is closed when the server stops.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive

from .._api import session as open_session
from .._environments.spec import EnvBroken, from_json
from .._errors import RequestError
from .._pipeline.observer import Observer
from .._pipeline.workspace import Workspace
from .._records import Policy
from .._serde import dumps
from .gate import Gate, Refused, answered


@attrs.define
class _Open:
    workspace: Workspace
    used: float
    busy: int = 0


@attrs.define
class Sessions:
    """The open sessions of one server, by id."""

    observer: Observer
    cap: int
    idle_s: float
    open: dict[str, _Open] = attrs.field(factory=dict)
    opening: int = 0

    def get(self, sid: str) -> _Open:
        entry = self.open.get(sid)
        if entry is None:
            raise Refused(404, f"no open session {sid!r}")
        entry.used = anyio.current_time()
        return entry

    async def start(self, body: Any) -> str:
        if not isinstance(body, dict):
            raise Refused(400, "body: a JSON object expected")
        unknown = sorted(set(body) - {"repo", "python", "environment", "policy"})
        if unknown:
            raise Refused(
                400, f"body: unknown field {unknown[0]!r} (expected repo, python, environment, policy)"
            )
        repo, python = body.get("repo"), body.get("python")
        for name, value in (("repo", repo), ("python", python)):
            if value is not None and not isinstance(value, str):
                raise Refused(400, f"{name} must be a string")
        await anyio.to_thread.run_sync(_check_paths, repo, python)
        try:
            environment = None if body.get("environment") is None else from_json(body["environment"])
            policy = None if body.get("policy") is None else _policy(body["policy"])
        except (RequestError, ValueError, TypeError) as e:
            raise Refused(400, str(e).splitlines()[0] if str(e) else type(e).__name__) from None
        await self._reap()
        if len(self.open) + self.opening >= self.cap:
            raise Refused(429, f"busy: {self.cap} sessions are open (DELETE one)", {"Retry-After": "5"})
        workspace = open_session(
            repo=repo, python=python, environment=environment, policy=policy, observer=self.observer
        )
        self.opening += 1
        try:
            await workspace.open()
        except (EnvBroken, RequestError) as e:
            raise Refused(400, str(e).splitlines()[0]) from None
        finally:
            self.opening -= 1
        sid = secrets.token_hex(8)
        self.open[sid] = _Open(workspace, anyio.current_time())
        return sid

    async def close(self, sid: str) -> None:
        entry = self.get(sid)
        if entry.busy:
            raise Refused(409, f"session {sid!r} is running a command")
        del self.open[sid]
        await entry.workspace.aclose()

    async def _reap(self) -> None:
        now = anyio.current_time()
        for sid, entry in list(self.open.items()):
            if not entry.busy and now - entry.used > self.idle_s:
                del self.open[sid]
                await entry.workspace.aclose()

    async def aclose(self) -> None:
        """Close every session (the server stops)."""
        with anyio.CancelScope(shield=True):
            while self.open:
                _, entry = self.open.popitem()
                await entry.workspace.aclose()


def _check_paths(repo: str | None, python: str | None) -> None:
    if repo is not None and not os.path.isdir(repo):
        raise Refused(400, f"repo: {repo!r} is not a directory")
    if python is not None and not os.access(python, os.X_OK):
        raise Refused(400, f"python: {python!r} is not an executable file")


def _policy(data: Any) -> Policy:
    if not isinstance(data, dict):
        raise RequestError("policy must be an object")
    known = attrs.fields_dict(Policy)
    for name in data:
        if name not in known:
            raise RequestError(f"policy: unknown field {name!r} (expected {', '.join(known)})")
    return Policy(**data)


def _command(body: Any) -> dict[str, Any]:
    """``exec``'s body checked: argv (a non-empty list of strings), input, cwd, env, timeout."""
    if not isinstance(body, dict):
        raise Refused(400, "body: a JSON object expected")
    unknown = sorted(set(body) - {"argv", "input", "cwd", "env", "timeout"})
    if unknown:
        raise Refused(400, f"body: unknown field {unknown[0]!r} (expected argv, input, cwd, env, timeout)")
    argv = body.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise Refused(400, "argv must be a non-empty list of strings")
    for name in ("input", "cwd"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise Refused(400, f"{name} must be a string")
    env = body.get("env")
    if env is not None and (not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values())):
        raise Refused(400, "env must be an object of strings")
    timeout = body.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise Refused(400, "timeout must be a positive number of seconds")
    return {"input": body.get("input"), "cwd": body.get("cwd"), "env": env, "timeout": timeout, "argv": argv}


def routes(
    sessions: Sessions,
    gate: Gate,
    max_body: int,
    body: Callable[[Request, int], Awaitable[bytes]],
    parse: Callable[[bytes, str], Any],
    guarded: Callable[[Receive, Callable[[], Awaitable[Any]]], Awaitable[tuple[bool, Any]]],
) -> list[Route]:
    """The session routes; ``body`` reads a capped body, ``parse`` its JSON, ``guarded``
    runs work until it ends or the client leaves (`app`'s helpers)."""

    async def start(request: Request) -> Response:
        return JSONResponse({"id": await sessions.start(parse(await body(request, max_body), "body"))})

    async def execute(request: Request) -> Response:
        entry = sessions.get(request.path_params["sid"])
        command = _command(parse(await body(request, max_body), "body"))
        argv = command.pop("argv")
        gate.admit(1)
        entry.busy += 1
        try:
            left, o = await guarded(
                request.receive,
                lambda: gate.run(1, lambda: entry.workspace.exec(argv, **command), admitted=True),
            )
        except (RequestError, NotADirectoryError) as e:
            raise Refused(400, str(e).splitlines()[0]) from None
        except PermissionError as e:
            raise Refused(403, str(e).splitlines()[0]) from None
        finally:
            entry.busy -= 1
            entry.used = anyio.current_time()
        if left:
            return Response(status_code=499)
        gate.done[o.verdict] += 1
        return Response(dumps(o), media_type="application/json")

    async def files(request: Request) -> Response:
        entry = sessions.get(request.path_params["sid"])
        path = request.path_params["path"]
        try:
            if request.method == "PUT":
                await entry.workspace.write_file(path, await body(request, max_body))
                return Response(status_code=204)
            data = await entry.workspace.read_file(path, limit=max_body)
        except PermissionError as e:
            raise Refused(403, str(e).splitlines()[0]) from None
        except FileNotFoundError:
            raise Refused(404, f"{path!r}: no such file in the workspace") from None
        except IsADirectoryError:
            raise Refused(400, f"{path!r} is a directory") from None
        except NotADirectoryError:
            raise Refused(404, f"{path!r}: a file is on the way") from None
        except ValueError as e:
            raise Refused(413, str(e).splitlines()[0]) from None
        return Response(data, media_type="application/octet-stream")

    async def diff(request: Request) -> Response:
        entry = sessions.get(request.path_params["sid"])
        return Response(await entry.workspace.diff(), media_type="text/x-diff")

    async def close(request: Request) -> Response:
        await sessions.close(request.path_params["sid"])
        return Response(status_code=204)

    return [
        Route("/sessions", answered(start), methods=["POST"]),
        Route("/sessions/{sid}/exec", answered(execute), methods=["POST"]),
        Route("/sessions/{sid}/files/{path:path}", answered(files), methods=["GET", "PUT"]),
        Route("/sessions/{sid}/diff", answered(diff), methods=["GET"]),
        Route("/sessions/{sid}", answered(close), methods=["DELETE"]),
    ]
