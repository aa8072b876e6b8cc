"""Stages (d) and (e), synchronously, from recorded raw outputs."""

from __future__ import annotations

from typing import Any

import pytest

from aexec._raw import RawRun
from aexec._stages.normalize import error_class, failures
from aexec._stages.parse import parse, traceback_from_text

CWD = "/tmp/aexec-x/work"
SNIPPET = "/tmp/aexec-x/.aexec/snippet.py"


def exc(
    type_: str,
    *,
    phase: str = "call",
    frames: list[list[Any]] | None = None,
    nodeid: str | None = None,
    **kw: Any,
) -> dict[str, Any]:
    import builtins

    cls = getattr(builtins, type_, None)
    bases = [f"builtins.{c.__qualname__}" for c in cls.__mro__] if cls else [type_]
    return {
        "kind": "exception",
        "phase": phase,
        "type": f"builtins.{type_}" if cls else type_,
        "bases": kw.pop("bases", bases),
        "message": kw.pop("message", "boom"),
        "frames": frames if frames is not None else [[f"{CWD}/pkg/mod.py", 7, "f"]],
        "nodeid": nodeid,
        **kw,
    }


def raw(
    *records: dict[str, Any],
    exit_code: int | None = 1,
    timed_out: bool = False,
    signal: int | None = None,
    stderr: str = "",
) -> RawRun:
    return RawRun(
        exit_code=exit_code,
        signal=signal,
        timed_out=timed_out,
        duration=0.5,
        stdout="",
        stderr=stderr,
        records=tuple(records),
        bad_records=0,
        cpu_s=0.1,
        peak_ram_mib=10,
    )


def classes(run: RawRun, runner: str = "pytest") -> list[str]:
    ev = parse(run, runner, cwd=CWD, snippet=SNIPPET)  # type: ignore[arg-type]
    return [f.failure.failure_class for f in failures(ev, 30.0)]


def test_pytest_verdicts_come_from_records() -> None:
    run = raw(
        {"kind": "start", "nodeid": "t.py::a"},
        {"kind": "test", "nodeid": "t.py::a", "verdict": "passed"},
        {"kind": "start", "nodeid": "t.py::b"},
        exc("AssertionError", nodeid="t.py::b", frames=[[f"{CWD}/t.py", 3, "b"]]),
        {"kind": "test", "nodeid": "t.py::b", "verdict": "failed"},
        {"kind": "end", "exitstatus": 1},
    )
    ev = parse(run, "pytest", cwd=CWD, snippet=None)
    assert [(t.nodeid, t.verdict) for t in ev.tests] == [("t.py::a", "passed"), ("t.py::b", "failed")]
    (found,) = failures(ev, 30.0)
    assert found.failure.failure_class == "assertion"
    assert found.failure.location == "t.py:3"
    assert found.exception == "AssertionError: boom"
    assert ev.parse_uncertain is False


def test_verdicts_reported_before_a_timeout_survive() -> None:
    run = raw(
        {"kind": "start", "nodeid": "t.py::a"},
        {"kind": "test", "nodeid": "t.py::a", "verdict": "passed"},
        {"kind": "start", "nodeid": "t.py::hangs"},
        exit_code=None,
        timed_out=True,
    )
    ev = parse(run, "pytest", cwd=CWD, snippet=None)
    assert {t.nodeid: t.verdict for t in ev.tests} == {"t.py::a": "passed", "t.py::hangs": "errored"}
    (found,) = failures(ev, 30.0)
    assert found.failure.failure_class == "timeout"
    assert "t.py::hangs" in found.failure.message


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (exc("SyntaxError", phase="collect"), "syntax"),
        (exc("IndentationError", phase="collect"), "syntax"),
        (exc("ModuleNotFoundError", phase="collect"), "dependency"),
        (exc("NameError", phase="collect"), "compile"),  # module-level NameError at collection
        (exc("TypeError", phase="collect"), "compile"),
        (exc("MemoryError", phase="collect"), "resource"),
        (exc("TypeError"), "type"),
        (exc("AssertionError"), "assertion"),
        (
            exc("_pytest.outcomes.Failed", bases=["_pytest.outcomes.Failed", "builtins.BaseException"]),
            "assertion",
        ),
        (exc("ImportError"), "dependency"),
        (exc("KeyError"), "runtime"),
        (exc("MemoryError"), "resource"),
        (exc("OSError", errno=27), "resource"),  # EFBIG: the file-size cap
        # a lazy import inside a test hits module-level code of a broken module
        (
            exc("NameError", frames=[[f"{CWD}/t.py", 3, "test_x"], [f"{CWD}/pkg/mod.py", 1, "<module>"]]),
            "compile",
        ),
    ],
)
def test_each_exception_gets_its_class(record: dict[str, Any], expected: str) -> None:
    assert classes(raw(record)) == [expected]


