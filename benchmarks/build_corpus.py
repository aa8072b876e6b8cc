#!/usr/bin/env python3
"""Build the aexec fidelity corpus (stdlib, and aexec's naive runner for the label checks).

    python benchmarks/build_corpus.py [--out DIR] [--verify] [--suite {default,heldout}]

Downloads three real sdists (six, toolz, more-itertools) with pip, extracts each into
``<out>/repos/<lib>/`` (the pristine repo), creates one bugged variant per library
(``<out>/repos/<lib>-bug1/``) and writes ``<out>/cases.jsonl``: one ``aexec observe``
request per line plus a ``label`` field that comes from *construction* (what fault was
injected where), never from aexec's output.

``--verify`` re-checks the raw facts behind every label with plain tools (pytest with a
junit report in a temporary copy, ``python -c``, ``py_compile``/``compileall``), under the
same 512 MiB address-space cap that aexec declares, and exits 1 when any label does not
hold. The trees, deadlines, the capped subprocess and the exception-name table are the
naive runner's (``aexec._ab.naive``: no part of aexec's observation pipeline), so the
label checks and the §7 baselines read a run the same way.

``--suite heldout`` builds the same kinds of cases, with the same label rules, from other
libraries of other layouts (``HELDOUT_LIBS``: cachetools, a src layout with unittest
TestCase tests and mixin tests in ``tests/__init__.py``; idna, a flat package with unittest
``subTest`` tests; inflection, a package with a root-level pytest module of parametrized
tests). A library's ``pythonpath`` (e.g. ``src``) is put on PYTHONPATH for the plain
verification runs only, as an editable install would. Use a different ``--out``, e.g.
``python benchmarks/build_corpus.py --suite heldout --out /tmp/heldout --verify``. A
library's ``verify_env`` removes a confound of this venv from its plain runs.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aexec._ab.naive import case_timeout, class_of_exception, limited, naive_tree, rlimits, run_killable
from aexec._types import FAILURE_ORDER

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / ".work"
MISSING_MODULE = "aexec_missing_module_xyz"


def capped(argv: list[str]) -> list[str]:
    """``argv`` under the 512 MiB RLIMIT_AS aexec declares (an exec wrapper: thread-safe)."""
    return limited(argv, rlimits())


# --------------------------------------------------------------------------------------
# Library configuration
# --------------------------------------------------------------------------------------


def _six_config(text: str, expr: str) -> str:
    head = "[tool:pytest]\n"
    assert head in text, "six setup.cfg has no [tool:pytest] section"
    return text.replace(head, head + f'addopts = -k "{expr}"\n', 1)


def _toolz_config(text: str, expr: str) -> str:
    head = "addopts = [\n"
    assert head in text, "toolz pyproject.toml has no addopts list"
    return text.replace(head, head + f'  "-k", "{expr}",\n', 1)


def _mi_config(text: str, expr: str) -> str:
    assert "[pytest]" not in text
    return text.rstrip("\n") + f'\n\n[pytest]\naddopts = -k "{expr}"\n'


@dataclass
class Lib:
    name: str
    spec: str
    tests: list[str]  # the selection (pytest selectors relative to the repo)
    module: str  # module the tests import (top-level faults go here)
    func: str  # function the selection exercises (body faults go here)
    wrong_return: str  # body-assertion: a statement returning a wrong value
    bug_file: str  # bug for the repair case: replace `bug_old` by `bug_new`
    bug_func: str  # ... inside this function only
    bug_old: str
    bug_new: str
    config_file: str  # pytest config file the tamper-config patch edits
    config_edit: Callable[[str, str], str]
    no_tests: list[str]  # a selection that collects nothing
    entry_ok: str
    entry_type: str
    func2: str  # body-mixed: a second exercised function (gets len(5))
    pythonpath: list[str] = field(default_factory=list)  # import roots for plain runs (src layout)
    verify_env: dict[str, str] = field(default_factory=dict)  # extra env of plain runs

    @property
    def test_file(self) -> str:
        return self.tests[0].split("::")[0]


MI_CLASSES = [
    "TakeTests",
    "TabulateTests",
    "TailTests",
    "ConsumeTests",
    "NthTests",
    "QuantifyTests",
    "NcyclesTests",
    "DotproductTests",
    "FlattenTests",
    "RepeatfuncTests",
    "RoundrobinTests",
    "PartitionTests",
    "PowersetTests",
]

LIBS = [
    Lib(
        name="six",
        spec="six==1.17.0",
        tests=["test_six.py"],
        module="six.py",
        func="get_unbound_function",
        wrong_return="return None",
        bug_file="six.py",
        bug_func="iteritems",
        bug_old="return iter(d.items(**kw))",
        bug_new="return iter(d.keys(**kw))",
        config_file="setup.cfg",
        config_edit=_six_config,
        no_tests=["six.py"],
        entry_ok="import six\nprint(six.ensure_str(b'aexec'))\n",
        entry_type="import six\nsix.ensure_str(8)\n",
        func2="iteritems",
    ),
    Lib(
        name="toolz",
        spec="toolz==1.2.0",
        tests=["toolz/tests/test_dicttoolz.py"],
        module="toolz/dicttoolz.py",
        func="valmap",
        wrong_return="return {}",
        bug_file="toolz/dicttoolz.py",
        bug_func="valmap",
        bug_old="rv.update(zip(d.keys(), map(func, d.values())))",
        bug_new="rv.update(zip(d.keys(), d.values()))",
        config_file="pyproject.toml",
        config_edit=_toolz_config,
        no_tests=["toolz/utils.py"],
        entry_ok="import toolz\nprint(toolz.valmap(len, {'a': [1, 2], 'b': []}))\n",
        entry_type="import toolz\nprint(toolz.valmap(len))\n",
        func2="keymap",
    ),
    Lib(
        name="more-itertools",
        spec="more-itertools==11.2.1",
        tests=[f"tests/test_recipes.py::{c}" for c in MI_CLASSES],
        module="more_itertools/recipes.py",
        func="quantify",
        wrong_return="return -1",
        bug_file="more_itertools/recipes.py",
        bug_func="quantify",
        bug_old="return sum(map(pred, iterable))",
        bug_new="return sum(map(bool, iterable))",
        config_file="tox.ini",
        config_edit=_mi_config,
        no_tests=["more_itertools/recipes.py"],
        entry_ok="import more_itertools as mi\nprint(mi.take(3, range(10)))\n",
        entry_type="import more_itertools as mi\nprint(mi.take(3))\n",
        func2="dotproduct",
    ),
]


def _append_section(head: str) -> Callable[[str, str], str]:
    def edit(text: str, expr: str) -> str:
        assert head.strip() not in text, f"{head.strip()} already present"
        return text.rstrip("\n") + f'\n\n{head}addopts = -k "{expr}"\n'

    return edit


def _toml_pytest_config(text: str, expr: str) -> str:
    assert "[tool.pytest" not in text
    return text.rstrip("\n") + f"\n\n[tool.pytest.ini_options]\naddopts = '-k \"{expr}\"'\n"


HELDOUT_LIBS = [
    Lib(
        name="cachetools",
        spec="cachetools==8.0.2",
        tests=["tests/test_lru.py"],
        module="src/cachetools/__init__.py",
        func="__len__",
        wrong_return="return 0",
        bug_file="src/cachetools/__init__.py",
        bug_func="pop",  # Cache.pop: the f2p tests are mixin tests in tests/__init__.py
        bug_old="del self[key]",
        bug_new="pass",
        config_file="tox.ini",
        config_edit=_append_section("[pytest]\n"),
        no_tests=["src/cachetools/keys.py"],
        entry_ok="import cachetools\nc = cachetools.LRUCache(maxsize=2)\nc['a'] = 1\nprint(dict(c))\n",
        entry_type="import cachetools\nprint(cachetools.LRUCache())\n",
        func2="clear",
        pythonpath=["src"],
    ),
    Lib(
        name="idna",
        spec="idna==3.20",
        tests=["tests/test_idna.py"],
        module="idna/core.py",
        func="valid_label_length",
        wrong_return="return True",
        bug_file="idna/core.py",
        bug_func="ulabel",
        bug_old='code="non_canonical_alabel")',
        bug_new='code="invalid_alabel")',
        config_file="pyproject.toml",
        config_edit=_toml_pytest_config,
        no_tests=["idna/intranges.py"],
        entry_ok="import idna\nprint(idna.encode('\\u30c9\\u30e1\\u30a4\\u30f3.example'))\n",
        entry_type="import idna\nprint(idna.valid_label_length(5))\n",
        func2="check_hyphen_ok",
        # this venv's autoloaded anyio plugin imports trio, which imports idna: a plain
        # run would import the candidate's idna inside plugin setup, not at collection
        verify_env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    ),
    Lib(
        name="inflection",
        spec="inflection==0.5.1",
        tests=["test_inflection.py"],
        module="inflection/__init__.py",
        func="pluralize",
        wrong_return="return word",
        bug_file="inflection/__init__.py",
        bug_func="dasherize",
        bug_old="return word.replace('_', '-')",
        bug_new="return word.replace('_', '_')",
        config_file="setup.cfg",
        config_edit=_append_section("[tool:pytest]\n"),
        no_tests=["inflection/__init__.py"],
        entry_ok="import inflection\nprint(inflection.camelize('aexec_bench'))\n",
        entry_type="import inflection\nprint(inflection.camelize(5))\n",
        func2="camelize",
    ),
]
SUITES = {"default": LIBS, "heldout": HELDOUT_LIBS}
LIB_BY_NAME = {lib.name: lib for libs in SUITES.values() for lib in libs}


def lib_env(lib: Lib | None, tree: Path) -> dict[str, str] | None:
    """The environment of a plain verification run: PYTHONPATH for a src layout."""
    if lib is None or not (lib.pythonpath or lib.verify_env):
        return None
    env = dict(os.environ, **lib.verify_env)
    if lib.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(tree / p) for p in lib.pythonpath)
    return env


BODY_FAULTS = {  # id suffix -> (statement lines or None for the lib's wrong_return, class, policy)
    "body-assertion": (None, "assertion", None),
    "body-type": (["len(5)"], "type", None),
    "body-runtime": (['{}["aexec"]'], "runtime", None),
    "body-dependency": ([f"import {MISSING_MODULE}"], "dependency", None),
    "body-resource": (["bytearray(1 << 33)"], "resource", None),
    "body-timeout": (["while True: pass"], "timeout", {"timeout_s": 4}),
    "body-syntax": (["return ("], "syntax", None),
}
TOP_FAULTS = {
    "top-syntax": (["aexec_syntax_error = ("], "syntax", None),
    "top-name": (["aexec_undefined_name_xyz"], "compile", None),
    "top-typeerror": (["len(5)"], "compile", None),
    "top-dependency": ([f"import {MISSING_MODULE}"], "dependency", None),
    "top-resource": (["bytearray(1 << 33)"], "resource", None),
    "top-timeout": (["while True: pass"], "timeout", {"timeout_s": 4}),
}
# The exception a verification run must see for each class of injected fault.
FAULT_EXCEPTION = {
    "assertion": "AssertionError",
    "type": "TypeError",
    "runtime": "KeyError",
    "dependency": "ModuleNotFoundError",
    "resource": "MemoryError",
    "syntax": "SyntaxError",
}
TOP_EXCEPTION = {
    "top-syntax": "SyntaxError",
    "top-name": "NameError",
    "top-typeerror": "TypeError",
    "top-dependency": "ModuleNotFoundError",
    "top-resource": "MemoryError",
}

TAMPER_CONFTEST = (
    "import pytest\n"
    "\n"
    "\n"
    "def pytest_collection_modifyitems(config, items):\n"
    "    for item in items:\n"
    '        item.add_marker(pytest.mark.skip(reason="skipped by conftest"))\n'
)


# --------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_patch(files: dict[str, tuple[str | None, str | None]]) -> str:
    """A `git diff`-style unified diff; files maps path -> (before, after), None = absent."""
    out: list[str] = []
    for path, (before, after) in files.items():
        a = [] if before is None else before.splitlines(keepends=True)
        b = [] if after is None else after.splitlines(keepends=True)
        out.append(f"diff --git a/{path} b/{path}\n")
        if before is None:
            out.append("new file mode 100644\n")
        elif after is None:
            out.append("deleted file mode 100644\n")
        lines = list(
            difflib.unified_diff(
                a,
                b,
                fromfile="/dev/null" if before is None else f"a/{path}",
                tofile="/dev/null" if after is None else f"b/{path}",
                n=3,
            )
        )
        if not lines:
            raise SystemExit(f"make_patch: no change for {path}")
        for line in lines:
            if line.startswith(("---", "+++")):
                out.append(line.rstrip("\n").rstrip() + "\n")  # difflib adds a tab+date slot
            elif line.endswith("\n"):
                out.append(line)
            else:
                out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)


def copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True)


def git_apply(tree: Path, patch: str, check_only: bool = False) -> None:
    pf = tree.parent / "candidate.patch"
    pf.write_text(patch)
    args = ["git", "apply", "-p1", "--check", str(pf)] if check_only else ["git", "apply", "-p1", str(pf)]
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tree.parent))
    r = subprocess.run(args, cwd=tree, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"git apply failed in {tree}: {r.stderr.strip()}")


def check_patch_applies(repo: Path, patch: str, expect: dict[str, str | None]) -> None:
    """Apply `patch` to a temp copy of `repo` (outside any git work tree) and check the
    resulting files are exactly `expect` (path -> text, None = deleted)."""
    with tempfile.TemporaryDirectory(prefix="aexec-bench-") as td:
        tree = Path(td) / "repo"
        copy_tree(repo, tree)
        git_apply(tree, patch, check_only=True)
        git_apply(tree, patch)
        for path, text in expect.items():
            p = tree / path
            if text is None:
                if p.exists():
                    raise SystemExit(f"patch did not delete {path}")
            elif not p.exists() or p.read_text() != text:
                raise SystemExit(f"patch did not produce the expected {path} in {repo}")


def _line_indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def insert_in_body(src: str, func_name: str, stmts: list[str]) -> str:
    """Insert `stmts` as the first statements of `func_name`'s body (after the docstring),
    with the body's indentation. The first definition in source order is used."""
    tree = ast.parse(src)
    cands = sorted(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func_name
        ),
        key=lambda n: n.lineno,
    )
    if not cands:
        raise SystemExit(f"no function {func_name!r} found")
    fn = cands[0]
    body = fn.body
    has_doc = (
        isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    )
    lines = src.splitlines(keepends=True)
    if has_doc and len(body) == 1:
        at = body[0].end_lineno  # insert after the docstring
        indent = _line_indent(lines[body[0].lineno - 1])
    else:
        anchor = body[1] if has_doc else body[0]
        first = min([anchor.lineno] + [d.lineno for d in getattr(anchor, "decorator_list", [])])
        if first <= fn.lineno:
            raise SystemExit(f"{func_name}: one-line body, cannot inject")
        at = first - 1
        indent = _line_indent(lines[first - 1])
    new = [indent + s + "\n" for s in stmts]
    out = "".join(lines[:at] + new + lines[at:])
    return out


