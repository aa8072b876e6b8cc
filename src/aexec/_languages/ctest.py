"""A C or C++ project's test suite with CMake and CTest: the steps, the pure parser.

Three steps, the build tree under the scratch home (`BUILD_DIR`, aexec's own):

* ``configure``: ``cmake -S <repo> -B <build> -DCMAKE_BUILD_TYPE=Debug`` — read by
  CMake's ``CMake Error at <file>:<line> (<command>):`` convention;
* ``build``: ``cmake --build <build>`` — GCC's documented text diagnostics
  (``<file>:<line>:<col>: error: <message> [-Werror=…]``) classed by the same rules as a
  snippet's JSON diagnostics (`cfamily`), and GNU ld's convention for a link error;
* ``run``: ``ctest --test-dir <build> --output-junit <file>`` (CMake ≥ 3.21), with the
  selection as an anchored ``-R`` regex: CTest's JUnit XML gives each test's status
  (``run``, ``fail``, ``notrun``, ``disabled``) and its output; ctest's own
  ``Test #n: name ....***Failed`` line says how it failed (``Failed``: a non-zero exit;
  ``Subprocess aborted``, ``SEGFAULT``, ``Exception``: a crash; ``Timeout``).

A failed test is ``assertion`` when it failed by its exit status or by glibc's
``assert`` (with its ``file:line``), ``runtime`` when it crashed or threw, ``timeout``
when CTest's own per-test timeout ended it. Test ids are ``CMakeLists.txt::<name>``.
"""

from __future__ import annotations

import posixpath
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Final

from .._types import FailureClass
from . import cfamily
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
    first_line,
    loc,
    tool,
)
from .cfamily import CFamily
from .suite import SuiteEvidence, SuiteVerdict, selected, split

BUILD_DIR: Final = ".aexec_build"
JUNIT_FILE: Final = ".aexec_ctest.xml"
#: The file test ids are anchored to.
ID_FILE: Final = "CMakeLists.txt"
_CMAKE_SPECIAL = re.compile(r"([\\^$.|?*+()\[\]{}])")


def regex(tests: Sequence[str]) -> str | None:
    """ctest's ``-R`` for the selected names (None: every test of the project)."""
    names = [split(s)[1] for s in tests]
    if any(n is None for n in names):
        return None
    return "^(" + "|".join(_CMAKE_SPECIAL.sub(r"\\\1", n or "") for n in names) + ")$"


def steps(
    work: str, home: str, tests: Sequence[str] | None, tools: Mapping[str, str] | None
) -> tuple[Step, ...]:
    build = posixpath.join(home, BUILD_DIR)
    junit = posixpath.join(home, JUNIT_FILE)
    env = (*BASE_ENV, ("CLICOLOR", "0"), ("CMAKE_COLOR_DIAGNOSTICS", "OFF"))
    cmake, ctest = tool(tools, "cmake"), tool(tools, "ctest")
    planned = [
        Step("configure", (cmake, "-S", work, "-B", build, "-DCMAKE_BUILD_TYPE=Debug"), work, env),
        Step("build", (cmake, "--build", build), work, env),
    ]
    if tests is not None and not tests:
        return tuple(planned)  # an empty selection: built, nothing run
    chosen = regex(tests) if tests is not None else None
    argv = (ctest, "--test-dir", build, "--output-junit", junit, "--no-tests=ignore")
    planned.append(
        Step(RUN_STEP, (*argv, *(("-R", chosen) if chosen else ())), work, env, evidence_file=junit)
    )
    return tuple(planned)


# ---- reading CMake, GCC and CTest ---------------------------------------------------------

_CMAKE_ERROR = re.compile(
    r"^CMake Error(?: at (?P<file>[^:\n]+):(?P<line>\d+))?[^\n]*:\n(?P<msg>(?:  [^\n]*\n?)*)", re.M
)
_GCC = re.compile(
    r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:\d+:)? (?P<kind>error|fatal error): (?P<msg>.*?)(?: \[(?P<opt>-W[^\]]+)\])?$",
    re.M,
)
_STATUS = re.compile(
    r"^\s*\d+/\d+ Test\s+#\d+: (?P<name>\S+) \.*\s*(?:\*+)?(?P<status>[^\n]*?)\s+[\d.]+ sec$", re.M
)
_VERDICT: Final[dict[str, SuiteVerdict]] = {
    "run": "passed",
    "fail": "failed",
    "notrun": "skipped",
    "disabled": "skipped",
}


