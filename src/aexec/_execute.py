"""Stage (c): execute (spec §3.3) — the only place that spawns and kills processes.

The supervisor spawns the candidate under the declared boundary, streams both pipes
into capped buffers while it keeps draining them, enforces the wall-clock deadline with
a cancel scope, and kills the whole process tree deterministically. It captures raw
artifacts and judges nothing.

Process tree: where the kernel allows (root here), every run gets fresh PID and network
namespaces (``unshare --pid --net --fork --kill-child``). The candidate's first process
is the namespace's init; when it dies the kernel kills everything else in the namespace
— ``setsid()`` and double forks included — before its parent can reap it, so once the
supervisor has reaped the run, nothing of it is left. Without namespaces the run is put
in a new session and killed by process group, and ``environment.enforced`` says so.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from typing import Any

import anyio
import anyio.abc
import attrs
import structlog

from ._records import RawRun
from ._types import STREAM_CAP_BYTES, TRUNCATION_MARKER

log = structlog.get_logger(__name__)

#: After the process exits, how long its pipes may stay open before the tree is killed.
EOF_GRACE_S = 1.0
#: How long a killed run may take to be reaped before the wrapper itself is killed.
KILL_WAIT_S = 5.0
#: The most of the driver's report file that is read back.
REPORT_CAP_BYTES = 16 * 1024 * 1024
_CHUNK = 65536


@attrs.frozen
class Isolation:
    """Which kernel mechanisms a run gets; ``enforced`` is what observations record."""

    namespaces: bool

    @property
    def enforced(self) -> dict[str, str]:
        if self.namespaces:
            return {
                "process_tree": "pid_namespace",
                "network": "net_namespace",
                "ram": "RLIMIT_AS",
                "cpu": "RLIMIT_CPU backstop above the deadline (no core cap)",
                "filesystem": "scratch copy of the repo (host paths not write-protected)",
            }
        return {
            "process_tree": "process_group",
            "network": "none",
            "ram": "RLIMIT_AS",
            "cpu": "RLIMIT_CPU backstop above the deadline (no core cap)",
            "filesystem": "scratch copy of the repo (host paths not write-protected)",
        }

    def wrap(self, argv: tuple[str, ...]) -> list[str]:
        if not self.namespaces:
            return list(argv)
        return ["unshare", "--pid", "--net", "--fork", "--kill-child", "--", *argv]


_detected: Isolation | None = None


def detect_isolation() -> Isolation:
    """Probe once per process whether namespaces work; ``AEXEC_NO_NAMESPACES=1`` forbids them."""
    global _detected
    if _detected is None:
        ok = False
        if os.environ.get("AEXEC_NO_NAMESPACES") != "1" and shutil.which("unshare"):
            try:
                done = subprocess.run(
                    ["unshare", "--pid", "--net", "--fork", "--kill-child", "--", "true"],
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=10,
                    check=False,
                )
                ok = done.returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
        if not ok:
            log.warning(
                "isolation_degraded",
                reason="PID/network namespaces unavailable; killing by process group, network not blocked",
            )
        _detected = Isolation(namespaces=ok)
    return _detected


@attrs.frozen
class Invocation:
    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    timeout_s: float
    report_path: str


class _Sink:
    """Keeps the first ``cap`` bytes of a stream and counts the rest."""

    def __init__(self, name: str, cap: int = STREAM_CAP_BYTES) -> None:
        self.name = name
        self.cap = cap
        self.kept = bytearray()
        self.dropped = 0
        self.done = anyio.Event()

    async def drain(self, stream: anyio.abc.ByteReceiveStream) -> None:
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
        finally:
            self.done.set()

    def text(self) -> str:
        text = self.kept.decode("utf-8", errors="replace")
        if self.dropped:
            text += TRUNCATION_MARKER.format(dropped=self.dropped, stream=self.name, cap=self.cap)
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


def _kill_tree(proc: anyio.abc.Process, isolation: Isolation) -> None:
    if proc.returncode is not None:
        return  # reaped: its pid may belong to someone else now
    if isolation.namespaces:
        # Kill only the namespace's init: the kernel then kills everything inside the
        # namespace before the init can be reaped, and the wrapper (left alive to reap
        # it) exits only after that — so its exit means the namespace is empty.
        targets = _children(proc.pid) or [proc.pid]
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_report(path: str) -> tuple[tuple[dict[str, Any], ...], int]:
    try:
        with open(path, "rb") as f:
            data = f.read(REPORT_CAP_BYTES)
    except OSError:
        return (), 0
    records: list[dict[str, Any]] = []
    bad = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(value, dict) and isinstance(value.get("kind"), str):
            records.append(value)
        else:
            bad += 1
    return tuple(records), bad


async def execute(inv: Invocation, isolation: Isolation) -> RawRun:
    """Run ``inv`` to completion or to its deadline and return the raw artifacts.

    **Cancellation:** if the caller is cancelled, the whole process tree is killed and
    reaped inside a shielded scope, then the cancellation is re-raised; no process of
    the run outlives this call.
    """
    start = anyio.current_time()
    proc = await anyio.open_process(
        isolation.wrap(inv.argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=inv.cwd,
        env=inv.env,
        start_new_session=True,
    )
    out, err = _Sink("stdout"), _Sink("stderr")
    timed_out = False
    killed_usage: tuple[float | None, int | None] = (None, None)
    try:
        async with anyio.create_task_group() as tg:
            assert proc.stdout is not None and proc.stderr is not None
            tg.start_soon(out.drain, proc.stdout)
            tg.start_soon(err.drain, proc.stderr)
            with anyio.move_on_after(inv.timeout_s) as deadline:
                await proc.wait()
            if deadline.cancelled_caught:
                timed_out = True
                killed_usage = _tree_usage(proc.pid)
                _kill_tree(proc, isolation)
                with anyio.move_on_after(KILL_WAIT_S) as stuck:
                    await proc.wait()
                if stuck.cancelled_caught:
                    proc.kill()
                    await proc.wait()
            with anyio.move_on_after(EOF_GRACE_S) as grace:
                await out.done.wait()
                await err.done.wait()
            if grace.cancelled_caught:
                # Something outside the run's kill still holds the pipes open.
                tg.cancel_scope.cancel()
    except BaseException:
        with anyio.CancelScope(shield=True):
            _kill_tree(proc, isolation)
            with anyio.move_on_after(KILL_WAIT_S):
                await proc.wait()
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await proc.aclose()
    duration = anyio.current_time() - start
    records, bad = _read_report(inv.report_path)
    rc = proc.returncode
    exit_code = rc if rc is not None and rc >= 0 else None
    sig = -rc if rc is not None and rc < 0 else None
    cpu_s, peak = killed_usage
    for r in records:
        if r["kind"] == "usage":
            cpu_s = float(r.get("cpu_s") or 0.0)
            peak = int(r.get("maxrss_kib") or 0) // 1024
    if timed_out:
        exit_code, sig = None, signal.SIGKILL  # what the supervisor sent
    return RawRun(
        exit_code=exit_code,
        signal=sig,
        timed_out=timed_out,
        duration=duration,
        stdout=out.text(),
        stderr=err.text(),
        records=records,
        bad_records=bad,
        cpu_s=cpu_s,
        peak_ram_mib=peak,
    )
