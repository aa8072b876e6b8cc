"""run_suite in languages beyond Python (issue 21, goal 3): real toolchains, the real boundary.

Per language — a Rust crate (cargo), a node project (node --test), a C project (CMake +
CTest) — built in tmp: a failing suite, its repair by a patch (exact FAIL_TO_PASS and
PASS_TO_PASS, confirmed by a re-run), a patch that tampers with the tests, an empty
selection, a compile error in the suite (class and location) and a timeout. Then the
pure pieces: selection, the tamper rules, the request checks.
"""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import anyio
import pytest

from aexec import Candidate, ExecutionObservation, Policy, RequestError, observe
from aexec._api import validate
from aexec._languages import language, split
from aexec._languages.suite import matches
from aexec._stages.assemble import touches_suite_oracle


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _patch(repo: Path, changes: dict[str, str]) -> str:
    """A unified diff (git's a/ b/ form) taking ``repo`` to ``changes`` applied."""
    out = []
    for name, new in changes.items():
        old = (repo / name).read_text() if (repo / name).exists() else ""
        out.extend(
            difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{name}", f"b/{name}"
            )
        )
    return "".join(out)


def _observe(
    repo: Path, language: str, tests: list[str] | None, patch: str | None = None, **policy: float
) -> ExecutionObservation:
    candidate = Candidate(
        "run_suite",
        "patch" if patch else "test_subset",
        repo=str(repo),
        language=language,  # type: ignore[arg-type]
        tests=tests,
        patch=patch,
        policy=Policy(**policy),  # type: ignore[arg-type]
    )
    return anyio.run(observe, candidate)


def _verdicts(obs: ExecutionObservation) -> dict[str, str]:
    return {t.test: t.verdict for t in obs.test_results}


def _needs(*tools: str) -> pytest.MarkDecorator:
    missing = [t for t in tools if shutil.which(t) is None and not (Path.home() / ".cargo/bin" / t).exists()]
    return pytest.mark.skipif(bool(missing), reason=f"not installed: {', '.join(missing)}")


# ---- Rust: cargo test ----------------------------------------------------------------------

CRATE = {
    "Cargo.toml": '[package]\nname = "demo"\nversion = "0.1.0"\nedition = "2021"\n',
    "src/lib.rs": (
        "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n\n"
        "#[cfg(test)]\nmod tests {\n    use super::*;\n\n"
        "    #[test]\n    fn adds() {\n        assert_eq!(add(1, 2), 3);\n    }\n\n"
        "    #[test]\n    fn zero() {\n        assert_eq!(add(0, 0), 0);\n    }\n\n"
        "    #[test]\n    #[ignore]\n    fn slow() {}\n}\n"
    ),
    "tests/api.rs": (
        "#[test]\nfn api_add() {\n    assert_eq!(demo::add(2, 2), 4);\n}\n\n"
        "#[test]\nfn api_ok() {\n    assert!(demo::add(1, 1) >= 0);\n}\n"
    ),
}


@pytest.fixture
def crate(tmp_path: Path) -> Path:
    return _tree(tmp_path / "crate", CRATE)


@_needs("cargo")
def test_rust_failing_suite_per_test(crate: Path) -> None:
    obs = _observe(crate, "rust", None)
    assert obs.verdict == "fail"
    assert _verdicts(obs) == {
        "src/lib.rs::tests::adds": "failed",
        "src/lib.rs::tests::zero": "passed",
        "src/lib.rs::tests::slow": "skipped",
        "tests/api.rs::api_add": "failed",
        "tests/api.rs::api_ok": "passed",
    }
    assert obs.failure is not None and obs.failure.failure_class == "assertion"
    assert obs.failure.location == "src/lib.rs:11"
    assert {f.location for f in obs.failures} == {"src/lib.rs:11", "tests/api.rs:3"}
    assert not obs.flags.parse_uncertain


@_needs("cargo")
def test_rust_repair_is_exact_f2p_and_reverified(crate: Path) -> None:
    fixed = CRATE["src/lib.rs"].replace("a - b", "a + b")
    tests = ["src/lib.rs::tests::adds", "src/lib.rs::tests::zero", "tests/api.rs::api_add"]
    obs = _observe(crate, "rust", tests, _patch(crate, {"src/lib.rs": fixed}))
    assert obs.verdict == "pass", obs.failures
    assert obs.flags.reverified and not obs.flags.tampered
    tags = {t.test: (t.verdict, t.f2p, t.p2p) for t in obs.test_results}
    assert tags == {
        "src/lib.rs::tests::adds": ("passed", True, False),
        "src/lib.rs::tests::zero": ("passed", False, True),
        "tests/api.rs::api_add": ("passed", True, False),
    }


