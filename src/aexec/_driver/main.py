"""The in-candidate driver: the first code that runs inside the boundary.

It is run by path (``python -s driver.py SPEC.json``) with the candidate's interpreter,
so it imports only the standard library (plus pytest, for test runs) and, by path, the
wire it shares with the library (``aexec/_wire.py``: its `Instructions` in, its report
records out) and its own parts in ``_driver/`` (see `_load`):

    reporting   the report file: one JSON record per event, flushed line by line
    kernel      the boundary's kernel calls: namespaces, cgroups, uid, rlimits
    view        the filesystem view (a new root)
    template    the fork server's template of a view's read-only part, which runs clone
    seccomp     the candidate's syscall filter (a BPF deny-list)
    plugin      the pytest plugin of a pytest run: its hooks' events as report records
    runners     what a run does: a snippet, a command, a compile check, pytest, steps
    serve       the fork server (``driver.py --serve``), which forks runs from a warm interpreter
    pyc         the bytecode job (``driver.py --bytecode``), not a run

This file is the run's process tree. With a ``box`` in the spec (root, namespaces
available) a run is three processes::

    outer   joins the run's cgroups, dies with aexec (PR_SET_PDEATHSIG), unshares
            PID + network + mount + IPC + UTS namespaces, and waits for:
    init    pid 1 of the new namespaces: names the host "aexec", builds the filesystem
            view (a new root of what the run needs: system dirs, toolchain, a cut /etc,
            a few /dev nodes, a fresh /proc, the scratch root writable and its tmp at
            /tmp), then forks, detaches the host's root, and reaps:
    child   the candidate: drops to the run's own unprivileged uid, no_new_privs,
            the syscall filter, kernel rlimits; then runs the snippet, command, or pytest.

The fork server forks a boxed run straight into its namespaces as their init, so it
needs no outer process. When init dies, the kernel kills everything left in its PID
namespace. Any step of the boundary that fails aborts the run (exit 125) rather than
run it with less. A child that is not pytest ends through `leave`: the interpreter's
shutdown as a program can see it, without freeing the driver's heap object by object.
"""

import sys


def driver_failed(error: "BaseException") -> "NoReturn":
    """The driver itself failed before the candidate's code started (a part that does not
    load, a module of its own interpreter's that does not import): nothing of the candidate
    ran. Its traceback, then one line naming the driver (the line aexec reports), and the
    exit status of a run that never started (`wire.BOX_FAILED`, with no ``main`` record)."""
    try:
        import traceback

        traceback.print_exception(type(error), error, error.__traceback__)
        what = "".join(traceback.format_exception_only(type(error), error)).strip().replace("\n", " ")
    except Exception:  # the interpreter's traceback module may be what is broken
        what = f"{type(error).__name__}: {error}"
    print(f"aexec: its driver failed before the candidate started, nothing ran: {what}", file=sys.stderr)
    sys.stderr.flush()
    import os

    os._exit(125)  # wire.BOX_FAILED (the wire may be what failed to load)


try:
    import contextlib
    import gc
    import json
    import os
    import signal
    import traceback
    from typing import TYPE_CHECKING, Any
except Exception as e:
    driver_failed(e)

_HERE = os.path.dirname(os.path.abspath(__file__))


# The driver runs in the candidate's interpreter, as old as CPython 3.6. This file is
# written so 3.6 runs it as it stands (its annotations quoted); the wire and the parts are
# typed for 3.11 (lazily: ``from __future__ import annotations``) and, before 3.8 (no such
# future on 3.6; no ``Literal``, ``TypedDict`` on 3.7), compiled without their types
# (``_driver/compat.py``).
_OLD = sys.version_info < (3, 8)


