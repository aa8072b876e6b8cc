"""A C or C++ project's test suite with CMake and CTest: the steps, the pure parser.

The steps, the build tree under the scratch home (`BUILD_DIR`, aexec's own):

* ``configure``: ``cmake -S <repo> -B <build> -DCMAKE_BUILD_TYPE=Debug`` — CMake's
  ``CMake Error at <file>:<line> (<command>):``; ``build``: ``cmake --build <build>`` —
  GCC's text diagnostics (``<file>:<line>:<col>: error: <message> [-Werror=…]``) classed
  as a snippet's JSON ones (`cfamily`), and GNU ld's convention for a link error;
* ``run``: ``ctest --test-dir <build> --output-junit <file>`` (CMake ≥ 3.21), with the
  selection as an anchored ``-R`` regex: CTest's JUnit XML gives each test's status
  (``run``, ``fail``, ``notrun``, ``disabled``) and its output; ctest's own
  ``Test #n: name ....***Failed`` line says how it failed (``Failed``: a non-zero exit;
  ``Subprocess aborted``, ``SEGFAULT``, ``Exception``: a crash; ``Timeout``).

A failed test is ``assertion`` by its exit status or glibc's ``assert`` (``file:line``),
``runtime`` when it crashed or threw, ``timeout`` by CTest's own per-test timeout. Test
ids are ``CMakeLists.txt::<name>``. A ``canary`` step registers a graded run's canary.

When the selection names CTest ids, the tamper guard needs what those tests are built
from: configure then also writes CMake's file-API query (``-C`` `INIT_FILE`), and a
``sources`` step between build and run (``cmake -P`` `GATHER_FILE`, aexec's own script)
writes to `SOURCES_FILE` what ``ctest --show-only=json-v1`` says each test runs, each
executable target's ``artifacts`` and ``sources`` from the file API's reply, and the
lines of its objects' compiler dependency files (``*.d``) that name a file of the repo.
`selected_sources` reads it.
"""

from __future__ import annotations

import json
import posixpath
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Final

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
from .canary import SuiteCanary, ctest_step
from .cfamily import CFamily
from .suite import Suite, SuiteEvidence, SuiteVerdict, selected, selects_ids, split

BUILD_DIR: Final = ".aexec_build"
JUNIT_FILE: Final = ".aexec_ctest.xml"
#: What the ``sources`` step gathered (under the scratch home).
SOURCES_FILE: Final = ".aexec_ctest_sources.txt"
#: The step that gathers what the selected tests are built from.
GATHER_STEP: Final = "sources"
#: The file test ids are anchored to (CTest's names are the project's).
ID_FILE: Final = "CMakeLists.txt"
_CMAKE_SPECIAL = re.compile(r"([\\^$.|?*+()\[\]{}])")

#: Configure's initial cache script (``cmake -C``): asks CMake's file API for the code model.
INIT_FILE: Final = ".aexec_ctest_init.cmake"
INIT_SOURCE: Final = """\
# aexec: ask CMake's file API for the code model (each target's artifacts and sources).
file(WRITE "${CMAKE_BINARY_DIR}/.cmake/api/v1/query/codemodel-v2" "")
"""
#: The ``sources`` step's script (``cmake -D… -P``); it never fails, whatever it finds.
GATHER_FILE: Final = ".aexec_ctest_sources.cmake"
GATHER_SOURCE: Final = """\
# aexec: what each CTest test runs, and what each executable target is built from.
cmake_minimum_required(VERSION 3.19)
execute_process(COMMAND "${CTEST}" --test-dir "${BUILD}" --show-only=json-v1
                OUTPUT_VARIABLE tests ERROR_QUIET RESULT_VARIABLE status)
file(WRITE "${OUT}" "@@aexec build ${BUILD}\\n@@aexec ctest\\n${tests}\\n")
file(GLOB replies "${BUILD}/.cmake/api/v1/reply/target-*.json")
foreach(reply IN LISTS replies)
  file(READ "${reply}" text)
  string(JSON type ERROR_VARIABLE failed GET "${text}" type)
  if(NOT type STREQUAL "EXECUTABLE")
    continue()
  endif()
  string(JSON name ERROR_VARIABLE failed GET "${text}" name)
  string(JSON dir ERROR_VARIABLE failed GET "${text}" paths build)
  set(rec "{}")
  foreach(key IN ITEMS artifacts sources)
    string(JSON value ERROR_VARIABLE failed GET "${text}" ${key})
    if(NOT failed)
      string(JSON rec ERROR_VARIABLE failed SET "${rec}" ${key} "${value}")
    endif()
  endforeach()
  file(GLOB_RECURSE depfiles "${BUILD}/${dir}/CMakeFiles/${name}.dir/*.d")
  set(depends "")
  foreach(depfile IN LISTS depfiles)
    file(STRINGS "${depfile}" lines REGEX "${SOURCE_RE}" ENCODING UTF-8)
    list(APPEND depends ${lines})
  endforeach()
  list(JOIN depends "\\n" depends)
  file(APPEND "${OUT}" "@@aexec target\\n${rec}\\n@@aexec depends\\n${depends}\\n")
endforeach()
file(APPEND "${OUT}" "@@aexec end\\n")
"""


