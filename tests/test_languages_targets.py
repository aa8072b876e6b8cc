"""What a suite's selection names, in languages beyond Python (issue 26, defects 6-8).

Real toolchains: a crate whose selection names two test targets, a binary and an example
(cargo must run each, not take a target's name for a test filter); a CMake project whose
test helper is gutted under a selection of CTest ids (the test's sources are its oracle
whatever form the selection takes); ES modules under ``node --test`` (locations relative
to the repo, a missing import placed at its importer).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aexec._languages.cargo import targets
from aexec._languages.ctest import selected_sources
from aexec._stages.assemble import touches_suite_oracle

from .test_languages_suite import _needs, _observe, _patch, _tree, _verdicts

# ---- Rust: every named target runs -------------------------------------------------------

CRATE = {
    "Cargo.toml": '[package]\nname = "demo"\nversion = "0.1.0"\nedition = "2021"\n',
    "src/lib.rs": "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n",
    "tests/test.rs": "#[test]\nfn t_add() {\n    assert_eq!(demo::add(1, 2), 3);\n}\n",
    "tests/extra.rs": (
        "#[test]\nfn e_add() {\n    assert_eq!(demo::add(2, 2), 4);\n}\n\n#[test]\nfn e_ok() {}\n"
    ),
    "src/bin/tool.rs": "fn main() {}\n\n#[test]\nfn b_add() {\n    assert_eq!(demo::add(3, 3), 6);\n}\n",
    "examples/show.rs": "fn main() {}\n\n#[test]\nfn x_add() {\n    assert_eq!(demo::add(4, 4), 8);\n}\n",
}


@_needs("cargo")
def test_rust_two_test_targets_both_run(tmp_path: Path) -> None:
    crate = _tree(tmp_path / "crate", CRATE)
    obs = _observe(crate, "rust", ["tests/test.rs", "tests/extra.rs"])
    assert obs.verdict == "fail", obs.failures
    assert _verdicts(obs) == {
        "tests/test.rs::t_add": "failed",
        "tests/extra.rs::e_add": "failed",
        "tests/extra.rs::e_ok": "passed",
    }
    assert {f.location for f in obs.failures} == {"tests/test.rs:3", "tests/extra.rs:3"}
    # ... and their repair is a pass with both targets' f2p.
    fix = _patch(crate, {"src/lib.rs": CRATE["src/lib.rs"].replace("a - b", "a + b")})
    obs = _observe(crate, "rust", ["tests/test.rs::t_add", "tests/extra.rs::e_add"], fix)
    assert obs.verdict == "pass" and obs.flags.reverified
    assert {t.test: t.f2p for t in obs.test_results} == {
        "tests/test.rs::t_add": True,
        "tests/extra.rs::e_add": True,
    }


@_needs("cargo")
def test_rust_binary_example_and_test_targets_run(tmp_path: Path) -> None:
    crate = _tree(tmp_path / "crate", CRATE)
    obs = _observe(crate, "rust", ["src/bin/tool.rs", "examples/show.rs", "tests/extra.rs::e_add"])
    assert _verdicts(obs) == {
        "src/bin/tool.rs::b_add": "failed",
        "examples/show.rs::x_add": "failed",
        "tests/extra.rs::e_add": "failed",
    }
    assert {f.location for f in obs.failures} == {
        "src/bin/tool.rs:5",
        "examples/show.rs:5",
        "tests/extra.rs:3",
    }


def test_rust_targets_are_flag_name_pairs() -> None:
    assert targets(["tests/test.rs", "tests/extra.rs", "tests/test.rs::x"]) == (
        "--test",
        "test",
        "--test",
        "extra",
    )
    assert targets(["src/bin/a.rs", "src/bin/b/main.rs", "examples/c.rs", "benches/d.rs", "src/lib.rs"]) == (
        "--bin",
        "a",
        "--bin",
        "b",
        "--example",
        "c",
        "--bench",
        "d",
        "--lib",
    )
    assert targets(["tests/test.rs", "tests"]) == ("--tests",)
    assert targets(None) == ("--tests",)


# ---- C: a test's sources under a selection of CTest ids --------------------------------

MINI = {
    "CMakeLists.txt": (
        "cmake_minimum_required(VERSION 3.16)\nproject(mini C)\nenable_testing()\n"
        "add_executable(test_mini tests/test_mini.c)\n"
        "target_include_directories(test_mini PRIVATE ${CMAKE_SOURCE_DIR})\n"
        "add_test(NAME parse_one COMMAND test_mini one)\n"
        "add_test(NAME parse_two COMMAND test_mini two)\n"
        "add_executable(test_other tests/test_other.c)\n"
        "add_test(NAME other COMMAND test_other)\n"
    ),
    # A header-only library, like jsmn: the test includes it, and a repair patches it.
    "mini.h": "#include <string.h>\nstatic int mini_len(const char *s) { return (int)strlen(s) - 1; }\n",
    "tests/util.h": (
        "#include <stdio.h>\n"
        "static int expect(int got, int want) {\n"
        '  if (got != want) { printf("got %d, want %d\\n", got, want); return 1; }\n'
        "  return 0;\n}\n"
    ),
    "tests/test_mini.c": (
        '#include <stdio.h>\n#include <string.h>\n#include "mini.h"\n#include "util.h"\n'
        "static int check(int got, int want) {\n"
        '  if (got != want) { printf("got %d, want %d\\n", got, want); return 1; }\n'
        "  return 0;\n}\n"
        "int main(int argc, char **argv) {\n"
        '  if (argc > 1 && strcmp(argv[1], "one") == 0) return check(mini_len("a"), 1);\n'
        '  return expect(mini_len("ab"), 2);\n}\n'
    ),
    "tests/test_other.c": "int main(void) { return 0; }\n",
}
IDS = ["CMakeLists.txt::parse_one", "CMakeLists.txt::parse_two"]


@pytest.fixture
def mini(tmp_path: Path) -> Path:
    return _tree(tmp_path / "mini", MINI)


@_needs("cmake", "ctest", "gcc")
def test_c_gutted_helper_under_ctest_ids_is_tampered(mini: Path) -> None:
    # The helper in the test's own source always succeeds: every selected test "passes".
    gutted = MINI["tests/test_mini.c"].replace("if (got != want)", "if (0)")
    helpers = MINI["tests/util.h"].replace("if (got != want)", "if (0)")
    obs = _observe(mini, "c", IDS, _patch(mini, {"tests/test_mini.c": gutted, "tests/util.h": helpers}))
    assert obs.verdict == "tampered", (obs.verdict, obs.test_results)
    # The helper in a header the test includes (the compiler's dependency files say so).
    obs = _observe(mini, "c", ["CMakeLists.txt::parse_two"], _patch(mini, {"tests/util.h": helpers}))
    assert obs.verdict == "tampered", (obs.verdict, obs.test_results)
    # The whole CMakeLists.txt selects every test: the same.
    obs = _observe(mini, "c", ["CMakeLists.txt"], _patch(mini, {"tests/test_mini.c": gutted}))
    assert obs.verdict == "tampered", (obs.verdict, obs.test_results)


@_needs("cmake", "ctest", "gcc")
def test_c_repair_under_ctest_ids_is_not_tampered(mini: Path) -> None:
    # The library is a header the test includes, not a test file: its repair passes, and
    # so does a change to a test file none of the selected tests is built from.
    fix = MINI["mini.h"].replace("(int)strlen(s) - 1", "(int)strlen(s)")
    other = "int main(void) { return 0 * 2; }\n"
    obs = _observe(mini, "c", IDS, _patch(mini, {"mini.h": fix, "tests/test_other.c": other}))
    assert obs.verdict == "pass" and obs.flags.reverified and not obs.flags.tampered
    assert {t.test: t.f2p for t in obs.test_results} == {
        "CMakeLists.txt::parse_one": True,
        "CMakeLists.txt::parse_two": True,
    }
    # ... while touching that file under a selection of its test is tampering.
    obs = _observe(mini, "c", ["CMakeLists.txt::other"], _patch(mini, {"tests/test_other.c": other}))
    assert obs.verdict == "tampered"


def test_ctest_sources_read_and_unknown() -> None:
    work, build = "/s/work", "/s/home/.aexec_build"
    gathered = (
        f"@@aexec build {build}\n@@aexec ctest\n"
        + json.dumps(
            {
                "tests": [
                    {"name": "a", "command": [f"{build}/t_a", "x"]},
                    {"name": "s", "command": ["/usr/bin/sh", f"{work}/tests/run.sh"]},
                    {"name": "odd", "command": ["/usr/bin/true"]},
                ]
            }
        )
        + '\n@@aexec target\n{"artifacts": [{"path": "t_a"}], "sources": [{"path": "tests/a.c"}]}\n'
        + f"@@aexec depends\n {work}/tests/a.c /usr/include/stdio.h \\\n {work}/tests/../h/x\\ y.h \\\n"
        + "@@aexec end\n"
    )
    assert selected_sources(gathered, work, ["CMakeLists.txt::a"]) == ("h/x y.h", "tests/a.c")
    assert selected_sources(gathered, work, ["CMakeLists.txt::s"]) == ("tests/run.sh",)
    assert selected_sources(gathered, work, ["CMakeLists.txt::odd"]) is None  # runs nothing known
    assert selected_sources(gathered.split("@@aexec depends")[0], work, ["CMakeLists.txt::a"]) is None  # cut
    assert selected_sources(None, work, ["CMakeLists.txt::a"]) is None
    # Unknown sources: every test file counts, as for the whole suite.
    ids = ["CMakeLists.txt::a"]
    assert touches_suite_oracle("c", ["tests/b.c"], ids, False, None)
    assert not touches_suite_oracle("c", ["tests/b.c"], ids, False, ("tests/a.c",))
    assert touches_suite_oracle("c", ["tests/a.c"], ids, False, ("tests/a.c",))
    assert not touches_suite_oracle("c", ["src/lib.c"], ids, False, ("src/lib.c",))  # not a test file


# ---- JavaScript: ES modules --------------------------------------------------------------

ESM = {
    "package.json": '{"name": "demo", "version": "1.0.0", "type": "module"}\n',
    "index.js": "// the library\nexport function add(a, b) {\n  return a - b;\n}\n",
    "test/add.test.js": (
        "import test from 'node:test';\n"
        "import assert from 'node:assert/strict';\n"
        "import { add } from '../index.js';\n"
        "test('adds', () => {\n"
        "  assert.equal(add(1, 2), 3);\n"
        "});\n"
    ),
}


@pytest.fixture
def esm(tmp_path: Path) -> Path:
    return _tree(tmp_path / "esm", ESM)


@_needs("node")
def test_esm_locations_are_repo_relative(esm: Path) -> None:
    obs = _observe(esm, "javascript", None)
    assert obs.failure is not None
    assert (obs.failure.failure_class, obs.failure.location) == ("assertion", "test/add.test.js:5")
    # A module that does not parse: node heads its report with the module's file:// URL.
    broken = ESM["index.js"].replace("return a - b;", "return a - b;\n  let = ;")
    obs = _observe(esm, "javascript", None, _patch(esm, {"index.js": broken}))
    assert obs.failure is not None
    assert (obs.failure.failure_class, obs.failure.location) == ("syntax", "index.js:4")
    assert _verdicts(obs) == {"test/add.test.js": "errored"}


@_needs("node")
def test_esm_missing_import_is_placed_at_its_importer(esm: Path) -> None:
    # ERR_MODULE_NOT_FOUND: node's frames are all its own, the importer is in the message.
    helper = "import { sub } from './helper.js';\n" + ESM["index.js"]
    obs = _observe(esm, "javascript", None, _patch(esm, {"index.js": helper}))
    assert obs.failure is not None
    assert (obs.failure.failure_class, obs.failure.location) == ("dependency", "index.js")
    assert "Cannot find module 'helper.js' imported from index.js" in obs.failure.message
    package = ESM["test/add.test.js"].replace("import { add }", "import 'no-such-package';\nimport { add }")
    _tree(esm, {"test/add.test.js": package})
    obs = _observe(esm, "javascript", ["test/add.test.js"])
    assert obs.failure is not None
    assert (obs.failure.failure_class, obs.failure.location) == ("dependency", "test/add.test.js")
