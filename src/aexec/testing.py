"""Test doubles for aexec's seams: judge fabricated runs in-process, in milliseconds.

`ScriptedSupervisor` is an `aexec.Supervisor` that starts nothing: each invocation it is
handed gets the next run its script gives (a `RawRun`, or a function of the invocation
and the driver's `Instructions` that returns one). The rest of the pipeline is the real
one — scratch roots, views, patches, plans, parsing, the verdict and its guards (empty
success, the confirming re-run, tampering, environment faults, FAIL_TO_PASS and
PASS_TO_PASS, timeouts, output caps) — so a test of a guard fabricates what the runs
said instead of writing a candidate that makes them say it::

    supervisor = ScriptedSupervisor(pytest_run({"tests/test_a.py::test_x": "passed"}))
    async with scripted_observer(supervisor) as obs:
        [o] = await aexec.observe_many([candidate], observer=obs)

`scripted_observer` is an `Observer` that starts no process of its own either: no fork
server, no bytecode compiler, no namespaces or cgroups, and the running interpreter's
toolchain known without asking a subprocess. (A patch is still applied by ``git apply``.)

`ServeProcess` is the other way round, for a test of an HTTP client: the real
``aexec serve`` as a child process on a free loopback port (``with ServeProcess("--jobs",
"4") as server: httpx.post(f"{server.url}/run_code", ...)``).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from ._api import VERSION
from ._boundary.supervise import Invocation
from ._driver.wire import ExceptionRecord, Instructions, Record
from ._options import Options
from ._pipeline.observer import Observer
from ._pipeline.toolchain import _PROBE, Toolchain, stamp
from ._raw import RawRun

__all__ = [
    "Script",
    "ScriptedSupervisor",
    "ServeProcess",
    "pytest_run",
    "raw_run",
    "scripted_observer",
    "snippet_run",
]

#: One scripted run: what the supervisor returns, or how to make it from the run's
#: invocation and the instructions the driver would have read.
Script = RawRun | Callable[[Invocation, Instructions], RawRun]

Verdict = Literal["passed", "failed", "errored", "skipped"]


class ScriptedSupervisor:
    """A `aexec.Supervisor` that returns a canned run per invocation and runs nothing.

    ``runs`` are handed out in order; once they are used up, ``then`` answers every
    further invocation (without it, one more invocation fails the candidate with a
    one-line error naming how many runs were scripted). What it was handed is kept:
    ``invocations`` and the driver's ``instructions`` of each, in order.

    A graded run's canary (docs/oracle.md) is played as a healthy one in every run the
    runner finished (an ``end`` record): its must-fail test failed with its message, its
    must-pass test passed, and pytest's exit status is what that failure makes it.
    ``canary=False`` plays none (the canary missing: a run to judge as tampered); nor is a
    language suite's played (docs/oracle.md).
    """

    def __init__(self, *runs: Script, then: Script | None = None, canary: bool = True) -> None:
        self._runs = list(runs)
        self._then = then
        self._canary = canary
        self.invocations: list[Invocation] = []
        self.instructions: list[Instructions] = []

    async def execute(self, invocation: Invocation) -> RawRun:
        instructions = _instructions(invocation.argv[-1])  # the driver's SPEC.json (small)
        self.invocations.append(invocation)
        self.instructions.append(instructions)
        if self._runs:
            script = self._runs.pop(0)
        elif self._then is not None:
            script = self._then
        else:
            raise AssertionError(f"ScriptedSupervisor: run {len(self.invocations)} was not scripted")
        raw = script if isinstance(script, RawRun) else script(invocation, instructions)
        file = instructions.get("canary")
        return (
            _with_canary(raw, invocation.cwd, file) if self._canary and file and file.endswith(".py") else raw
        )


def _with_canary(raw: RawRun, cwd: str, file: str) -> RawRun:
    """``raw`` with the records of a healthy canary, read from the file the pipeline wrote."""
    ends = [r for r in raw.records if r["kind"] == "end"]
    if not ends:
        return raw
    source = Path(cwd, file).read_text(encoding="utf-8")
    fail, passes = (f"{file}::{n}" for n in re.findall(r"def (test_\w+)\(", source))
    bases = ["builtins.AssertionError", "builtins.Exception", "builtins.BaseException", "builtins.object"]
    message = re.findall(r"assert False, '(\w+)'", source)[0]
    exc = ExceptionRecord(
        kind="exception", phase="call", nodeid=fail, type=bases[0], bases=bases, message=message
    )
    records: list[Record] = [
        {"kind": "start", "nodeid": fail},
        exc,
        {"kind": "test", "nodeid": fail, "verdict": "failed"},
        {"kind": "start", "nodeid": passes},
        {"kind": "test", "nodeid": passes, "verdict": "passed"},
    ]
    was = ends[0]["exitstatus"]
    status = 1 if was in (0, 5) else was
    kept = [r for r in raw.records if r["kind"] != "end"]
    exit_code = status if raw.exit_code == was else raw.exit_code
    return attrs.evolve(
        raw, records=(*kept, *records, {"kind": "end", "exitstatus": status}), exit_code=exit_code
    )


def _instructions(spec: str) -> Instructions:
    with open(spec, encoding="utf-8") as f:
        found: Instructions = json.load(f)
    return found


def raw_run(
    *,
    exit_code: int | None = 0,
    signal: int | None = None,
    timed_out: bool = False,
    duration: float = 0.01,
    stdout: str = "",
    stderr: str = "",
    records: Sequence[Record] = (),
    bad_records: int = 0,
    cpu_s: float | None = None,
    peak_ram_mib: int | None = None,
    oom_killed: bool = False,
) -> RawRun:
    """A `RawRun` with defaults for what a test does not care about (a clean exit)."""
    return RawRun(
        exit_code=None if timed_out or signal is not None else exit_code,
        signal=signal,
        timed_out=timed_out,
        duration=duration,
        stdout=stdout,
        stderr=stderr,
        records=tuple(records),
        bad_records=bad_records,
        cpu_s=cpu_s,
        peak_ram_mib=peak_ram_mib,
        oom_killed=oom_killed,
    )


def pytest_run(
    verdicts: Mapping[str, Verdict],
    *,
    exitstatus: int | None = None,
    running: str | None = None,
    **raw: Any,
) -> RawRun:
    """What the pytest runner reports for ``verdicts`` (node id -> outcome, in order):
    the collected count, a start and an outcome record per test, and pytest's exit
    status (default: 0 if nothing failed, 1 if something did, 5 if no test ran). With
    ``running``, that test started and the run ended before it did (no exit status):
    pass ``timed_out=True`` for a run killed at its deadline."""
    if "records" in raw:  # spelled out by the caller
        return raw_run(**raw)
    records: list[Record] = [{"kind": "collected", "count": len(verdicts) + (running is not None)}]
    for nodeid, verdict in verdicts.items():
        records += [
            {"kind": "start", "nodeid": nodeid},
            {"kind": "test", "nodeid": nodeid, "verdict": verdict},
        ]
    if running is not None:
        records.append({"kind": "start", "nodeid": running})
    else:
        if exitstatus is None:
            bad = any(v in ("failed", "errored") for v in verdicts.values())
            exitstatus = 1 if bad else 0 if verdicts else 5
        records.append({"kind": "end", "exitstatus": exitstatus})
        raw.setdefault("exit_code", exitstatus)
    return raw_run(records=records, **raw)


def snippet_run(*, exit_code: int = 0, stdout: str = "", stderr: str = "", **raw: Any) -> RawRun:
    """What the snippet runner reports for a snippet that printed ``stdout`` and ended
    with ``exit_code`` (pass ``records=[...]`` for a raised exception's record)."""
    return raw_run(exit_code=exit_code, stdout=stdout, stderr=stderr, **raw)


def _running_toolchain() -> Toolchain:
    """The running interpreter's toolchain, from the probe's own code run in-process
    (what a probe in a subprocess answers, without starting one)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(_PROBE, {})
    info = json.loads(out.getvalue())
    paths = tuple(map(str, info["paths"]))
    return Toolchain(
        sys.executable, str(info["version"]), str(info["fingerprint"]), paths, stamp([sys.executable, *paths])
    )


def scripted_observer(supervisor: ScriptedSupervisor, options: Options | None = None) -> Observer:
    """An `Observer` around ``supervisor`` that starts no process of its own (see the
    module docstring); close it with ``async with``. ``options`` (default: none)
    keep their cache dir, limit and ablations; the switches that would start a process
    are turned off."""
    opts = attrs.evolve(
        options or Options(), forkserver=False, bytecode=False, namespaces=False, cgroups=False
    )
    observer = Observer(opts, supervisor=supervisor, version=VERSION)
    tool = _running_toolchain()
    observer.warm.toolchains._known[tool.path] = tool
    return observer


class ServeProcess:
    """``aexec serve --port 0 --no-cache`` with ``flags``, run by this interpreter: its
    ``url`` once it listens, and ``lines``, what it wrote to stderr. One that does not
    start within ``start_timeout`` seconds raises `RuntimeError` with those lines. Leaving
    ``with`` stops it (SIGTERM; a kill if it has not exited within 60 s). ``preexec_fn``
    runs in the child before it starts (a benchmark moves it into cgroups of its own)."""

    def __init__(
        self,
        *flags: str,
        env: Mapping[str, str] | None = None,
        start_timeout: float = 60,
        preexec_fn: Callable[[], object] | None = None,
    ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "aexec", "serve", "--port", "0", "--no-cache", *flags],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
            preexec_fn=preexec_fn,
        )
        self.url = ""
        self.lines: list[str] = []
        ready = threading.Event()

        def drain() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line)
                if "listening on " in line and not self.url:
                    self.url = line.split("listening on ", 1)[1].split()[0]
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=drain, daemon=True)
        self.reader.start()
        ready.wait(start_timeout)
        if not self.url:
            self.__exit__()
            raise RuntimeError(f"aexec serve did not start: {''.join(self.lines)}")

    def metrics(self) -> dict[str, Any]:
        """``GET /metrics``."""
        import httpx

        return dict(httpx.get(f"{self.url}/metrics", timeout=10).json())

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then its exit status (`subprocess.TimeoutExpired` past ``timeout``)."""
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        """Its exit status, once it has exited and its stderr is read to the end."""
        rc = self.proc.wait(timeout)
        self.reader.join(10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return rc

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.wait(60)
