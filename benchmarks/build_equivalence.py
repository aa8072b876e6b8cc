#!/usr/bin/env python3
"""Build the public equivalence corpus: real PyPI projects, each in its own venv.

    python benchmarks/build_equivalence.py [--out DIR] [--only NAME,...] [--no-verify]

Issue 18, goal 2. For every project below the script downloads the pinned sdist
(``pip download --no-binary :all: --no-deps NAME==VERSION``; nothing is vendored),
unpacks it under ``DIR/repos/``, builds a venv of its own under ``DIR/venvs/`` with the
project's runtime and test dependencies from PyPI (pinned where it matters), then
**uninstalls the project itself** from that venv, so the code that runs is the scratch
copy of the sdist a patch was applied to (otherwise an injected fault would silently run
against site-packages). It then writes ``DIR/cases.jsonl`` in aexec's request format
(``/work/shared/contract.md``), with ``python`` the project's venv interpreter and
``repo`` the unpacked sdist, and labels by construction in ``label`` (plus ``project``):

* ``pristine``: the selection as shipped -> ``pass``;
* ``fault-raise``: ``raise RuntimeError`` inserted in a function the selection
  exercises -> ``fail``/``runtime`` (or the project's ``raise_class``: ``assertion`` when
  a test's assert sees the effect, which comes first in the spec's order);
* ``fault-syntax``: a broken ``def`` appended to that module -> ``fail``/``syntax``;
* ``fault-import``: ``import aexec_equivalence_missing_module`` after the module's
  imports -> ``fail``/``dependency``;
* ``bug``: a one-token change of behaviour in that function -> ``fail``/``assertion``
  (a changed result, caught by an ``assert`` or a doctest's expected output), or the
  project's ``bug_class`` (``runtime``: the changed code raises inside the test);
* ``repair``: the reverse of ``bug`` applied to ``<repo>-buggy`` (the sdist with the bug
  baked in) -> ``pass`` with ``f2p`` exactly the tests plain pytest sees fail on the
  buggy tree and pass on the repaired one;
* ``tamper``: ``bug`` plus a module-level skip appended to every selected test file ->
  ``tampered`` (with no failure left to show: plain pytest skips every test);
* ``empty``: a selection (a module of the project) that collects no test ->
  ``empty_success``;
* for a project with ``command_opts``: ``cmd-pristine``, ``cmd-bug``, ``cmd-repair`` as
  ``command`` artifacts ``python -m pytest <command_opts> <tests>`` (the referee runs the
  same arguments).

Every case declares ``policy.timeout_s`` = the referee's own deadline (300 s): a patched
``run_suite`` is ``targeted_execution`` by the §3.1 table, whose default deadline (30 s)
is shorter than a hypothesis-heavy selection run twice (before and after) may need on
a loaded machine; plain pytest has no deadline but the referee's.

Unless ``--no-verify``, each label is checked with the plain toolchain: ``python -m
pytest <selection> --junitxml=...`` in the project's venv on a scratch copy with the
patch applied (the same referee as ``benchmarks/equivalence.py``). A label that plain
pytest contradicts stops the build with the evidence.

The projects, and why each is here (configuration variety, issue 18):

=================  ========  ======================================================
project            version   why
=================  ========  ======================================================
semver             3.0.2     ``addopts`` needs pytest-cov (``--cov --no-cov-on-fail``);
                             ``--doctest-modules``/``--doctest-glob``; ``pythonpath =
                             src tests``; ``testpaths``; ``--import-mode=importlib``;
                             a src layout
async-lru          2.0.4     pytest-asyncio with ``asyncio_mode = auto``; pytest-timeout
                             (``timeout = 15`` in the ini); ``--cov`` and
                             ``--cache-clear`` in addopts; ``filterwarnings = error``
aiosignal          1.3.1     ``--cov`` in addopts; pytest-asyncio strict mode
                             (``@pytest.mark.asyncio``); ``filterwarnings = error``;
                             ``junit_family = xunit2``
httpcore           1.0.5     ``@pytest.mark.anyio`` tests (anyio's pytest plugin, an
                             entry point) under ``--strict-markers --strict-config``
cookiecutter       2.6.0     pytest-mock's ``mocker`` fixture; ``--cov`` and ``-vvv``
                             in addopts
hyperlink          21.0.0    ``doctest_optionflags``; a src layout whose tests live
                             inside the package (its ``test_hypothesis.py`` fails two
                             health checks under today's hypothesis: not selected)
django-crispy-forms 2.3      pytest-django (``DJANGO_SETTINGS_MODULE`` in
                             ``[tool.pytest.ini_options]``, ``settings`` fixture)
jaraco.functools   4.0.1     ``--doctest-modules`` and ``--import-mode importlib`` in a
                             ``pytest.ini``, ``consider_namespace_packages``, a namespace
                             package (the patched module is not selected: its doctests
                             would make every patch to it an edit of a selected test
                             file, i.e. tampering)
idna               3.7       a unittest-only suite (``unittest.TestCase``); pytest-xdist:
                             no small sdist we found ships ``-n auto`` in its own
                             configuration, so three more cases run ``python -m pytest
                             -n 2 <tests>`` as a ``command`` artifact
jsonpointer        3.0.0     a unittest-only single-module project (``tests.py``
                             beside ``jsonpointer.py``), no pytest configuration at all
simplejson         3.19.2    unittest suite inside the package; its C speedups tests
                             skip (the sdist is not compiled) -> ``skipped`` verdicts
pyrsistent         0.20.0    hypothesis-heavy (``@given`` stateful tests); tests import
                             the package's pure-Python fallback
=================  ========  ======================================================

Each project runs a small subset of its test files so the corpus runs in a few
minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / ".work" / "equivalence"
PYTEST = "pytest==8.3.3"
MISSING_MODULE = "aexec_equivalence_missing_module"
RAISE_STMT = 'raise RuntimeError("aexec equivalence corpus: injected fault")'
REFEREE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Project:
    name: str  # the PyPI name
    version: str
    #: pip requirements of the venv (the project itself first, so pip resolves its deps)
    install: tuple[str, ...]
    #: the selection (pytest selectors relative to the repo)
    tests: tuple[str, ...]
    #: the module the faults go into, and the function/method (``Class.method``) body
    src: str
    func: str
    #: the bug: ``old`` -> ``new``, exactly once inside ``func``
    bug: tuple[str, str]
    #: the selected test file the tampering patch edits first (then every other one)
    tamper: str
    #: a selector that collects no test
    empty: str
    #: distributions to uninstall after the install (default: the project itself)
    uninstall: tuple[str, ...] | None = None
    why: str = ""
    #: the failure classes the bug and the injected raise show (checked against plain
    #: pytest's junit messages)
    bug_class: str = "assertion"
    raise_class: str = "runtime"
    #: pytest options of an extra case set run as a ``command`` artifact
    #: (``python -m pytest <options> <tests>``): pristine, bug and repair
    command_opts: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


PROJECTS: tuple[Project, ...] = (
    Project(
        "semver",
        "3.0.2",
        ("semver==3.0.2", PYTEST, "pytest-cov==5.0.0", "coverage==7.6.1"),
        ("tests/test_bump.py", "tests/test_compare.py"),
        "src/semver/version.py",
        "Version.bump_patch",
        ("self._patch + 1)", "self._patch + 2)"),
        "tests/test_bump.py",
        "src/semver/__about__.py",
        why="addopts needs pytest-cov; doctest-modules/glob; pythonpath; testpaths; src layout",
    ),
    Project(
        "async-lru",
        "2.0.4",
        ("async-lru==2.0.4", PYTEST, "pytest-asyncio==0.23.8", "pytest-timeout==2.3.1", "pytest-cov==5.0.0"),
        ("tests/test_basic.py", "tests/test_cache_info.py"),
        "async_lru/__init__.py",
        "_LRUCacheWrapper.cache_info",
        ("self.__hits,", "self.__misses,"),
        "tests/test_cache_info.py",
        "async_lru/__init__.py",
        why="asyncio_mode = auto; pytest-timeout ini option; --cov and --cache-clear in addopts",
    ),
    Project(
        "aiosignal",
        "1.3.1",
        ("aiosignal==1.3.1", PYTEST, "pytest-asyncio==0.23.8", "pytest-cov==5.0.0"),
        ("tests/test_signals.py",),
        "aiosignal/__init__.py",
        "Signal.send",
        ("if not self.frozen:", "if self.frozen:"),
        "tests/test_signals.py",
        "aiosignal/__init__.py",
        why="--cov in addopts; pytest-asyncio strict; filterwarnings = error",
    ),
    Project(
        "httpcore",
        "1.0.5",
        ("httpcore[http2,socks,trio]==1.0.5", PYTEST, "anyio==4.4.0", "trio==0.25.1", "pytest-trio==0.8.0"),
        ("tests/_async/test_connection_pool.py", "tests/test_models.py"),
        "httpcore/_models.py",
        "enforce_bytes",
        ("may not include unicode characters", "may not include non-ASCII characters"),
        "tests/test_models.py",
        "tests/concurrency.py",
        why="@pytest.mark.anyio under --strict-markers --strict-config",
        # the injected raise empties a trace a test asserts on: assertion comes first
        raise_class="assertion",
    ),
    Project(
        "cookiecutter",
        "2.6.0",
        ("cookiecutter==2.6.0", PYTEST, "pytest-mock==3.14.0", "pytest-cov==5.0.0", "click==8.1.7"),
        ("tests/test_read_user_choice.py", "tests/test_read_user_yes_no.py"),
        "cookiecutter/prompt.py",
        "read_user_yes_no",
        (
            'return YesNoPrompt.ask(f"{prefix}{question}", default=default_value)',
            'return not YesNoPrompt.ask(f"{prefix}{question}", default=default_value)',
        ),
        "tests/test_read_user_yes_no.py",
        "tests/__init__.py",
        why="pytest-mock's mocker; --cov in addopts",
    ),
    Project(
        "hyperlink",
        "21.0.0",
        ("hyperlink==21.0.0", PYTEST, "hypothesis==6.108.5", "idna==3.7"),
        ("src/hyperlink/test/test_url.py", "src/hyperlink/test/test_decoded_url.py"),
        "src/hyperlink/_url.py",
        "URL.to_text",
        ("with_password=False", "with_password=True"),
        "src/hyperlink/test/test_url.py",
        "src/hyperlink/test/common.py",
        why="hypothesis; doctest_optionflags; src layout, tests inside the package",
    ),
    Project(
        "django-crispy-forms",
        "2.3",
        (
            "django-crispy-forms==2.3",
            PYTEST,
            "pytest-django==4.9.0",
            "django==4.2.16",
            "crispy-bootstrap3",
            "crispy-bootstrap4",
        ),
        ("tests/test_utils.py",),
        "crispy_forms/utils.py",
        "list_intersection",
        ("if item in list2", "if item not in list2"),
        "tests/test_utils.py",
        "tests/forms.py",
        why="pytest-django: DJANGO_SETTINGS_MODULE in [tool.pytest.ini_options]",
    ),
    Project(
        "jaraco.functools",
        "4.0.1",
        ("jaraco.functools==4.0.1", PYTEST, "jaraco.classes==3.4.0"),
        ("test_functools.py",),
        "jaraco/functools/__init__.py",
        "retry_call",
        ("cleanup()", "None"),
        "test_functools.py",
        "conftest.py",
        uninstall=("jaraco.functools",),
        why="--doctest-modules, --import-mode importlib, consider_namespace_packages in pytest.ini",
    ),
    Project(
        "idna",
        "3.7",
        ("idna==3.7", PYTEST, "pytest-xdist==3.6.1"),
        ("tests/test_idna.py", "tests/test_intranges.py"),
        "idna/core.py",
        "check_hyphen_ok",
        ("if label[2:4] == '--':", "if label[1:3] == '--':"),
        "tests/test_idna.py",
        "tests/__init__.py",
        why="unittest-only suite; pytest-xdist: a command case set with -n 2",
        bug_class="runtime",  # the bug raises IDNAError inside the tested call
        command_opts=("-n", "2"),
    ),
    Project(
        "jsonpointer",
        "3.0.0",
        ("jsonpointer==3.0.0", PYTEST),
        ("tests.py",),
        "jsonpointer.py",
        "escape",
        ("s.replace('~', '~0').replace('/', '~1')", "s.replace('/', '~1').replace('~', '~0')"),
        "tests.py",
        "jsonpointer.py",
        why="unittest-only single module; no pytest configuration",
    ),
    Project(
        "simplejson",
        "3.19.2",
        ("simplejson==3.19.2", PYTEST),
        (
            "simplejson/tests/test_dump.py",
            "simplejson/tests/test_speedups.py",
            "simplejson/tests/test_indent.py",
        ),
        "simplejson/encoder.py",
        "JSONEncoder.encode",
        ("if isinstance(o, string_types):", "if isinstance(o, bytes):"),
        "simplejson/tests/test_dump.py",
        "simplejson/tests/_cibw_runner.py",
        why="unittest suite inside the package; C-speedups tests skip",
    ),
    Project(
        "pyrsistent",
        "0.20.0",
        ("pyrsistent==0.20.0", PYTEST, "hypothesis==6.108.5"),
        ("tests/vector_test.py", "tests/hypothesis_vector_test.py"),
        "pyrsistent/_pvector.py",
        "PythonPVector.__len__",
        ("return self._count", "return self._count + 1"),
        "tests/vector_test.py",
        "pyrsistent/typing.py",
        why="hypothesis-heavy; the pure-Python fallback",
    ),
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------


def make_patch(files: dict[str, tuple[str, str]]) -> str:
    """A ``git diff``-style unified diff; ``files`` maps path -> (before, after)."""
    out: list[str] = []
    for path, (before, after) in files.items():
        lines = list(
            difflib.unified_diff(
                before.splitlines(keepends=True),
                after.splitlines(keepends=True),
                fromfile=f"a/{path}",
                tofile=f"b/{path}",
                n=3,
            )
        )
        if not lines:
            raise SystemExit(f"make_patch: no change for {path}")
        out.append(f"diff --git a/{path} b/{path}\n")
        for line in lines:
            if line.startswith(("---", "+++")):
                out.append(line.rstrip("\n").rstrip() + "\n")
            elif line.endswith("\n"):
                out.append(line)
            else:
                out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _function(src: str, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    tree: ast.AST = ast.parse(src)
    parts = qualname.split(".")
    for cls in parts[:-1]:
        tree = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    fns = [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == parts[-1]
    ]
    if not fns:
        raise SystemExit(f"no function {qualname}")
    return min(fns, key=lambda n: n.lineno)


def replace_in_function(src: str, qualname: str, old: str, new: str) -> str:
    fn = _function(src, qualname)
    lines = src.splitlines(keepends=True)
    seg = "".join(lines[fn.lineno - 1 : fn.end_lineno])
    if seg.count(old) != 1:
        raise SystemExit(f"bug text {old!r} occurs {seg.count(old)} times in {qualname}")
    return "".join(lines[: fn.lineno - 1]) + seg.replace(old, new) + "".join(lines[fn.end_lineno :])


def raise_in_function(src: str, qualname: str) -> str:
    """``RAISE_STMT`` as the first statement of the body (after a docstring)."""
    fn = _function(src, qualname)
    body = fn.body
    first = (
        body[1]
        if len(body) > 1
        and isinstance(body[0], ast.Expr)
        and isinstance(getattr(body[0], "value", None), ast.Constant)
        else body[0]
    )
    lines = src.splitlines(keepends=True)
    target = lines[first.lineno - 1]
    indent = target[: len(target) - len(target.lstrip())]
    return "".join(lines[: first.lineno - 1] + [indent + RAISE_STMT + "\n"] + lines[first.lineno - 1 :])


def insert_after_imports(src: str, stmt: str) -> str:
    tree = ast.parse(src)
    body = list(tree.body)
    i, last_end = 0, 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        last_end, i = body[0].end_lineno or 0, 1
    while i < len(body) and isinstance(body[i], (ast.Import, ast.ImportFrom)):
        last_end = body[i].end_lineno or last_end
        i += 1
    lines = src.splitlines(keepends=True)
    return "".join(lines[:last_end] + [stmt + "\n"] + lines[last_end:])


def git_apply(tree: Path, patch: str) -> None:
    pf = tree.parent / f"candidate-{time.monotonic_ns()}.patch"
    pf.write_text(patch)
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tree.parent))
    r = subprocess.run(["git", "apply", "-p1", str(pf)], cwd=tree, capture_output=True, text=True, env=env)
    pf.unlink()
    if r.returncode != 0:
        raise RuntimeError(f"git apply failed in {tree}: {r.stderr.strip()}")


# --------------------------------------------------------------------------------------
# The referee: plain pytest in the project's venv, junit XML as the record
# --------------------------------------------------------------------------------------


def junit_key(nodeid: str) -> tuple[str, str]:
    """(classname, name) exactly as pytest's junitxml derives them from a node id
    (``_pytest.junitxml.mangle_test_address``), so aexec's test ids and the junit report
    can be compared in the same space without guessing the reverse mapping."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = names[0].replace("/", ".")
    if names[0].endswith(".py"):
        names[0] = names[0][:-3]
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def referee_args(case: dict) -> list[str]:
    """What plain pytest is asked for ``case``: its ``command``'s arguments after
    ``python -m pytest``, or its ``tests``."""
    cmd = case.get("command")
    if cmd:
        if cmd[:3] != ["python", "-m", "pytest"]:
            raise ValueError(f"{case['id']}: the referee runs only 'python -m pytest ...' commands")
        return list(cmd[3:])
    return list(case["tests"])


