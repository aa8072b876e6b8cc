"""The repo's own test runners (issue 29): ``python -m unittest``, Django's
``tests/runtests.py`` and sympy's ``bin/test``, run in the driver's process with their
per-test verdicts read from their own objects, never from their text:

* unittest and Django: a ``unittest.TextTestResult`` subclass installed as
  ``unittest.TextTestRunner``'s result class (Django's runner builds a ``TextTestRunner``
  with no result class of its own), so the run prints what the plain command prints and
  reports each test as it starts and ends;
* sympy: sympy's ``PyTestReporter``, hooked as ``sympy.testing.runtests`` (or the older
  ``sympy.utilities.runtests``) is imported — after ``bin/test`` has set its environment.

A test is named as SWE-bench names it, i.e. as verbose unittest prints it: its
description's last line (``test_x (module.Class)``, ``test_x (module.Class.test_x)`` on
Python 3.11+, or the docstring's first line), and for sympy the test function's name.
A module that fails to import (unittest's ``_FailedTest``, sympy's ``import_error``) is
a collection error, not a test; a runner that cannot start (its entry point missing, an
import it needs failing) is an exception of phase ``collect`` under the entry's name.

A module of the driver's package (see `aexec._driver`). Standard library only.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from . import reporting

if TYPE_CHECKING:
    from .reporting import Report
    from .wire import Instructions


def _failed_import(test: Any) -> bool:
    """unittest's stand-in for a module (or name) its loader could not import."""
    return type(test).__name__ == "_FailedTest" and type(test).__module__ == "unittest.loader"


def _install_result(report: Report) -> None:
    """Make every ``unittest.TextTestRunner`` that names no result class of its own use
    one that reports each test (a subclass of the runner's own, so its output is kept)."""
    import unittest

    base: Any = unittest.TextTestRunner.resultclass

    class Result(base):  # type: ignore[misc]
        def _aexec_name(self, test: Any) -> str:
            try:
                described = str(self.getDescription(test))
            except Exception:
                described = ""
            lines = [ln for ln in described.splitlines() if ln.strip()]
            return lines[-1].strip() if lines else str(test)

        def _aexec_set(self, test: Any, verdict: str, err: Any = None, worse: bool = True) -> None:
            name = self._aexec_name(test)
            verdicts = self.__dict__.setdefault("_aexec_verdicts", {})
            if err is not None and err[1] is not None:
                record = dict(phase="call", nodeid=name, **reporting.describe(err[1]))
                self.__dict__.setdefault("_aexec_pending", {}).setdefault(name, []).append(record)
            rank = {None: -1, "passed": 0, "skipped": 1, "failed": 2, "errored": 3}
            if not worse or rank[verdict] > rank[verdicts.get(name)]:
                verdicts[name] = verdict

        def startTest(self, test: Any) -> None:
            if _failed_import(test):  # reported as a collection error (addError)
                super().startTest(test)
                return
            name = self._aexec_name(test)
            self.__dict__.setdefault("_aexec_verdicts", {})[name] = None
            report.write("start", nodeid=name)
            super().startTest(test)

        def stopTest(self, test: Any) -> None:
            super().stopTest(test)
            if not _failed_import(test):
                self._aexec_finish(self._aexec_name(test))

        def _aexec_finish(self, name: str) -> None:
            verdict = self.__dict__.setdefault("_aexec_verdicts", {}).pop(name, None) or "errored"
            for record in self.__dict__.setdefault("_aexec_pending", {}).pop(name, []):
                report.write("exception", **record)
            report.write("test", nodeid=name, verdict=verdict)

        def addSuccess(self, test: Any) -> None:
            self._aexec_set(test, "passed")
            super().addSuccess(test)

        def addFailure(self, test: Any, err: Any) -> None:
            self._aexec_set(test, "failed", err)
            super().addFailure(test, err)

        def addError(self, test: Any, err: Any) -> None:
            failed_import = _failed_import(test)
            if failed_import or not hasattr(test, "_testMethodName"):
                # A module that did not import, or a class/module fixture (setUpClass):
                # no test of its own started. The first is a collection error.
                name = self._aexec_name(test)
                if failed_import:
                    exc = err[1]
                    report.write("collect_error", nodeid=name, text=f"{type(exc).__name__}: {exc}")
                    report.write("exception", phase="collect", nodeid=name, **reporting.describe(exc))
                else:
                    report.write("exception", phase="setup", nodeid=name, **reporting.describe(err[1]))
                    report.write("test", nodeid=name, verdict="errored")
            else:
                self._aexec_set(test, "errored", err)
            super().addError(test, err)

        def addSkip(self, test: Any, reason: str) -> None:
            self._aexec_set(test, "skipped")
            super().addSkip(test, reason)

        def addExpectedFailure(self, test: Any, err: Any) -> None:
            self._aexec_set(test, "skipped")  # as pytest's xfail
            super().addExpectedFailure(test, err)

        def addUnexpectedSuccess(self, test: Any) -> None:
            self._aexec_set(test, "failed")  # unittest's run fails on it
            super().addUnexpectedSuccess(test)

        def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:
            if err is not None:
                failed = issubclass(err[0], test.failureException)
                self._aexec_set(test, "failed" if failed else "errored", err)
            super().addSubTest(test, subtest, err)

    Result.__name__ = Result.__qualname__ = base.__name__
    unittest.TextTestRunner.resultclass = Result


