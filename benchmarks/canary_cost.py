#!/usr/bin/env python3
"""What the canary costs a graded run (issue 44): wall time per observation, and the
run's own duration, for a small pytest project and Django's ``utils_tests.test_text``.

    python benchmarks/canary_cost.py [--rounds N] [--django DIR --django-python PY] [--suites]

Each round observes one graded ``run_suite`` (a gold patch: its run, and the confirming
re-run of its pass; the before-run is shared) in a call of its own, with no cache;
``--suites`` adds a 20-test crate (cargo), node project (``node --test``) and CMake
project (CTest) with their gold patches.
Run it with this tree's aexec and, for the "before", with another's on ``PYTHONPATH``
(``PYTHONPATH=/work/main/src python benchmarks/canary_cost.py``): it prints which one ran.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

import aexec
from aexec import Candidate, observe_many

CALC = "def add(a, b):\n    return a - b\n"
TESTS = "from calc import add\n\n\n" + "".join(
    f"def test_{i}():\n    assert add({i}, 1) == {i + 1}\n\n\n" for i in range(20)
)


def diff(path: str, old: str, new: str) -> str:
    import difflib

    head = f"diff --git a/{path} b/{path}\n"
    return head + "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    )


def pytest_case(root: Path) -> Candidate:
    (root / "calc").mkdir(parents=True)
    (root / "calc" / "__init__.py").write_text(CALC)
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(TESTS)
    return Candidate(
        "run_suite",
        "patch",
        repo=str(root),
        patch=diff("calc/__init__.py", CALC, CALC.replace("a - b", "a + b")),
        tests=["tests/test_calc.py"],
        fail_to_pass=["tests/test_calc.py::test_1"],
    )


#: The language suites (``--suites``): a crate, a node project, a CMake project, each with
#: a failing test its gold patch repairs (as tests/test_languages_suite.py's).
SUITES = {
    "rust": (
        {
            "Cargo.toml": '[package]\nname = "demo"\nversion = "0.1.0"\nedition = "2021"\n',
            "src/lib.rs": "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n\n#[cfg(test)]\nmod tests {\n"
            + "".join(
                f"    #[test]\n    fn t{i}() {{\n        assert_eq!(super::add({i}, 1), {i + 1});\n    }}\n"
                for i in range(20)
            )
            + "}\n",
        },
        "src/lib.rs",
        ["src/lib.rs::tests"],
        "src/lib.rs::tests::t1",
    ),
    "javascript": (
        {
            "lib/math.js": "exports.add = (a, b) => a - b;\n",
            "test/math.test.js": "const test = require('node:test');\nconst assert = require('node:assert');\n"
            + "const { add } = require('../lib/math.js');\n"
            + "".join(f"test('t{i}', () => assert.strictEqual(add({i}, 1), {i + 1}));\n" for i in range(20)),
        },
        "lib/math.js",
        ["test/math.test.js"],
        "test/math.test.js::t1",
    ),
    "c": (
        {
            "CMakeLists.txt": "cmake_minimum_required(VERSION 3.16)\nproject(demo C)\nenable_testing()\n"
            + "add_executable(t t.c add.c)\n"
            + "".join(f"add_test(NAME t{i} COMMAND t {i})\n" for i in range(20)),
            "add.c": "int add(int a, int b) { return a - b; }\n",
            "t.c": "#include <stdlib.h>\nint add(int, int);\n"
            + "int main(int c, char **v) { int i = atoi(v[1]); return add(i, 1) != i + 1; }\n",
        },
        "add.c",
        ["CMakeLists.txt"],
        "CMakeLists.txt::t1",
    ),
}


def suite_case(root: Path, language: str) -> Candidate:
    files, source, tests, f2p = SUITES[language]
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    old = files[source]
    return Candidate(
        "run_suite",
        "patch",
        repo=str(root),
        language=language,  # type: ignore[arg-type]
        patch=diff(source, old, old.replace("a - b", "a + b")),
        tests=tests,
        fail_to_pass=[f2p],
    )


def django_case(repo: str, python: str) -> Candidate:
    text = Path(repo, "django/utils/text.py").read_text()
    same = text.replace(
        '"""Capitalize the first letter of a string."""', '"""Capitalize the first letter."""'
    )
    return Candidate(
        "run_suite",
        "patch",
        repo=repo,
        python=python,
        runner="django",
        patch=diff("django/utils/text.py", text, same),
        tests=["utils_tests.test_text"],
        pass_to_pass=["test_get_text_list (utils_tests.test_text.TestUtilsText)"],
    )


async def measure(candidate: Candidate, rounds: int) -> tuple[list[float], list[float], list[float], str]:
    walls, runs, cpus, verdict = [], [], [], ""
    for _ in range(rounds):
        start = time.perf_counter()
        (obs,) = await observe_many([candidate])
        walls.append(time.perf_counter() - start)
        runs.append(obs.duration)
        # the run's CPU seconds (its cgroup's), from the share of its cap it used
        cpus.append((obs.resource_usage.peak_cpu or 0.0) * obs.duration * obs.environment.cpu_cap_cores)
        verdict = f"{obs.verdict} resolved={obs.resolved} canary={getattr(obs, 'canary', None) is not None}"
    return walls, runs, cpus, verdict


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--django", help="a Django checkout (its tests/ with runtests.py)")
    ap.add_argument("--django-python", help="an interpreter with Django's dependencies")
    ap.add_argument("--suites", action="store_true", help="also cargo, node --test and CTest (20 tests each)")
    ap.add_argument("--no-pytest", action="store_true", help="skip the pytest project")
    args = ap.parse_args()
    print(f"aexec from {Path(aexec.__file__).parent}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        cases = {} if args.no_pytest else {"pytest (20 tests)": pytest_case(Path(tmp) / "calc")}
        if args.suites:
            for lang in SUITES:
                cases[f"{lang} suite (20 tests)"] = suite_case(Path(tmp) / lang, lang)
        if args.django and args.django_python:
            cases["django utils_tests.test_text"] = django_case(args.django, args.django_python)
        for name, cand in cases.items():
            walls, runs, cpus, verdict = anyio.run(measure, cand, args.rounds)
            print(
                f"{name}: {verdict}; wall per graded observation median {statistics.median(walls):.2f} s "
                f"(min {min(walls):.2f}); the run's own duration median {statistics.median(runs):.3f} s "
                f"(min {min(runs):.3f}), its CPU median {statistics.median(cpus):.3f} s "
                f"(min {min(cpus):.3f}); {args.rounds} rounds"
            )


if __name__ == "__main__":
    main()
