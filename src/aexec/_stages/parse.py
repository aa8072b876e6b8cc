"""Stage (d): evidence parsing (spec §3.4), Python toolchain. Pure: no I/O.

The driver inside the candidate reports through pytest's own hooks and through the
exceptions it catches, so most evidence arrives already structured. For a ``command``,
or when the report is missing, stderr is read by the interpreter's traceback convention;
output that follows no convention is flagged ``parse_uncertain``, never guessed at.
"""

from __future__ import annotations

import builtins
import os
import re

import attrs

from .. import _languages as langs
from .. import _runners as runners
from .._driver.wire import BOX_FAILED, FRAME_CAP, REPO_VIEW, ExceptionRecord
from .._raw import RawRun
from .._types import MESSAGE_CAP_CHARS, TestVerdict
from .classify import Runner

#: The name the snippet is shown under in locations.
SNIPPET_NAME = "snippet.py"


@attrs.frozen
class Frame:
    file: str
    line: int
    name: str


@attrs.frozen
class RaisedError:
    """One exception the candidate raised, as data."""

    type: str
    bases: tuple[str, ...]
    message: str
    frames: tuple[Frame, ...]
    #: Where it was raised: ``collect setup call teardown`` (pytest; ``conftest``: a
    #: conftest pytest could not import at start), ``run`` (a snippet),
    #: ``compile``/``import`` (a build check), ``spawn``, or ``stderr`` (read from text).
    phase: str
    nodeid: str | None = None
    errno: int | None = None
    #: True when it was raised by module-level code while importing a module.
    at_import: bool = False

    @property
    def name(self) -> str:
        return self.type.rsplit(".", 1)[-1]

    def is_a(self, builtin: str) -> bool:
        return f"builtins.{builtin}" in self.bases


@attrs.frozen
class ParsedTest:
    nodeid: str
    verdict: TestVerdict
    #: A collector pytest could not collect (a module that failed to import, ...): listed
    #: ``errored`` under its collect report's node id, as pytest's junit XML lists it,
    #: but not a test that ran (`aexec._stages.assemble.ran_tests`) and not a failure of
    #: its own (the collection error's exception is).
    collection: bool = False


@attrs.frozen
class Evidence:
    runner: Runner
    exit_code: int | None
    signal: int | None
    timed_out: bool
    duration: float
    tests: tuple[ParsedTest, ...]
    errors: tuple[RaisedError, ...]
    #: The test that was running when the run ended without finishing it.
    in_flight: str | None
    #: pytest's own exit status, when pytest got to report one.
    pytest_exit: int | None
    parse_uncertain: bool
    #: The run's memory cgroup killed a process of it.
    oom_killed: bool = False
    #: The driver could not build the boundary, or failed before the candidate's code
    #: started (exit `BOX_FAILED`, no ``main`` record): nothing of the candidate ran.
    box_failed: bool = False
    #: A language beyond Python (the ``steps`` runner): its toolchain's evidence.
    lang: langs.LanguageEvidence | None = None
    #: ``sql``: ``(table, rows, digest)`` of the tables whose rows changed.
    tables: tuple[tuple[str, int, str], ...] = ()
    #: A language's suite selected by the runner's ids: the repo's files the selected
    #: tests are built from (`aexec._languages.SuiteEvidence.sources`); None: not known.
    test_sources: tuple[str, ...] | None = None
    #: pytest: ``(what, name, nodeid)`` of each fixture a test requested that pytest
    #: found nowhere (``fixture``) and each unknown marker under ``--strict-markers``
    #: that a module failed to collect on (``marker``), as the driver read them.
    missing: tuple[tuple[str, str, str], ...] = ()


def _display(path: str, cwd: str, snippet: str | None) -> str:
    if snippet is not None and path == snippet:
        return SNIPPET_NAME
    for where in (cwd, REPO_VIEW):  # the repo's copy, at its scratch path or in the view's
        if path.startswith(where + os.sep):
            return os.path.relpath(path, where)
    return path


