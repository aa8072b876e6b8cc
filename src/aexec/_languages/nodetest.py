"""A node project's test suite with ``node --test``: the step, its reporter, the parser.

One step: ``node --test`` with two reporters, node's ``spec`` to stdout (what a person
reads) and aexec's own, a stdlib-only ES module written into the scratch directory
(`REPORTER_FILE`), to `EVENTS_FILE`: one JSON object per test-runner event it keeps —
``start`` (file, nesting, name), ``pass``/``fail`` (the same, plus whether it is a suite,
skipped or todo, node's ``failureType`` and the error's cause: name, code, message,
stack) and ``stderr`` (a test file's own stderr, where node reports a file that fails
to load). The parser rebuilds each test's ancestry from the ``start`` events of its
file, so a test's id is ``<file>::<suite> > <test>``.

node runs each test file in its own process and reports a file that exits non-zero as a
test named by its path: when no test of that file failed, the file itself is
``errored``, read from its stderr (a ``SyntaxError`` with ``file:line``, a missing
module). Selecting a test by name runs its whole file; only the selected tests are
reported.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any, Final

from . import javascript
from ._common import (
    BASE_ENV,
    RUN_STEP,
    LangFinding,
    Step,
    StepOutput,
    cap,
    cap_findings,
    evidence,
    exit_finding,
    relative,
    tool,
)
from .canary import SuiteCanary
from .suite import Suite, SuiteEvidence, SuiteVerdict, selected, split

REPORTER_FILE: Final = ".aexec_node_reporter.mjs"
EVENTS_FILE: Final = ".aexec_node_tests.jsonl"

REPORTER_SOURCE: Final = """\
// aexec: node --test events as JSON lines (stdlib only; written by aexec, not the project's).
function describe(e) {
  if (e === undefined || e === null) return null;
  if (typeof e !== 'object') return { name: typeof e, code: null, message: String(e), stack: '' };
  let name = 'Error';
  try { name = String(e.name || (e.constructor && e.constructor.name) || 'Error'); } catch {}
  return {
    name,
    code: e.code === undefined || e.code === null ? null : String(e.code),
    message: String(e.message === undefined ? '' : e.message),
    stack: String(e.stack === undefined ? '' : e.stack),
  };
}
export default async function* aexecReporter(source) {
  for await (const event of source) {
    const d = event.data || {};
    let rec = null;
    if (event.type === 'test:start') {
      rec = { t: 'start', file: d.file, nesting: d.nesting, name: d.name };
    } else if (event.type === 'test:pass' || event.type === 'test:fail') {
      const det = d.details || {};
      const err = det.error;
      const cause = err && err.cause !== undefined ? err.cause : err;
      rec = {
        t: event.type === 'test:pass' ? 'pass' : 'fail', file: d.file, nesting: d.nesting,
        name: d.name, line: d.line, suite: det.type === 'suite', skip: d.skip !== undefined,
        todo: d.todo !== undefined, failureType: err ? err.failureType || null : null,
        error: describe(cause),
      };
    } else if (event.type === 'test:stderr') {
      rec = { t: 'stderr', file: d.file, message: d.message };
    }
    if (rec !== null) yield JSON.stringify(rec) + '\\n';
  }
}
"""


def files(tests: Sequence[str] | None) -> tuple[str, ...]:
    """The test files to hand node: the selectors' files (node finds them all when None)."""
    return tuple(dict.fromkeys(split(s)[0] for s in tests or ()))


def steps(
    work: str,
    home: str,
    tests: Sequence[str] | None,
    tools: Mapping[str, str] | None,
    canary: SuiteCanary | None = None,
) -> tuple[Step, ...]:
    """node's one step; the canary is in the first selected file, which node runs anyway."""
    if tests is not None and not tests:
        return ()  # an empty selection: nothing to run
    node = tool(tools, "node")
    events = posixpath.join(work, EVENTS_FILE)
    argv = (
        node,
        "--test",
        f"--test-reporter={posixpath.join(work, REPORTER_FILE)}",
        f"--test-reporter-destination={events}",
        "--test-reporter=spec",
        "--test-reporter-destination=stdout",
        *files(tests),
    )
    return (Step(RUN_STEP, argv, work, (*BASE_ENV, ("NO_COLOR", "1")), evidence_file=events),)


# ---- reading the events -------------------------------------------------------------------


def events(text: str | None) -> tuple[list[dict[str, Any]], int]:
    """The reporter's records, and how many lines were not one."""
    out: list[dict[str, Any]] = []
    bad = 0
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(rec, dict) and isinstance(rec.get("t"), str):
            out.append(rec)
        else:
            bad += 1
    return out, bad


def _verdict(rec: Mapping[str, Any]) -> SuiteVerdict:
    if rec.get("skip") or rec.get("todo"):
        return "skipped"
    if rec["t"] == "pass":
        return "passed"
    return "failed" if rec.get("failureType") in (None, "testCodeFailure") else "errored"