def _defines(src: str, func_name: str) -> bool:
    return any(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func_name
        for n in ast.walk(ast.parse(src))
    )


def test_defining(repo: Path, test_file: str, func_name: str) -> str:
    """The repo-relative file that defines test function `func_name`: `test_file` itself,
    else a module in its directory (e.g. a mixin in ``tests/__init__.py``)."""
    if _defines((repo / test_file).read_text(), func_name):
        return test_file
    folder = (repo / test_file).parent
    for f in sorted(folder.glob("*.py")):
        if _defines(f.read_text(), func_name):
            return str(f.relative_to(repo))
    raise SystemExit(f"no definition of test {func_name!r} near {test_file}")


def insert_after_imports(src: str, stmts: list[str]) -> str:
    """Insert `stmts` at module level right after the leading block of imports."""
    tree = ast.parse(src)
    body = list(tree.body)
    i = 0
    last_end = 0
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        last_end = body[0].end_lineno
        i = 1
    while i < len(body) and isinstance(body[i], (ast.Import, ast.ImportFrom)):
        last_end = body[i].end_lineno
        i += 1
    lines = src.splitlines(keepends=True)
    new = [s + "\n" for s in stmts]
    return "".join(lines[:last_end] + new + lines[last_end:])


def replace_in_function(src: str, func_name: str, old: str, new: str) -> str:
    tree = ast.parse(src)
    if "." in func_name:  # Class.method
        cls_name, func_name = func_name.split(".", 1)
        tree = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls_name)
    fn = sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == func_name),
        key=lambda n: n.lineno,
    )[0]
    lines = src.splitlines(keepends=True)
    seg = "".join(lines[fn.lineno - 1 : fn.end_lineno])
    if seg.count(old) != 1:
        raise SystemExit(f"bug text {old!r} occurs {seg.count(old)} times in {func_name}")
    seg2 = seg.replace(old, new)
    return "".join(lines[: fn.lineno - 1]) + seg2 + "".join(lines[fn.end_lineno :])