def _cannot_start(report: Report, entry: str, exc: BaseException) -> int:
    import traceback

    report.write("collect_error", nodeid=entry, text=f"{type(exc).__name__}: {exc}")
    report.write("exception", phase="collect", nodeid=entry, **reporting.describe(exc))
    traceback.print_exception(type(exc), exc, exc.__traceback__)  # 3.6: three arguments
    report.write("end", exitstatus=1)
    return 1


def _run_script(spec: Instructions, report: Report, script: str) -> int:
    """``python SCRIPT ARGS`` in this process: its directory first on ``sys.path``."""
    import runpy

    path = os.path.join(spec["cwd"], script)
    if not os.path.isfile(path):
        return _cannot_start(report, script, FileNotFoundError(2, f"the checkout has no {script}"))
    sys.argv = [script, *spec["argv"][1:]]
    sys.path.insert(0, os.path.dirname(path))
    code: Any = 0
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = e.code
    except (ImportError, SyntaxError) as e:  # the script's own imports: it never started
        return _cannot_start(report, script, e)
    except Exception as e:
        import traceback

        report.write("exception", phase="run", **reporting.describe(e))
        traceback.print_exc()
        code = 1
    return _exit_status(report, code)


def _exit_status(report: Report, code: Any) -> int:
    status = 0 if code is None else code if isinstance(code, int) else 1
    if not isinstance(code, (int, type(None))):
        print(code, file=sys.stderr)
    report.write("end", exitstatus=status)
    return status


def run_unittest(spec: Instructions, report: Report) -> int:
    """``python -m unittest ARGS``, with the reporting result class installed."""
    import unittest

    _install_result(report)
    sys.argv = ["python -m unittest", *spec["argv"][2:]]
    try:
        program = unittest.main(module=None, argv=sys.argv, exit=False)
    except SystemExit as e:  # a usage error
        return _exit_status(report, e.code)
    result: Any = program.result
    return _exit_status(report, 0 if result.wasSuccessful() else 1)


def run_django(spec: Instructions, report: Report) -> int:
    """Django's ``tests/runtests.py ARGS``, with the reporting result class installed."""
    _install_result(report)
    return _run_script(spec, report, spec["argv"][0])


# -- sympy ---------------------------------------------------------------------------

SYMPY_RUNTESTS = ("sympy.testing.runtests", "sympy.utilities.runtests")