def _failure(test_id: str, rec: Mapping[str, Any], work: str) -> LangFinding:
    got = rec.get("error")
    err: Mapping[str, Any] = got if isinstance(got, dict) else {}
    name = str(err.get("name") or "Error")
    code = str(err["code"]) if err.get("code") else None
    message = str(err.get("message") or "").replace(work.rstrip("/") + "/", "")
    exc = f"{name}: {message}" if message else name
    where = javascript.stack_location(str(err.get("stack") or ""), work)
    if not where and isinstance(rec.get("file"), str):
        where = (
            f"{relative(rec['file'], work)}:{rec.get('line')}"
            if rec.get("line")
            else relative(rec["file"], work)
        )
    cls = javascript.error_class(name, code, message)
    if rec.get("failureType") == "testTimeoutFailure":
        cls = "timeout"
    return LangFinding(cls, where, cap(f"{test_id}: {exc}".split("\n", 1)[0]), RUN_STEP, cap(exc))


def _file_failure(file_id: str, stderr: str, work: str) -> LangFinding:
    """A test file that failed outside any test (it did not load): its own stderr."""
    out = StepOutput("check", 1, stderr=stderr)
    found = javascript.check_findings(out, work) or javascript.run_findings(
        StepOutput(RUN_STEP, 1, stderr=stderr), work
    )
    if found:
        f = found[0]
        return LangFinding(f.failure_class, f.location, cap(f"{file_id}: {f.message}"), RUN_STEP, f.exception)
    return LangFinding("runtime", file_id, f"{file_id}: the test file failed outside its tests", RUN_STEP)


def _file_selected(file_id: str, tests: Sequence[str] | None) -> bool:
    """Does the selection name ``file_id`` or a test in it (a file that did not load)?"""
    paths = [split(s)[0] for s in tests or ()]
    return tests is None or any(p in (".", file_id) or file_id.startswith(p + "/") for p in paths)


def parse(
    outputs: tuple[StepOutput, ...], work: str, tests: Sequence[str] | None, timeout_s: float | None
) -> SuiteEvidence:
    found: list[LangFinding] = []
    results: dict[str, SuiteVerdict] = {}
    uncertain = False
    for out in outputs:
        caps = cap_findings(out, timeout_s)
        found.extend(caps)
        if out.timed_out:
            continue
        recs, bad = events(out.diagnostics)
        uncertain = uncertain or bad > 0 or out.diagnostics is None
        stack: dict[str, list[str]] = {}
        stderr: dict[str, str] = {}
        failed_files: dict[str, bool] = {}  # file -> a test of it failed
        for rec in recs:
            file = str(rec.get("file") or "")
            if rec["t"] == "stderr":
                stderr[file] = stderr.get(file, "") + str(rec.get("message") or "")
                continue
            nesting = rec.get("nesting") if isinstance(rec.get("nesting"), int) else 0
            name = str(rec.get("name") or "")
            path = [*stack.get(file, [])[:nesting], name]
            if rec["t"] == "start":
                stack[file] = path
                continue
            if nesting == 0 and name == file:  # node's report of the file's own process
                if rec["t"] == "fail":
                    failed_files.setdefault(file, False)
                continue
            tid = f"{relative(file, work)}::{' > '.join(path)}"
            verdict = _verdict(rec)
            if rec.get("suite") and not (verdict == "errored" and rec.get("failureType") != "subtestsFailed"):
                continue  # a suite is judged by its tests (unless its own hook failed)
            if verdict in ("failed", "errored"):
                failed_files[file] = True
            if not selected(tid, tests):
                continue
            results[tid] = verdict
            if verdict in ("failed", "errored"):
                found.append(_failure(tid, rec, work))
        for file, had_test in failed_files.items():
            file_id = relative(file, work)
            if not had_test and _file_selected(file_id, tests):
                results[file_id] = "errored"
                found.append(_file_failure(file_id, stderr.get(file, ""), work))
        if out.failed and not caps and not failed_files:
            found.append(exit_finding(out))  # node failed and no test or file says why
            uncertain = True
    return SuiteEvidence(evidence("javascript", outputs, found, uncertain=uncertain), tuple(results.items()))


# ---- the tamper guard: node's test files and package.json's test configuration --------------

#: A node project's test files (fnmatch on the repo-relative path, and on its basename).
TEST_FILES: Final = (
    "test/*",
    "*/test/*",
    "tests/*",
    "*/tests/*",
    "__tests__/*",
    "*/__tests__/*",
    "*.test.?js",
    "*.test.js",
    "*-test.js",
    "*-test.?js",
    "*_test.js",
    "*_test.?js",
    "test-*.js",
    "test-*.?js",
    "test.js",
    "test.?js",
    "*.spec.js",
    "*.spec.?js",
)


def _package_tests(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text  # not JSON: the whole file, so any change counts
    if not isinstance(data, dict):
        return text
    scripts = data.get("scripts")
    if not isinstance(scripts, dict):
        scripts = {}
    picked = {
        k: v for k, v in scripts.items() if str(k).removeprefix("pre").removeprefix("post").startswith("test")
    }
    conf = {k: data[k] for k in ("test", "tests", "node-test", "mocha", "jest", "ava") if k in data}
    return json.dumps([picked, conf], sort_keys=True)


def oracle_text(path: str, text: str | None) -> str | None:
    """The test part of a ``package.json`` (its test scripts and test runners' keys)."""
    if posixpath.basename(path) != "package.json":
        return None
    return "" if text is None else _package_tests(text)


#: ``node --test`` (JavaScript).
SUITE: Final = Suite(
    name="nodetest",
    tools=(),
    steps=steps,
    parse=parse,
    test_files=TEST_FILES,
    oracle_text=oracle_text,
    support=((REPORTER_FILE, REPORTER_SOURCE),),
)