@_needs("cargo")
def test_rust_tampering_with_the_tests_is_flagged(crate: Path) -> None:
    # The unit test lives in the source file: its #[cfg(test)] module is the oracle.
    weakened = CRATE["src/lib.rs"].replace("assert_eq!(add(1, 2), 3)", "assert_eq!(add(1, 2), -1)")
    obs = _observe(crate, "rust", ["src/lib.rs::tests::adds"], _patch(crate, {"src/lib.rs": weakened}))
    assert obs.verdict == "tampered"
    # ... and an integration test file, and Cargo.toml's test tables.
    gutted = CRATE["tests/api.rs"].replace("assert_eq!(demo::add(2, 2), 4);", "")
    obs = _observe(crate, "rust", ["tests/api.rs::api_add"], _patch(crate, {"tests/api.rs": gutted}))
    assert obs.verdict == "tampered"
    harness = CRATE["Cargo.toml"] + '\n[[test]]\nname = "api"\nharness = false\n'
    obs = _observe(crate, "rust", ["tests/api.rs"], _patch(crate, {"Cargo.toml": harness}))
    assert obs.verdict == "tampered"


@_needs("cargo")
def test_rust_empty_selection_is_empty_success(crate: Path) -> None:
    obs = _observe(crate, "rust", [])
    assert obs.verdict == "empty_success" and obs.test_results == ()
    # A selection that names no existing test runs none either.
    obs = _observe(crate, "rust", ["tests/api.rs::no_such_test"])
    assert obs.verdict == "empty_success"


@_needs("cargo")
def test_rust_compile_error_in_the_suite(crate: Path) -> None:
    broken = CRATE["tests/api.rs"].replace("demo::add(1, 1) >= 0", 'demo::add(1, "one") >= 0')
    _tree(crate, {"tests/api.rs": broken})
    obs = _observe(crate, "rust", None)
    assert obs.verdict == "fail" and obs.test_results == ()
    assert obs.failure is not None
    assert (obs.failure.failure_class, obs.failure.location) == ("type", "tests/api.rs:8")
    assert "E0308" in obs.failure.message


@_needs("cargo")
def test_rust_timeout(crate: Path) -> None:
    _tree(
        crate,
        # waits, not spins: the deadline is what is tested, not a core burnt till it
        {
            "tests/spin.rs": "#[test]\nfn spins() {\n    loop {\n        std::thread::sleep(std::time::Duration::from_secs(1));\n    }\n}\n"
        },
    )
    obs = _observe(crate, "rust", ["tests/spin.rs::spins"], timeout_s=8.0)
    assert obs.timed_out and obs.verdict == "fail"
    assert obs.failure is not None and obs.failure.failure_class == "timeout"


# ---- JavaScript: node --test ---------------------------------------------------------------