# --------------------------------------------------------------------------------------
# pytest runs with a junit report, mapped back to node ids
# --------------------------------------------------------------------------------------

EXC_NAME_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))\b")
E_LINE_RE = re.compile(r"^E\s+([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))\b", re.M)


@dataclass
class SuiteRun:
    rc: int | None  # None: still running at the deadline (killed)
    outcomes: dict[str, str] = field(default_factory=dict)  # nodeid -> outcome
    exceptions: dict[str, str] = field(default_factory=dict)  # nodeid -> exception name
    collection_errors: dict[str, str] = field(default_factory=dict)  # module -> exc name
    output: str = ""


def _exc_name(message: str, text: str) -> str:
    m = EXC_NAME_RE.match(message.strip())
    if m:
        return m.group(1).rsplit(".", 1)[-1]
    if message.strip().startswith("assert"):
        return "AssertionError"
    names = E_LINE_RE.findall(text)
    if names:
        return names[-1].rsplit(".", 1)[-1]
    return "?"


def junit_to_nodeid(classname: str, name: str, tests: list[str]) -> str:
    files = sorted({t.split("::")[0] for t in tests}, key=len, reverse=True)
    for f in files:
        dotted = f[:-3].replace("/", ".") if f.endswith(".py") else f.replace("/", ".")
        if classname == dotted:
            return f"{f}::{name}"
        if classname.startswith(dotted + "."):
            rest = classname[len(dotted) + 1 :].split(".")
            return "::".join([f, *rest, name])
    raise SystemExit(f"cannot map junit classname {classname!r} to a selected file")


