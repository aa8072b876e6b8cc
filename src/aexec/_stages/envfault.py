"""The environment's fault (`EnvFault`, ``flags.env_broken``): a pytest run whose
selection cannot run in the declared interpreter, not because of the candidate. Pure:
no I/O (the pipeline reads the repo's files and hands their text in).

A run qualifies (`env_fault`) when nothing of the candidate's failed: pytest refused to
start, cannot be imported, or the only failures are what a missing package leaves
behind (a module collection imports, a plugin's marker under ``--strict-markers``, a
plugin's fixture), none of it defined by the repo nor touched by the patch. It is the
environment's (`pristine_fault`) only when the unpatched repo fails the same way.
"""

from __future__ import annotations

import ast
import configparser
import posixpath
import re
import tomllib
from collections.abc import Collection, Iterable

from .. import _runners as runners
from .._records import EnvFault
from .assemble import PYTEST_FILES, Run, ran_tests
from .normalize import failures
from .parse import Evidence, RaisedError

_NO_MODULE = re.compile(r"No module named '([^']+)'")
#: pytest could not find what the selection names: the request's doing, not the environment's.
_NOT_FOUND = re.compile(r"^ERROR: (?:file or directory )?not found", re.M)
#: What a candidate's patch may change that pytest reads at start.
_START_FILES = PYTEST_FILES | {"tox.ini", "setup.cfg", "pyproject.toml"}
#: Kinds whose message names what is missing: the unpatched run must miss the same.
_NAMED = ("missing_module", "unknown_marker", "missing_fixture", "no_runner")


def _start_error(stderr: str, cwd: str, stdout: str = "") -> str:
    """The line pytest said its start failed with, without the scratch path: a usage
    error's, else an ``INTERNALERROR>`` traceback's last line (its exception; pytest
    writes it to stdout), else stderr's last line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    said = [ln for ln in lines if re.match(r"\S+: error: ", ln)]
    said = said or [ln for ln in lines if ln.startswith("ERROR:") and "usage:" not in ln]
    internal = [
        ln.strip()
        for ln in (stderr + "\n" + stdout).splitlines()
        if ln.startswith("INTERNALERROR>") and ln[len("INTERNALERROR>") :].strip()
    ]
    said = said or internal[-1:]
    line = (said or lines[-1:] or ["no message"])[0]
    return line.replace(cwd + "/", "").replace(cwd, ".")[:300]


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(f"'{n}'" for n in sorted(set(names)))


def wanted(ev: Evidence) -> set[tuple[str, str]]:
    """``(what, name)`` of the fixtures and markers pytest found missing in a run: what
    the repo's files must be searched for (`defined_in`)."""
    return {(what, name) for what, name, _ in ev.missing}