def _at_import(frames: tuple[Frame, ...]) -> bool:
    """Module-level code of an *imported* module is on the stack.

    A ``<module>`` frame is an import when something called it: not the outermost frame
    (a script), not one that runpy started (``-m``, the snippet), not the snippet itself.
    """
    for i, f in enumerate(frames):
        if f.name != "<module>" or f.file.startswith("<") or f.file == SNIPPET_NAME:
            continue
        if i > 0 and not frames[i - 1].file.endswith("runpy.py"):
            return True
    return False


def _error(rec: ExceptionRecord, cwd: str, snippet: str | None) -> RaisedError:
    frames = tuple(
        Frame(_display(str(f[0]), cwd, snippet), f[1] if type(f[1]) is int else 0, str(f[2]))
        for f in (rec.get("frames") if isinstance(rec.get("frames"), list) else None) or ()
        if isinstance(f, list) and len(f) == 3
    )[-FRAME_CAP:]
    phase = str(rec.get("phase") or "run")
    return RaisedError(
        type=str(rec.get("type") or "builtins.Exception"),
        bases=tuple(str(b) for b in (rec.get("bases") if isinstance(rec.get("bases"), list) else None) or ()),
        message=str(rec.get("message") or "")[:MESSAGE_CAP_CHARS],
        frames=frames,
        phase=phase,
        nodeid=rec.get("nodeid") if isinstance(rec.get("nodeid"), str) else None,
        errno=rec.get("errno") if isinstance(rec.get("errno"), int) else None,
        at_import=phase in ("collect", "import", "conftest") or _at_import(frames),
    )


_FILE_LINE = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+)(?:, in (?P<name>.+))?$')
_EXC_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Iteration|Warning))"
    r"(?::\s?(?P<msg>.*))?$"
)


def _builtin_bases(name: str) -> tuple[str, ...]:
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, BaseException):
        return tuple(f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__)
    return ()


def traceback_from_text(text: str, cwd: str) -> RaisedError | None:
    """The last Python traceback in ``text``, by the interpreter's printing convention."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        m = _EXC_LINE.match(lines[i])
        if not m:
            continue
        frames: list[Frame] = []
        for line in lines[max(0, i - 4 * FRAME_CAP) : i]:
            if line.startswith("Traceback (most recent call last):"):
                frames = []
            fm = _FILE_LINE.match(line)
            if fm:
                frames.append(
                    Frame(_display(fm["file"], cwd, None), int(fm["line"]), fm["name"] or "<module>")
                )
        if not frames:
            continue  # an exception name with no traceback above it is not a traceback
        name = m["type"]
        short = name.rsplit(".", 1)[-1]
        errno = re.match(r"\[Errno (\d+)\]", m["msg"] or "")
        bases = _builtin_bases(short) if "." not in name else ()
        return RaisedError(
            type=f"builtins.{short}" if bases else name,
            bases=bases or (name,),
            message=(m["msg"] or "")[:MESSAGE_CAP_CHARS],
            frames=tuple(frames[-FRAME_CAP:]),
            phase="stderr",
            errno=int(errno[1]) if errno else None,
            at_import=_at_import(tuple(frames)),
        )
    return None


_COLLECT_EXC = re.compile(r"^E\s+(?P<type>[A-Za-z_][\w.]*(?:Error|Exception)):?\s?(?P<msg>.*)$", re.M)


def collect_error(nodeid: str, text: str) -> RaisedError | None:
    """The exception of a collection error known only by its report's text (pytest-xdist
    relays a worker's collection errors without raising them in the controller)."""
    found = list(_COLLECT_EXC.finditer(text))
    if not found:
        return None
    m = found[-1]
    name = m["type"]
    short = name.rsplit(".", 1)[-1]
    bases = _builtin_bases(short) if "." not in name else ()
    return RaisedError(
        type=f"builtins.{short}" if bases else name,
        bases=bases or (name,),
        message=m["msg"][:MESSAGE_CAP_CHARS],
        frames=(),
        phase="collect",
        nodeid=nodeid,
        at_import=True,
    )