def regex(tests: Sequence[str]) -> str | None:
    """ctest's ``-R`` for the selected names (None: every test of the project)."""
    names = [split(s)[1] for s in tests]
    if any(n is None for n in names):
        return None
    return "^(" + "|".join(_CMAKE_SPECIAL.sub(r"\\\1", n or "") for n in names) + ")$"


def steps(
    work: str,
    home: str,
    tests: Sequence[str] | None,
    tools: Mapping[str, str] | None,
    canary: SuiteCanary | None = None,
) -> tuple[Step, ...]:
    build = posixpath.join(home, BUILD_DIR)
    junit = posixpath.join(home, JUNIT_FILE)
    env = (*BASE_ENV, ("CLICOLOR", "0"), ("CMAKE_COLOR_DIAGNOSTICS", "OFF"))
    cmake, ctest = tool(tools, "cmake"), tool(tools, "ctest")
    gather = selects_ids(ID_FILE, tests)  # the guard needs what the named tests are built from
    init = ("-C", posixpath.join(work, INIT_FILE)) if gather else ()
    planned = [
        Step("configure", (cmake, *init, "-S", work, "-B", build, "-DCMAKE_BUILD_TYPE=Debug"), work, env),
        Step("build", (cmake, "--build", build), work, env),
    ]
    if tests is not None and not tests:
        return tuple(planned)  # an empty selection: built, nothing run
    if gather:
        found = posixpath.join(home, SOURCES_FILE)
        source_re = _CMAKE_SPECIAL.sub(r"\\\1", work.rstrip("/") + "/")
        defs = (f"-DBUILD={build}", f"-DCTEST={ctest}", f"-DOUT={found}", f"-DSOURCE_RE={source_re}")
        script = (cmake, *defs, "-P", posixpath.join(work, GATHER_FILE))
        planned.append(Step(GATHER_STEP, script, work, env, evidence_file=found))
    planned.extend(ctest_step(cmake, work, build, canary))  # after the gather: it lists the project's
    chosen = regex((*tests, *(canary.tests if canary else ()))) if tests is not None else None
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
        text = cap(f"CMake Error: {msg}".replace(work.rstrip("/") + "/", ""))
        found.append(LangFinding(cls, where, text, out.name))
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


def _sections(text: str) -> list[tuple[str, str]]:
    """The ``@@aexec <kind>`` sections of the ``sources`` step's file: (kind, body)."""
    out: list[tuple[str, str]] = []
    for part in ("\n" + text).split("\n@@aexec ")[1:]:
        head, _, body = part.partition("\n")
        out.append((head, body))
    return out


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _inside(path: str, work: str) -> str | None:
    """``path`` relative to the repo's view, if it is in it."""
    root = work.rstrip("/") + "/"
    path = posixpath.normpath(posixpath.join(work, path))
    return path[len(root) :] if path.startswith(root) else None