def env_fault(
    ev: Evidence,
    stderr: str,
    *,
    cwd: str,
    touched: Iterable[str],
    repo_modules: Collection[str],
    repo_defines: Collection[tuple[str, str]] = (),
    stdout: str = "",
) -> tuple[str, str] | None:
    """``(kind, message)`` when a pytest run shows that its selection cannot run in the
    declared environment (see `EnvFault.kind`), else None. Never one whose patch touched
    what failed: a module named in a failing frame, a collection error's file, a failing
    test's file, or a file pytest reads at start. ``repo_defines``: the ``(what, name)``
    of `wanted` that a file of the repo defines (then it is the repo's, not a plugin's).
    """
    own = ev.runner in runners.OWN_RUNNERS  # unittest, django, sympy: no fixtures, no config
    if (ev.runner != "pytest" and not own) or ev.timed_out or ev.oom_killed or ev.signal is not None:
        return None
    touched = [posixpath.normpath(p) for p in touched]
    if ran_tests(ev.tests):
        return None if own else _missing_fixtures(ev, touched, repo_defines)
    # A conftest that failed to import for another reason than a missing module is pytest
    # refusing to start (below: ``usage``), as when its exception was not read at all.
    errors = [
        e
        for e in ev.errors
        if e.phase != "conftest" or (e.is_a("ImportError") and _NO_MODULE.search(e.message))
    ]
    collect = [e for e in errors if e.phase in ("collect", "conftest")]
    if any(
        f.file and not f.file.startswith(("/", "<")) for e in errors if e not in collect for f in e.frames
    ):
        return None  # pytest's start failed in the repo's own code (a module shadowing one of pytest's)
    for e in errors:
        m = _NO_MODULE.search(e.message)
        if (
            e.phase == "import"
            and e.is_a("ImportError")
            and m
            and m[1].split(".")[0] in ("pytest", "_pytest")
        ):
            return "no_pytest", f"the interpreter cannot import pytest ({e.name}: {e.message})"
    if own:
        absent = [e for e in collect if e.is_a("FileNotFoundError") and e.nodeid not in touched]
        if absent and len(absent) == len(errors):
            return "no_runner", f"the {ev.runner} runner cannot start: {absent[0].message}"
        return _collection(ev, collect, touched, repo_modules, repo_defines) if collect else None
    if collect:
        return _collection(ev, collect, touched, repo_modules, repo_defines)
    if any(posixpath.basename(p) in _START_FILES for p in touched):
        return None
    if ev.pytest_exit == 4 and not _NOT_FOUND.search(stderr):
        return "usage", f"pytest refused to start (usage error): {_start_error(stderr, cwd)}"
    if ev.pytest_exit == 3 or (ev.pytest_exit is None and ev.exit_code not in (0, None)):
        return "internal", f"pytest or a plugin failed at start: {_start_error(stderr, cwd, stdout)}"
    return None


def _collection(
    ev: Evidence,
    collect: list[RaisedError],
    touched: list[str],
    repo_modules: Collection[str],
    repo_defines: Collection[tuple[str, str]],
) -> tuple[str, str] | None:
    """Collection failed: the environment's only if every error is a module neither the
    repo nor the interpreter has, or a marker no file of the repo registers."""
    markers = {nodeid: name for what, name, nodeid in ev.missing if what == "marker"}
    modules: set[str] = set()
    unknown: set[str] = set()
    for e in collect:
        where = {posixpath.normpath(f.file) for f in e.frames} | {(e.nodeid or "").split("::")[0]}
        if where & set(touched):
            return None
        marker = markers.get(e.nodeid or "")
        if e.phase == "collect" and marker is not None and ("marker", marker) not in repo_defines:
            unknown.add(marker)
            continue
        m = _NO_MODULE.search(e.message)
        if not (e.is_a("ImportError") and m) or m[1].split(".")[0] in repo_modules:
            return None  # a fault of the code, not of the environment
        modules.add(m[1])
    said = []
    if modules:
        said.append(f"collection imports {_quoted(modules)}, which neither the repo nor the interpreter has")
    if unknown:
        said.append(
            f"the tests use marker {_quoted(unknown)} under --strict-markers, which no file of "
            "the repo registers (a plugin the interpreter lacks)"
        )
    return ("missing_module" if modules else "unknown_marker"), "; ".join(said)


def _missing_fixtures(
    ev: Evidence, touched: list[str], repo_defines: Collection[tuple[str, str]]
) -> tuple[str, str] | None:
    """Tests ran: the environment's only if every test that failed or errored errored at
    setup on a fixture pytest found nowhere and no file of the repo defines (a plugin's),
    and the patch touched none of their files."""
    fixtures: dict[str, set[str]] = {}
    for what, name, nodeid in ev.missing:
        if what == "fixture":
            fixtures.setdefault(nodeid, set()).add(name)
    bad = [t for t in ev.tests if t.verdict in ("failed", "errored")]
    if not fixtures or ev.pytest_exit != 1 or not bad:
        return None
    if any(t.collection or t.nodeid not in fixtures for t in bad):
        return None
    if any(e.phase != "setup" or e.nodeid not in fixtures for e in ev.errors):
        return None
    names = {n for t in bad for n in fixtures[t.nodeid]}
    if any(("fixture", n) in repo_defines for n in names):
        return None
    if {posixpath.normpath(t.nodeid.split("::")[0]) for t in bad} & set(touched):
        return None
    return (
        "missing_fixture",
        f"the tests request fixture {_quoted(names)}, which neither the repo nor the "
        "interpreter's plugins define",
    )


