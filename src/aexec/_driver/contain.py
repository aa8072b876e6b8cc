"""The boundary, its steps listed once and in order: `contain` (as nsjail's
``containProc``), each step a function of its own.

With a ``box`` in the spec (root, namespaces available) a run is three processes::

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
namespace. Any step of the boundary that fails aborts the run (exit 125,
`wire.BOX_FAILED`) rather than run it with less; any other failure before the
candidate's code starts is the driver's (`driver_failed`).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from . import driver_failed, kernel, reporting, runners, seccomp, view, wire

if TYPE_CHECKING:
    from typing import NoReturn

    from .reporting import Report
    from .wire import Box, Instructions

#: The driver's own folder, which is not the candidate's.
HERE = os.path.dirname(os.path.abspath(__file__))


def contain(spec: Instructions, tree: Any = None, as_init: bool = False) -> Report:
    """Build the boundary, step by step, and return in the candidate's process, ready to
    run it (its report open, nothing of its code run yet).

    It forks twice: `become_init` returns only in the init (the outer process waits for
    it and exits with its status), `fork_candidate` only in the candidate (the init reaps,
    reports the end, and exits). ``as_init``: the fork server forked this process as the
    init of its new namespaces already; ``tree``: its template of the view."""
    box = spec.get("box")
    outer = bool(box) and not as_init
    try:
        if box:
            die_with_supervisor(box, as_init)
        kernel.enter_cgroups(spec["cgroups"])
        if outer:
            kernel.unshare()
    except kernel.BoxError as e:
        box_failed(e)
    if outer:
        become_init()
    if box:
        try:
            if outer:
                kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the outer process
            kernel.name_host()
            view.build_view(box, tree)
        except (kernel.BoxError, OSError) as e:
            box_failed(kernel.BoxError(str(e)))
    started, report = fork_candidate(spec)
    try:
        leave_drivers_path(spec)
        if box:
            kernel.drop_privileges(box)
            if box["seccomp"]:
                seccomp.install()  # after no_new_privs, before anything of the candidate's
        os.chdir(spec["cwd"])
        runners.feed_stdin(spec)
        kernel.apply_limits(spec)
        import_first_uses(spec)
        handed_over(started)
    except kernel.BoxError as e:
        box_failed(e)
    except Exception as e:
        driver_failed(e)
    return report


def die_with_supervisor(box: Box, as_init: bool) -> None:
    """Die with aexec, even if it is SIGKILLed; if it already died, do nothing."""
    kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
    if _parent_pid(as_init) not in box["supervisor_pids"]:  # aexec, or its fork server
        os._exit(wire.BOX_FAILED)


def _parent_pid(as_init: bool) -> int:
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


def become_init() -> None:
    """Fork the init of the new namespaces; the outer process waits for it and exits as it did."""
    init = os.fork()
    if init != 0:
        _, status = os.waitpid(init, 0)
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def fork_candidate(spec: Instructions) -> tuple[int, Report]:
    """Fork the candidate, and in this process (the init) reap everything and report its
    end: returns only in the candidate, with the write end of a pipe that `handed_over`
    closes and the run's report.

    In a PID namespace this process is the init: the candidate is not, so signals it
    sends itself behave as usual, and orphans are reaped. Its wait status and rusage
    (the whole tree it reaped) are reported here, where a signal death is still visible.

    The report is opened once, before the fork, for both: the candidate's is the fd it
    opened itself after the fork before (the lowest free, 3), and the init does no more
    after the fork than it must (each page it writes then is one copied: ~0.1 ms per
    ~30, and the two records' JSON encoder cost it ~65).
    """
    try:
        report = reporting.Report(spec["report"])
    except Exception as e:
        driver_failed(e)
    heard, started = os.pipe()
    pid = kernel.fork_again()
    if pid == 0:
        os.close(heard)
        return started, report
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
    os._exit(report.end(status, rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss))


#: The fork server's sys.path, and what `leave_drivers_path` leaves of it (`keep_path`).
_kept_path: tuple[list[str], list[str]] | None = None


def keep_path() -> None:
    """In the fork server, once it has imported all it serves with: its sys.path without
    the driver's folder, made once for every run it forks (each child filtered it anew:
    ~0.15 ms and ~35 copied pages per run)."""
    global _kept_path
    _kept_path = (list(sys.path), _without_driver(sys.path))
    runners.warm_snippets()
    keep_modules()
    kernel.BEFORE_FORK.append(keep_modules)


#: The fork server's modules as it last forked a run (`keep_modules`).
_kept_modules: frozenset[str] = frozenset()


def keep_modules() -> None:
    """In the fork server, before each fork of a run (`kernel.fork_init`): the names in
    its sys.modules, made anew only when it has others (its first runs' imports), so
    that a candidate need not make that set itself (`driver_modules`).

    The names are copies, made together: looking them up refers to them, which writes
    to their pages (a few), not to the pages of sys.modules' own keys (one per name,
    about: ~70 copied pages per forked run of a snippet's server)."""
    global _kept_modules
    if len(sys.modules) != len(_kept_modules):
        _kept_modules = frozenset([_copy(name) for name in sys.modules])


def _copy(text: str) -> str:
    """An equal str that is another object (a slice of the whole would be ``text``)."""
    return (text + ".")[:-1]


def driver_modules() -> frozenset[str]:
    """The names in sys.modules before the candidate's code runs: its fork server's set
    where they are the same (a set made in a forked child costs ~0.15 ms, most of it the
    pages of every name it refers to, copied), else a set made here."""
    kept = _kept_modules
    return kept if same_modules(kept) else frozenset(sys.modules)


def same_modules(names: frozenset[str]) -> bool:
    """sys.modules holds just ``names``. Checked without referring to its keys (each
    reference taken to a key writes to it: its page copied, in a forked process): its
    size, and each name looked up in it (a set's difference with a dict refers to the
    set's items, and reads the dict)."""
    modules = sys.modules
    return type(modules) is dict and len(modules) == len(names) and not names.difference(modules)


def _without_driver(path: list[str]) -> list[str]:
    return [p for p in path if p and os.path.abspath(p) != HERE]


def leave_drivers_path(spec: Instructions) -> None:
    """The candidate's sys.path: the driver's folder off it, the run's import roots first."""
    kept = _kept_path
    rest = kept[1] if kept is not None and sys.path == kept[0] else _without_driver(sys.path)
    sys.path[:] = [*spec["sys_path"], *rest]


def is_suite(spec: Instructions) -> bool:
    """A test runner's run (pytest and its plugins, unittest, Django, sympy)."""
    return spec["runner"] in runners.SUITES


def import_first_uses(spec: Instructions) -> None:
    """What the driver imports on first use while a candidate runs, imported now (see
    `runners.FIRST_USE_IMPORTS`); a test runner's run imports what it imports."""
    if not is_suite(spec):
        for name in runners.FIRST_USE_IMPORTS:
            if sys.modules.get(name) is None:  # a fork server's child has them all (None: blocked)
                __import__(name)


def handed_over(started: int) -> None:
    """The driver's own steps are done: one byte to the init (`fork_candidate`'s pipe).
    From here on, a failure is the candidate's run's."""
    os.write(started, b"S")
    os.close(started)


def box_failed(error: kernel.BoxError) -> NoReturn:
    print(f"aexec: the boundary could not be built, nothing ran: {error}", file=sys.stderr)
    os._exit(wire.BOX_FAILED)
