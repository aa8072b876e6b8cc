"""Stage (c): execute (spec §3.3) — the only place that spawns and kills a run.

The supervisor spawns the driver (cold, or forked by a warm `ForkServer`, which drains
the run's output for it) under the declared boundary, streams both pipes of a cold run
into capped buffers, enforces the wall-clock deadline with a cancel scope, and kills the
whole process tree: the run's cgroups (``cgroup.kill``), the PID namespace's init, or the
process group, by what `Isolation` the run has. It judges nothing.

`Supervisor` is the seam: the pipeline calls ``supervisor.execute(invocation)``; a test
or a harness may pass its own in (``observe_many(..., supervisor=...)``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Protocol

import anyio
import anyio.abc
import attrs

from .._driver.wire import EOF_GRACE_S, REPORT_CAP_BYTES, Record, decode_report
from .._log import get_logger
from .._raw import RawRun
from .._types import STREAM_CAP_BYTES, TRUNCATION_MARKER
from .cgroups import MEMORY_POLL_S, Caps, at_cap
from .forkserver import ForkServer, ServedProcess, ServerGone
from .isolation import Isolation

log = get_logger(__name__)

#: How long a killed run may take to be reaped before the wrapper itself is killed.
KILL_WAIT_S = 5.0
_CHUNK = 65536
#: After a read that did not fill a chunk, the next waits this long while the run lives: a
#: chatty run (pytest's dot per test, written unbuffered) then costs aexec a wake-up per
#: interval, not per write. Once the run has exited, what is left is read at once.
_COALESCE_S = 0.005


@attrs.frozen
class Invocation:
    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    timeout_s: float
    report_path: str
    #: The run's name, unique in this process: names its cgroups.
    run: str = "run"
    caps: Caps | None = None
    #: Fork the driver from this warm server (``argv`` is then ``python -s DRIVER SPEC``);
    #: if it is gone, the run starts cold.
    server: ForkServer | None = None
    #: The mechanisms this run is held by (`detect_isolation`).
    isolation: Isolation = attrs.field(factory=lambda: Isolation(namespaces=False))
    #: Bytes kept of each of stdout and stderr (the environment's stream caps).
    stream_cap: int = STREAM_CAP_BYTES


class _Sink:
    """Keeps the first ``cap`` bytes of a stream and counts the rest."""

    def __init__(self, name: str, cap: int = STREAM_CAP_BYTES) -> None:
        self.name = name
        self.cap = cap
        self.kept = bytearray()
        self.dropped = 0
        self.done = anyio.Event()

    async def drain(self, stream: anyio.abc.ByteReceiveStream, exited: anyio.Event) -> None:
        """Read ``stream`` to its end; between short reads, pause until ``exited`` is set
        or `_COALESCE_S` has passed, whichever comes first."""
        try:
            while True:
                try:
                    chunk = await stream.receive(_CHUNK)
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    break
                room = self.cap - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
                self.dropped += max(0, len(chunk) - max(room, 0))
                if len(chunk) < _CHUNK and not exited.is_set():
                    with anyio.move_on_after(_COALESCE_S):
                        await exited.wait()
        finally:
            self.done.set()

    def text(self) -> str:
        return _text(self.name, bytes(self.kept), self.dropped, self.cap)


def _text(name: str, kept: bytes, dropped: int, cap: int) -> str:
    """A stream's kept bytes as text, with the marker of what was not kept."""
    text = kept.decode("utf-8", errors="replace")
    if dropped:
        text += TRUNCATION_MARKER.format(dropped=dropped, stream=name, cap=cap)
    return text


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def _tree(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < 4096:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _tree_usage(pid: int) -> tuple[float | None, int | None]:
    """CPU seconds and peak RSS of a live tree, read from /proc just before a kill."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu, peak = 0.0, 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except (OSError, ValueError, IndexError):
            continue
    return cpu, (peak // 1024 if peak else None)


def _kill_tree(proc: anyio.abc.Process, inv: Invocation, isolation: Isolation) -> None:
    if isolation.cgroups is not None and inv.caps is not None:
        isolation.cgroups.kill(inv.run)  # everything in the run's cgroups, at once
    if proc.returncode is not None:
        return  # reaped: its pid may belong to someone else now
    if isolation.namespaces:
        # Kill the namespace's init (the driver's child, or the process itself when the
        # fork server made it the init): the kernel then kills everything inside the
        # namespace before the init can be reaped, and the driver (left alive to reap
        # it) exits only after that — so its exit means the namespace is empty.
        if isinstance(proc, ServedProcess) and proc.init:
            targets = [proc.pid]
        else:
            targets = _children(proc.pid) or [proc.pid]
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _kill_and_reap(proc: anyio.abc.Process, inv: Invocation, isolation: Isolation) -> None:
    """The run failed or was cancelled: its whole tree killed and reaped, shielded."""
    with anyio.CancelScope(shield=True):
        _kill_tree(proc, inv, isolation)
        with anyio.move_on_after(KILL_WAIT_S):
            await proc.wait()


def _read_report(path: str) -> tuple[tuple[Record, ...], int]:
    try:
        with open(path, "rb") as f:
            data = f.read(REPORT_CAP_BYTES)
    except OSError:
        return (), 0
    return decode_report(data)


async def execute(inv: Invocation) -> RawRun:
    """Run ``inv`` to completion or to its deadline and return the raw artifacts.

    **Cancellation:** if the caller is cancelled, the whole process tree is killed and
    reaped inside a shielded scope, then the cancellation is re-raised; no process of
    the run outlives this call.
    """
    isolation = inv.isolation
    cgroups = isolation.cgroups if inv.caps is not None else None
    if cgroups is not None:
        assert inv.caps is not None
        cgroups.create(inv.run, inv.caps)
    try:
        raw = await _execute(inv, isolation)
        if cgroups is not None and not raw.oom_killed and cgroups.oom_killed(inv.run):
            raw = attrs.evolve(raw, oom_killed=True)
        return raw
    finally:
        if cgroups is not None:
            cgroups.kill(inv.run)
            # A reaped run's cgroups are empty, or all but: removed here, and in a
            # worker thread (which waits for the killed to leave, shielded) only if not.
            if not cgroups.try_remove(inv.run):
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(cgroups.remove, inv.run)


async def _spawn(inv: Invocation) -> anyio.abc.Process:
    if inv.server is not None and inv.server.alive:
        try:
            return await inv.server.spawn(
                inv.argv, inv.cwd, inv.env, box=inv.isolation.namespaces, cap=inv.stream_cap
            )
        except ServerGone as e:
            log.warning("forkserver_gone", run=inv.run, error=str(e))
    return await anyio.open_process(
        inv.argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=inv.cwd,
        env=inv.env,
        start_new_session=True,
    )


class _MemoryWatch:
    """Kills the run once its tree is at its memory cap (`Cgroups.memory_held`), or once
    the kernel's OOM killer has killed any process of it, read every `MEMORY_POLL_S`.
    Without swap the kernel can stall a tree at its cap in reclaim for seconds before its
    OOM killer runs, and the OOM killer kills one process, not the run: a parent left
    waiting for a killed worker (``multiprocessing.Pool``) would wait to its deadline."""

    def __init__(self) -> None:
        self.killed_usage: tuple[float | None, int | None] | None = None

    @staticmethod
    def floor(inv: Invocation, isolation: Isolation) -> int | None:
        """The memory held that kills the run; None: the run's memory is not watched."""
        cgroups, caps = isolation.cgroups, inv.caps
        if cgroups is None or caps is None or not cgroups.memory:
            return None
        return at_cap(caps.memory_bytes)

    def check(self, proc: anyio.abc.Process, inv: Invocation, isolation: Isolation, floor: int) -> bool:
        """One reading; the run is killed (and True returned) if it is at its cap."""
        cgroups = isolation.cgroups
        assert cgroups is not None
        held = cgroups.memory_held(inv.run, floor)
        if not ((held is not None and held >= floor) or cgroups.oom_killed(inv.run)):
            return False
        log.info("memory_cap_kill", run=inv.run, held_mib=None if held is None else held >> 20)
        cpu, peak = _tree_usage(proc.pid)
        tree_peak = cgroups.memory_peak(inv.run)  # a process the OOM killer took counts
        self.killed_usage = cpu, max(peak or 0, (tree_peak or 0) >> 20) or None
        _kill_tree(proc, inv, isolation)
        return True

    async def wait(self, proc: anyio.abc.Process, inv: Invocation, isolation: Isolation) -> None:
        """``proc.wait()``, reading between its waits every `MEMORY_POLL_S`: returns when
        the run has exited, or has been killed at its cap (not yet reaped then)."""
        floor = self.floor(inv, isolation)
        if floor is None:
            await proc.wait()
            return
        while True:
            with anyio.move_on_after(MEMORY_POLL_S):
                await proc.wait()
                return
            if self.check(proc, inv, isolation, floor):
                return


async def _execute(inv: Invocation, isolation: Isolation) -> RawRun:
    start = anyio.current_time()
    proc = await _spawn(inv)
    if isinstance(proc, ServedProcess):
        return await _execute_served(inv, isolation, proc, start)
    out, err = _Sink("stdout", inv.stream_cap), _Sink("stderr", inv.stream_cap)
    exited = anyio.Event()
    timed_out = False
    killed_usage: tuple[float | None, int | None] = (None, None)
    memory = _MemoryWatch()
    try:
        async with anyio.create_task_group() as tg:
            assert proc.stdout is not None and proc.stderr is not None
            tg.start_soon(out.drain, proc.stdout, exited)
            tg.start_soon(err.drain, proc.stderr, exited)
            with anyio.move_on_after(inv.timeout_s) as deadline:
                await memory.wait(proc, inv, isolation)
            if deadline.cancelled_caught or proc.returncode is None:
                if memory.killed_usage is None:  # else killed at its memory cap already
                    timed_out = True
                    killed_usage = _tree_usage(proc.pid)
                    _kill_tree(proc, inv, isolation)
                with anyio.move_on_after(KILL_WAIT_S) as stuck:
                    await proc.wait()
                if stuck.cancelled_caught:
                    proc.kill()
                    await proc.wait()
            exited.set()
            with anyio.move_on_after(EOF_GRACE_S) as grace:
                await out.done.wait()
                await err.done.wait()
            if grace.cancelled_caught:
                # Something outside the run's kill still holds the pipes open.
                tg.cancel_scope.cancel()
    except BaseException:
        await _kill_and_reap(proc, inv, isolation)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await proc.aclose()
    return _raw(inv, proc, start, timed_out, memory, killed_usage, out.text(), err.text())


async def _execute_served(inv: Invocation, isolation: Isolation, proc: ServedProcess, start: float) -> RawRun:
    """`_execute` for a run the fork server forked and drains: one task, no pipes."""
    timed_out = False
    killed_usage: tuple[float | None, int | None] = (None, None)
    memory = _MemoryWatch()
    out, err, dropped = b"", b"", [0, 0]
    try:
        with anyio.move_on_after(inv.timeout_s) as deadline:
            await memory.wait(proc, inv, isolation)
        if deadline.cancelled_caught and memory.killed_usage is None:
            timed_out = True
            killed_usage = _tree_usage(proc.pid)
            _kill_tree(proc, inv, isolation)
        if proc.returncode is None:
            with anyio.move_on_after(KILL_WAIT_S) as stuck:
                await proc.wait()
            if stuck.cancelled_caught:
                proc.kill()
                await proc.wait()
        # The server gives a pipe up `EOF_GRACE_S` after the reap; this is a backstop.
        if proc.outputs is not None:
            out, err, dropped = proc.outputs
        else:
            with anyio.move_on_after(EOF_GRACE_S + KILL_WAIT_S):
                out, err, dropped = await proc.output()
    except BaseException:
        await _kill_and_reap(proc, inv, isolation)
        raise
    finally:
        proc.close()
    cap = inv.stream_cap
    texts = _text("stdout", out, dropped[0], cap), _text("stderr", err, dropped[1], cap)
    return _raw(inv, proc, start, timed_out, memory, killed_usage, *texts)


def _raw(
    inv: Invocation,
    proc: anyio.abc.Process,
    start: float,
    timed_out: bool,
    memory: _MemoryWatch,
    killed_usage: tuple[float | None, int | None],
    stdout: str,
    stderr: str,
) -> RawRun:
    """The run's raw artifacts, its report read."""
    duration = anyio.current_time() - start
    records, bad = _read_report(inv.report_path)
    rc = proc.returncode
    exit_code = rc if rc is not None and rc >= 0 else None
    sig = -rc if rc is not None and rc < 0 else None
    cpu_s, peak = memory.killed_usage or killed_usage
    for r in records:
        if r["kind"] == "usage":
            cpu_s = float(r["cpu_s"])
            peak = r["maxrss_kib"] // 1024
    if timed_out or memory.killed_usage is not None:
        exit_code, sig = None, signal.SIGKILL  # what the supervisor sent
    return RawRun(
        exit_code=exit_code,
        signal=sig,
        timed_out=timed_out,
        duration=duration,
        stdout=stdout,
        stderr=stderr,
        records=records,
        bad_records=bad,
        cpu_s=cpu_s,
        peak_ram_mib=peak,
        oom_killed=memory.killed_usage is not None,
    )


class Supervisor(Protocol):
    """Runs an `Invocation` to its end and returns what it left (`RawRun`)."""

    async def execute(self, invocation: Invocation) -> RawRun: ...


class LocalSupervisor:
    """Runs invocations on this machine (`execute`): the default `Supervisor`."""

    async def execute(self, invocation: Invocation) -> RawRun:
        """**Cancellation:** as `execute`: the whole tree is killed and reaped, shielded,
        then the cancellation is re-raised."""
        return await execute(invocation)
