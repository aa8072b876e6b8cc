"""What a suite's selection names, in languages beyond Python (issue 26, defects 6-8).

Real toolchains: a crate whose selection names two test targets, a binary and an example
(cargo must run each, not take a target's name for a test filter); a CMake project whose
test helper is gutted under a selection of CTest ids (the test's sources are its oracle
whatever form the selection takes); ES modules under ``node --test`` (locations relative
to the repo, a missing import placed at its importer).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aexec._languages.cargo import targets

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