@dataclass
class RefereeRun:
    rc: int | None  # None: killed at the deadline
    timed_out: bool
    output: str
    duration: float
    #: junit key "classname::name" -> passed|failed|errored|skipped
    verdicts: dict[str, str] = field(default_factory=dict)
    #: junit key -> the exception-ish message head of a failure/error
    messages: dict[str, str] = field(default_factory=dict)


def clean_env() -> dict[str, str]:
    """The caller's environment less what would change pytest's or Python's behaviour
    behind the repo's back (PYTEST_ADDOPTS, PYTHONPATH, a parent's venv, ...)."""
    drop = ("PYTEST_", "PYTHON", "VIRTUAL_ENV", "COV_CORE_", "COVERAGE_", "AEXEC_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def parse_junit(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    verdicts: dict[str, str] = {}
    messages: dict[str, str] = {}
    rank = {"passed": 0, "skipped": 1, "errored": 2, "failed": 3}
    for tc in ET.parse(path).getroot().iter("testcase"):
        key = f"{tc.get('classname', '')}::{tc.get('name', '')}"
        tags = {c.tag: c for c in tc}
        if "failure" in tags:
            v, el = "failed", tags["failure"]
        elif "error" in tags:
            v, el = "errored", tags["error"]
        elif "skipped" in tags:
            v, el = "skipped", None
        else:
            v, el = "passed", None
        if key in verdicts and rank[verdicts[key]] >= rank[v]:
            continue
        verdicts[key] = v
        if el is not None:
            messages[key] = (
                (el.get("message") or "").strip().splitlines()[0][:200] if el.get("message") else ""
            )
    return verdicts, messages


def referee(repo: Path, patch: str | None, tests: list[str], python: str) -> RefereeRun:
    """Plain ``python -m pytest <tests> --junitxml=...`` on a scratch copy of ``repo``
    with ``patch`` applied, in ``python``'s environment. Blocking."""
    with tempfile.TemporaryDirectory(prefix="aexec-equiv-") as td:
        tree = Path(td) / "repo"
        shutil.copytree(repo, tree, symlinks=True)
        if patch:
            git_apply(tree, patch)
        junit = Path(td) / "junit.xml"
        argv = [python, "-m", "pytest", *tests, f"--junitxml={junit}"]
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=tree,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=clean_env(),
        )
        try:
            out, _ = proc.communicate(timeout=REFEREE_TIMEOUT_S)
            run = RefereeRun(proc.returncode, False, out, time.monotonic() - t0)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return RefereeRun(None, True, out or "", time.monotonic() - t0)
        if junit.exists():
            run.verdicts, run.messages = parse_junit(junit)
        return run


