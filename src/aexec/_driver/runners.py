"""The runners: what a run does once the boundary is built, one per ``Instructions.runner``
(a snippet, a command, a compile check, pytest, a toolchain's steps), each reporting as
it goes and returning the run's exit status.

A module of the driver's package (see `aexec._driver`).
"""

from __future__ import annotations

import contextlib
import os
import resource
import stat
import sys
import traceback
import types
from typing import TYPE_CHECKING, Any

from . import plugin, reporting, suites, wire

if TYPE_CHECKING:
    from .reporting import Report
    from .wire import Instructions


#: The globals dict a snippet ran in, for the driver's exit (``driver.leave``) to clear
#: as the interpreter clears ``__main__``'s at exit. ``runpy`` returns a copy and drops
#: its module; a snippet whose functions refer to its globals then leaves them to the
#: garbage collector, which may close a file's raw layer before flushing its buffer.
MAIN_GLOBALS: list[dict[str, Any]] = []


def _keep_globals(path: str, left: dict[str, Any] | None, tb: Any) -> None:
    """Find the dict the snippet at ``path`` ran in: its module frame's, in the
    traceback ``tb`` of what it raised, else the ``__globals__`` of a function it left
    in ``left`` (runpy's copy of that dict) or in one of its classes.

    Only exact types are tested and real dicts read, so none of the candidate's code
    (a ``__class__``, ``__eq__`` or metaclass ``__dict__`` of its own) runs here."""

    def ran_here(namespace: dict[str, Any]) -> bool:
        file = namespace.get("__file__")
        return type(file) is str and file == path

    class_dict = type.__dict__["__dict__"]  # a class's own namespace, past its metaclass
    with contextlib.suppress(Exception):  # the candidate's objects: nothing here may fail the run
        while tb is not None:
            if ran_here(tb.tb_frame.f_globals):
                MAIN_GLOBALS.append(tb.tb_frame.f_globals)
                return
            tb = tb.tb_next
        for value in (left or {}).values():
            is_class = issubclass(type(value), type)
            for obj in class_dict.__get__(value).values() if is_class else (value,):
                if (
                    type(obj) is types.FunctionType
                    and obj.__globals__ is not left
                    and ran_here(obj.__globals__)
                ):
                    MAIN_GLOBALS.append(obj.__globals__)
                    return


def feed_stdin(spec: Instructions) -> None:
    """Make the request's stdin (a file: read to its end, it is EOF, never a hang) the
    candidate's fd 0, in place of /dev/null; ``sys.stdin`` has read nothing yet."""
    path = spec.get("stdin_file")
    if path:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        os.dup2(fd, 0)  # the duplicate is inheritable: a command's children read it too
        os.close(fd)


def run_snippet(spec: Instructions, report: Report) -> int:
    import runpy

    path = spec["snippet"]
    assert path is not None  # a snippet runner always has one
    sys.argv = [path]
    try:
        left = runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        _keep_globals(path, None, e.__traceback__)
        code = e.code
        report.write("exit", code=repr(code))
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException as e:
        _keep_globals(path, None, e.__traceback__)
        report.write("exception", phase="run", **reporting.describe(e))
        traceback.print_exc()
        return 1
    _keep_globals(path, left, None)
    return 0


def warm_snippets(times: int = 10) -> None:
    """In the fork server, once: run `run_snippet`'s ``runpy.run_path`` on an empty
    program (``os.devnull``), so that its code (the path hooks' tries, the temporary
    ``__main__`` and ``argv[0]``, which it puts back) has been run often enough to be
    specialized: each forked run of a snippet then writes less of it (3.11: ~25 copied
    pages and ~0.1 ms a run). Nothing of it stays: ``run_path`` caches no importer for a
    path no hook takes, and returns a copy of the empty program's globals."""
    import runpy

    with contextlib.suppress(Exception):  # only a warm-up: a run does it all itself
        for _ in range(times):
            runpy.run_path(os.devnull, run_name="__main__")


