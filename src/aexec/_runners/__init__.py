"""The Python test runners of a ``run_suite`` (issue 29): one small object per runner.

``pytest`` (the default, unchanged), ``unittest`` (``python -m unittest``), ``django``
(the repo's ``tests/runtests.py``) and ``sympy`` (``bin/test``). Each says, with no I/O:

* ``argv``: the command it stands for, as the driver runs it in-process (its part
  ``_driver/suites.py`` installs the structured hooks: a ``unittest`` result class,
  sympy's reporter) — the selection's labels appended;
* ``labels``: SWE-bench's test directives for it, from the oracle ``test_patch``'s paths
  (``get_test_directives``) or, failing that, from the expected test names;
* ``touches_oracle``: the tamper scope — its own test tree and entry point, and for every
  runner what runs in its process before the tests do (``sitecustomize.py``,
  ``usercustomize.py``, ``*.pth``, a test package's ``__init__.py``);
* ``same_test``: the two forms of a unittest name (``t (m.C)`` and Python 3.11's
  ``t (m.C.t)``) are one test.

`runner_for_instance` chooses the runner of a SWE-bench instance.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import attrs

from .._types import RUNNER_NAMES, RunnerName, TestIds

__all__ = [
    "OWN_RUNNERS",
    "RUNNERS",
    "RUNNER_NAMES",
    "SuiteRunner",
    "ids_of_instance",
    "runner_for_instance",
    "same_test",
]

#: The runners beyond pytest: their ids are not pytest node ids.
OWN_RUNNERS: Final[tuple[RunnerName, ...]] = ("unittest", "django", "sympy")

#: What runs in any Python process before its tests do: never the candidate's to change.
STARTUP_FILES: Final = frozenset({"sitecustomize.py", "usercustomize.py", "conftest.py"})
#: SWE-bench's ``NON_TEST_EXTS``: a test patch's files that are not test directives.
NON_TEST_EXTS: Final = (
    ".json",
    ".png",
    "csv",
    ".txt",
    ".md",
    ".jpg",
    ".jpeg",
    ".pkl",
    ".yml",
    ".yaml",
    ".toml",
)

#: ``name (module.Class)`` or ``name (module.Class.name)``: a unittest test's str().
#: A ``-k`` keyword no test's name holds: an empty selection runs no test.
NOTHING: Final = "aexec_selects_no_test"
_UNITTEST_ID = re.compile(r"^(?P<name>\S+) \((?P<where>[\w.]+)\)$")
_DIFF_PATH = re.compile(r"^diff --git a/.* b/(.*)$", re.M)


def _is_test_package_init(path: str) -> bool:
    """A package of tests' ``__init__.py``: under a ``tests`` or ``test_*`` directory, or a
    top-level ``test`` one (not a framework's ``django/test/`` or ``sympy/testing/``)."""
    parts = path.split("/")
    dirs = parts[:-1]
    return parts[-1] == "__init__.py" and (
        any(p == "tests" or p.startswith("test_") for p in dirs) or dirs[:1] == ["test"]
    )


def python_suite(runner: str) -> bool:
    """Does ``runner`` run a Python test suite (pytest, or a repo's own runner)?"""
    return runner == "pytest" or runner in OWN_RUNNERS


def touches_startup(path: str) -> bool:
    """Runs in the test process before the tests: a site or user customization, a
    ``.pth`` file, a ``conftest.py``, a test package's ``__init__.py``."""
    name = posixpath.basename(path)
    return name in STARTUP_FILES or name.endswith(".pth") or _is_test_package_init(path)


def unittest_form(test: str) -> tuple[str, str] | None:
    """``(name, module.Class)`` of a unittest id in either form, else None."""
    m = _UNITTEST_ID.match(test)
    if m is None:
        return None
    name, where = m["name"], m["where"]
    if where.endswith("." + name):  # Python 3.11+: module.Class.name
        where = where[: -len(name) - 1]
    return name, where


@attrs.frozen
class SuiteRunner:
    """One Python test runner: its command, its ids and its tamper scope."""

    name: RunnerName
    #: The command it stands for (before the selection's labels).
    command: tuple[str, ...]
    #: Its entry point and runner files (repo-relative): touching one is tampering.
    entry: tuple[str, ...] = ()
    #: Directory names whose files are all the oracle's (``tests``: a whole tree).
    test_trees: tuple[str, ...] = ()

    def argv(self, labels: Sequence[str] | None) -> list[str]:
        """The command with the selection: every test (None), these labels, or none
        (``[]``: a keyword no test name holds; each of the three takes ``-k``)."""
        if labels is not None and not labels:
            return [*self.command, "-k", NOTHING]
        return [*self.command, *(labels or ())]

    def is_test_file(self, path: str) -> bool:
        parts = path.split("/")
        base = parts[-1]
        if self.name == "django":
            return parts[0] in self.test_trees
        if self.name == "sympy":
            return any(p in self.test_trees for p in parts[:-1])
        return (
            (base.startswith("test") and base.endswith(".py"))
            or "tests" in parts[:-1]
            or "test" in parts[:-1]
        )

    def touches_oracle(self, paths: Iterable[str]) -> bool:
        """Does a patch touching ``paths`` touch this runner's oracle: a test file, the
        runner's entry or its files, or what runs in its process before the tests?"""
        for path in map(posixpath.normpath, paths):
            if path in self.entry or touches_startup(path) or self.is_test_file(path):
                return True
        return False

    def labels(self, test_patch_paths: Sequence[str], expected: Iterable[str]) -> tuple[str, ...] | None:
        """SWE-bench's test directives: the test patch's files (Django: as module labels);
        without a test patch, what the expected ids name (None: the whole suite)."""
        paths = [p for p in test_patch_paths if not p.endswith(NON_TEST_EXTS)]
        if paths:
            return tuple(dict.fromkeys(self.directive(p) for p in paths))
        found: list[str] = []
        for test in expected:
            form = unittest_form(test)
            if form is not None and self.name != "sympy":
                found.append(form[1].rsplit(".", 1)[0])
        return tuple(dict.fromkeys(found)) or None

    def directive(self, path: str) -> str:
        """One test patch path as this runner's label (SWE-bench's ``get_test_directives``)."""
        if self.name == "django":
            d = path[: -len(".py")] if path.endswith(".py") else path
            d = d[len("tests/") :] if d.startswith("tests/") else d
            return d.replace("/", ".")
        if self.name == "unittest" and path.endswith(".py"):
            return path[: -len(".py")].replace("/", ".")
        return path


RUNNERS: Final[dict[str, SuiteRunner]] = {
    "unittest": SuiteRunner("unittest", ("-m", "unittest", "-v")),
    "django": SuiteRunner(
        "django",
        ("tests/runtests.py", "--verbosity", "2", "--settings=test_sqlite", "--parallel", "1"),
        entry=("tests/runtests.py", "tests/test_sqlite.py"),
        test_trees=("tests",),
    ),
    "sympy": SuiteRunner(
        "sympy",
        ("bin/test", "-C", "--verbose"),
        entry=("bin/test", "sympy/testing/runtests.py", "sympy/utilities/runtests.py"),
        test_trees=("tests",),
    ),
}


def get(name: str) -> SuiteRunner:
    return RUNNERS[name]


def patch_paths(diff: str | None) -> list[str]:
    """The files a diff touches, as SWE-bench reads them (``diff --git a/… b/PATH``)."""
    return [] if not diff else [p.strip() for p in _DIFF_PATH.findall(diff)]


def same_test(expected: str, ran: str) -> bool:
    """One unittest test under its two names (``t (m.C)`` and ``t (m.C.t)``)."""
    a, b = unittest_form(expected), unittest_form(ran)
    return a is not None and a == b


def runner_for_instance(repo: str | None, test_cmd: str | None) -> tuple[RunnerName, str]:
    """The runner of a SWE-bench instance and why: its ``test_cmd`` where it has one,
    else its ``repo`` (``django/django`` → django, ``sympy/sympy`` → sympy), else pytest."""
    if test_cmd:
        try:
            words = shlex.split(test_cmd)
        except ValueError:
            words = test_cmd.split()
        words = [w for w in words if "=" not in w.split("/")[0] or w.startswith("-")]  # VAR=value
        joined = " ".join(words)
        if any(w.endswith("runtests.py") for w in words) and "sympy" not in joined:
            return "django", f"test_cmd {test_cmd!r} runs Django's tests/runtests.py"
        if any(w.endswith("bin/test") for w in words) or "sympy.testing.runtests" in joined:
            return "sympy", f"test_cmd {test_cmd!r} runs sympy's bin/test"
        if "unittest" in words:
            return "unittest", f"test_cmd {test_cmd!r} runs python -m unittest"
        if "pytest" in joined or "py.test" in joined:
            return "pytest", f"test_cmd {test_cmd!r} runs pytest"
    name = (repo or "").strip().lower().rstrip("/")
    if name == "django/django":
        return "django", "repo django/django: SWE-bench runs ./tests/runtests.py"
    if name == "sympy/sympy":
        return "sympy", "repo sympy/sympy: SWE-bench runs bin/test -C --verbose"
    return "pytest", f"repo {repo!r}: SWE-bench runs pytest" if repo else "the default: pytest"


def repo_of_instance_id(instance_id: str) -> str | None:
    """``django/django`` of ``django__django-11099`` (SWE-bench's id: owner__name-number)."""
    m = re.fullmatch(r"(?P<owner>[\w.-]+?)__(?P<name>[\w.-]+)-\d+", instance_id)
    return None if m is None else f"{m['owner']}/{m['name']}"


#: The repos whose SWE-bench parser is ``parse_log_pytest_options`` (swebench's
#: ``MAP_REPO_TO_PARSER_PY``): their expected ids are that parser's names, not pytest's.
_PYTEST_OPTIONS: Final = frozenset({"psf/requests", "pydicom/pydicom", "pylint-dev/pylint"})


def ids_of_instance(instance_id: str) -> TestIds:
    """Whose names a SWE-bench instance's expected ids are (`aexec._stages.grade.swebench_id`)."""
    repo = repo_of_instance_id(instance_id)
    if repo == "matplotlib/matplotlib":  # ``parse_log_matplotlib``
        return "matplotlib"
    return "pytest_options" if repo in _PYTEST_OPTIONS else "pytest"


def choose_runner(
    ident: str, has: Callable[[str], bool], test_cmd: str | None, expected: Sequence[str]
) -> tuple[RunnerName, str]:
    """An instance's runner and why: its ``test_cmd``, else the repo its SWE-bench id
    names (``django__django-11099`` → django/django), else what the checkout is (``has``:
    is this relative path a file of it? Django's ``tests/runtests.py``, sympy's runner) or
    what its expected names are (unittest's ``test_x (module.Class)``), else pytest."""
    runner, reason = runner_for_instance(repo_of_instance_id(ident), test_cmd)
    if test_cmd or runner != "pytest":
        return runner, reason
    if has("tests/runtests.py") and has("django/__init__.py"):
        return "django", "the checkout is Django's (tests/runtests.py beside django/)"
    if has("sympy/testing/runtests.py") or has("sympy/utilities/runtests.py"):
        return "sympy", "the checkout is sympy's (sympy/testing/runtests.py)"
    unittest_names = any(unittest_form(t) is not None for t in expected)
    if expected and unittest_names and all("::" not in t for t in expected):
        return "unittest", "the expected tests are unittest names (test_x (module.Class))"
    return runner, reason
