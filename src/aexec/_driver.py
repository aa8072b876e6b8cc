"""The in-candidate driver: the first code that runs inside the boundary.

It is run by path (``python -s _driver.py SPEC.json``) with the candidate's interpreter,
so it imports nothing of aexec and only the standard library (plus pytest, for test
runs). It applies the kernel limits to itself, runs the candidate, and appends one JSON
record per event to the report file, flushed line by line, so that whatever was
reported before a kill survives it.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from typing import Any

FRAME_CAP = 32
MESSAGE_CAP = 4096


class Report:
    def __init__(self, path: str) -> None:
        self._f = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def write(self, kind: str, **fields: Any) -> None:
        fields["kind"] = kind
        try:
            self._f.write(json.dumps(fields, default=repr) + "\n")
        except (OSError, ValueError):
            pass  # the candidate closed or broke our file; the exit code still speaks


def qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def describe(exc: BaseException) -> dict[str, Any]:
    """An exception as plain data: type, MRO, message, innermost frames."""
    if isinstance(exc, SyntaxError) and exc.filename:
        frames = [[exc.filename, exc.lineno or 0, "<module>"]]
    else:
        tb = traceback.extract_tb(exc.__traceback__)[-FRAME_CAP:]
        frames = [[f.filename, f.lineno or 0, f.name] for f in tb]
    try:
        message = str(exc)
    except Exception:  # a hostile __str__
        message = "<unprintable>"
    return {
        "type": qualname(type(exc)),
        "bases": [qualname(c) for c in type(exc).__mro__],
        "message": message[:MESSAGE_CAP],
        "errno": getattr(exc, "errno", None) if isinstance(exc, OSError) else None,
        "frames": frames,
    }


def apply_limits(spec: dict[str, Any]) -> None:
    for name, value in spec["rlimits"].items():
        which = getattr(resource, name)
        resource.setrlimit(which, (value, value))


def run_snippet(spec: dict[str, Any], report: Report) -> int:
    import runpy

    path = spec["snippet"]
    sys.argv = [path]
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = e.code
        report.write("exit", code=repr(code))
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException as e:
        report.write("exception", phase="run", **describe(e))
        traceback.print_exc()
        return 1
    return 0


def run_command(spec: dict[str, Any], report: Report) -> int:
    import subprocess

    try:
        proc = subprocess.Popen(spec["argv"], cwd=spec["cwd"])
    except OSError as e:
        report.write("exception", phase="spawn", **describe(e))
        print(f"aexec: cannot run {spec['argv'][0]!r}: {e}", file=sys.stderr)
        return 127
    _, status, _ = os.wait4(proc.pid, 0)
    if os.WIFSIGNALED(status):
        report.write("child", exit=None, signal=os.WTERMSIG(status))
        return 128 + os.WTERMSIG(status)
    code = os.waitstatus_to_exitcode(status)
    report.write("child", exit=code, signal=None)
    return code


def compile_snippet(spec: dict[str, Any], report: Report) -> int:
    with open(spec["snippet"], encoding="utf-8") as f:
        source = f.read()
    try:
        compile(source, spec["snippet"], "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        report.write("exception", phase="compile", **describe(e))
        traceback.print_exc(limit=0)
        return 1
    return 0


SKIP_DIRS = {".git", "__pycache__", ".tox", ".venv", "venv", ".eggs", "node_modules"}


def compile_tree(spec: dict[str, Any], report: Report) -> int:
    import importlib

    root = spec["cwd"]
    failed = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as f:
                    compile(f.read(), path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError) as e:
                failed += 1
                report.write("exception", phase="compile", **describe(e))
                print("".join(traceback.format_exception_only(e)), end="", file=sys.stderr)
    if failed:
        return 1
    for module in spec["import_modules"]:
        try:
            importlib.import_module(module)
        except BaseException as e:
            failed += 1
            report.write("exception", phase="import", module=module, **describe(e))
            traceback.print_exc()
    return 1 if failed else 0


class Reporter:
    """A pytest plugin: per-test verdicts from pytest's own hooks, not its terminal text."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.verdicts: dict[str, str] = {}

    def pytest_collection_finish(self, session: Any) -> None:
        self.report.write("collected", count=len(session.items))

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.report.write("collect_error", nodeid=report.nodeid, text=str(report.longrepr)[:MESSAGE_CAP])

    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        exc = call.excinfo.value
        phase = getattr(report, "when", None) or "collect"
        if phase == "collect" and exc.__cause__ is not None:
            exc = exc.__cause__  # pytest wraps SyntaxError/ImportError in CollectError
        self.report.write("exception", phase=phase, nodeid=node.nodeid, **describe(exc))

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.report.write("start", nodeid=nodeid)

    def pytest_runtest_logreport(self, report: Any) -> None:
        prior = self.verdicts.get(report.nodeid)
        if report.when == "setup":
            verdict = "errored" if report.failed else "skipped" if report.skipped else None
        elif report.when == "call":
            verdict = "passed" if report.passed else "skipped" if report.skipped else "failed"
            if prior == "failed":
                verdict = prior  # a failed subtest report is not undone by the test's own pass
        else:  # teardown
            verdict = "errored" if report.failed and prior in (None, "passed") else prior
        if verdict is not None:
            self.verdicts[report.nodeid] = verdict

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.report.write("test", nodeid=nodeid, verdict=self.verdicts.get(nodeid, "errored"))


def run_pytest(spec: dict[str, Any], report: Report) -> int:
    try:
        import pytest
    except BaseException as e:
        report.write("exception", phase="import", **describe(e))
        traceback.print_exc()
        return 1
    rc = pytest.main(list(spec["pytest_args"]), plugins=[Reporter(report)])
    report.write("end", exitstatus=int(rc))
    return int(rc)


RUNNERS = {
    "snippet": run_snippet,
    "command": run_command,
    "compile_snippet": compile_snippet,
    "compile_tree": compile_tree,
    "pytest": run_pytest,
}


def run_candidate(spec: dict[str, Any]) -> None:
    # The driver's own directory is not the candidate's: take it off sys.path.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != here]
    sys.path[0:0] = spec["sys_path"]
    os.chdir(spec["cwd"])
    report = Report(spec["report"])
    apply_limits(spec)
    sys.exit(RUNNERS[spec["runner"]](spec, report))


def main() -> None:
    """Be the run's first process: fork the candidate, reap everything, report its end.

    In a PID namespace this process is the init: the candidate is not, so signals it
    sends itself behave as usual, and orphans are reaped. Its wait status and rusage
    (the whole tree it reaped) are reported here, where a signal death is still visible.
    """
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    pid = os.fork()
    if pid == 0:
        run_candidate(spec)
    while True:
        try:
            reaped, status, rusage = os.wait4(-1, 0)
        except InterruptedError:
            continue
        if reaped == pid:
            break
    report = Report(spec["report"])
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        report.write("main", exit=None, signal=sig)
        code = 128 + sig
    else:
        code = os.waitstatus_to_exitcode(status)
        report.write("main", exit=code, signal=None)
    report.write("usage", cpu_s=rusage.ru_utime + rusage.ru_stime, maxrss_kib=rusage.ru_maxrss)
    os._exit(code)


if __name__ == "__main__":
    main()
