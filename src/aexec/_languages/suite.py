"""Test suites in languages beyond Python (``run_suite`` with a ``repo``). Pure: no I/O.

What every language's suite shares: which tools it needs beyond its snippet's, how a
selector picks test ids, the per-test result record, and the rules of the tamper guard
(which files are the language's tests and its runner's configuration). The steps and
the parsers are per language: `cargo` (Rust, ``cargo test``), `nodetest` (JavaScript,
``node --test``), `ctest` (C and C++, CMake and CTest).

Test ids are ``<file>::<name>`` like pytest's node ids, so a selector is a file (every
test of it), a file and a name (that test), or a file and a name prefix that ends at a
separator (``::`` for Rust modules, `` > `` for node suites):

* Rust: ``<target source>::<libtest path>`` — ``src/lib.rs::tests::adds``,
  ``tests/api.rs::api_add``, ``src/main.rs::tests::x``;
* JavaScript: ``<test file>::<suite> > <test>`` — ``test/math.test.js::math > adds``;
* C/C++: ``CMakeLists.txt::<ctest name>`` (CTest's names are the project's, declared by
  ``add_test`` in its CMake files) — ``CMakeLists.txt::add_big``.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
from collections.abc import Sequence
from typing import Final, Literal

import attrs

from ._common import Language, LanguageEvidence

SuiteVerdict = Literal["passed", "failed", "errored", "skipped"]

#: Languages whose test suites ``run_suite`` runs.
SUITE_LANGUAGES: Final[tuple[Language, ...]] = ("rust", "javascript", "c", "cpp")
#: Executables a suite needs beyond the snippet's `TOOLS` (looked up the same way).
SUITE_TOOLS: Final[dict[Language, tuple[str, ...]]] = {
    "rust": ("cargo",),
    "c": ("cmake", "ctest"),
    "cpp": ("cmake", "ctest"),
}


@attrs.frozen
class SuiteEvidence:
    """What a suite's steps showed: the per-test verdicts (selected, in reported order)
    and the findings (a failed build, each failed test with its location, the deadline)."""

    evidence: LanguageEvidence
    tests: tuple[tuple[str, SuiteVerdict], ...]
    #: The repo's files the selected tests are built from, when the selection names the
    #: runner's ids (`selects_ids`) and the steps found them; None: not known.
    sources: tuple[str, ...] | None = None


# ---- selection ----------------------------------------------------------------------------


def split(selector: str) -> tuple[str, str | None]:
    """``(file, name)`` of a selector; ``name`` is None for a whole file (or directory)."""
    path, sep, name = selector.partition("::")
    return posixpath.normpath(path) if path else ".", (name if sep else None)


def matches(test_id: str, selector: str) -> bool:
    """Does ``selector`` pick ``test_id``? A whole file or directory picks every test in
    it; a name picks itself and what is nested under it (``::``, `` > ``)."""
    path, name = split(selector)
    tid_path, _, tid_name = test_id.partition("::")
    if name is None:
        return path == "." or tid_path == path or tid_path.startswith(path + "/")
    return tid_path == path and (
        tid_name == name or tid_name.startswith(name + "::") or tid_name.startswith(name + " > ")
    )


def selected(test_id: str, selectors: Sequence[str] | None) -> bool:
    return selectors is None or any(matches(test_id, s) for s in selectors)


#: Languages whose test ids are anchored to the runner's file, not to a test's source:
#: a selector of that file names tests whose sources the file path does not say.
ID_FILES: Final[dict[Language, str]] = {"c": "CMakeLists.txt", "cpp": "CMakeLists.txt"}


def selects_ids(language: Language, selectors: Sequence[str] | None) -> bool:
    """Does the selection name tests by the runner's ids (``CMakeLists.txt::add_big``)?"""
    id_file = ID_FILES.get(language)
    return id_file is not None and any(split(s)[0] == id_file for s in selectors or ())


# ---- the tamper guard: the language's tests and its runner's configuration ---------------