# --------------------------------------------------------------------------------------
# Fetch, venvs
# --------------------------------------------------------------------------------------


def fetch(p: Project, out: Path) -> Path:
    """Download and unpack the sdist; return the pristine repo directory."""
    sdists, repos = out / "sdists", out / "repos"
    sdists.mkdir(parents=True, exist_ok=True)
    repos.mkdir(parents=True, exist_ok=True)
    repo = repos / p.key
    if (repo / ".aexec-unpacked").exists():
        return repo
    norm = p.name.replace("-", "_").replace(".", "_").lower()

    def find() -> Path | None:
        for f in sdists.iterdir():
            stem = f.name.lower().replace("-", "_").replace(".", "_")
            if stem.startswith(f"{norm}_{p.version.replace('.', '_')}_tar_gz"):
                return f
        return None

    sdist = find()
    if sdist is None:
        log(f"[{p.key}] pip download --no-binary :all: --no-deps {p.name}=={p.version}")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-binary",
                ":all:",
                "--no-deps",
                f"{p.name}=={p.version}",
                "-d",
                str(sdists),
            ],
            check=True,
        )
        sdist = find()
        if sdist is None:
            raise SystemExit(f"[{p.key}] no sdist downloaded")
    if repo.exists():
        shutil.rmtree(repo)
    with tempfile.TemporaryDirectory(dir=repos) as td, tarfile.open(sdist) as tf:
        tf.extractall(td, filter="data")
        (top,) = list(Path(td).iterdir())
        top.rename(repo)
    missing = [t.split("::")[0] for t in (*p.tests, p.empty) if not (repo / t.split("::")[0]).exists()]
    if missing:
        raise SystemExit(f"[{p.key}] the sdist does not ship {missing}")
    (repo / ".aexec-unpacked").write_text(sdist.name + "\n")
    return repo