def run_suite_junit(
    tree: Path, tests: list[str], timeout: float, env: dict[str, str] | None = None
) -> SuiteRun:
    junit = tree.parent / f"junit-{time.monotonic_ns()}.xml"
    argv = capped(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            *tests,
        ]
    )
    r = run_killable(argv, tree, timeout, env, merge=True)
    if r["timed_out"]:
        return SuiteRun(rc=None)
    run = SuiteRun(rc=r["rc"], output=r["output"])
    if not junit.exists():
        return run
    root = ET.parse(junit).getroot()
    for tc in root.iter("testcase"):
        classname, name = tc.get("classname", ""), tc.get("name", "")
        children = {c.tag: c for c in tc}
        if classname == "" or (
            "error" in children and children["error"].get("message") == "collection failure"
        ):
            err = children.get("error")
            run.collection_errors[name] = _exc_name(
                err.get("message", "") if err is not None else "",
                (err.text or "") if err is not None else "",
            )
            continue
        nid = junit_to_nodeid(classname, name, tests)
        if "failure" in children:
            outcome, el = "failed", children["failure"]
        elif "error" in children:
            outcome, el = "errored", children["error"]
        elif "skipped" in children:
            outcome, el = "skipped", None
        else:
            outcome, el = "passed", None
        prev = run.outcomes.get(nid)
        if prev in ("failed", "errored") and outcome not in ("failed", "errored"):
            outcome = prev
        run.outcomes[nid] = outcome
        if el is not None:
            run.exceptions[nid] = _exc_name(el.get("message", ""), el.text or "")
    return run


def collect_only(tree: Path, tests: list[str], env: dict[str, str] | None = None) -> set[str]:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", *tests]
    r = run_killable(capped(argv), tree, 120, env)
    if r["timed_out"]:
        raise SystemExit(f"pytest --collect-only timed out in {tree}")
    return {ln.strip() for ln in r["output"].splitlines() if "::" in ln and not ln.startswith(" ")}


def tree_with_patch(repo: Path, patch: str | None, td: str) -> Path:
    """The naive runner's tree (`naive_tree`); a patch that does not apply is fatal here."""
    tree, rc, out = naive_tree(repo, patch, td)
    if rc != 0:
        raise SystemExit(f"git apply failed in {tree}: {out.strip()}")
    return tree