def run_command(spec: Instructions, report: Report) -> int:
    import subprocess

    try:
        # The repo's import roots, as a snippet or pytest run gets them on sys.path.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(spec["sys_path"]))
        env.update(spec.get("command_env") or {})
        proc = subprocess.Popen(spec["argv"], cwd=spec["cwd"], env=env)
    except OSError as e:
        report.write("exception", phase="spawn", **reporting.describe(e))
        print(f"aexec: cannot run {spec['argv'][0]!r}: {e}", file=sys.stderr)
        return 127
    _, status, _ = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped here: its finalizer warns of no "subprocess still running"
    if os.WIFSIGNALED(status):
        report.write("child", exit=None, signal=os.WTERMSIG(status))
        return 128 + os.WTERMSIG(status)
    code = os.WEXITSTATUS(status)  # not signaled: exited
    report.write("child", exit=code, signal=None)
    return code


def compile_snippet(spec: Instructions, report: Report) -> int:
    path = spec["snippet"]
    assert path is not None  # a snippet runner always has one
    with open(path, encoding="utf-8") as f:
        source = f.read()
    try:
        compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        report.write("exception", phase="compile", **reporting.describe(e))
        traceback.print_exc(limit=0)
        return 1
    return 0


SKIP_DIRS = {".git", "__pycache__", ".tox", ".venv", "venv", ".eggs", "node_modules"}


def compile_tree(spec: Instructions, report: Report) -> int:
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
                report.write("exception", phase="compile", **reporting.describe(e))
                print("".join(traceback.format_exception_only(type(e), e)), end="", file=sys.stderr)
    if failed:
        return 1
    for module in spec["import_modules"]:
        try:
            importlib.import_module(module)
        except BaseException as e:
            failed += 1
            report.write("exception", phase="import", module=module, **reporting.describe(e))
            traceback.print_exc()
    return 1 if failed else 0


def run_pytest(spec: Instructions, report: Report) -> int:
    try:
        import pytest
    except BaseException as e:
        report.write("exception", phase="import", **reporting.describe(e))
        traceback.print_exc()
        return 1
    reporter = plugin.Reporter(report, pytest.hookimpl, spec.get("canary"))
    rc = pytest.main(list(spec["pytest_args"]), plugins=reporter.plugins)
    report.write("end", exitstatus=int(rc))
    return int(rc)


# -- the steps runner: toolchains of languages beyond Python (aexec._languages) --------


