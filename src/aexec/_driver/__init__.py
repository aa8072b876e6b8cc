"""The driver: the program that runs inside the boundary, in the candidate's interpreter.

One stdlib-only package (plus pytest, for pytest runs), run on the candidate's
CPython 3.6 to 3.13. It is run by path, never as ``aexec._driver`` (aexec may not be
importable there)::

    python -s aexec/_driver/__main__.py SPEC.json        a run
    python -s aexec/_driver/__main__.py --serve ...      the fork server
    python -I aexec/_driver/__main__.py --bytecode       the bytecode job, not a run
    python -s aexec/_driver/__main__.py --seccomp-probe  the library's probe of the filter

The entry (``__main__.py``) loads this folder as a package under a private name
(``_aexec_driver``), whose modules import each other relatively (``from . import
wire``), then takes all of them out of ``sys.modules`` before anything of the
candidate's runs: a candidate's ``import wire``, ``import kernel`` or ``import aexec``
finds nothing of the driver's. Its modules, in the order they load:

    wire        the records both sides speak: `Instructions` in, report records out
                (the library imports it as ``aexec._driver.wire``: the one module it shares)
    compat      the other modules' code without their types, for CPython < 3.8
    reporting   the report file: one JSON record per event, flushed line by line
    kernel      the boundary's kernel calls: namespaces, cgroups, uid, rlimits
    mounts      the kernel's mount calls: the new mount API, pivot_root, the read-only seal
    view        the filesystem view (a new root)
    template    the fork server's template of a view's read-only part, which runs clone
    seccomp     the candidate's syscall filter (a BPF deny-list)
    rewriting   what a pytest fork server imported through pytest's rewriting hook, and
                whether a forked run's configuration would have imported it so
    plugin      the pytest plugin of a pytest run: its hooks' events as report records
    suites      the repo's own test runners (unittest, Django, sympy)
    runners     what a run does: a snippet, a command, a compile check, pytest, steps
    contain     the boundary's steps, listed once, in order (`contain.contain`)
    startup     what a pytest start imports, learnt once per interpreter and environment
    outputs     the fork server's side of its runs' stdout and stderr: drained, capped, sent
    serve       the fork server, which forks runs from a warm interpreter
    pyc         the bytecode job
    main        the way in: which of the above a command line asks for, and a run's end

This file is loaded first, as it stands on CPython 3.6 (its annotations quoted).
"""

import sys

TYPE_CHECKING = False  # typing's, without importing typing here (mypy reads the name)
if TYPE_CHECKING:
    from typing import NoReturn


def driver_failed(error: "BaseException") -> "NoReturn":
    """The driver itself failed before the candidate's code started (a module that does
    not load, a module of its own interpreter's that does not import): nothing of the
    candidate ran. Its traceback, then one line naming the driver (the line aexec
    reports), and the exit status of a run that never started (`wire.BOX_FAILED`, with no
    ``main`` record)."""
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