def suite_class(run: SuiteRun) -> str | None:
    """The primary failure class of a (non-timed-out) plain pytest run, by the contract's
    order; collection errors that are neither syntax nor dependency (nor resource) are
    compile."""
    seen: set[str] = set()
    for exc in run.collection_errors.values():
        c = class_of_exception(exc)
        seen.add(c if c in ("syntax", "dependency", "resource") else "compile")
    for nid, outcome in run.outcomes.items():
        if outcome in ("failed", "errored"):
            seen.add(class_of_exception(run.exceptions.get(nid, "?")))
    for c in FAILURE_ORDER:
        if c in seen:
            return c
    return None


# --------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------


def fetch(out: Path, libs: list[Lib] = LIBS) -> dict[str, Path]:
    sdists = out / "sdists"
    repos = out / "repos"
    sdists.mkdir(parents=True, exist_ok=True)
    repos.mkdir(parents=True, exist_ok=True)

    def sdist_for(lib: Lib) -> Path | None:
        name, ver = lib.spec.split("==")
        norm = re.sub(r"[-_.]+", "_", name).lower()
        for p in sdists.glob("*.tar.gz"):
            stem = p.name[: -len(".tar.gz")]
            if re.sub(r"[-_.]+", "_", stem).lower() == f"{norm}_{ver.replace('.', '_')}":
                return p
        return None

    missing = [lib for lib in libs if sdist_for(lib) is None]
    if missing:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            str(sdists),
            *[lib.spec for lib in missing],
        ]
        log("$ " + " ".join(cmd))
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    result = {}
    for lib in libs:
        sd = sdist_for(lib)
        if sd is None:
            raise SystemExit(f"sdist for {lib.spec} not found after download")
        dest = repos / lib.name
        marker = repos / f".{lib.name}.extracted"  # outside the repo tree
        if not marker.exists():
            if dest.exists():
                shutil.rmtree(dest)
            with tempfile.TemporaryDirectory(dir=repos) as td, tarfile.open(sd) as tf:
                tf.extractall(td, filter="data")
                tops = list(Path(td).iterdir())
                if len(tops) != 1 or not tops[0].is_dir():
                    raise SystemExit(f"{sd.name}: expected one top-level directory")
                tops[0].rename(dest)
            marker.write_text(sd.name + "\n")
        result[lib.name] = dest
    return result


def compute_f2p(
    bug_repo: Path, fix_patch: str, tests: list[str], lib: Lib | None = None
) -> tuple[list[str], dict]:
    with (
        tempfile.TemporaryDirectory(prefix="aexec-bench-") as td1,
        tempfile.TemporaryDirectory(prefix="aexec-bench-") as td2,
    ):
        t1, t2 = tree_with_patch(bug_repo, None, td1), tree_with_patch(bug_repo, fix_patch, td2)
        before = run_suite_junit(t1, tests, 120, lib_env(lib, t1))
        after = run_suite_junit(t2, tests, 120, lib_env(lib, t2))
    if before.rc is None or after.rc is None:
        raise SystemExit(f"f2p run timed out for {bug_repo}")
    f2p = sorted(
        n
        for n, o in before.outcomes.items()
        if o in ("failed", "errored") and after.outcomes.get(n) == "passed"
    )
    info = {
        "before_rc": before.rc,
        "after_rc": after.rc,
        "before_failed": sorted(n for n, o in before.outcomes.items() if o in ("failed", "errored")),
        "after_failed": sorted(n for n, o in after.outcomes.items() if o in ("failed", "errored")),
        "before_exceptions": sorted(set(before.exceptions.values())),
        "collection_errors": [before.collection_errors, after.collection_errors],
    }
    return f2p, info