def _hook_sympy(module: Any, report: Report) -> None:
    """Report each test from sympy's ``PyTestReporter`` (its methods wrapped)."""
    cls = getattr(module, "PyTestReporter", None)
    if cls is None or getattr(cls, "_aexec_hooked", False):
        return
    cls._aexec_hooked = True
    state: dict[str, Any] = {"name": None}

    def finish(verdict: str, exc: BaseException | None = None) -> None:
        name = state["name"]
        if name is None:
            return
        if exc is not None:
            report.write("exception", phase="call", nodeid=name, **reporting.describe(exc))
        report.write("test", nodeid=name, verdict=verdict)
        state["name"] = None

    def wrap(method: str, before: Any) -> None:
        original = getattr(cls, method, None)
        if original is None:
            return

        def hooked(self: Any, *args: Any, **kwargs: Any) -> Any:
            before(self, *args, **kwargs)
            return original(self, *args, **kwargs)

        setattr(cls, method, hooked)

    def entering_test(self: Any, f: Any) -> None:
        name = str(getattr(f, "__name__", f))
        state["name"] = name
        report.write("start", nodeid=name)

    def import_error(self: Any, filename: str, exc_info: Any) -> None:
        root = str(getattr(self, "_root_dir", "") or "")
        rel = os.path.relpath(filename, root) if root else filename
        report.write("collect_error", nodeid=rel, text=f"{exc_info[0].__name__}: {exc_info[1]}")
        report.write("exception", phase="collect", nodeid=rel, **reporting.describe(exc_info[1]))

    def test_exception(self: Any, exc_info: Any) -> None:
        if state["name"] is None:  # a module that raised (not an ImportError) while loading
            report.write("exception", phase="collect", **reporting.describe(exc_info[1]))
            return
        finish("errored", exc_info[1])

    wrap("entering_test", entering_test)
    wrap("test_pass", lambda self, *a, **k: finish("passed"))
    wrap("test_fail", lambda self, exc_info: finish("failed", exc_info[1]))
    wrap("test_exception", test_exception)
    wrap("test_skip", lambda self, *a, **k: finish("skipped"))
    wrap("test_xfail", lambda self, *a, **k: finish("skipped"))  # as pytest's xfail
    wrap("test_xpass", lambda self, *a, **k: finish("passed"))  # sympy's run does not fail on it
    wrap("import_error", import_error)


class _OnImport:
    """A meta-path finder that runs ``then(module)`` right after one of ``names`` is
    executed by its own loader (sympy's runner is imported by ``bin/test``, after it set
    its environment: importing it first would change that)."""

    def __init__(self, names: tuple[str, ...], then: Any) -> None:
        self.names = names
        self.then = then

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.names:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        original = loader.exec_module
        then = self.then

        def exec_module(module: Any) -> None:
            original(module)
            then(module)

        loader.exec_module = exec_module
        return spec


def run_sympy(spec: Instructions, report: Report) -> int:
    """sympy's ``bin/test ARGS``; where the checkout has no ``bin/test`` (sympy's sdists),
    ``sympy.testing.runtests.test`` called as ``bin/test`` calls it."""
    sys.meta_path.insert(0, _OnImport(SYMPY_RUNTESTS, lambda m: _hook_sympy(m, report)))
    script = spec["argv"][0]
    if os.path.isfile(os.path.join(spec["cwd"], script)):
        return _run_script(spec, report, script)
    args = spec["argv"][1:]
    if "-C" in args or "--no-cache" in args:
        os.environ["SYMPY_USE_CACHE"] = "no"
    paths = [a for a in args if not a.startswith("-")]
    try:
        import importlib

        runtests: Any = importlib.import_module(SYMPY_RUNTESTS[0])
    except ImportError as e:
        return _cannot_start(report, "sympy/testing/runtests.py", e)
    ok = runtests.test(*paths, verbose="--verbose" in args or "-v" in args)
    return _exit_status(report, 0 if ok else 1)


RUNNERS = {"unittest": run_unittest, "django": run_django, "sympy": run_sympy}
