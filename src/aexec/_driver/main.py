"""The driver's way in (``main``, which the entry ``__main__.py`` calls once the package
has loaded): which job a command line asks for, and a run from its spec to its end.

A run is `contain.contain` (the boundary, step by step, until the candidate's process
stands ready), then the runner, then `leave`: a child that is not a test runner ends
as the interpreter's shutdown would, as far as a program can see it, without freeing
the driver's heap object by object.
"""

from __future__ import annotations

# Imported as the driver loads (a fork server's runs have it), not as a run ends: in a
# forked child the import machinery's first run cost ~100 copied pages and ~0.3 ms.
import atexit
import contextlib
import gc
import json
import os
import sys
import traceback
from typing import TYPE_CHECKING, Any

from . import contain, kernel, pyc, runners, seccomp, serve

if TYPE_CHECKING:
    from .reporting import Report
    from .wire import Instructions


def main() -> None:
    """``SPEC.json`` (a run), ``--serve MODE SUPERVISOR_PID FD [STARTUP_DIR]`` (the fork server, whose
    forked runs return here with their spec), ``--bytecode`` (the bytecode job) or
    ``--seccomp-probe``."""
    if sys.argv[1] == "--bytecode":
        pyc.write_bytecode(json.load(sys.stdin))
        return
    if sys.argv[1] == "--seccomp-probe":
        try:
            seccomp.probe()
        except kernel.BoxError as e:
            raise SystemExit(str(e)) from None
        return
    as_init = False  # already the init of new namespaces (forked so by the fork server)
    spec, tree = None, None  # read by the fork server; its view's template
    if sys.argv[1] == "--serve":
        mode, supervisor, fd, *startup_dir = sys.argv[2:]
        spec_path, as_init, spec, tree = serve.serve(mode, int(supervisor), int(fd), *startup_dir[:1])
        sys.argv[1:] = [spec_path]
    if spec is None:
        with open(sys.argv[1], "rb") as f:
            spec = json.loads(f.read())
    report = contain.contain(spec, tree, as_init)
    run(spec, report)


def run(spec: Instructions, report: Report) -> None:
    """The candidate's process, the boundary built: its runner, then its end."""
    runner = runners.RUNNERS[spec["runner"]]
    if contain.is_suite(spec):
        # A test runner (pytest and its plugins, unittest, Django, sympy) gets the
        # interpreter's whole shutdown, as the plain command does.
        sys.exit(runner(spec, report))
    ours = contain.driver_modules()
    # The driver's own objects are never garbage: the collector no longer walks them
    # (nor, at exit, copies every page of a forked server's heap to do so).
    if hasattr(gc, "freeze"):  # 3.7+
        gc.freeze()
    leave(runner(spec, report), ours)


def leave(code: int, ours: frozenset[str]) -> None:
    """Exit as the interpreter's own shutdown does, as far as a program can tell, without
    tearing down the driver's heap object by object (most of a trivial run's CPU).

    In CPython's order (``Py_FinalizeEx``): non-daemon threads are joined, ``atexit``
    callbacks run, the modules the candidate imported are dropped, the snippet's globals
    cleared as ``__main__``'s are and the garbage collected (so their objects'
    finalizers run and open files are flushed), then stdout and stderr are flushed (exit
    status 120 if stdout cannot be, as CPython's). What is left unfreed is the driver's
    own, which nothing of the candidate's refers to.
    """
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:
        traceback.print_exc()
    atexit._run_exitfuncs()
    flushed = _flushed()
    if not contain.same_modules(ours):  # the candidate imported modules (or took some away)
        for name in [n for n in sys.modules if n not in ours]:
            del sys.modules[name]
    for namespace in runners.MAIN_GLOBALS:
        _clear_globals(namespace)
    gc.collect()
    if not (_flushed() and flushed):
        code = 120
    os._exit(code)


def _clear_globals(namespace: dict[str, Any]) -> None:
    """Set a module's globals to None as CPython's ``_PyModule_ClearDict`` does at exit:
    names with one leading underscore first, then all but ``__builtins__``, in order.
    Their objects are freed as their last reference goes (a file flushed, then closed),
    not in whatever order the collector finalizes a cycle."""
    for first in (True, False):
        for name in list(namespace):
            if type(name) is not str or name == "__builtins__":  # no str subclass's __eq__ runs
                continue
            if not first or (name[:1] == "_" and name[1:2] != "_"):
                with contextlib.suppress(Exception):  # a __del__ it sets off may raise
                    namespace[name] = None


def _flushed() -> bool:
    """Flush stdout and stderr as the interpreter does at exit: False if stdout failed."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            ok = ok and stream is not sys.stdout
    return ok