_CONFTEST = re.compile(r"^ImportError while loading conftest '(?P<path>[^']+)'\.$", re.M)
_SHORT_FRAME = re.compile(r"^(?P<file>[^\s:][^:]*\.py):(?P<line>\d+): in (?P<name>\S+)$")
_E_FILE = re.compile(r'^E\s+File "(?P<file>[^"]+)", line (?P<line>\d+)')


def conftest_error(stderr: str, cwd: str) -> RaisedError | None:
    """The exception of a ``conftest.py`` pytest could not import, from the report pytest
    prints before it exits with status 4 ("ImportError while loading conftest ..."): no
    hook sees it. Its frames are pytest's short traceback (and a syntax error's own
    ``File "...", line N``); its node id is the conftest's path."""
    m = _CONFTEST.search(stderr)
    if m is None:
        return None
    text = stderr[m.end() :]
    found = collect_error(_display(m["path"], cwd, None), text)
    if found is None:
        return None
    frames = []
    for line in text.splitlines():
        fm = _SHORT_FRAME.match(line) or _E_FILE.match(line)
        if fm:
            name = fm.groupdict().get("name") or "<module>"
            frames.append(Frame(_display(fm["file"], cwd, None), int(fm["line"]), name))
    return attrs.evolve(found, frames=tuple(frames[-FRAME_CAP:]), phase="conftest")


def parse(raw: RawRun, runner: Runner, *, cwd: str, snippet: str | None) -> Evidence:
    """Turn raw artifacts into structured evidence. Same input, same output."""
    errors: list[RaisedError] = []
    tests: dict[str, TestVerdict] = {}
    started: list[str] = []
    pytest_exit: int | None = None
    exited = False  # the snippet raised SystemExit
    signal = raw.signal
    exit_code = raw.exit_code
    collect_errors: dict[str, str] = {}
    missing: dict[tuple[str, str, str], None] = {}
    for rec in raw.records:
        if rec["kind"] == "exception":
            errors.append(_error(rec, cwd, snippet))
        elif rec["kind"] == "collect_error":
            collect_errors.setdefault(rec["nodeid"], rec["text"])
        elif rec["kind"] == "missing":
            if rec["what"] in ("fixture", "marker"):
                missing[(rec["what"], rec["name"], rec["nodeid"])] = None
        elif rec["kind"] == "start":
            started.append(rec["nodeid"])
        elif rec["kind"] == "test":
            if rec["verdict"] in ("passed", "failed", "errored", "skipped"):
                tests[rec["nodeid"]] = rec["verdict"]
        elif rec["kind"] == "end":
            pytest_exit = rec["exitstatus"]
        elif rec["kind"] in ("child", "main"):
            if rec.get("signal") is not None:  # a command's process, or the candidate's
                signal, exit_code = rec.get("signal"), None
        elif rec["kind"] == "exit":
            exited = True
    raised = {e.nodeid for e in errors if e.phase == "collect"}
    for nodeid, text in collect_errors.items():
        unraised = None if nodeid in raised else collect_error(nodeid, text)
        if unraised is not None:
            errors.append(unraised)
    if runner == "pytest" and pytest_exit == 4 and not errors:
        conftest = conftest_error(raw.stderr, cwd)
        if conftest is not None:
            errors.append(conftest)
    in_flight = next((n for n in reversed(started) if n not in tests), None)
    if in_flight is not None and (raw.timed_out or pytest_exit is None):
        tests[in_flight] = "errored"  # killed (or died) while it ran
    else:
        in_flight = None
    uncollected = [n for n in collect_errors if n not in tests]
    failed_exit = (exit_code not in (0, None)) or signal is not None
    if not errors and failed_exit and runner in ("command", "snippet") and not raw.timed_out:
        found = traceback_from_text(raw.stderr, cwd)
        if found is not None:
            errors.append(found)
    explained = (
        raw.timed_out
        or bool(errors)
        or any(v in ("failed", "errored") for v in tests.values())
        or ((runner == "pytest" or runner in runners.OWN_RUNNERS) and pytest_exit is not None)
        or exited
    )
    uncertain = raw.bad_records > 0 or (failed_exit and not explained)
    return Evidence(
        runner=runner,
        exit_code=exit_code,
        signal=signal,
        timed_out=raw.timed_out,
        duration=raw.duration,
        tests=tuple(ParsedTest(n, v) for n, v in tests.items())
        + tuple(ParsedTest(n, "errored", collection=True) for n in uncollected),
        errors=tuple(errors),
        in_flight=in_flight,
        pytest_exit=pytest_exit,
        parse_uncertain=uncertain,
        oom_killed=raw.oom_killed,
        box_failed=raw.exit_code == BOX_FAILED and not any(r["kind"] == "main" for r in raw.records),
        missing=tuple(missing),
    )


