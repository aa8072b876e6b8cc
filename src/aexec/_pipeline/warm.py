"""`Warm`: what an `Observer` keeps between calls and its sessions use — the probed
interpreters and language toolchains, the warm fork servers, the compiled-bytecode store
without a cache dir, and the runs' cut /etc.

A session is handed its observer's `Warm` and only calls down into it: nothing here
knows a session (the in-flight starts of one call are passed in, `Warm.server`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time

import anyio

from .._boundary import DRIVER
from .._boundary.forkserver import PER_RUN_ENV, ForkServer, ServerGone
from .._boundary.leftovers import default_registry
from .._boundary.scratch import SCRATCH_PREFIX, make_etc
from .._environments.build import default_root
from .._environments.system import run_env
from .._log import get_logger
from .._options import Options
from .._stages.keys import server_key
from .._stages.plan import Scratch, candidate_env
from .cache import Inflight, Rechecked, in_thread
from .remover import Remover
from .toolchain import LangToolchains, Toolchain, Toolchains

log = get_logger(__name__)


class Warm:
    """See the module docstring; `aclose` gives it all back."""

    def __init__(self, options: Options, version: str) -> None:
        self.options = options
        self.version = version
        self.toolchains = Toolchains(version, options.recheck_s)
        self.lang_toolchains = LangToolchains(options.recheck_s)
        #: Warm fork servers, by what they serve (`server`).
        self._servers: dict[str, ForkServer] = {}
        #: The keys whose server a call is settling now (`_settle`).
        self._starting: dict[str, anyio.Event] = {}
        #: The last check of each running server's files (`_settle`; `Options.recheck_s`).
        self._rechecked: Rechecked[ForkServer] = Rechecked(options.recheck_s)
        #: Servers replaced because a file behind them changed, until their runs end.
        self._retired: list[ForkServer] = []
        self._bytecode_dir: str | None = None
        #: The runs' cut /etc (`etc_dir`).
        self._etc_dir: str | None = None
        self._etc_lock = threading.Lock()
        self._server_envs: dict[tuple[str, bool], dict[str, str]] = {}
        self._server_keys: dict[tuple[str, str, str, bool, int], str] = {}
        #: Removes delivered observations' scratch roots (`Remover`).
        self.remover = Remover()

    async def aclose(self) -> None:
        """Stop the fork servers (runs they started die with them), remove the bytecode store."""
        with anyio.CancelScope(shield=True):
            await self.remover.close()
            servers, self._servers = [*self._servers.values(), *self._retired], {}
            self._retired = []
            for server in servers:
                await server.aclose()
            if self._bytecode_dir is not None:
                await anyio.to_thread.run_sync(shutil.rmtree, self._bytecode_dir, True)
                self._bytecode_dir = None

    def bytecode_store(self, cache_dir: str | None, scratch_base: str) -> str:
        """Where compiled repos live: the cache dir's ``bytecode/``, or without one a
        directory of this observer's own (removed by `aclose`; if the process is killed,
        swept with its scratch roots by the next aexec)."""
        if cache_dir is not None:
            return os.path.join(cache_dir, "bytecode")
        if self._bytecode_dir is None:
            self._bytecode_dir = tempfile.mkdtemp(
                prefix=f"{SCRATCH_PREFIX}{os.getpid()}-bytecode-", dir=scratch_base
            )
        return self._bytecode_dir

    def etc_dir(self) -> str:
        """The /etc of this observer's runs (`make_etc`, in the registry's directory:
        shared by every aexec on the host while /etc is unchanged), looked up on first
        use (blocking: called in a worker thread)."""
        with self._etc_lock:
            # pruned by another aexec once /etc changed: made afresh
            if self._etc_dir is None or not os.path.isdir(self._etc_dir):
                self._etc_dir = make_etc(os.path.join(self.options.registry or default_registry(), "view"))
            return self._etc_dir

    async def server(
        self, tool: Toolchain, mode: str, autoload: bool, starts: Inflight[ForkServer | None]
    ) -> ForkServer | None:
        """The warm server for runs like this one, settled once per call (``starts``:
        `_settle`); None if there is none.

        Servers outlive the call (one per interpreter, its distributions, mode, start-up
        environment and thread, until `aclose`), so that a harness calling `observe` once
        per candidate gets them too. The thread is part of the key because a server dies
        with the thread that started it (PR_SET_PDEATHSIG). The start-up environment is a
        run's (`candidate_env`) but for what differs run by run (``HOME``, ``TMPDIR``:
        each forked run gets its own). One that dies during a call leaves that call's
        later runs cold.
        """
        if not self.options.forkserver:
            return None
        env = self._server_env(tool.path, autoload)
        # the environment is made once per (interpreter, autoload): so is the key
        known = (tool.path, tool.fingerprint, mode, autoload, threading.get_ident())
        key = self._server_keys.get(known)
        if key is None:
            key = server_key(tool.path, tool.fingerprint, mode, env, known[-1], per_run=PER_RUN_ENV)
            self._server_keys[known] = key
        server, _ = await starts.run(key, lambda: self._settle(key, tool.path, mode, env))
        return server if server is not None and server.alive else None

    async def _settle(self, key: str, python: str, mode: str, env: dict[str, str]) -> ForkServer | None:
        """The server of ``key`` for a call: the running one while every file behind its
        modules is unchanged (`ForkServer.changed`: a forked run runs the code the server
        imported, a cold run the files'), else a new one (None if it cannot start). The
        files are checked once per call, or once per `Options.recheck_s`."""
        # Concurrent calls on this observer (a server's requests) wait for the one that
        # is settling this key, and share its server: a second start would replace the
        # first server, and closing it would kill the runs it had begun (issue 31).
        while True:
            held = self._rechecked.fresh(key)  # none while a settle runs: it began stale
            if held is not None and held.alive and self._servers.get(key) is held:
                return held
            settling = self._starting.get(key)
            if settling is None:
                break
            await settling.wait()
        self._starting[key] = event = anyio.Event()
        began = time.monotonic()
        try:
            self._retired = [s for s in self._retired if not s.exited]  # reaped
            running = self._servers.get(key)
            if running is not None and running.alive:
                gone = await in_thread(running.changed)
                if gone is None:
                    self._rechecked.checked(key, running, began)
                    return running
                log.info("forkserver_stale", python=python, mode=mode, changed=gone)
                # runs of another call it started end as they would have; then it exits
                running.retire()
                self._retired.append(self._servers.pop(key))
            server = await self._start(key, python, mode, env)
            if server is not None:  # it imports the files as they are from now on
                self._rechecked.checked(key, server, began)
            return server
        finally:
            del self._starting[key]
            event.set()

    async def _start(self, key: str, python: str, mode: str, env: dict[str, str]) -> ForkServer | None:
        try:
            server = await ForkServer.start(python, DRIVER, mode, env, startup_dir=self.startup_dir)
        except ServerGone as e:
            log.warning("forkserver_unavailable", python=python, mode=mode, error=str(e))
            return None
        dead = self._servers.pop(key, None)
        self._servers[key] = server
        if dead is not None:
            await dead.aclose()
        return server

    @property
    def startup_dir(self) -> str:
        """Where the servers keep what a pytest start imports (`Options.startup_dir`;
        default ``~/.cache/aexec/startup``): not the observation cache, so that observers
        with a cache dir of their own, or none, share it."""
        return self.options.startup_dir or os.path.join(os.path.dirname(default_root(None)), "startup")

    def _server_env(self, python: str, autoload: bool) -> dict[str, str]:
        """A server's start-up environment: a run's (`candidate_env`), made once per
        interpreter and plugin loading, with placeholder ``HOME``/``TMPDIR`` (each forked
        run gets its own, `PER_RUN_ENV`)."""
        env = self._server_envs.get((python, autoload))
        if env is None:
            placeholder = Scratch(os.path.join(tempfile.gettempdir(), "aexec-server"))
            env = self._server_envs[(python, autoload)] = candidate_env(
                placeholder, python, autoload=autoload, system=run_env(python)
            )
        return env