def test_first_true_wins_across_tests() -> None:
    run = raw(
        exc("AssertionError", nodeid="t.py::a"),
        exc("KeyError", nodeid="t.py::b"),
        exc("TypeError", nodeid="t.py::c"),
        exc("ModuleNotFoundError", nodeid="t.py::d"),
    )
    # type precedes dependency, which precedes assertion and runtime
    assert classes(run) == ["type", "assertion", "runtime", "dependency"]


def test_snippet_top_level_name_error_is_runtime_but_an_imported_module_is_compile() -> None:
    own = exc(
        "NameError",
        phase="run",
        frames=[["/usr/lib/python3.11/runpy.py", 88, "_run_code"], [SNIPPET, 1, "<module>"]],
    )
    imported = exc(
        "NameError", phase="run", frames=[[SNIPPET, 1, "<module>"], [f"{CWD}/pkg/mod.py", 3, "<module>"]]
    )
    assert classes(raw(own), "snippet") == ["runtime"]
    assert classes(raw(imported), "snippet") == ["compile"]


def test_timeout_beats_everything_and_resource_kill_is_resource() -> None:
    assert classes(raw(exc("TypeError"), exit_code=None, timed_out=True))[0] == "timeout"
    assert classes(raw(exit_code=None, signal=9), "snippet") == ["resource"]
    assert classes(raw(exit_code=None, signal=24), "snippet") == ["resource"]  # SIGXCPU


def test_exit_zero_with_no_tests_is_not_a_failure() -> None:
    run = raw({"kind": "collected", "count": 0}, {"kind": "end", "exitstatus": 5}, exit_code=5)
    assert classes(run) == []


@pytest.mark.parametrize("status", [2, 3, 4])
def test_pytest_stopping_without_an_exception_is_still_a_failure(status: int) -> None:
    assert classes(raw({"kind": "end", "exitstatus": status}, exit_code=status)) == ["runtime"]


def test_failed_test_without_exception_record_is_assertion() -> None:
    run = raw({"kind": "test", "nodeid": "t.py::x", "verdict": "failed"}, {"kind": "end", "exitstatus": 1})
    assert classes(run) == ["assertion"]


def test_sys_exit_without_exception_is_runtime() -> None:
    assert classes(raw({"kind": "exit", "code": "3"}, exit_code=3), "snippet") == ["runtime"]


RECORDED_STDERR = """Traceback (most recent call last):
  File "/tmp/aexec-x/work/tool.py", line 4, in <module>
    main()
  File "/tmp/aexec-x/work/tool.py", line 2, in main
    return len(5)
           ^^^^^^
TypeError: object of type 'int' has no len()
"""

RECORDED_SYNTAX = """  File "<string>", line 1
    x = (
        ^
SyntaxError: '(' was never closed
"""


def test_command_tracebacks_are_read_by_convention() -> None:
    e = traceback_from_text(RECORDED_STDERR, CWD)
    assert e is not None
    assert (e.type, e.message) == ("builtins.TypeError", "object of type 'int' has no len()")
    assert [(f.file, f.line) for f in e.frames] == [("tool.py", 4), ("tool.py", 2)]
    assert error_class(e) == "type"
    s = traceback_from_text(RECORDED_SYNTAX, CWD)
    assert s is not None and error_class(s) == "syntax"


def test_unconventional_output_is_flagged_not_guessed() -> None:
    run = raw(exit_code=2, stderr="something went wrong, no traceback here\n")
    ev = parse(run, "command", cwd=CWD, snippet=None)
    assert ev.errors == ()
    assert ev.parse_uncertain is True
    assert [f.failure.failure_class for f in failures(ev, 30)] == ["runtime"]
    # A word that looks like an exception name is not a traceback.
    assert traceback_from_text("ValueError: but no frames above\n", CWD) is None


def test_parsing_is_deterministic() -> None:
    run = raw(exc("TypeError", nodeid="t.py::a"), {"kind": "test", "nodeid": "t.py::a", "verdict": "failed"})
    assert parse(run, "pytest", cwd=CWD, snippet=None) == parse(run, "pytest", cwd=CWD, snippet=None)


def test_messages_are_bounded() -> None:
    run = raw(exc("ValueError", message="x" * 100_000))
    (found,) = failures(parse(run, "pytest", cwd=CWD, snippet=None), 30)
    assert len(found.failure.message) <= 4096
