"""``aexec serve``: the application under Hypercorn, on the asyncio or the trio backend.

Hypercorn is the ASGI server that runs on both of anyio's backends (uvicorn is asyncio
only), and Starlette is built on anyio, so the same aexec code (itself on anyio) serves
under either. The listening socket is made here, so that the address is known (and
announced through ``on_ready``) before the first request, port 0 included.

SIGTERM or SIGINT: new connections are refused, requests in flight get ``grace`` seconds
to finish, then they are cancelled — aexec kills their process trees and removes their
scratch roots — every open session is closed, and the observer's warm interpreters are
stopped before the call returns.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import tempfile
from collections.abc import Callable

import anyio
import attrs

from .._api import observer as make_observer
from .._boundary.supervise import Supervisor
from .._environments.spec import EnvBroken, EnvSpec, from_json
from .._errors import RequestError
from .._log import get_logger
from .._options import Options
from .app import Settings, build

log = get_logger(__name__)


#: `ServeConfig.recheck_s`'s default: each request is a call of its own, which would
#: otherwise recheck (a ``stat`` of each file behind the interpreter's editable installs
#: and the fork server's modules, and three thread hops) once per request.
RECHECK_S = 0.5


@attrs.frozen
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    jobs: int = 8
    queue: int = 256
    max_body: int = 16 * 1024 * 1024
    token: str | None = None
    #: Seconds requests in flight may take to finish after SIGTERM before they are cancelled.
    grace: float = 5.0
    #: What ``/run_code``'s Python programs run in: an interpreter, or a declared
    #: environment (built once, at the start; its interpreter is then the one).
    python: str | None = None
    environment: EnvSpec | None = None
    #: Sessions open at once at most (``POST /sessions`` past it: 429).
    sessions: int = 4
    #: Seconds a recheck of what runs rest on (the interpreter, its editable sources, a
    #: fork server's files) holds for later requests (`Options.recheck_s`): an edit there
    #: is seen by the requests that arrive that long after it; 0: every request rechecks.
    recheck_s: float = RECHECK_S


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(path: str) -> str:
    """The bearer token in ``path`` (its first line); `RequestError` if unreadable or empty."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise RequestError(f"--token-file {path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    if not token:
        raise RequestError(f"--token-file {path}: the first line is empty")
    return token


def read_environment(text: str) -> EnvSpec:
    """``--environment``: a declared environment, as JSON or ``@FILE``; `RequestError`."""
    if text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise RequestError(
                f"--environment {text}: cannot read: {getattr(e, 'strerror', None) or e}"
            ) from None
    try:
        return from_json(json.loads(text))
    except ValueError as e:
        raise RequestError(f"--environment: {str(e).splitlines()[0]}") from None


def environment_python(spec: EnvSpec, options: Options) -> str:
    """``--environment``: the declared environment's interpreter, built once (aexec's
    environment store: later starts find it built); `RequestError` if it cannot be."""
    from .._environments.build import default_root, ensure

    root = options.env_dir or default_root(options.cache_dir)
    with tempfile.TemporaryDirectory(prefix="aexec-serve-env-") as nothing:  # no project of its own
        try:
            return ensure(spec, nothing, root).python
        except EnvBroken as e:
            raise RequestError(f"--environment: {e}") from None


def check_config(config: ServeConfig) -> None:
    """What must hold before the server starts; `RequestError` naming the flag."""
    if not is_loopback(config.host) and config.token is None:
        raise RequestError(
            f"--host {config.host}: not a loopback address; a bearer token is required (--token-file)"
        )
    if config.sessions < 0:
        raise RequestError(f"--sessions must be >= 0, got {config.sessions}")
    for name in ("jobs", "queue"):
        if getattr(config, name) < (1 if name == "jobs" else 0):
            raise RequestError(
                f"--{name} must be >= {1 if name == 'jobs' else 0}, got {getattr(config, name)}"
            )
    if config.python is not None and not os.access(config.python, os.X_OK):
        raise RequestError(f"--python {config.python}: not an executable file")
    if not 0 <= config.recheck_s < float("inf"):
        raise RequestError(f"--recheck-s must be a number of seconds >= 0, got {config.recheck_s}")
    if not 0 <= config.port <= 65535:
        raise RequestError(f"--port must be in [0, 65535], got {config.port}")


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Inherited by every accepted connection (Hypercorn sets it only on the sockets it
    # binds itself): without it, a response written in two parts may wait for the
    # client's delayed ACK (Nagle's algorithm).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise RequestError(f"--host {host} --port {port}: cannot listen: {e.strerror or e}") from None
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


async def serve(
    config: ServeConfig,
    options: Options,
    *,
    on_ready: Callable[[str], None] | None = None,
    stop: anyio.Event | None = None,
    signals: bool = True,
    supervisor: Supervisor | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT (with ``signals``) or ``stop`` is set; then drain and
    return. ``supervisor`` replaces the one that runs each invocation (a test's)."""
    from hypercorn.config import Config

    check_config(config)
    python = config.python
    if config.environment is not None:  # built (or found built) before the port opens
        python = await anyio.to_thread.run_sync(environment_python, config.environment, options)
    sock = listen(config.host, config.port)
    stopping = stop or anyio.Event()
    with sock:
        address = sock.getsockname()
        hc = Config()
        # A duplicate for Hypercorn, which closes the sockets it serves on.
        hc.bind = [f"fd://{os.dup(sock.fileno())}"]
        hc.graceful_timeout = config.grace
        hc.accesslog = None
        hc.errorlog = None  # the application logs its own errors, through aexec._log
        hc.keep_alive_timeout = 75.0
        options = attrs.evolve(options, recheck_s=config.recheck_s)
        async with make_observer(options, supervisor=supervisor) as obs:
            app = build(
                Settings(
                    obs,
                    config.jobs,
                    config.queue,
                    config.max_body,
                    config.token,
                    python=python,
                    sessions=config.sessions,
                )
            )
            async with anyio.create_task_group() as tg:
                if signals:
                    tg.start_soon(_stop_on_signal, stopping)
                host = f"[{address[0]}]" if ":" in address[0] else address[0]
                url = f"http://{host}:{address[1]}"
                log.info(
                    "serving", url=url, jobs=config.jobs, queue=config.queue, auth=config.token is not None
                )
                if on_ready is not None:
                    on_ready(url)
                try:
                    await _hypercorn(app, hc, stopping)
                finally:
                    await app.state.sessions.aclose()
                tg.cancel_scope.cancel()
    log.info("stopped")


async def _stop_on_signal(stopping: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
        async for signum in received:
            log.info("draining", signal=signal.Signals(signum).name)
            stopping.set()
            return


async def _hypercorn(app: object, hc: object, stopping: anyio.Event) -> None:
    from typing import Any

    import sniffio

    serve_on: Any
    if sniffio.current_async_library() == "trio":
        from hypercorn.trio import serve as serve_on
    else:
        from hypercorn.asyncio import serve as serve_on
    await serve_on(app, hc, shutdown_trigger=stopping.wait)
