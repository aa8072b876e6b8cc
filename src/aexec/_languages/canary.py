"""A graded language suite's canary (issue 44), the language side. Pure: no I/O.

The shell (`aexec._pipeline.canary`) draws the fresh names and writes these texts into
the repo's view; `aexec._stages.canary` reads what the run showed. Each canary goes
through the machinery the repo's own selected tests go through:

* cargo: a ``#[cfg(test)]`` module appended to the root source of the selection's first
  target (``src/lib.rs``, ``tests/api.rs``): the same test binary, libtest harness and
  macros in scope (a crate's ``macro_rules! assert_eq`` shadows them for it too);
* node --test: two top-level tests appended to the first selected test file: the same
  process, the same ``node:test`` and ``node:assert`` module objects;
* CTest: a CMake script of its own whose run (a step after the build) appends two
  ``add_test`` lines to the build's top-level ``CTestTestfile.cmake``: the same ``ctest``
  run reads them after the project's own tests (and its ``TEST_INCLUDE_FILES``).
"""

from __future__ import annotations

import posixpath
import re
from typing import Final

import attrs

from ._common import BASE_ENV, Step

#: The exit status each runner gives a run whose only failure is a test's.
FAILED_EXIT: Final = {"cargo": 101, "nodetest": 1, "ctest": 8}
#: The step that registers a CTest canary (between the build and the run).
CTEST_STEP: Final = "canary"
#: The assertions the must-fail test makes, each of which must fail; it then fails itself
#: (Rust: ``panic!``; node: the first one's error), and passes if one of them did not.
_RUST_ASSERTS: Final = ('assert!(false, "{m}")', 'assert_eq!(0, 1, "{m}")', 'assert_ne!(0, 0, "{m}")')
_NODE_ASSERTS: Final = (
    "{a}(false, '{m}')",
    "{a}.ok(false, '{m}')",
    "{a}.equal(0, 1, '{m}')",
    "{a}.strictEqual(0, 1, '{m}')",
    "{a}.deepStrictEqual([0], [1], '{m}')",
    "{a}.strict.equal(0, 1, '{m}')",
    "{a}.strict.deepEqual([0], [1], '{m}')",
    "{a}.strict.ok(false, '{m}')",
    "{a}.fail('{m}')",
)


@attrs.frozen
class SuiteCanary:
    """What a suite's steps need of the run's canary."""

    #: The repo-relative file it is written in (CTest: its script).
    file: str
    #: Its test ids, the must-fail one first (selectors for the runner's filters).
    tests: tuple[str, ...]


def ids(runner: str, file: str, module: str, fail: str, passes: str) -> tuple[str, str]:
    """The canary's two test ids as the runner's parser names them."""
    if runner == "cargo":
        return f"{file}::{module}::{fail}", f"{file}::{module}::{passes}"
    if runner == "ctest":
        return f"CMakeLists.txt::{fail}", f"CMakeLists.txt::{passes}"
    return f"{file}::{fail}", f"{file}::{passes}"


def source(runner: str, module: str, fail: str, passes: str, message: str) -> str:
    """The text written: appended to the file (cargo, node), or the script (CTest)."""
    if runner == "cargo":
        checks = " || ".join(f"c(|| {{ {a.format(m=message)}; }}).is_ok()" for a in _RUST_ASSERTS)
        return (
            f"\n\n#[cfg(test)]\n#[allow(warnings)]\nmod {module} {{\n    #[allow(unused_extern_crates)]\n    extern crate std;\n\n"
            f"    #[test]\n    fn {fail}() {{\n        use self::std::panic::catch_unwind as c;\n"
            f"        if {checks} {{\n            return;\n        }}\n"
            f'        panic!("{message}");\n    }}\n\n'
            f"    #[test]\n    fn {passes}() {{\n        assert_eq!(0, 0);\n    }}\n}}\n"
        )
    if runner == "nodetest":
        checks = ", ".join("() => " + a.format(a=module, m=message) for a in _NODE_ASSERTS)
        return (
            "\n;{\n"
            f"  const {module} = process.getBuiltinModule('node:assert');\n"
            f"  process.getBuiltinModule('node:test').test('{fail}', () => {{\n"
            f"    let first = null;\n    for (const check of [{checks}]) {{\n"
            "      try { check(); return; } catch (e) { first = first || e; }\n    }\n"
            "    throw first;\n  });\n"
            f"  process.getBuiltinModule('node:test').test('{passes}', () => {{\n"
            f"    {module}.strictEqual(0, 0);\n  }});\n}}\n"
        )
    line = '\\nadd_test({} \\"${{CMAKE_COMMAND}}\\" \\"-DMODE={}\\" -P \\"${{CMAKE_CURRENT_LIST_FILE}}\\")'
    return (
        "if(DEFINED TESTFILE)\n"
        f'  file(APPEND "${{TESTFILE}}" "{line.format(fail, "fail")}{line.format(passes, "pass")}\\n")\n'
        'elseif(MODE STREQUAL "fail")\n'
        f'  message(STATUS "{message}")\n  message(FATAL_ERROR "{message}")\n'
        "endif()\n"
    )


def runs_on(runner: str, version: str) -> bool:
    """Can this toolchain (its version line) run the runner's canary? node's takes its
    modules with ``process.getBuiltinModule`` (node 20.16+ and 22.3+; a file may be an ES
    module, where ``require`` is not defined): an older node's run gets no canary."""
    if runner != "nodetest":
        return True
    m = re.search(r"(\d+)\.(\d+)", version)
    if m is None:
        return False
    major, minor = int(m[1]), int(m[2])
    return major >= 23 or (major, minor) >= (22, 3) or (major == 20 and minor >= 16)


def ctest_step(cmake: str, work: str, build: str, canary: SuiteCanary | None) -> tuple[Step, ...]:
    """The step that registers the CTest canary in the build tree (none without one)."""
    if canary is None:
        return ()
    testfile = posixpath.join(build, "CTestTestfile.cmake")
    argv = (cmake, f"-DTESTFILE={testfile}", "-P", posixpath.join(work, canary.file))
    return (Step(CTEST_STEP, argv, work, BASE_ENV),)