def _load(path: "str", name: "str", **given: "Any") -> "Any":
    """The Python file ``path`` as a module kept out of ``sys.modules`` (a candidate's own
    module of that name is never shadowed, and no aexec package is imported), with
    ``given`` in its globals before it runs: the modules it would import from aexec."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(given)
    if _OLD and name != "_aexec_driver_compat":
        # Typed for mypy with what this interpreter cannot run: its types taken away.
        module.__dict__["_aexec_anything"] = _compat.anything
        exec(_compat.compile_for_old(path), module.__dict__)
    else:
        spec.loader.exec_module(module)
    return module


def _part(name: "str", **given: "Any") -> "Any":
    return _load(os.path.join(_HERE, "_driver", f"{name}.py"), f"_aexec_driver_{name}", **given)


if TYPE_CHECKING:
    from typing import NoReturn  # 3.6.2+: not at run time

    from .. import _wire as wire
    from .._wire import Instructions
    from ._driver import compat as _compat
    from ._driver import kernel, plugin, pyc, reporting, runners, seccomp, serve, suites, template, view
else:
    try:
        if _OLD:
            _compat = _load(os.path.join(_HERE, "_driver", "compat.py"), "_aexec_driver_compat")
        wire = _load(os.path.join(os.path.dirname(_HERE), "_wire.py"), "_aexec_wire")
        reporting = _part("reporting", wire=wire)
        kernel = _part("kernel")
        view = _part("view", kernel=kernel)
        template = _part("template", kernel=kernel, view=view)
        seccomp = _part("seccomp", kernel=kernel)
        plugin = _part("plugin", wire=wire, reporting=reporting)
        runners = _part("runners", wire=wire, reporting=reporting, plugin=plugin)
        suites = _part("suites", wire=wire, reporting=reporting)
        runners.RUNNERS.update(suites.RUNNERS)
        serve = _part("serve", wire=wire, kernel=kernel, runners=runners, template=template)
        pyc = _part("pyc")
    except Exception as e:
        driver_failed(e)


def run_candidate(spec: "Instructions", started: "int") -> None:
    """The candidate's process: the boundary's last steps, then the runner. Once the
    driver's own steps are done it writes one byte to ``started`` (`be_init`'s pipe) and
    closes it; until then, any failure is the driver's (`driver_failed`)."""
    runner = spec["runner"]
    suite = runner == "pytest" or runner in suites.RUNNERS
    try:
        # The driver's own directory is not the candidate's: take it off sys.path.
        sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != _HERE]
        sys.path[0:0] = spec["sys_path"]
        box = spec["box"]
        if box:
            kernel.drop_privileges(box)
            if box["seccomp"]:
                seccomp.install()  # after no_new_privs, before anything of the candidate's
        os.chdir(spec["cwd"])
        runners.feed_stdin(spec)
        report = reporting.Report(spec["report"])
        kernel.apply_limits(spec)
        if not suite:
            for name in runners.FIRST_USE_IMPORTS:
                __import__(name)
        os.write(started, b"S")
        os.close(started)
    except kernel.BoxError as e:
        box_failed(e)
    except Exception as e:
        driver_failed(e)
    if suite:
        # A test runner (pytest and its plugins, unittest, Django, sympy) gets the
        # interpreter's whole shutdown, as the plain command does.
        sys.exit(runners.RUNNERS[runner](spec, report))
    ours = set(sys.modules)
    # The driver's own objects are never garbage: the collector no longer walks them
    # (nor, at exit, copies every page of a forked server's heap to do so).
    if hasattr(gc, "freeze"):  # 3.7+
        gc.freeze()
    leave(runners.RUNNERS[runner](spec, report), ours)


def leave(code: "int", ours: "set[str]") -> None:
    """Exit as the interpreter's own shutdown does, as far as a program can tell, without
    tearing down the driver's heap object by object (most of a trivial run's CPU).

    In CPython's order (``Py_FinalizeEx``): non-daemon threads are joined, ``atexit``
    callbacks run, the modules the candidate imported are dropped, the snippet's globals
    cleared as ``__main__``'s are and the garbage collected (so their objects'
    finalizers run and open files are flushed), then stdout and stderr are flushed (exit
    status 120 if stdout cannot be, as CPython's). What is left unfreed is the driver's
    own, which nothing of the candidate's refers to.
    """
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:
        traceback.print_exc()
    atexit._run_exitfuncs()
    flushed = _flushed()
    for name in [n for n in sys.modules if n not in ours]:
        del sys.modules[name]
    for namespace in runners.MAIN_GLOBALS:
        _clear_globals(namespace)
    gc.collect()
    if not (_flushed() and flushed):
        code = 120
    os._exit(code)


