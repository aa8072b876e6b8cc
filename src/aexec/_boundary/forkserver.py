"""The warm fork server of stage (c) (issue 5): start-up paid once per interpreter.

A cold run starts a fresh interpreter for the driver, which then imports pytest: on
this kind of machine ~0.25 s of CPU per pytest run, before any test runs. A
`ForkServer` is one interpreter per (toolchain, mode, environment) that has done that
once (``_driver/__main__.py --serve``, its loop in ``_driver/serve.py``) and forks each run on request. The
child puts itself where a fresh ``Popen`` would have (fds 0-2 on /dev/null and the run's
pipes, every other fd closed, a new session, cwd, the run's environment and argv) and
runs the same driver code: same cgroups, namespaces, view, uid and rlimits. Nothing is
shared with the run but copy-on-write memory.

The one thing a warm child cannot undo is what the server already imported: a repo whose
import roots shadow one of those modules (a top-level ``packaging/``, say) would import
differently, so such a run goes cold (`ForkServer.serves`); so does a pytest run whose
configuration has pytest rewrite the asserts of those modules otherwise (it ends at once,
`aexec._driver.rewriting.unlike_cold`, and is made again cold: `Session.execute`).

The supervisor sees a `ServedProcess`, an ``anyio.abc.Process``: its pid (the outer
process, a child of the server), its wait status as the server reaps it, and its output
as the server drained it (``_driver/outputs.py``): the server's one select loop reads
every run's pipes, where each run cost the library two pipes and two tasks (issue 42).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc

from .._driver.wire import SpawnRequest
from .._errors import AexecError
from .._types import STREAM_CAP_BYTES

#: How long a server may take to start (import pytest) before runs go cold.
START_TIMEOUT_S = 30.0
_MESSAGE_CAP = 1 << 20
#: Environment variables that differ run by run; the rest is read at interpreter start
#: (PYTHONHASHSEED, locale, malloc arenas …) and so keys the server.
PER_RUN_ENV = ("HOME", "TMPDIR")


class ServerGone(AexecError):
    """The fork server died (or never started): the run was not started by it."""


async def _recv(sock: socket.socket) -> bytes:
    while True:
        try:
            return sock.recv(_MESSAGE_CAP)
        except BlockingIOError:
            await anyio.wait_readable(sock)


class ServedProcess(anyio.abc.Process):
    """A run's first process as forked by a `ForkServer`: its outer process, or its init.

    It has no pipes: the server drains the run's stdout and stderr and sends what it
    kept on the run's reply socket (`wire.SpawnReply`) after the status: `wait`, then
    `output`. Reading is cancellation-safe: each datagram is taken whole, and what was
    read stays here for the next call.
    """

    def __init__(self, pid: int, reply: socket.socket, *, init: bool = False) -> None:
        self._pid = pid
        #: The pid is the init of the run's PID namespace (no outer process around it).
        self.init = init
        self._reply = reply
        self._returncode: int | None = None
        #: The output's head, once received: bytes kept of stdout and stderr, and dropped.
        self._head: tuple[int, int, list[int]] | None = None
        self._data = bytearray()

    async def _read(self) -> None:
        """Take one datagram of the reply."""
        msg = await _recv(self._reply)
        if not msg:
            raise ServerGone(f"the fork server died while run {self._pid} was running")
        if self._head is not None:  # a part of the output
            self._data += msg
            return
        reply = json.loads(msg)
        if "status" in reply:
            self._returncode = os.waitstatus_to_exitcode(int(reply["status"]))
        if "out" in reply:
            self._head = int(reply["out"]), int(reply["err"]), [int(n) for n in reply["dropped"]]

    async def wait(self) -> int:
        while self._returncode is None:
            await self._read()
        return self._returncode

    @property
    def outputs(self) -> tuple[bytes, bytes, list[int]] | None:
        """What the server kept of stdout and of stderr, and how many bytes of each it
        did not keep; None until all of it is read (`output`)."""
        if self._head is None or len(self._data) < self._head[0] + self._head[1]:
            return None
        out, err, dropped = self._head
        return bytes(self._data[:out]), bytes(self._data[out : out + err]), dropped

    async def output(self) -> tuple[bytes, bytes, list[int]]:
        """`outputs`, once read; after `wait`."""
        while (got := self.outputs) is None:
            await self._read()
        return got

    def send_signal(self, sig: int) -> None:
        if self._returncode is None:  # not reaped yet: the pid is still this run's
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._returncode

    @property
    def stdin(self) -> None:
        return None

    @property
    def stdout(self) -> None:
        return None

    @property
    def stderr(self) -> None:
        return None

    def close(self) -> None:
        """Stop listening: the server's later datagrams for this run are dropped."""
        self._reply.close()

    async def aclose(self) -> None:
        self.close()


def top_level_names(roots: Iterable[str]) -> set[str]:
    """What ``import NAME`` could find first in these sys.path entries."""
    names = set()
    for root in roots:
        try:
            entries = os.listdir(root)
        except OSError:
            continue
        for entry in entries:
            stem = entry.split(".", 1)[0]
            if stem.isidentifier() and ("." not in entry or entry.endswith((".py", ".pyc", ".so", ".pyd"))):
                names.add(stem)
    return names