def pristine_fault(
    fault: tuple[str, str], pristine: Run, found: tuple[str, str] | None, timeout_s: float
) -> EnvFault | None:
    """The `EnvFault` of a run whose ``fault`` the unpatched repo's run shows the same way
    (``found``: its own `env_fault`), else None."""
    if found is None or found[0] != fault[0] or (fault[0] in _NAMED and found[1] != fault[1]):
        return None
    return EnvFault(
        kind=fault[0],
        message=fault[1],
        pristine_exit_code=pristine.evidence.exit_code,
        pristine_failures=tuple(f.failure for f in failures(pristine.evidence, timeout_s)),
        pristine_stderr=pristine.stderr[-2000:],
    )


# -- what the repo defines ---------------------------------------------------------------


def _marker_name(entry: str) -> str:
    """A ``markers`` line's name, as pytest reads it (``name(args): help``)."""
    return entry.split(":")[0].split("(")[0].strip()


def _config_markers(name: str, text: str) -> list[str]:
    """The ``markers`` entries of one pytest configuration file (``name`` its basename)."""
    try:
        if name.endswith(".toml"):
            data = tomllib.loads(text)
            tables = [data.get("pytest")] if name != "pyproject.toml" else []
            tool = data.get("tool", {}).get("pytest", {})
            tables += [tool, tool.get("ini_options")] if isinstance(tool, dict) else []
            values = [t.get("markers") for t in tables if isinstance(t, dict)]
        else:
            cp = configparser.RawConfigParser()
            cp.read_string(text)
            section = {"setup.cfg": "tool:pytest"}.get(name, "pytest")
            values = [cp.get(section, "markers", fallback=None)]
    except (tomllib.TOMLDecodeError, configparser.Error, AttributeError):
        return []
    out: list[str] = []
    for v in values:
        if isinstance(v, str):
            out += v.splitlines()
        elif isinstance(v, list):
            out += [x for x in v if isinstance(x, str)]
    return out


def _callee(node: ast.expr) -> str:
    """The last name of what a decorator or call names (``pytest.fixture`` → ``fixture``)."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _fixture_name(call: ast.expr, default: str | None) -> str | None:
    """The name a fixture decorator or ``fixture(...)`` call gives: its ``name=``, else ``default``."""
    if isinstance(call, ast.Call):
        for kw in call.keywords:
            if kw.arg == "name" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                return kw.value.value
    return default


def _python_defines(text: str) -> set[tuple[str, str]]:
    """Fixtures (decorated functions, ``x = pytest.fixture(f)``) and registered markers
    (``config.addinivalue_line("markers", "name: ...")``) of one Python file."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    found: set[tuple[str, str]] = set()
    fixture = ("fixture", "yield_fixture")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for d in node.decorator_list:
                if _callee(d) in fixture:
                    found.add(("fixture", _fixture_name(d, node.name) or node.name))
        elif (
            isinstance(node, ast.Assign)
            and _callee(node.value) in fixture
            and isinstance(node.value, ast.Call)
        ):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            named = _fixture_name(node.value, None)
            found |= {("fixture", n) for n in ([named] if named else targets)}
        elif isinstance(node, ast.Call) and _callee(node) == "addinivalue_line" and len(node.args) == 2:
            key, line = (a.value if isinstance(a, ast.Constant) else None for a in node.args)
            if key == "markers" and isinstance(line, str):
                found.add(("marker", _marker_name(line)))
    return found


def defined_in(path: str, text: str, want: Collection[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which of ``want`` (``(what, name)``: ``fixture`` or ``marker``) the repo file at
    ``path`` defines: a fixture of a Python file, a marker its ``markers`` configuration or
    a Python file registers."""
    base = posixpath.basename(path)
    if base.endswith(".py"):
        found = _python_defines(text)
    else:
        found = {("marker", _marker_name(m)) for m in _config_markers(base, text)}
    return found & set(want)