def _clear_globals(namespace: "dict[str, Any]") -> None:
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


def _flushed() -> "bool":
    """Flush stdout and stderr as the interpreter does at exit: False if stdout failed."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            ok = ok and stream is not sys.stdout
    return ok


def box_failed(error: "kernel.BoxError") -> None:
    print(f"aexec: the boundary could not be built, nothing ran: {error}", file=sys.stderr)
    os._exit(wire.BOX_FAILED)


def main() -> None:
    """Build the boundary, then be the run's init (see the module docstring)."""
    if sys.argv[1] == "--bytecode":
        pyc.write_bytecode(json.load(sys.stdin))
        return
    as_init = False  # already the init of new namespaces (forked so by the fork server)
    spec, tree = None, None  # read by the fork server; its view's template
    if sys.argv[1] == "--serve":
        spec_path, as_init, spec, tree = serve.serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        sys.argv[1:] = [spec_path]
    if spec is None:
        with open(sys.argv[1], "rb") as f:
            spec = json.loads(f.read())
    box = spec.get("box")
    try:
        if box:
            # Die with aexec, even if it is SIGKILLed; if it already died, do nothing.
            kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
            if _parent_pid(as_init) not in box["supervisor_pids"]:  # aexec, or its fork server
                os._exit(wire.BOX_FAILED)
        kernel.enter_cgroups(spec["cgroups"])
        if box and not as_init:
            kernel.unshare()
    except kernel.BoxError as e:
        box_failed(e)
    if box:
        if not as_init:
            init = os.fork()
            if init != 0:
                _, status = os.waitpid(init, 0)
                os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
        try:
            if not as_init:
                kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
            kernel.name_host()
            view.build_view(box, tree)
        except (kernel.BoxError, OSError) as e:
            box_failed(kernel.BoxError(str(e)))
    be_init(spec)


def _parent_pid(as_init: "bool") -> "int":
    """The parent's pid as the supervisor knows it. The init of a new PID namespace has
    no parent in it (``getppid()`` is 0), but until it mounts its own /proc, /proc is the
    host's, where its parent is named."""
    if not as_init:
        return os.getppid()
    try:
        fd = os.open("/proc/self/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            stat = os.read(fd, 4096)
        finally:
            os.close(fd)
        return int(stat.rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def be_init(spec: "Instructions") -> None:
    """Fork the candidate, reap everything, report its end.

    In a PID namespace this process is the init: the candidate is not, so signals it
    sends itself behave as usual, and orphans are reaped. Its wait status and rusage
    (the whole tree it reaped) are reported here, where a signal death is still visible.
    """
    heard, started = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(heard)
        run_candidate(spec, started)
    os.close(started)
    view.release_host()
    while True:
        try:
            reaped, status, rusage = os.wait4(-1, 0)
        except InterruptedError:
            continue
        if reaped == pid:
            break
    os.set_blocking(heard, False)
    try:
        began = os.read(heard, 1) == b"S"
    except OSError:
        began = False
    if not began:
        # The driver's child ended before the candidate's code started: no `main` record.
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            print(
                f"aexec: its driver was killed (signal {sig}) before the candidate started", file=sys.stderr
            )
        os._exit(wire.BOX_FAILED)
    report = reporting.Report(spec["report"])
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        report.write("main", exit=None, signal=sig)
        code = 128 + sig
    else:
        code = os.WEXITSTATUS(status)  # exited: WIFSIGNALED is not
        report.write("main", exit=code, signal=None)
    report.write("usage", cpu_s=rusage.ru_utime + rusage.ru_stime, maxrss_kib=rusage.ru_maxrss)
    os._exit(code)


if __name__ == "__main__":
    main()