class ForkServer:
    """One warm interpreter forking runs' outer processes; see the module docstring."""

    def __init__(self, python: str, driver: str, proc: subprocess.Popen[bytes], ctrl: socket.socket) -> None:
        self.python = python
        self.driver = driver
        self._proc = proc
        self._ctrl = ctrl
        #: Top-level modules the server has imported (a run must not shadow any).
        self.modules: frozenset[str] = frozenset()
        #: How it knew what a pytest start imports (the hello's ``startup``: ``cached``,
        #: ``computed``, ``failed`` or ``none``).
        self.startup = "none"
        #: ``(path, mtime_ns, size)`` of the files behind its modules when it was ready.
        self.files: tuple[tuple[str, int, int], ...] = ()
        self._closed = False
        self._retired = False

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        """Not closed and not exited (a dead server is reaped here)."""
        return not self._closed and self._proc.poll() is None

    @classmethod
    async def start(
        cls, python: str, driver: str, mode: str, env: Mapping[str, str], *, startup_dir: str | None = None
    ) -> ForkServer:
        """Start a server; raises `ServerGone` with its reason if it cannot serve.

        ``startup_dir``: where the server keeps what a pytest start imports, per
        interpreter and environment (``_driver/startup.py``); None: learnt at each start.
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [python, "-s", driver, "--serve", mode, str(os.getpid()), str(theirs.fileno())]
        try:
            # Spawned from the event loop's thread: PR_SET_PDEATHSIG follows that thread.
            proc = subprocess.Popen(  # noqa: ASYNC220  (a few ms; not from a worker thread)
                [*argv, startup_dir] if startup_dir else argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                env=dict(env),
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        finally:
            theirs.close()
        ours.setblocking(False)
        server = cls(python, driver, proc, ours)
        try:
            try:
                with anyio.fail_after(START_TIMEOUT_S):
                    msg = await _recv(ours)
                    hello: dict[str, Any] = (
                        json.loads(msg) if msg else {"ok": False, "error": "exited at start"}
                    )
                    if not hello.get("ok"):
                        raise ServerGone(f"fork server ({mode}) cannot start: {hello.get('error')}")
                    # then the files behind what it imported (`changed`)
                    files: list[tuple[str, int, int]] = []
                    for _ in range(int(hello.get("files", 0))):
                        files.extend((str(p), int(m), int(n)) for p, m, n in json.loads(await _recv(ours)))
            except (TimeoutError, OSError, ValueError, TypeError) as e:
                raise ServerGone(f"fork server ({mode}) did not start: {e!r}") from None
        except BaseException:
            with anyio.CancelScope(shield=True):
                await server.aclose()
            raise
        server.modules = frozenset(map(str, hello["modules"]))
        server.startup = str(hello.get("startup", "none"))
        server.files = tuple(files)
        return server

    def changed(self) -> str | None:
        """The first file behind the server's modules that is no longer as it was when
        the server was ready (edited, replaced, gone), or None: a forked run runs the
        code a cold run would. Blocking: a stat per file (a few hundred for pytest)."""
        for path, mtime, size in self.files:
            try:
                st = os.stat(path)
                now = (st.st_mtime_ns, st.st_size)
            except OSError:
                now = (-1, -1)
            if now != (mtime, size):
                return path
        return None

    def retire(self) -> None:
        """Serve no more runs, and exit once those it started have ended (their ends
        reported as ever): the server stops when its control socket closes with runs
        going. `alive` is false from now on; `close` still kills it."""
        if not self._closed:
            self._closed = self._retired = True
            anyio.notify_closing(self._ctrl)
            self._ctrl.close()

    @property
    def exited(self) -> bool:
        """Its process has exited (and is reaped)."""
        return self._proc.poll() is not None

    def serves(self, roots: Iterable[str]) -> bool:
        """Whether a run with these import roots would import exactly what a cold one does."""
        return self.alive and not (top_level_names(roots) & self.modules)

    async def spawn(
        self,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        *,
        box: bool = False,
        cap: int = STREAM_CAP_BYTES,
    ) -> ServedProcess:
        """Fork ``argv`` (``python -s DRIVER SPEC``); raises `ServerGone` if the server is gone.

        With ``box`` (the spec has one) the run is forked straight into its namespaces.
        The server keeps ``cap`` bytes of each of its stdout and stderr.
        """
        assert list(argv[:3]) == [self.python, "-s", self.driver], argv
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        mine.setblocking(False)
        request: SpawnRequest = {"spec": argv[3], "cwd": cwd, "env": dict(env), "box": box, "cap": cap}
        data = json.dumps(request).encode()
        try:
            try:
                while True:
                    try:
                        socket.send_fds(self._ctrl, [data], [theirs.fileno()])
                        break
                    except BlockingIOError:
                        await anyio.wait_writable(self._ctrl)
            finally:
                theirs.close()
            # Shielded: once the request is sent the server forks, and a run whose pid
            # was never read could not be killed. Its answer is immediate.
            msg = b""
            with anyio.move_on_after(START_TIMEOUT_S, shield=True):
                msg = await _recv(mine)
            if not msg:
                raise ServerGone("the fork server exited")
        except BaseException as e:
            mine.close()
            if isinstance(e, (OSError, anyio.ClosedResourceError)):
                e = ServerGone(f"the fork server is gone: {e!r}")
            if isinstance(e, ServerGone) and not self._retired:  # a retired one ends its runs
                self.close()
            raise e from None
        reply = json.loads(msg)
        return ServedProcess(int(reply["pid"]), mine, init=bool(reply.get("init")))

    def close(self) -> None:
        """Stop the server; runs it started and that are still going die with it."""
        self._closed = True
        self._ctrl.close()
        with contextlib.suppress(ProcessLookupError):
            self._proc.kill()
        self._proc.wait()  # at once: SIGKILL

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.close)