PROJECT = {
    "package.json": '{"name": "demo", "version": "1.0.0", "scripts": {"test": "node --test"}}\n',
    "lib/math.js": "exports.add = (a, b) => a - b;\n",
    "test/math.test.js": (
        "const test = require('node:test');\n"
        "const assert = require('node:assert/strict');\n"
        "const { add } = require('../lib/math.js');\n"
        "test.describe('math', () => {\n"
        "  test.it('adds', () => {\n"
        "    assert.equal(add(1, 2), 3);\n"
        "  });\n"
        "  test.it('zero', () => {\n"
        "    assert.equal(add(0, 0), 0);\n"
        "  });\n"
        "});\n"
        "test('types', () => {\n"
        "  assert.equal(typeof add(1, 1), 'number');\n"
        "});\n"
        "test('later', { skip: 'not yet' }, () => {});\n"
    ),
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return _tree(tmp_path / "project", PROJECT)


@_needs("node")
def test_node_failing_suite_per_test(project: Path) -> None:
    obs = _observe(project, "javascript", None)
    assert obs.verdict == "fail"
    assert _verdicts(obs) == {
        "test/math.test.js::math > adds": "failed",
        "test/math.test.js::math > zero": "passed",
        "test/math.test.js::types": "passed",
        "test/math.test.js::later": "skipped",
    }
    assert obs.failure is not None
    assert (obs.failure.failure_class, obs.failure.location) == ("assertion", "test/math.test.js:6")
    assert obs.changed_state == "no files written"  # the reporter's files are aexec's own


@_needs("node")
def test_node_repair_is_exact_f2p_and_reverified(project: Path) -> None:
    tests = ["test/math.test.js::math", "test/math.test.js::types"]
    obs = _observe(
        project, "javascript", tests, _patch(project, {"lib/math.js": "exports.add = (a, b) => a + b;\n"})
    )
    assert obs.verdict == "pass", obs.failures
    assert obs.flags.reverified
    tags = {t.test: (t.f2p, t.p2p) for t in obs.test_results}
    assert tags == {
        "test/math.test.js::math > adds": (True, False),
        "test/math.test.js::math > zero": (False, True),
        "test/math.test.js::types": (False, True),
    }


@_needs("node")
def test_node_tampering_is_flagged(project: Path) -> None:
    weakened = PROJECT["test/math.test.js"].replace("assert.equal(add(1, 2), 3);", "")
    obs = _observe(
        project, "javascript", ["test/math.test.js"], _patch(project, {"test/math.test.js": weakened})
    )
    assert obs.verdict == "tampered"
    script = PROJECT["package.json"].replace('"node --test"', '"true"')
    obs = _observe(project, "javascript", ["test/math.test.js"], _patch(project, {"package.json": script}))
    assert obs.verdict == "tampered"


@_needs("node")
def test_node_empty_selection_is_empty_success(project: Path) -> None:
    obs = _observe(project, "javascript", [])
    assert obs.verdict == "empty_success" and not obs.flags.parse_uncertain


@_needs("node")
def test_node_syntax_error_in_a_test_file(project: Path) -> None:
    _tree(
        project,
        {"test/broken.test.js": "const test = require('node:test');\ntest('x', () => { let = ; });\n"},
    )
    obs = _observe(project, "javascript", ["test/broken.test.js"])
    assert obs.verdict == "fail"
    assert _verdicts(obs) == {"test/broken.test.js": "errored"}
    assert obs.failure is not None
    assert (obs.failure.failure_class, obs.failure.location) == ("syntax", "test/broken.test.js:2")


@_needs("node")
def test_node_timeout(project: Path) -> None:
    _tree(
        project,
        # a test that never settles and keeps the loop alive: waits till the deadline, burns nothing
        {
            "test/spin.test.js": (
                "const test = require('node:test');\n"
                "test('spins', () => new Promise(() => setInterval(() => {}, 1000)));\n"
            )
        },
    )
    obs = _observe(project, "javascript", ["test/spin.test.js"], timeout_s=5.0)
    assert obs.timed_out and obs.failure is not None and obs.failure.failure_class == "timeout"


# ---- C: CMake + CTest ----------------------------------------------------------------------

CMAKE = {
    "CMakeLists.txt": (
        "cmake_minimum_required(VERSION 3.16)\nproject(demo C)\nenable_testing()\n"
        "add_library(demo src/demo.c)\ntarget_include_directories(demo PUBLIC src)\n"
        "add_executable(test_add tests/test_add.c)\ntarget_link_libraries(test_add demo)\n"
        "add_test(NAME add_small COMMAND test_add small)\n"
        "add_test(NAME add_big COMMAND test_add big)\n"
    ),
    "src/demo.h": "int add(int a, int b);\n",
    "src/demo.c": '#include "demo.h"\nint add(int a, int b) { return a - b; }\n',
    "tests/test_add.c": (
        '#include <assert.h>\n#include <string.h>\n#include "demo.h"\n'
        "int main(int argc, char **argv) {\n"
        '  if (argc > 1 && strcmp(argv[1], "small") == 0) assert(add(1, 0) == 1);\n'
        "  else assert(add(2, 2) == 4);\n"
        "  return 0;\n}\n"
    ),
}


@pytest.fixture
def cproject(tmp_path: Path) -> Path:
    return _tree(tmp_path / "cproject", CMAKE)


@_needs("cmake", "ctest", "gcc")
def test_c_failing_suite_per_test(cproject: Path) -> None:
    obs = _observe(cproject, "c", None)
    assert obs.verdict == "fail"
    assert _verdicts(obs) == {"CMakeLists.txt::add_small": "passed", "CMakeLists.txt::add_big": "failed"}
    assert obs.failure is not None
    assert (obs.failure.failure_class, obs.failure.location) == ("assertion", "tests/test_add.c:6")


@_needs("cmake", "ctest", "gcc")
def test_c_repair_tamper_and_empty(cproject: Path) -> None:
    tests = ["CMakeLists.txt::add_small", "CMakeLists.txt::add_big"]
    fix = _patch(cproject, {"src/demo.c": CMAKE["src/demo.c"].replace("a - b", "a + b")})
    obs = _observe(cproject, "c", tests, fix)
    assert obs.verdict == "pass" and obs.flags.reverified
    assert {t.test: (t.f2p, t.p2p) for t in obs.test_results} == {
        "CMakeLists.txt::add_small": (False, True),
        "CMakeLists.txt::add_big": (True, False),
    }
    gutted = CMAKE["tests/test_add.c"].replace("assert(add(2, 2) == 4)", "(void)0")
    obs = _observe(cproject, "c", ["tests/test_add.c"], _patch(cproject, {"tests/test_add.c": gutted}))
    assert obs.verdict == "tampered"
    dropped = CMAKE["CMakeLists.txt"].replace("add_test(NAME add_big COMMAND test_add big)\n", "")
    obs = _observe(
        cproject, "c", ["CMakeLists.txt::add_small"], _patch(cproject, {"CMakeLists.txt": dropped})
    )
    assert obs.verdict == "tampered"
    assert _observe(cproject, "c", []).verdict == "empty_success"


@_needs("cmake", "ctest", "gcc")
def test_c_compile_error_and_timeout(cproject: Path) -> None:
    _tree(
        cproject, {"tests/test_add.c": CMAKE["tests/test_add.c"].replace("return 0;", "return undeclared;")}
    )
    obs = _observe(cproject, "c", None)
    assert obs.failure is not None
    assert (obs.failure.failure_class, obs.failure.location) == ("compile", "tests/test_add.c:7")
    waits = CMAKE["tests/test_add.c"].replace("return 0;", "for (;;) pause();")  # not a busy loop
    _tree(cproject, {"tests/test_add.c": "#include <unistd.h>\n" + waits})
    obs = _observe(cproject, "c", ["CMakeLists.txt::add_small"], timeout_s=10.0)
    assert obs.timed_out and obs.failure is not None and obs.failure.failure_class == "timeout"


# ---- the pure pieces -----------------------------------------------------------------------


def test_selectors_pick_ids() -> None:
    assert split("tests/api.rs::api_add") == ("tests/api.rs", "api_add")
    assert matches("src/lib.rs::tests::adds", "src/lib.rs::tests")
    assert not matches("src/lib.rs::tests_more::x", "src/lib.rs::tests")
    assert matches("test/a.test.js::math > adds", "test/a.test.js::math")
    assert matches("test/a.test.js::math > adds", "test")
    assert not matches("test/a.test.js::mathx", "test/a.test.js::math")


def test_tamper_rules() -> None:
    assert language("rust").runner().is_test_file("tests/common/mod.rs") and not language(
        "rust"
    ).runner().is_test_file("src/lib.rs")
    assert language("javascript").runner().is_test_file("lib/x.test.mjs") and not language(
        "javascript"
    ).runner().is_test_file("lib/x.js")
    assert language("c").runner().is_test_file("tests/test_add.c") and not language(
        "c"
    ).runner().is_test_file("src/demo.c")
    # Only the test part of a runner's file counts: a dependency or a library change does not.
    toml = CRATE["Cargo.toml"]
    assert language("rust").runner().oracle_text("Cargo.toml", toml) == language("rust").runner().oracle_text(
        "Cargo.toml", toml + "[dependencies]\n"
    )
    assert language("rust").runner().oracle_text("Cargo.toml", toml) != language("rust").runner().oracle_text(
        "Cargo.toml", toml + "[dev-dependencies]\nx = '1'\n"
    )
    src = CRATE["src/lib.rs"]
    assert language("rust").runner().oracle_text("src/lib.rs", src) == language("rust").runner().oracle_text(
        "src/lib.rs", src.replace("a - b", "a + b")
    )
    assert language("rust").runner().oracle_text("src/lib.rs", src) != language("rust").runner().oracle_text(
        "src/lib.rs", src.replace("), 3)", "), 4)")
    )
    pkg = PROJECT["package.json"]
    assert language("javascript").runner().oracle_text("package.json", pkg) == language(
        "javascript"
    ).runner().oracle_text("package.json", pkg.replace("1.0.0", "1.0.1"))
    cm = CMAKE["CMakeLists.txt"]
    assert language("c").runner().oracle_text("CMakeLists.txt", cm) == language("c").runner().oracle_text(
        "CMakeLists.txt", cm.replace("src/demo.c", "src/demo.c src/x.c")
    )
    # Selected test files (all of them for the whole suite), or the runner's config.
    assert touches_suite_oracle("javascript", ["test/a.test.js"], ["test/a.test.js::x"], False)
    assert not touches_suite_oracle("javascript", ["test/b.test.js"], ["test/a.test.js::x"], False)
    assert touches_suite_oracle("javascript", ["test/b.test.js"], None, False)
    assert not touches_suite_oracle("rust", ["src/lib.rs"], ["src/lib.rs::tests::adds"], False)
    assert touches_suite_oracle("rust", ["src/lib.rs"], ["src/lib.rs::tests::adds"], True)


def test_requests_are_checked(crate: Path) -> None:
    validate(Candidate("run_suite", "test_subset", repo=str(crate), language="rust", tests=["tests/api.rs"]))
    with pytest.raises(RequestError, match="run_suite runs"):
        validate(Candidate("run_suite", "test_subset", repo=str(crate), language="java"))
    with pytest.raises(RequestError, match="no `code`"):
        validate(Candidate("run_suite", "test_subset", repo=str(crate), language="rust", code="fn main(){}"))
    with pytest.raises(RequestError, match="snippet"):
        validate(Candidate("run_suite", "test_subset", language="rust", code="fn main(){}"))