def step_outputs(raw: RawRun) -> tuple[langs.StepOutput, ...]:
    """The ``steps`` runner's records as the language parsers' `StepOutput`s, in order.

    A step that started and has no end record was still running when the run ended:
    at the deadline (``timed_out``), or killed with the whole run (the run's signal).
    A memory-cgroup kill is laid on the last step, if it failed.
    """
    outs: list[langs.StepOutput] = []
    open_step: str | None = None
    for rec in raw.records:
        if rec["kind"] == "step_start":
            open_step = rec["name"]
        elif rec["kind"] == "step":
            open_step = None
            outs.append(
                langs.StepOutput(
                    rec["name"],
                    rec["exit"],
                    rec["signal"],
                    stdout=rec["stdout"],
                    stderr=rec["stderr"],
                    diagnostics=rec["evidence"],
                )
            )
    if open_step is not None:
        signal = None if raw.timed_out else raw.signal
        outs.append(langs.StepOutput(open_step, None, signal, timed_out=raw.timed_out))
    elif raw.timed_out and outs:
        outs[-1] = attrs.evolve(outs[-1], timed_out=True)
    if raw.oom_killed and outs and outs[-1].failed:
        outs[-1] = attrs.evolve(outs[-1], oom_killed=True)
    return tuple(outs)


def parse_language(
    raw: RawRun,
    language: str,
    *,
    cwd: str,
    timeout_s: float | None = None,
    request_type: str = "run_entry",
    tests: tuple[str, ...] | None = None,
) -> Evidence:
    """The evidence of a language's steps (`aexec._languages.Language.parse`; for
    ``run_suite``, its suite's: the selection's per-test verdicts too). Same input, same output."""
    lang = langs.language(language)
    outs = step_outputs(raw)
    parsed: tuple[ParsedTest, ...] = ()
    sources: tuple[str, ...] | None = None
    suite = request_type == "run_suite"
    if suite:
        found = lang.runner().parse(outs, cwd, tests, timeout_s=timeout_s)
        ev, parsed = found.evidence, tuple(ParsedTest(n, v) for n, v in found.tests)
        sources = found.sources
    else:
        ev = lang.parse(outs, cwd, timeout_s=timeout_s)
    tables = lang.tables(next((o for o in outs if o.name == "run" and not o.failed), None))
    box_failed = raw.exit_code == BOX_FAILED and not any(r["kind"] == "main" for r in raw.records)
    last = outs[-1] if outs else None
    # An empty selection plans no step at all for node: nothing ran, and that is known.
    nothing_planned = suite and tests is not None and not tests
    return Evidence(
        runner="steps",
        exit_code=last.exit_code if last else raw.exit_code,
        signal=last.signal if last else raw.signal,
        timed_out=raw.timed_out,
        duration=raw.duration,
        tests=parsed,
        errors=(),
        in_flight=None,
        pytest_exit=None,
        parse_uncertain=ev.parse_uncertain
        or raw.bad_records > 0
        or (not outs and not box_failed and not nothing_planned),
        oom_killed=raw.oom_killed,
        box_failed=box_failed,
        lang=ev,
        tables=tables,
        test_sources=sources,
    )