def build_venv(p: Project, out: Path) -> Path:
    """The project's own venv (cached by its install spec); return its interpreter."""
    venv = (out / "venvs").resolve() / p.key  # the venv's own path, through any symlink
    spec = json.dumps({"install": p.install, "uninstall": p.uninstall, "py": sys.version_info[:2]})
    marker = venv / ".aexec-spec"
    py = venv / "bin" / "python"
    if marker.exists() and marker.read_text() == spec and py.exists():
        return py
    if venv.exists():
        shutil.rmtree(venv)
    log(f"[{p.key}] venv + pip install {' '.join(p.install)}")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *p.install],
        check=True,
        env=clean_env(),
    )
    gone = p.uninstall if p.uninstall is not None else (p.name,)
    subprocess.run([str(py), "-m", "pip", "uninstall", "-q", "-y", *gone], check=True, env=clean_env())
    marker.write_text(spec)
    return py


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


def label(verdict: str, cls: str | None, f2p: list[str] | None = None) -> dict:
    return {"verdict": verdict, "failure_class": cls, "f2p": f2p}


def cases_for(p: Project, repo: Path, py: Path, out: Path, verify: bool) -> list[dict]:
    src_text = (repo / p.src).read_text()
    bugged = replace_in_function(src_text, p.func, *p.bug)
    skip = (
        "\n\n\nimport pytest as _aexec_tamper_pytest  # noqa: E402\n\n"
        'pytestmark = _aexec_tamper_pytest.mark.skip(reason="tampered")\n'
    )
    tamper_edits = {
        f: ((repo / f).read_text(), (repo / f).read_text().rstrip("\n") + skip)
        for f in dict.fromkeys((p.tamper, *p.tests))
    }
    patches = {
        "fault-raise": make_patch({p.src: (src_text, raise_in_function(src_text, p.func))}),
        "fault-syntax": make_patch(
            {p.src: (src_text, src_text.rstrip("\n") + "\n\n\ndef aexec_broken(:\n    pass\n")}
        ),
        "fault-import": make_patch(
            {p.src: (src_text, insert_after_imports(src_text, f"import {MISSING_MODULE}"))}
        ),
        "bug": make_patch({p.src: (src_text, bugged)}),
        "tamper": make_patch({p.src: (src_text, bugged), **tamper_edits}),
    }
    # the buggy repo: the sdist with the bug baked in, for the repair case
    buggy = repo.parent / f"{p.key}-buggy"
    if buggy.exists():
        shutil.rmtree(buggy)
    shutil.copytree(repo, buggy, symlinks=True)
    (buggy / p.src).write_text(bugged)
    repair = make_patch({p.src: (bugged, src_text)})

    tests = list(p.tests)
    rel = lambda d: os.path.relpath(d, out)  # noqa: E731
    base = {"request_type": "run_suite", "artifact_shape": "test_subset", "python": str(py)}
    cases = [
        {"id": f"{p.key}/pristine", **base, "repo": rel(repo), "tests": tests, "label": label("pass", None)},
        {
            "id": f"{p.key}/fault-raise",
            **base,
            "artifact_shape": "patch",
            "repo": rel(repo),
            "tests": tests,
            "patch": patches["fault-raise"],
            "label": label("fail", p.raise_class),
        },
        {
            "id": f"{p.key}/fault-syntax",
            **base,
            "artifact_shape": "patch",
            "repo": rel(repo),
            "tests": tests,
            "patch": patches["fault-syntax"],
            "label": label("fail", "syntax"),
        },
        {
            "id": f"{p.key}/fault-import",
            **base,
            "artifact_shape": "patch",
            "repo": rel(repo),
            "tests": tests,
            "patch": patches["fault-import"],
            "label": label("fail", "dependency"),
        },
        {
            "id": f"{p.key}/bug",
            **base,
            "artifact_shape": "patch",
            "repo": rel(repo),
            "tests": tests,
            "patch": patches["bug"],
            "label": label("fail", p.bug_class),
        },
        {
            "id": f"{p.key}/repair",
            **base,
            "artifact_shape": "patch",
            "repo": rel(buggy),
            "tests": tests,
            "patch": repair,
            "label": label("pass", None),
        },
        {
            "id": f"{p.key}/tamper",
            **base,
            "artifact_shape": "patch",
            "repo": rel(repo),
            "tests": tests,
            "patch": patches["tamper"],
            "label": label("tampered", None),
        },
        {
            "id": f"{p.key}/empty",
            **base,
            "repo": rel(repo),
            "tests": [p.empty],
            "label": label("empty_success", None),
        },
    ]
    if p.command_opts:
        command = ["python", "-m", "pytest", *p.command_opts, *tests]
        for src, dst in (("pristine", "cmd-pristine"), ("bug", "cmd-bug"), ("repair", "cmd-repair")):
            c = next(x for x in cases if x["id"] == f"{p.key}/{src}")
            c = {k: v for k, v in c.items() if k != "tests"}
            cases.append(
                {
                    **c,
                    "id": f"{p.key}/{dst}",
                    "request_type": "run_entry",
                    "artifact_shape": "command",
                    "command": command,
                    "label": dict(c["label"]),
                }
            )
    for c in cases:
        c["project"] = p.key
        c["policy"] = {"timeout_s": REFEREE_TIMEOUT_S}
    # exact FAIL_TO_PASS: plain pytest on the buggy tree and on the repaired one
    before = referee(buggy, None, tests, str(py))
    after = referee(buggy, repair, tests, str(py))
    f2p = sorted(
        k
        for k, v in before.verdicts.items()
        if v in ("failed", "errored") and after.verdicts.get(k) == "passed"
    )
    if not f2p:
        raise SystemExit(f"[{p.key}] the bug fails no test plain pytest runs:\n{before.output[-3000:]}")
    for c in cases:
        if c["id"].endswith("repair"):
            c["label"]["f2p"] = f2p  # junit keys "classname::name"
    if verify:
        problems = []
        for c in cases:
            r = (
                after
                if c["id"].endswith("/repair")
                else referee(out / c["repo"], c.get("patch"), referee_args(c), str(py))
            )
            bug = c["id"].endswith("bug")
            why = check_label(c["label"], r, bug=bug, check_class=bug or c["id"].endswith("fault-raise"))
            if why:
                problems.append(f"{c['id']}: {why}\n{r.output[-2500:]}")
            else:
                log(f"  ok {c['id']} (rc={r.rc}, {len(r.verdicts)} tests)")
        if problems:
            raise SystemExit(f"[{p.key}] plain pytest contradicts a label:\n" + "\n\n".join(problems))
    return cases