def _pump_step(proc: Any, forward: dict[int, int]) -> dict[int, str]:
    """Drain a step's stdout and stderr pipes until both close: forward each chunk to
    ``forward[fd]`` (the run's own stdout or stderr) and keep its text, capped."""
    import selectors

    cap = wire.STEP_STREAM_CAP
    head: dict[int, bytearray] = {}
    tail: dict[int, bytearray] = {}
    total: dict[int, int] = {}
    sel = selectors.DefaultSelector()
    for f in (proc.stdout, proc.stderr):
        fd = f.fileno()
        head[fd], tail[fd], total[fd] = bytearray(), bytearray(), 0
        sel.register(fd, selectors.EVENT_READ)
    while sel.get_map():
        for key, _ in sel.select():
            fd = int(key.fd)
            try:
                chunk = os.read(fd, 65536)
            except InterruptedError:
                continue
            if not chunk:
                sel.unregister(fd)
                continue
            if fd in forward:
                with contextlib.suppress(OSError):
                    os.write(forward[fd], chunk)
            total[fd] += len(chunk)
            room = cap // 2 - len(head[fd])
            if room > 0:
                head[fd] += chunk[:room]
                chunk = chunk[room:]
            tail[fd] += chunk
            del tail[fd][: max(0, len(tail[fd]) - cap // 2)]
    sel.close()
    out = {}
    for fd in head:
        text = head[fd].decode("utf-8", "replace")
        dropped = total[fd] - len(head[fd]) - len(tail[fd])
        if dropped > 0:
            text += wire.CUT_MARKER.format(dropped=dropped)
        out[fd] = text + tail[fd].decode("utf-8", "replace")
    return out


def _read_evidence(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(wire.STEP_EVIDENCE_CAP).decode("utf-8", "replace")


def run_steps(spec: Instructions, report: Report) -> int:
    """Run the planned toolchain steps in order; stop at the first that fails.

    Each step's stdout and stderr are pipes the driver drains, kept, capped (head and
    tail), in the step's report record with its exit status and evidence file. The
    program's (``run``) streams are also forwarded as they come to the run's stdout and
    stderr, so those are what the program printed; a build step's are written to the
    run's stderr only when it failed (a compiler's successful ``[]`` is not the program's). The run's deadline covers them
    all: the supervisor kills the whole tree, and ``step_start`` says which one was running.
    """
    import subprocess

    code = 0
    for step in spec["steps"]:
        report.write("step_start", name=step["name"])
        env = dict(os.environ, **step["env"])
        limits = step["rlimits"]

        def lower(limits: dict[str, int] = limits) -> None:
            for name, value in limits.items():
                resource.setrlimit(getattr(resource, name), (value, value))

        stdin: Any = subprocess.DEVNULL
        try:
            if step["stdin_file"] is not None:
                stdin = open(os.path.join(step["cwd"], step["stdin_file"]), "rb")  # noqa: SIM115
            proc = subprocess.Popen(
                step["argv"],
                cwd=step["cwd"],
                env=env,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                preexec_fn=lower if limits else None,  # single-threaded child
            )
        except OSError as e:
            message = f"aexec: cannot run {step['argv'][0]!r}: {e}"
            print(message, file=sys.stderr)
            report.write(
                "step", name=step["name"], exit=127, signal=None, stdout="", stderr=message, evidence=None
            )
            return 127
        finally:
            if stdin is not subprocess.DEVNULL:
                stdin.close()
        assert proc.stdout is not None and proc.stderr is not None
        program = step["stdout_is_program"]
        pipes = {proc.stdout.fileno(): 1, proc.stderr.fileno(): 2}
        texts = _pump_step(proc, pipes if program else {})
        out_text, err_text = texts[proc.stdout.fileno()], texts[proc.stderr.fileno()]
        _, status, _ = os.wait4(proc.pid, 0)
        proc.returncode = 0  # reaped here; keep Popen from waiting for it again
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        exit_code = None if signum is not None else os.WEXITSTATUS(status)
        report.write(
            "step",
            name=step["name"],
            exit=exit_code,
            signal=signum,
            stdout=out_text,
            stderr=err_text,
            evidence=_read_evidence(step["evidence_file"]),
        )
        proc.stdout.close()
        proc.stderr.close()
        code = 128 + signum if signum is not None else int(exit_code or 0)
        if code != 0:
            if not program:  # a failed build step's output is the run's stderr
                for text in (out_text, err_text):
                    with contextlib.suppress(OSError):
                        os.write(2, text.encode("utf-8", "replace"))
            return code
    return code


RUNNERS = {
    "snippet": run_snippet,
    "command": run_command,
    "compile_snippet": compile_snippet,
    "compile_tree": compile_tree,
    "pytest": run_pytest,
    "steps": run_steps,
    **suites.RUNNERS,
}
#: The test runners (pytest, and the repo's own: unittest, Django, sympy): a run of one
#: gets the interpreter's whole shutdown, as the plain command does.
SUITES = frozenset(["pytest", *suites.RUNNERS])


#: What the driver imports on first use while a candidate runs: ``runpy.run_path`` on
#: its first call, and printing a traceback (``ast``, for the carets under a failed
#: expression). Imported before the candidate runs, cold and warm alike (the fork server
#: has them already), so no run pays for them (~2 ms of CPU per failed snippet).
FIRST_USE_IMPORTS = ("runpy", "pkgutil", "weakref", "ast")
