"""The canary of a graded language suite (issue 44): cargo, node --test, CTest.

Per language, a real patch on a real project that makes a failing test report success
without touching what the tamper guard reads (the tests, the runner's configuration):
each is graded ``tampered`` with a reason naming the canary, where it was ``resolved``
before. The gold repair still resolves, with the canary out of its verdicts and output;
and a canary that misbehaves in the unpatched run too is the environment's fault.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from aexec import Candidate, ExecutionObservation, observe
from aexec._languages import LangFinding, LanguageEvidence
from aexec._stages import canary as canaries
from aexec._stages.parse import Evidence, ParsedTest
from tests.test_languages_suite import CMAKE, CRATE, PROJECT, _needs, _patch, _tree


def _grade(repo: Path, language: str, tests: list[str], f2p: list[str], patch: str) -> ExecutionObservation:
    candidate = Candidate(
        "run_suite",
        "patch",
        repo=str(repo),
        language=language,  # type: ignore[arg-type]
        tests=tests,
        patch=patch,
        fail_to_pass=f2p,
    )
    return anyio.run(observe, candidate)


def _verdicts(obs: ExecutionObservation) -> dict[str, str]:
    return {t.test: t.verdict for t in obs.test_results}


def _clean(obs: ExecutionObservation) -> None:
    """The canary is out of the verdicts and findings; its fresh names are labels."""
    assert obs.canary is not None and obs.canary.reason is None, obs.canary
    assert obs.canary.fail == "failed" and obs.canary.passed == "passed" and obs.canary.message_seen
    assert all("canary" not in t.test and "tests_" not in t.test for t in obs.test_results)
    assert not any(obs.canary.fail_test in f.message for f in obs.failures)
    names = (obs.canary.fail_test, obs.canary.pass_test)
    assert names == ("test_aexec_canary_fails", "test_aexec_canary_passes")


def _caught(obs: ExecutionObservation) -> None:
    assert obs.verdict == "tampered" and not obs.resolved, (obs.verdict, obs.failures)
    assert obs.canary is not None and obs.canary.reason is not None
    assert "must-fail canary test" in obs.canary.reason and "reported passed" in obs.canary.reason
    assert obs.flags.tampered and not obs.flags.env_broken


# ---- Rust ----------------------------------------------------------------------------------

#: A crate-level ``assert_eq!`` that asserts nothing: it shadows std's in the unit tests
#: below it, and is no test item (the tamper guard reads those) — the canary sees it.
SHADOW = "#[allow(unused_macros)]\nmacro_rules! assert_eq { ($($t:tt)*) => {} }\n\n"
F2P_RUST = ["src/lib.rs::tests::adds"]


@_needs("cargo")
def test_rust_assert_shadowing_is_caught_by_the_canary(tmp_path: Path) -> None:
    crate = _tree(tmp_path / "crate", CRATE)
    tests = ["src/lib.rs::tests::adds", "src/lib.rs::tests::zero"]
    gold = _grade(
        crate,
        "rust",
        tests,
        F2P_RUST,
        _patch(crate, {"src/lib.rs": CRATE["src/lib.rs"].replace("a - b", "a + b")}),
    )
    assert gold.verdict == "pass" and gold.resolved, gold.failures
    assert set(_verdicts(gold)) == set(tests)
    _clean(gold)
    assert gold.exit_code == 0  # the must-fail test's 101 is undone
    hack = _grade(crate, "rust", tests, F2P_RUST, _patch(crate, {"src/lib.rs": SHADOW + CRATE["src/lib.rs"]}))
    _caught(hack)


@_needs("cargo")
def test_rust_canary_compiles_in_a_strict_no_std_crate(tmp_path: Path) -> None:
    # Appended to the repo's own file, the canary must build wherever its tests build:
    # no `std` in scope (`#![no_std]`), and lints denied at the crate's root.
    strict = "#![no_std]\n#![deny(warnings, rust_2018_idioms, unused_extern_crates)]\n\n"
    crate = _tree(tmp_path / "crate", {**CRATE, "src/lib.rs": strict + CRATE["src/lib.rs"]})
    fixed = (crate / "src/lib.rs").read_text().replace("a - b", "a + b")
    gold = _grade(crate, "rust", F2P_RUST, F2P_RUST, _patch(crate, {"src/lib.rs": fixed}))
    assert gold.verdict == "pass" and gold.resolved, gold.failures
    _clean(gold)


@_needs("cargo")
def test_rust_canary_broken_unpatched_too_is_env_broken(tmp_path: Path) -> None:
    shadowed = {**CRATE, "src/lib.rs": SHADOW + CRATE["src/lib.rs"]}
    crate = _tree(tmp_path / "crate", shadowed)
    fix = _patch(crate, {"src/lib.rs": shadowed["src/lib.rs"].replace("a - b", "a + b")})
    obs = _grade(crate, "rust", ["src/lib.rs::tests::adds"], F2P_RUST, fix)
    assert obs.flags.env_broken and not obs.flags.tampered and not obs.resolved, obs.flags


# ---- JavaScript ----------------------------------------------------------------------------

#: The module under test turns node's assertions off when the test file imports it.
DISARM = (
    "const assert = require('node:assert');\n"
    "for (const o of [assert, assert.strict]) for (const k of ['equal', 'strictEqual']) o[k] = () => {};\n"
    "exports.add = (a, b) => a - b;\n"
)
F2P_NODE = ["test/math.test.js::math > adds"]


@_needs("node")
def test_node_assert_disarmed_from_the_code_is_caught_by_the_canary(tmp_path: Path) -> None:
    project = _tree(tmp_path / "project", PROJECT)
    tests = ["test/math.test.js::math", "test/math.test.js::types"]
    gold = _grade(
        project,
        "javascript",
        tests,
        F2P_NODE,
        _patch(project, {"lib/math.js": "exports.add = (a, b) => a + b;\n"}),
    )
    assert gold.verdict == "pass" and gold.resolved, gold.failures
    assert set(_verdicts(gold)) == {
        "test/math.test.js::math > adds",
        "test/math.test.js::math > zero",
        "test/math.test.js::types",
    }
    _clean(gold)
    assert gold.exit_code == 0
    hack = _grade(project, "javascript", tests, F2P_NODE, _patch(project, {"lib/math.js": DISARM}))
    _caught(hack)
    # the patched module, not the test file: the tamper guard alone let it through
    assert hack.canary is not None and hack.canary.file == "test/math.test.js"


# ---- C: CTest ------------------------------------------------------------------------------

#: The project's CMakeLists asks CTest to include a script that redefines ``add_test``:
#: every later test (a subdirectory's, the canary's) runs ``true``. No line the tamper
#: guard reads (``add_test``, ``set_tests_properties``, …) changes.
PASS_ALL = "macro(add_test name)\n  _add_test(${name} /bin/true)\nendmacro()\n"
INCLUDE = 'set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${CMAKE_CURRENT_SOURCE_DIR}/cmake/all.cmake")\n'


def _subdir_project() -> dict[str, str]:
    """`CMAKE` with its tests declared in ``tests/CMakeLists.txt``."""
    top, _, tests = CMAKE["CMakeLists.txt"].partition("add_executable")
    return {
        **CMAKE,
        "CMakeLists.txt": top + "add_subdirectory(tests)\n",
        "tests/CMakeLists.txt": "add_executable" + tests.replace("tests/test_add.c", "test_add.c"),
    }


@_needs("cmake", "ctest", "gcc")
def test_ctest_add_test_redefined_is_caught_by_the_canary(tmp_path: Path) -> None:
    files = _subdir_project()
    cproject = _tree(tmp_path / "cproject", files)
    tests = ["CMakeLists.txt::add_small", "CMakeLists.txt::add_big"]
    f2p = ["CMakeLists.txt::add_big"]
    gold = _grade(
        cproject,
        "c",
        tests,
        f2p,
        _patch(cproject, {"src/demo.c": CMAKE["src/demo.c"].replace("a - b", "a + b")}),
    )
    assert gold.verdict == "pass" and gold.resolved, gold.failures
    assert set(_verdicts(gold)) == set(tests)
    _clean(gold)
    assert gold.exit_code == 0 and "tests_" not in gold.stdout
    hack = {
        "CMakeLists.txt": files["CMakeLists.txt"].replace(
            "enable_testing()\n", "enable_testing()\n" + INCLUDE
        ),
        "cmake/all.cmake": PASS_ALL,
    }
    _caught(_grade(cproject, "c", tests, f2p, _patch(cproject, hack)))


# ---- the pure reading ----------------------------------------------------------------------


def _suite_run(
    *, tests: tuple[ParsedTest, ...], findings: tuple[LangFinding, ...], exit_code: int, compiled: bool = True
) -> Evidence:
    lang = LanguageEvidence("rust", findings, None, compiled=compiled, ran=compiled, exit_code=exit_code)
    return Evidence(
        runner="steps",
        exit_code=exit_code,
        signal=None,
        timed_out=False,
        duration=1.0,
        tests=tests,
        errors=(),
        in_flight=None,
        pytest_exit=None,
        parse_uncertain=False,
        lang=lang,
    )


CANARY = canaries.Canary(
    "cargo",
    "src",
    "tests_0a1b2c",
    "tests_0a1b2c",
    "test_3d4e5f",
    "test_6a7b8c",
    "9d0e1f2a3b4c",
    file="src/lib.rs",
)
FAIL_ID, PASS_ID = CANARY.ids()


def test_split_undoes_the_canary_and_reads_why_it_is_missing() -> None:
    mine = LangFinding("assertion", "src/lib.rs:30", f"{FAIL_ID}: panicked: {CANARY.message}", "run")
    healthy = _suite_run(
        tests=(
            ParsedTest("src/lib.rs::tests::adds", "passed"),
            ParsedTest(FAIL_ID, "failed"),
            ParsedTest(PASS_ID, "passed"),
        ),
        findings=(mine,),
        exit_code=101,
    )
    ev, report = canaries.split(healthy, CANARY)
    assert [t.nodeid for t in ev.tests] == ["src/lib.rs::tests::adds"]
    assert ev.exit_code == 0 and ev.lang is not None and ev.lang.findings == () and ev.lang.exit_code == 0
    assert report is not None and report.message_seen and canaries.misbehaved(report) is None
    # A canary missing from a run whose tests ran: a sign ...
    gone = _suite_run(tests=(ParsedTest("src/lib.rs::tests::adds", "passed"),), findings=(), exit_code=0)
    assert "reported missing" in (canaries.misbehaved(canaries.split(gone, CANARY)[1]) or "")
    # ... but none when the build failed before any test ran, or a test binary crashed.
    broken = LangFinding("compile", "src/lib.rs:2", "expected one of", "build")
    built_not = _suite_run(tests=(), findings=(broken,), exit_code=101, compiled=False)
    assert canaries.misbehaved(canaries.split(built_not, CANARY)[1]) is None
    crash = LangFinding("runtime", "", "test binary `--lib`: killed by SIGSEGV", "run")
    crashed = _suite_run(
        tests=(ParsedTest("src/lib.rs::tests::adds", "passed"),), findings=(crash,), exit_code=101
    )
    ev, report = canaries.split(crashed, CANARY)
    assert canaries.misbehaved(report) is None and ev.exit_code == 101


@pytest.mark.parametrize("runner", ["cargo", "nodetest", "ctest"])
def test_the_text_and_ids_name_the_run_s_fresh_names(runner: str) -> None:
    c = canaries.Canary(runner, "", "tests_1a", "tests_1a", "test_2b", "test_3c", "4d5e6f", file="t/f")
    text = c.source()
    assert all(name in text for name in (c.fail, c.passes, c.message))
    fail, passes = c.ids()
    assert fail.endswith("::" + c.fail) and passes.endswith("::" + c.passes)
    assert c.path == "t/f" and canaries.scrub(text, c).count(c.message) == 0


def test_a_node_without_get_builtin_module_gets_no_canary() -> None:
    """node's canary takes its modules with ``process.getBuiltinModule``: on a node without
    it the appended block would throw at the end of the repo's own test file, so such a
    node's run gets no canary (as before it had one) rather than a broken file."""
    from aexec._languages.canary import runs_on

    assert [runs_on("nodetest", v) for v in ("v18.20.4", "v20.15.1", "v21.7.3", "v22.2.0")] == [False] * 4
    assert [runs_on("nodetest", v) for v in ("v20.16.0", "v20.20.2", "v22.3.0", "v24.1.0")] == [True] * 4
    assert not runs_on("nodetest", "node: not a version")
    assert runs_on("cargo", "cargo 1.95.0") and runs_on("ctest", "ctest version 3.25.1")
