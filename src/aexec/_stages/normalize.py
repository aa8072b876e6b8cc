"""Stage (e): normalization into the failure-class vocabulary (spec §3.5). Pure.

Each piece of evidence gets one class; the primary class of a run is the first true in
the spec's order (timeout, resource, syntax, compile, type, dependency, assertion,
runtime). A run that failed nothing is not normalized to a class at all: the
empty-success guard of assembly looks at it.
"""

from __future__ import annotations

import errno
import signal as signals

import attrs

from .._records import Failure
from .._types import FAILURE_ORDER, MESSAGE_CAP_CHARS, SECONDARY_FAILURE_CAP, FailureClass
from .parse import Evidence, RaisedError

#: Signals a kernel cap sends: CPU time, file size, and the hard-limit SIGKILL.
RESOURCE_SIGNALS = frozenset({signals.SIGKILL, signals.SIGXCPU, signals.SIGXFSZ})


#: OSErrors that mean a cap was hit: file size, disk space, open files, processes, memory.
RESOURCE_ERRNOS = frozenset(
    {errno.EFBIG, errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN}
)


def error_class(e: RaisedError) -> FailureClass:
    """The class of one exception, by its type's MRO and where it was raised."""
    if e.is_a("MemoryError") or (e.is_a("OSError") and e.errno in RESOURCE_ERRNOS):
        return "resource"
    if e.is_a("SyntaxError"):
        return "syntax"
    if e.is_a("ImportError"):
        return "dependency"
    if e.at_import:
        # Raised by module-level code while importing the candidate's modules.
        return "compile"
    if e.is_a("TypeError"):
        return "type"
    # pytest.fail() raises _pytest.outcomes.Failed, whose __module__ pytest sets to "builtins"
    if e.is_a("AssertionError") or e.is_a("Failed") or "_pytest.outcomes.Failed" in e.bases:
        return "assertion"
    return "runtime"


def _location(e: RaisedError) -> str:
    frames = [f for f in e.frames if not f.file.startswith(("/", "<"))] or list(e.frames)
    if frames:
        return f"{frames[-1].file}:{frames[-1].line}"
    return e.nodeid or ""


def signal_name(sig: int) -> str:
    try:
        return signals.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _message(text: str) -> str:
    return text[:MESSAGE_CAP_CHARS]


@attrs.frozen
class Finding:
    failure: Failure
    #: ``Type: message`` of the exception behind it, if one was raised.
    exception: str | None = None


def language_failures(ev: Evidence) -> tuple[Finding, ...]:
    """A language's findings (already classed and ordered by its parser) as failures."""
    assert ev.lang is not None
    found = [
        Finding(
            Failure(f.failure_class, f.location, _message(f.message), ev.exit_code, round(ev.duration, 6)),
            None if f.exception is None else _message(f.exception),
        )
        for f in ev.lang.findings
    ]
    if not found and (ev.timed_out or ev.oom_killed):  # nothing of the steps was reported
        cls: FailureClass = "timeout" if ev.timed_out else "resource"
        what = "killed at the wall-clock deadline" if ev.timed_out else "killed by the run's memory cap"
        found.append(Finding(Failure(cls, "", what, ev.exit_code, round(ev.duration, 6))))
    return tuple(found[:SECONDARY_FAILURE_CAP])


def failures(ev: Evidence, timeout_s: float) -> tuple[Finding, ...]:
    """Every failure the evidence shows, the primary one first (bounded)."""
    if ev.lang is not None:
        return language_failures(ev)
    seen: list[Finding] = []

    def add(cls: FailureClass, location: str, message: str, exception: str | None = None) -> None:
        failure = Failure(cls, location, _message(message), ev.exit_code, round(ev.duration, 6))
        seen.append(Finding(failure, exception))

    if ev.timed_out:
        where = f" while running {ev.in_flight}" if ev.in_flight else ""
        add("timeout", ev.in_flight or "", f"killed at the {timeout_s:g} s wall-clock deadline{where}")
    elif ev.oom_killed:
        add("resource", ev.in_flight or "", "a process was killed by the run's memory cap (cgroup OOM)")
    elif ev.signal in RESOURCE_SIGNALS:
        add("resource", ev.in_flight or "", f"killed by {signal_name(ev.signal)} (a resource cap)")
    explained: set[str] = set()
    for e in ev.errors:
        prefix = f"{e.nodeid}: " if e.nodeid else ""
        exc = f"{e.name}: {e.message}" if e.message else e.name
        add(error_class(e), _location(e), prefix + exc, _message(exc))
        if e.nodeid:
            explained.add(e.nodeid)
    for t in ev.tests:
        if t.nodeid in explained or t.nodeid == ev.in_flight or t.collection:
            continue
        if t.verdict == "failed":
            add("assertion", t.nodeid, f"{t.nodeid}: failed")
        elif t.verdict == "errored":
            add("runtime", t.nodeid, f"{t.nodeid}: error outside the test body")
    if not seen and not ev.timed_out:
        no_tests = ev.runner == "pytest" and ev.pytest_exit == 5 and ev.exit_code == 5
        if ev.signal is not None:
            add("runtime", "", f"killed by {signal_name(ev.signal)}")
        elif ev.exit_code not in (0, None) and not no_tests:
            if ev.runner != "pytest":
                add("runtime", "", f"exited with status {ev.exit_code}")
            elif ev.pytest_exit is None:
                add("runtime", "", f"exited with status {ev.exit_code} before pytest reported")
            else:
                add("runtime", "", f"pytest exited with status {ev.pytest_exit} and no failed test to show")
    rank = {c: i for i, c in enumerate(FAILURE_ORDER)}
    if not seen:
        return ()
    primary = min(range(len(seen)), key=lambda i: (rank[seen[i].failure.failure_class], i))
    ordered = [seen[primary]] + seen[:primary] + seen[primary + 1 :]
    return tuple(ordered[:SECONDARY_FAILURE_CAP])