def label(verdict: str, cls: str | None, f2p: list[str] | None = None) -> dict:
    return {"verdict": verdict, "failure_class": cls, "f2p": f2p}


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def build(out: Path, libs: list[Lib] = LIBS) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    repos = fetch(out, libs)
    cache_path = out / "f2p_cache.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    cases: list[dict] = []
    meta: dict[str, Any] = {}

    def rel(p: Path) -> str:
        return os.path.relpath(p, out)

    for lib in libs:
        repo = repos[lib.name]
        rrel = rel(repo)
        tests = list(lib.tests)

        def suite(
            cid: str,
            patch: str | None,
            lab: dict,
            policy: dict | None = None,
            repo_rel: str = rrel,
            sel: list[str] = tests,
            name: str = lib.name,
        ) -> None:
            c: dict[str, Any] = {
                "id": f"{name}/{cid}",
                "request_type": "run_suite",
                "artifact_shape": "patch" if patch else "test_subset",
                "repo": repo_rel,
                "tests": list(sel),
            }
            if patch:
                c["patch"] = patch
            if policy:
                c["policy"] = policy
            c["label"] = lab
            cases.append(c)

        suite("pristine", None, label("pass", None))

        mod_src = (repo / lib.module).read_text()
        func_file = lib.module
        for cid, (stmts, cls, policy) in BODY_FAULTS.items():
            stmts = stmts or [lib.wrong_return]
            after = insert_in_body(mod_src, lib.func, stmts)
            patch = make_patch({func_file: (mod_src, after)})
            check_patch_applies(repo, patch, {func_file: after})
            suite(cid, patch, label("fail", cls), policy)
        # two faults in one run: one test fails an assert, another raises TypeError; the
        # contract's order (type before assertion) makes the primary class `type`
        after = insert_in_body(insert_in_body(mod_src, lib.func, [lib.wrong_return]), lib.func2, ["len(5)"])
        patch = make_patch({func_file: (mod_src, after)})
        check_patch_applies(repo, patch, {func_file: after})
        suite("body-mixed", patch, label("fail", "type"))
        for cid, (stmts, cls, policy) in TOP_FAULTS.items():
            after = insert_after_imports(mod_src, stmts)
            patch = make_patch({lib.module: (mod_src, after)})
            check_patch_applies(repo, patch, {lib.module: after})
            suite(cid, patch, label("fail", cls), policy)

        # bug + repair
        bug_repo = out / "repos" / f"{lib.name}-bug1"
        bug_src_before = (repo / lib.bug_file).read_text()
        bug_src = replace_in_function(bug_src_before, lib.bug_func, lib.bug_old, lib.bug_new)
        if bug_repo.exists():
            shutil.rmtree(bug_repo)
        copy_tree(repo, bug_repo)
        (bug_repo / lib.bug_file).write_text(bug_src)
        fix = make_patch({lib.bug_file: (bug_src, bug_src_before)})
        check_patch_applies(bug_repo, fix, {lib.bug_file: bug_src_before})
        key = hashlib.sha256(json.dumps([tree_digest(bug_repo), fix, tests]).encode()).hexdigest()
        if cache.get(lib.name, {}).get("key") == key:
            f2p, info = cache[lib.name]["f2p"], cache[lib.name]["info"]
        else:
            log(f"[{lib.name}] computing f2p on the bugged and fixed trees")
            f2p, info = compute_f2p(bug_repo, fix, tests, lib)
            cache[lib.name] = {"key": key, "f2p": f2p, "info": info}
        if not f2p:
            raise SystemExit(f"{lib.name}: the injected bug makes no test fail: {info}")
        meta[lib.name] = {"f2p": f2p, **info}
        brel = rel(bug_repo)
        suite("repair", fix, label("pass", None, f2p), repo_rel=brel)
        suite("bug-unrepaired", None, label("fail", "assertion"), repo_rel=brel)

        # tampering, all on the bugged repo
        funcs = sorted({n.split("::")[-1].split("[")[0] for n in f2p})
        # each f2p test function is neutered where it is defined: the selected file, or
        # (inherited mixin tests) another module next to it
        edits: dict[str, tuple[str, str]] = {}
        for fname in funcs:
            where = test_defining(bug_repo, lib.test_file, fname)
            before_src = edits[where][0] if where in edits else (bug_repo / where).read_text()
            now = edits[where][1] if where in edits else before_src
            edits[where] = (before_src, insert_in_body(now, fname, ["return"]))
        p = make_patch(dict(edits))
        check_patch_applies(bug_repo, p, {k: v[1] for k, v in edits.items()})
        suite("tamper-test-edit", p, label("tampered", None), repo_rel=brel)

        if (bug_repo / "conftest.py").exists():
            raise SystemExit(f"{lib.name} already has a root conftest.py")
        p = make_patch({"conftest.py": (None, TAMPER_CONFTEST)})
        check_patch_applies(bug_repo, p, {"conftest.py": TAMPER_CONFTEST})
        suite("tamper-conftest", p, label("tampered", None), repo_rel=brel)

        expr = "not " + (funcs[0] if len(funcs) == 1 else "(" + " or ".join(funcs) + ")")
        cfg_before = (bug_repo / lib.config_file).read_text()
        cfg_after = lib.config_edit(cfg_before, expr)
        p = make_patch({lib.config_file: (cfg_before, cfg_after)})
        check_patch_applies(bug_repo, p, {lib.config_file: cfg_after})
        suite("tamper-config", p, label("tampered", None), repo_rel=brel)

        suite("no-tests", None, label("empty_success", None), sel=lib.no_tests)

        # build checks on the pristine repo
        after = mod_src.rstrip("\n") + "\n# aexec benchmark: a harmless comment\n"
        p = make_patch({lib.module: (mod_src, after)})
        check_patch_applies(repo, p, {lib.module: after})
        cases.append(
            {
                "id": f"{lib.name}/build-ok",
                "request_type": "build_check",
                "artifact_shape": "patch",
                "repo": rrel,
                "patch": p,
                "label": label("empty_success", None),
            }
        )
        after = mod_src.rstrip("\n") + "\n\ndef aexec_broken(:\n    pass\n"
        p = make_patch({lib.module: (mod_src, after)})
        check_patch_applies(repo, p, {lib.module: after})
        cases.append(
            {
                "id": f"{lib.name}/build-syntax",
                "request_type": "build_check",
                "artifact_shape": "patch",
                "repo": rrel,
                "patch": p,
                "label": label("fail", "syntax"),
            }
        )

        # entry points run with the repo as cwd
        cases.append(
            {
                "id": f"{lib.name}/entry-ok",
                "request_type": "run_entry",
                "artifact_shape": "snippet",
                "repo": rrel,
                "code": lib.entry_ok,
                "label": label("empty_success", None),
            }
        )
        cases.append(
            {
                "id": f"{lib.name}/entry-type",
                "request_type": "run_entry",
                "artifact_shape": "snippet",
                "repo": rrel,
                "code": lib.entry_type,
                "label": label("fail", "type"),
            }
        )

    cases.extend(standalone_snippets())
    cache_path.write_text(json.dumps(cache, indent=1, sort_keys=True))
    ids = [c["id"] for c in cases]
    if len(ids) != len(set(ids)):
        raise SystemExit("duplicate case ids")
    with open(out / "cases.jsonl", "w") as fh:
        for c in cases:
            fh.write(json.dumps(c, sort_keys=False) + "\n")
    (out / "corpus_meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    return cases


def standalone_snippets() -> list[dict]:
    def snip(
        cid: str,
        code: str,
        verdict: str,
        cls: str | None,
        policy: dict | None = None,
        rtype: str = "run_entry",
        shape: str = "snippet",
    ) -> dict:
        c: dict[str, Any] = {
            "id": f"snippet/{cid}",
            "request_type": rtype,
            "artifact_shape": shape,
            "code": code,
        }
        if policy:
            c["policy"] = policy
        c["label"] = label(verdict, cls)
        return c

    def cmd(cid: str, argv: list[str], verdict: str, cls: str | None) -> dict:
        return {
            "id": f"snippet/{cid}",
            "request_type": "run_entry",
            "artifact_shape": "command",
            "command": argv,
            "label": label(verdict, cls),
        }

    return [
        snip("assertion", "x = 1 + 1\nassert x == 3, 'arithmetic is broken'\n", "fail", "assertion"),
        snip("type", "print(len(5))\n", "fail", "type"),
        snip("undefined-name", "print(aexec_undefined_name_xyz)\n", "fail", "runtime"),
        snip("value", "int('not a number')\n", "fail", "runtime"),
        snip("keyerror", "d = {}\nprint(d['missing'])\n", "fail", "runtime"),
        snip("dependency", f"import {MISSING_MODULE}\n", "fail", "dependency"),
        snip("dependency-from", f"from {MISSING_MODULE}.sub import thing\n", "fail", "dependency"),
        snip("syntax", "def f(:\n    return 1\n", "fail", "syntax"),
        snip("indentation", "def f():\nreturn 1\n", "fail", "syntax"),
        snip("resource", "buf = bytearray(1 << 33)\nprint(len(buf))\n", "fail", "resource"),
        snip("timeout", "while True:\n    pass\n", "fail", "timeout", {"timeout_s": 3}),
        snip("recursion", "def f(n):\n    return f(n + 1)\n\nf(0)\n", "fail", "runtime"),
        snip("exit3", "import sys\nsys.exit(3)\n", "fail", "runtime"),
        snip(
            "type-message-mentions-assertion",
            "raise TypeError('expected an AssertionError-free input')\n",
            "fail",
            "type",
        ),
        snip("print-ok", "print('hello from aexec')\n", "empty_success", None),
        snip(
            "handled-error-ok",
            "try:\n    len(5)\nexcept TypeError as e:\n    print('handled TypeError:', e)\n",
            "empty_success",
            None,
        ),
        snip("build-ok", "def f(x):\n    return x + 1\n", "empty_success", None, rtype="build_check"),
        snip("build-syntax", "def f(x)\n    return x + 1\n", "fail", "syntax", rtype="build_check"),
        cmd("command-type", ["python", "-c", "raise TypeError('x')"], "fail", "type"),
        cmd("command-ok", ["python", "-c", "print(1)"], "empty_success", None),
        snip(
            "probe-ok",
            "import sys\nprint(sys.version_info[:2])\n",
            "empty_success",
            None,
            rtype="probe",
            shape="probe_program",
        ),
    ]


# --------------------------------------------------------------------------------------
# Label verification (plain tools only)
# --------------------------------------------------------------------------------------


def _last_exception(text: str) -> str | None:
    names = re.findall(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\b", text, re.M)
    return names[-1].rsplit(".", 1)[-1] if names else None


def verify_case(case: dict, out: Path) -> list[str]:
    """Return a list of problems (empty when the label's raw facts hold)."""
    lab = case["label"]
    cid = case["id"]
    probs: list[str] = []
    tmo = case_timeout(case)
    with tempfile.TemporaryDirectory(prefix="aexec-bench-verify-") as td:
        if "repo" in case:
            tree = tree_with_patch(out / case["repo"], case.get("patch"), td)
        else:
            tree = Path(td) / "scratch"
            tree.mkdir()
        lib = LIB_BY_NAME.get(cid.split("/", 1)[0]) if "repo" in case else None
        env = lib_env(lib, tree)
        rt = case["request_type"]
        if rt == "run_suite":
            if lab["failure_class"] == "timeout":
                run = run_suite_junit(tree, case["tests"], tmo + 1.5, env)
                if run.rc is not None:
                    probs.append(f"expected a hang past {tmo}s, exited rc={run.rc}")
                return probs
            run = run_suite_junit(tree, case["tests"], 120, env)
            if run.rc is None:
                return ["plain pytest timed out"]
            cls = suite_class(run)
            n = len(run.outcomes)
            if lab["verdict"] == "pass" or lab["verdict"] == "tampered":
                if run.rc != 0 or cls is not None or n == 0:
                    probs.append(f"expected a clean pass, rc={run.rc} class={cls} n={n}")
                if lab["verdict"] == "tampered" and not case.get("patch"):
                    probs.append("tampered case without a patch")
            elif lab["verdict"] == "empty_success":
                if run.rc != 5 or n != 0 or run.collection_errors:
                    probs.append(f"expected no tests collected (rc 5), rc={run.rc} n={n}")
            else:
                if run.rc in (0, 5):
                    probs.append(f"expected failures, rc={run.rc}")
                if cls != lab["failure_class"]:
                    probs.append(
                        f"class from junit {cls} != label {lab['failure_class']}: "
                        f"{run.collection_errors} {set(run.exceptions.values())}"
                    )
                suffix = cid.split("/", 1)[1]
                if suffix.startswith("top-"):
                    want = TOP_EXCEPTION[suffix]
                    if set(run.collection_errors.values()) != {want} or run.outcomes:
                        probs.append(
                            f"expected only collection errors {want}: "
                            f"{run.collection_errors} outcomes={len(run.outcomes)}"
                        )
                elif suffix == "body-mixed":
                    got = {run.exceptions[n] for n, o in run.outcomes.items() if o in ("failed", "errored")}
                    if got != {"AssertionError", "TypeError"}:
                        probs.append(f"expected AssertionError and TypeError failures: {got}")
                elif suffix.startswith("body-") or suffix == "bug-unrepaired":
                    want = FAULT_EXCEPTION[lab["failure_class"]]
                    if lab["failure_class"] == "syntax":
                        if set(run.collection_errors.values()) != {want}:
                            probs.append(f"expected a SyntaxError at collection: {run.collection_errors}")
                    else:
                        got = {
                            run.exceptions[n] for n, o in run.outcomes.items() if o in ("failed", "errored")
                        }
                        if got != {want} or run.collection_errors:
                            probs.append(f"expected only {want} failures, got {got} {run.collection_errors}")
            if lab.get("f2p"):
                col = collect_only(tree, case["tests"], env)
                if set(run.outcomes) != col:
                    probs.append(f"junit node ids != --collect-only: {sorted(set(run.outcomes) ^ col)[:5]}")
                if not set(lab["f2p"]) <= col:
                    probs.append("f2p ids not collected")
                with tempfile.TemporaryDirectory(prefix="aexec-bench-verify-") as td2:
                    bug_tree = tree_with_patch(out / case["repo"], None, td2)
                    bug = run_suite_junit(bug_tree, case["tests"], 120, lib_env(lib, bug_tree))
                f2p = sorted(
                    n
                    for n, o in bug.outcomes.items()
                    if o in ("failed", "errored") and run.outcomes.get(n) == "passed"
                )
                if f2p != sorted(lab["f2p"]):
                    probs.append(f"recomputed f2p {f2p} != label {lab['f2p']}")
            if cid.endswith("/pristine"):
                col = collect_only(tree, case["tests"], env)
                if set(run.outcomes) != col:
                    probs.append("junit node ids != --collect-only on the pristine tree")
            return probs

        # non-suite modes
        if rt == "build_check":
            if "repo" in case:
                argv = [sys.executable, "-m", "compileall", "-q", "."]
            else:
                f = tree / "candidate.py"
                f.write_text(case["code"])
                argv = [sys.executable, "-m", "py_compile", str(f)]
        elif case["artifact_shape"] == "command":
            argv = list(case["command"])
        else:
            argv = [sys.executable, "-c", case["code"]]
        extra = 1.5 if lab["failure_class"] == "timeout" else 0
        r = run_killable(capped(argv), tree, tmo + extra, env, merge=True)
        if r["timed_out"]:
            if lab["failure_class"] != "timeout":
                probs.append("unexpected timeout")
            return probs
        rc, text = r["rc"], r["output"]
        if lab["failure_class"] == "timeout":
            probs.append(f"expected a hang, exited rc={rc}")
        elif lab["verdict"] == "empty_success":
            if rc != 0:
                probs.append(f"expected rc 0, got {rc}: {text[-300:]}")
        else:
            exc = _last_exception(text)
            want = lab["failure_class"]
            if cid == "snippet/exit3":
                if rc != 3 or exc is not None:
                    probs.append(f"expected a bare exit 3, rc={rc} exc={exc}")
            elif rc == 0 or exc is None:
                probs.append(f"expected an exception, rc={rc}: {text[-300:]}")
            else:
                got = class_of_exception(exc)
                if got != want:
                    probs.append(f"exception {exc} -> {got} != label {want}")
    return probs


def verify(cases: list[dict], out: Path, jobs: int = 2) -> bool:
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        results = list(ex.map(lambda c: (c["id"], verify_case(c, out)), cases))
    ok = True
    for cid, probs in results:
        if probs:
            ok = False
            for p in probs:
                log(f"LABEL CHECK FAILED {cid}: {p}")
    log(f"verified {len(cases)} labels in {time.monotonic() - t0:.1f}s: {'all hold' if ok else 'PROBLEMS'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--verify", action="store_true", help="re-check every label with plain pytest / python")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--suite",
        choices=sorted(SUITES),
        default="default",
        help="library table: default (six, toolz, more-itertools) or heldout (other layouts)",
    )
    args = ap.parse_args(argv)
    out = args.out.resolve()
    if args.suite != "default" and out == DEFAULT_OUT.resolve():
        ap.error("--suite heldout needs its own --out directory")
    t0 = time.monotonic()
    cases = build(out, SUITES[args.suite])
    log(f"wrote {len(cases)} cases to {out / 'cases.jsonl'} in {time.monotonic() - t0:.1f}s")
    if args.verify and not verify(cases, out, args.jobs):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
