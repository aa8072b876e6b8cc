"""The fork server's side of its runs' output (issue 42): one select loop drains every
run's stdout and stderr, where each run used to cost the library two pipes, two tasks and
their wake-ups.

For each run the server makes the two pipes itself (`Outputs.pipes`), keeps the first
``cap`` bytes of each and counts the rest, and answers on the run's reply socket
(`wire.SpawnReply`):

* ``{"status"}`` when it reaps the run's first process;
* ``{"out", "err", "dropped"}`` once both pipes are at their end, followed by the kept
  bytes (stdout's, then stderr's) in datagrams of at most `wire.OUTPUT_DATAGRAM_BYTES`.
  Both in one datagram when the pipes ended first (the usual case: a run's namespace
  dies with its init). A pipe still open `wire.EOF_GRACE_S` after the reap (something
  outside the run's kill holds it: possible only without namespaces) is given up.

A pipe whose read came short while its run lives is left unread for `COALESCE_S`: a
chatty run (pytest's dot per test, written unbuffered) then costs the server a wake-up
per interval, not per write; once the run is reaped, the rest is read at once.

A module of the driver's package (see `aexec._driver`).
"""

from __future__ import annotations

import json
import os
import selectors
import time
from typing import Any

from . import wire

COALESCE_S = 0.005
_CHUNK = 65536


class Run:
    """One run being served: its reply socket and its two pipes' read ends."""

    __slots__ = ("cap", "dropped", "grace", "kept", "open", "paused", "pid", "reply", "status")

    def __init__(self, pid: int, reply: Any, pipes: tuple[int, int], cap: int) -> None:
        self.pid = pid
        self.reply = reply
        self.cap = cap
        self.kept = [bytearray(), bytearray()]
        self.dropped = [0, 0]
        #: Read end → 0 (stdout) or 1 (stderr), while not at its end.
        self.open = {pipes[0]: 0, pipes[1]: 1}
        #: The wait status to report, once reaped.
        self.status: int | None = None
        #: When to give up on pipes left open after the reap.
        self.grace: float | None = None
        #: Read ends left unread until a time (`COALESCE_S`).
        self.paused: dict[int, float] = {}


class Outputs:
    """The runs the server has forked and not yet answered in full, by pid and by pipe."""

    def __init__(self, sel: selectors.BaseSelector) -> None:
        self.sel = sel
        self.runs: dict[int, Run] = {}

    @staticmethod
    def pipes() -> tuple[tuple[int, int], tuple[int, int]]:
        """A run's two pipes, ``(read, write)`` each; the read ends the server's."""
        return os.pipe2(os.O_CLOEXEC), os.pipe2(os.O_CLOEXEC)

    def add(self, pid: int, reply: Any, reads: tuple[int, int], cap: int) -> None:
        """Drain ``reads`` (stdout's, stderr's) of the run ``pid`` from now on."""
        run = Run(pid, reply, reads, cap)
        self.runs[pid] = run
        for fd in reads:  # blocking: read only when the selector says a read will not wait
            self.sel.register(fd, selectors.EVENT_READ, run)

    def sockets(self) -> list[Any]:
        """Every reply socket held (a forked child detaches them)."""
        return [run.reply for run in self.runs.values()]

    def readable(self, fd: int, run: Run) -> None:
        """Read what one pipe holds (the selector said it is readable)."""
        try:
            data = os.read(fd, _CHUNK)
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(fd)
            os.close(fd)
            del run.open[fd]
            if not run.open and run.status is not None:
                self._answer(run, with_status=False)
            return
        kept = run.kept[run.open[fd]]
        room = run.cap - len(kept)
        if room > 0:
            kept += data[:room]
        run.dropped[run.open[fd]] += max(0, len(data) - max(room, 0))
        if len(data) < _CHUNK and run.status is None:
            self.sel.unregister(fd)
            run.paused[fd] = time.monotonic() + COALESCE_S

    def reaped(self, pid: int, status: int) -> None:
        """The run ``pid`` was reaped with ``status``: say so, and its output if it is all read."""
        run = self.runs.get(pid)
        if run is None:
            return
        run.status = status
        for fd in list(run.paused):
            self._resume(fd, run)
        if not run.open:
            self._answer(run, with_status=True)
            return
        self._send(run, {"status": status})
        run.grace = time.monotonic() + wire.EOF_GRACE_S

    def due(self) -> float | None:
        """Read again the pipes whose pause is over, give up those past their grace;
        how long until the next of either (None: nothing pending)."""
        now = time.monotonic()
        soonest: float | None = None
        for run in list(self.runs.values()):
            for fd, when in list(run.paused.items()):
                if when <= now:
                    self._resume(fd, run)
                else:
                    soonest = when if soonest is None else min(soonest, when)
            if run.grace is not None:
                if run.grace <= now:
                    for fd in list(run.open):
                        run.paused.pop(fd, None)
                        if fd in self.sel.get_map():
                            self.sel.unregister(fd)
                        os.close(fd)
                    run.open.clear()
                    self._answer(run, with_status=False)
                else:
                    soonest = run.grace if soonest is None else min(soonest, run.grace)
        return None if soonest is None else max(0.0, soonest - now)

    def _resume(self, fd: int, run: Run) -> None:
        del run.paused[fd]
        self.sel.register(fd, selectors.EVENT_READ, run)

    def _answer(self, run: Run, *, with_status: bool) -> None:
        """The output's datagrams (with the status if not sent yet); the run is done."""
        del self.runs[run.pid]
        head: dict[str, Any] = {"out": len(run.kept[0]), "err": len(run.kept[1]), "dropped": run.dropped}
        if with_status:
            head["status"] = run.status
        if self._send(run, head):
            data = bytes(run.kept[0] + run.kept[1])
            step = wire.OUTPUT_DATAGRAM_BYTES
            for at in range(0, len(data), step):
                if not self._send(run, data[at : at + step]):
                    break
        run.reply.close()

    @staticmethod
    def _send(run: Run, message: dict[str, Any] | bytes) -> bool:
        """One datagram to the run's reply socket; False if aexec no longer listens."""
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        try:
            run.reply.send(data)
        except OSError:
            return False
        return True