def check_label(lab: dict, r: RefereeRun, *, bug: bool = False, check_class: bool = False) -> str | None:
    """Why plain pytest's run contradicts the label, or None (``bug``: the case is a
    bug's, which injects no text; ``check_class``: the failure class is checked against
    the junit messages too)."""
    bad = {k: v for k, v in r.verdicts.items() if v in ("failed", "errored")}
    v = lab["verdict"]
    if r.timed_out:
        return "plain pytest timed out"
    if v == "pass":
        if r.rc != 0 or bad or not r.verdicts:
            return f"expected a pass, got rc={r.rc}, {len(bad)} failed/errored of {len(r.verdicts)}"
    elif v == "empty_success":
        if r.rc != 5:
            return f"expected no test collected (rc 5), got rc={r.rc}"
    elif v == "fail":
        if r.rc in (0, 5) or r.rc is None:
            # rc 2..4 with no failed test is a failure too: a conftest that imports the
            # faulty module stops pytest before collection (usage/internal error)
            return f"expected a failure, got rc={r.rc}"
        text = r.output
        want = {"syntax": "SyntaxError", "dependency": MISSING_MODULE, "runtime": "aexec equivalence corpus"}
        cls = lab["failure_class"]
        if cls in want and want[cls] not in text and not (cls == "runtime" and bug):
            return f"expected {want[lab['failure_class']]!r} in plain pytest's output"
        if check_class:
            # a bug's (or an injected raise's) class, from the junit messages of what failed: ``assertion`` when an
            # assert (a doctest's expected output, ``pytest.raises``'s "DID NOT RAISE")
            # caught it, else ``runtime``
            msgs = [r.messages.get(k, "") for k in bad]
            caught = any(m.startswith(("assert", "AssertionError", "[doctest]", "Failed:")) for m in msgs)
            seen = "assertion" if caught else "runtime"
            if seen != lab["failure_class"]:
                return f"the failure is {seen!r} in plain pytest's junit ({msgs[:3]}), labelled {cls!r}"
    elif v == "tampered" and bad:
        # the label's class is None: the tampering must hide every failure of the bug
        return f"expected every test skipped, {len(bad)} failed/errored"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", default="", help="comma-separated project names")
    ap.add_argument("--no-verify", action="store_true", help="skip checking the labels with plain pytest")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    only = {s for s in args.only.split(",") if s}
    all_cases: list[dict] = []
    manifest = []
    for p in PROJECTS:
        if only and p.name not in only:
            continue
        t0 = time.monotonic()
        repo = fetch(p, out)
        py = build_venv(p, out)
        cases = cases_for(p, repo, py, out, verify=not args.no_verify)
        all_cases.extend(cases)
        manifest.append(
            {
                "project": p.key,
                "why": p.why,
                "tests": list(p.tests),
                "python": str(py),
                "repo": str(repo),
                "cases": len(cases),
            }
        )
        log(f"[{p.key}] {len(cases)} cases in {time.monotonic() - t0:.1f}s")
    name = "cases.jsonl" if not only else f"cases-{'_'.join(sorted(only))}.jsonl"
    (out / name).write_text("".join(json.dumps(c) + "\n" for c in all_cases))
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    digest = hashlib.sha256((out / name).read_bytes()).hexdigest()[:12]
    log(f"wrote {len(all_cases)} cases for {len(manifest)} projects to {out / name} (sha256 {digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