def _configure_findings(out: StepOutput, work: str) -> list[LangFinding]:
    found = []
    for m in _CMAKE_ERROR.finditer(out.stderr):
        msg = " ".join(m["msg"].split()) or first_line(out.stderr)
        cls: FailureClass = "syntax" if "Parse error" in msg or "syntax" in msg.lower() else "compile"
        if re.search(r"Could not find|Could NOT find|find_package", msg):
            cls = "dependency"
        where = loc(m["file"], m["line"], work) if m["file"] else ""
        found.append(
            LangFinding(cls, where, cap(f"CMake Error: {msg}".replace(work.rstrip("/") + "/", "")), out.name)
        )
    return found


def _build_findings(out: StepOutput, work: str) -> list[LangFinding]:
    text = out.stdout + "\n" + out.stderr
    found = [
        LangFinding(
            cfamily.diag_class({"kind": m["kind"], "message": m["msg"], "option": m["opt"]}),
            loc(m["file"], m["line"], work),
            cap(m["msg"]),
            out.name,
        )
        for m in _GCC.finditer(text)
    ]
    return found or cfamily.link_findings(StepOutput(out.name, out.exit_code, stderr=text), work)


def _failure(test_id: str, status: str, output: str, work: str) -> LangFinding:
    read = cfamily.run_findings(StepOutput(RUN_STEP, 1, stderr=output), work)
    if read:
        f = read[0]
        return LangFinding(f.failure_class, f.location, cap(f"{test_id}: {f.message}"), RUN_STEP, f.exception)
    cls: FailureClass = "assertion"
    if "Timeout" in status:
        cls = "timeout"
    elif status and status != "Failed":
        cls = "runtime"  # "Subprocess aborted", "SEGFAULT", "Exception", "Child aborted"
    why = status or "failed"
    return LangFinding(cls, "", cap(f"{test_id}: {why}: {first_line(output)}".rstrip(": ")), RUN_STEP)


def _run(
    out: StepOutput, work: str, tests: Sequence[str] | None
) -> tuple[list[tuple[str, SuiteVerdict]], list[LangFinding], bool]:
    statuses = {m["name"]: m["status"].strip() for m in _STATUS.finditer(out.stdout)}
    if out.diagnostics is None:
        return [], [], True
    try:
        root = ET.fromstring(out.diagnostics)
    except ET.ParseError:
        return [], [], True
    results: list[tuple[str, SuiteVerdict]] = []
    found: list[LangFinding] = []
    for case in root.iter("testcase"):
        name = case.get("name") or ""
        tid = f"{ID_FILE}::{name}"
        if not selected(tid, tests):
            continue
        verdict = _VERDICT.get(case.get("status") or "", "errored")
        results.append((tid, verdict))
        if verdict in ("failed", "errored"):
            output = "".join(e.text or "" for e in case.iter("system-out"))
            found.append(
                _failure(tid, statuses.get(name, ""), output.replace(work.rstrip("/") + "/", ""), work)
            )
    return results, found, False


def parse(
    language: CFamily,
    outputs: tuple[StepOutput, ...],
    work: str,
    tests: Sequence[str] | None,
    timeout_s: float | None,
) -> SuiteEvidence:
    found: list[LangFinding] = []
    results: list[tuple[str, SuiteVerdict]] = []
    uncertain = False
    for out in outputs:
        caps = cap_findings(out, timeout_s)
        found.extend(caps)
        if out.timed_out or (out.name != RUN_STEP and not out.failed):
            continue
        if out.name != RUN_STEP:
            own = (_configure_findings if out.name == "configure" else _build_findings)(out, work)
            uncertain = uncertain or not own
            found.extend(
                own
                or [
                    LangFinding(
                        "compile", "", cap(f"{out.name} step failed: {first_line(out.stderr)}"), out.name
                    )
                ]
            )
            continue
        got, failed, unsure = _run(out, work, tests)
        results.extend(got)
        found.extend(failed)
        uncertain = uncertain or unsure
        if out.failed and not caps and not failed and not any(v != "passed" for _, v in got):
            found.append(exit_finding(out))
    return SuiteEvidence(evidence(language, outputs, found, uncertain=uncertain), tuple(results))