#: Test files by language (fnmatch on the repo-relative path, and on its basename).
TEST_FILES: Final[dict[Language, tuple[str, ...]]] = {
    "rust": ("tests/*", "benches/*"),
    "javascript": (
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
    ),
    "c": ("test/*", "tests/*", "*/test/*", "*/tests/*", "test_*.c", "*_test.c", "*_test.h"),
    "cpp": (
        "test/*",
        "tests/*",
        "*/test/*",
        "*/tests/*",
        "test_*.c*",
        "*_test.c*",
        "*_test.h*",
        "*_unittest.c*",
    ),
}
#: Files whose test part (`oracle_text`) is the runner's configuration.
RUNNER_FILES: Final[dict[Language, tuple[str, ...]]] = {
    "rust": ("Cargo.toml", ".cargo/config", ".cargo/config.toml"),
    "javascript": ("package.json",),
    "c": ("CMakeLists.txt", "CTestTestfile.cmake", "CTestCustom.cmake", "CTestConfig.cmake"),
    "cpp": ("CMakeLists.txt", "CTestTestfile.cmake", "CTestCustom.cmake", "CTestConfig.cmake"),
}


def is_test_file(language: Language, path: str) -> bool:
    """Is ``path`` (repo-relative) one of the language's test files?"""
    path = posixpath.normpath(path)
    base = posixpath.basename(path)
    return any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(base, p) for p in TEST_FILES[language])


_CARGO_TEST_TABLE = re.compile(
    r"^\[\[?\s*(?:test|bench|lib|bin|dev-dependencies|profile\.test|profile\.bench"
    r"|target\.[^\]]*\.dev-dependencies)\s*\]\]?\s*$"
)
_TOML_TABLE = re.compile(r"^\[\[?[^\]]+\]\]?\s*(?:#.*)?$")
_CMAKE_TEST = re.compile(
    r"^\s*(?:add_test|enable_testing|set_tests_properties|include\s*\(\s*CTest|gtest_discover_tests"
    r"|gtest_add_tests|set_property\s*\(\s*TEST)\b",
    re.I,
)
_RUST_TEST_ATTR = re.compile(r"#\[\s*(?:cfg\s*\(\s*test\s*\)|test|should_panic[^\]]*|ignore[^\]]*)\s*\]")


def _cargo_tests(text: str) -> str:
    """The tables of a Cargo.toml that configure tests: ``[[test]]``, ``[[bench]]``,
    ``[lib]``/``[[bin]]`` (their ``test``/``harness`` keys), ``[dev-dependencies]``,
    ``[profile.test]``/``[profile.bench]``."""
    out: list[str] = []
    keep = False
    for line in text.splitlines():
        stripped = line.strip()
        if _TOML_TABLE.match(stripped):
            keep = bool(_CARGO_TEST_TABLE.match(stripped.split("#", 1)[0].strip()))
        if keep and stripped and not stripped.startswith("#"):
            out.append(stripped)
    return "\n".join(out)


def _braced(text: str, start: int) -> str:
    """From ``start``, the item up to its matching ``}`` (or ``;`` before any ``{``)."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == ";" and depth == 0:
            return text[start : i + 1]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return text[start:]


def _rust_tests(text: str) -> str:
    """The test items of a Rust source: each ``#[cfg(test)]`` / ``#[test]`` item whole
    (by brace matching, which a brace inside a string literal can shift the same way on
    both sides of a patch)."""
    out: list[str] = []
    end = 0
    for m in _RUST_TEST_ATTR.finditer(text):
        if m.start() < end:
            continue  # inside an item already taken
        item = _braced(text, m.start())
        end = m.start() + len(item)
        out.append(item)
    return "\n".join(out)


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


def oracle_text(language: Language, path: str, text: str | None) -> str | None:
    """The part of ``path`` that configures the suite, from its ``text`` (None: absent);
    None when ``path`` holds no such part. A patch that changes it is tampering."""
    path = posixpath.normpath(path)
    base = posixpath.basename(path)
    if language == "rust":
        if path in (".cargo/config", ".cargo/config.toml"):
            return text or ""
        if base == "Cargo.toml":
            return _cargo_tests(text or "")
        if path.endswith(".rs") and not is_test_file(language, path):
            return _rust_tests(text or "")
        return None
    if language == "javascript":
        return (
            _package_tests(text)
            if base == "package.json" and text is not None
            else ("" if base == "package.json" else None)
        )
    if base == "CMakeLists.txt" or base.endswith(".cmake"):
        if base in ("CTestTestfile.cmake", "CTestCustom.cmake", "CTestConfig.cmake"):
            return text or ""
        return "\n".join(ln.strip() for ln in (text or "").splitlines() if _CMAKE_TEST.match(ln))
    return None