def selected_sources(text: str | None, work: str, tests: Sequence[str] | None) -> tuple[str, ...] | None:
    """The repo's files the selected CTest tests are built from, read from what the
    ``sources`` step gathered: for each argument of a selected test's command (CTest's
    ``--show-only=json-v1``) that is an executable target's artifact, that target's
    sources (the file API) and the repo files its objects' dependency files name; an
    argument that is a file of the repo (a script, a data file) is itself one. None when
    it is not known: nothing gathered, or a selected test whose command names neither."""
    if not text:
        return None
    build = ""
    listed: list[dict[str, Any]] | None = None
    targets: dict[str, set[str]] = {}
    artifacts: list[str] = []
    for kind, body in _sections(text):
        if kind.startswith("build "):
            build = kind[len("build ") :]
        elif kind == "ctest":
            got = _json(body)
            if isinstance(got, dict) and isinstance(got.get("tests"), list):
                listed = [t for t in got["tests"] if isinstance(t, dict)]
        elif kind == "target":
            rec = _json(body)
            if not isinstance(rec, dict):
                return None
            listed_sources = [s.get("path") for s in rec.get("sources") or () if isinstance(s, dict)]
            files = {f for f in (_inside(str(p), work) for p in listed_sources if p) if f}
            artifacts = [
                posixpath.normpath(posixpath.join(build, str(a["path"])))
                for a in rec.get("artifacts") or ()
                if isinstance(a, dict) and a.get("path")
            ]
            for a in artifacts:
                targets[a] = files
        elif kind == "depends":
            named = re.split(r"(?<!\\)\s+", body.replace("\\\n", " "))
            files = {
                f for f in (_inside(n.replace("\\ ", " "), work) for n in named if n.startswith("/")) if f
            }
            for a in artifacts:
                targets[a] = targets[a] | files
    if not build or listed is None or not text.rstrip().endswith("@@aexec end"):
        return None  # ctest could not list the tests, or the file was cut by the cap
    found: set[str] = set()
    for test in listed:
        if not selected(f"{ID_FILE}::{test.get('name')}", tests):
            continue
        known = False
        for arg in test.get("command") or ():
            arg = posixpath.normpath(str(arg))
            if arg in targets:
                found |= targets[arg]
                known = True
            elif (inside := _inside(arg, work)) is not None and posixpath.isabs(arg):
                found.add(inside)
                known = True
        if not known:
            return None
    return tuple(sorted(found))


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
    sources: tuple[str, ...] | None = None
    for out in outputs:
        caps = cap_findings(out, timeout_s)
        found.extend(caps)
        if out.name == GATHER_STEP and not out.timed_out:
            sources = selected_sources(out.diagnostics, work, tests)
        if out.timed_out or (out.name != RUN_STEP and not out.failed):
            continue
        if out.name != RUN_STEP:
            own = (_configure_findings if out.name == "configure" else _build_findings)(out, work)
            uncertain = uncertain or not own
            why = cap(f"{out.name} step failed: {first_line(out.stderr)}")
            found.extend(own or [LangFinding("compile", "", why, out.name)])
            continue
        got, failed, unsure = _run(out, work, tests)
        results.extend(got)
        found.extend(failed)
        uncertain = uncertain or unsure
        if out.failed and not caps and not failed and not any(v != "passed" for _, v in got):
            found.append(exit_finding(out))
    return SuiteEvidence(evidence(language, outputs, found, uncertain=uncertain), tuple(results), sources)


# ---- the tamper guard: the project's test files and CMake's test configuration --------------

#: Test files (fnmatch on the repo-relative path, and on its basename).
_TEST_DIRS: Final = ("test/*", "tests/*", "*/test/*", "*/tests/*")
TEST_FILES: Final[dict[CFamily, tuple[str, ...]]] = {
    "c": (*_TEST_DIRS, "test_*.c", "*_test.c", "*_test.h"),
    "cpp": (*_TEST_DIRS, "test_*.c*", "*_test.c*", "*_test.h*", "*_unittest.c*"),
}
_CMAKE_TEST = re.compile(
    r"^\s*(?:add_test|enable_testing|set_tests_properties|include\s*\(\s*CTest|gtest_discover_tests"
    r"|gtest_add_tests|set_property\s*\(\s*TEST)\b",
    re.I,
)


def oracle_text(path: str, text: str | None) -> str | None:
    """CTest's own files whole, and the test commands of the CMake files."""
    base = posixpath.basename(path)
    if base in ("CTestTestfile.cmake", "CTestCustom.cmake", "CTestConfig.cmake"):
        return text or ""
    if base == "CMakeLists.txt" or base.endswith(".cmake"):
        return "\n".join(ln.strip() for ln in (text or "").splitlines() if _CMAKE_TEST.match(ln))
    return None


def _suite(language: CFamily) -> Suite:
    return Suite(
        name="ctest",
        tools=("cmake", "ctest"),
        steps=steps,
        parse=partial(parse, language),
        test_files=TEST_FILES[language],
        oracle_text=oracle_text,
        support=((INIT_FILE, INIT_SOURCE), (GATHER_FILE, GATHER_SOURCE)),
        own_files=(BUILD_DIR + "/", JUNIT_FILE, SOURCES_FILE),
        id_file=ID_FILE,
    )


#: CMake and CTest (C, C++).
C_SUITE: Final = _suite("c")
CPP_SUITE: Final = _suite("cpp")
