"""A graded run's canary, laid out (issue 44; the pure part is `aexec._stages.canary`):
fresh random names, and the test module written where the runner finds the repo's own
tests — beside the selection's first test file (pytest; sympy: its last), in its first
label's package (unittest; Django: under ``tests/``).

A language suite's goes where `aexec._languages.canary` says (appended to the selection's
first target or test file; CTest: a script of its own). Only a ``run_suite`` with an
explicit, non-empty selection gets one: the whole suite (no selection) is collected by
the repo's own configuration (``testpaths``, discovery), which an argument more would change.
"""

from __future__ import annotations

import contextlib
import os
import secrets

from .. import _languages as langs
from .. import _runners as runners
from .._boundary.trees import read_inside, write_inside
from .._languages import canary as lang_canary
from .._languages import cargo
from .._languages.suite import split
from .._stages.canary import SUITES, Canary
from .session import Job

#: The largest repo file a canary is appended to (a target's root source, a test file).
MAX_APPEND_BYTES = 16 << 20


def _token() -> str:
    return secrets.token_hex(6)


def _is_dir(work: str, rel: str) -> bool:
    path = os.path.join(work, rel)
    return os.path.isdir(path) and not os.path.islink(path)


def _directory(runner: str, work: str, selection: tuple[str, ...]) -> tuple[str, str] | None:
    """``(directory, dotted package)`` of the canary's module, or None: no place for it."""
    if runner == "pytest":
        return _pytest_directory(work, selection)
    if runner == "sympy":
        # sympy runs its files sorted by path: the last one's directory comes last
        for s in sorted(selection, reverse=True):
            rel = os.path.normpath(s.split("::", 1)[0])
            if rel.startswith(("..", "/", "-")):
                continue
            if _is_dir(work, rel):
                return ("" if rel == "." else rel), ""
            if os.path.isfile(os.path.join(work, rel)):
                return os.path.dirname(rel), ""
        return None
    base = "tests" if runner == "django" else ""
    parts = [p for p in selection[0].split(".") if p]
    for k in range(len(parts), 0, -1):
        if all(p.isidentifier() for p in parts[:k]) and _is_dir(work, os.path.join(base, *parts[:k])):
            return os.path.join(base, *parts[:k]), ".".join(parts[:k])
    return None if runner == "django" else ("", "")


def _pytest_directory(work: str, selection: tuple[str, ...]) -> tuple[str, str] | None:
    """Beside the first selected file, or beside the first selected directory: never
    inside a selected directory, whose collection would overlap the canary's own
    argument (pytest 8.3 then collects the canary's file alone). None when the root
    itself is selected."""
    picked = [os.path.normpath(s.split("::", 1)[0]) for s in selection]
    picked = [p for p in picked if not p.startswith(("..", "/", "-"))]
    dirs = [p for p in picked if _is_dir(work, p)]
    if "." in dirs:
        return None
    for rel in picked:
        here = os.path.dirname(rel) if os.path.isfile(os.path.join(work, rel)) else rel
        while any(here == d or here.startswith(d + "/") for d in dirs):
            here = os.path.dirname(here)
        if here != rel or not _is_dir(work, rel):
            return here, ""
    return "", ""


def _module(runner: str, directory: str) -> str:
    """A fresh module name; sympy's sorts after every file of its directory (its runner
    runs files in path order, and a patch's hook set off by a test must meet it after)."""
    if runner != "sympy":
        return f"test_{_token()}"
    try:
        names = [n[:-3] for n in os.listdir(directory) if n.startswith("test_") and n.endswith(".py")]
    except OSError:
        names = []
    return f"{max(names, default='test')}_{_token()}"


def place(job: Job, work: str) -> Canary | None:
    """The run's canary, written into the view ``work``; None when the run gets none.
    A canary that cannot be written is still returned (and reported ``missing``)."""
    c = job.candidate
    tests = c.tests
    if c.request_type != "run_suite" or c.command or not tests:
        return None
    if c.language != "python":
        runner = langs.language(c.language).runner().name
        if job.lang is None or not lang_canary.runs_on(runner, job.lang.version):
            return None
        return _place_suite(runner, work, tests)
    if not runners.python_suite(job.runner):
        return None
    where = _directory(job.runner, work, tests)
    if where is None:
        return None
    directory, package = where
    canary = Canary(
        runner=job.runner,
        directory=directory,
        module=_module(job.runner, os.path.join(work, directory)),
        cls=f"Test{_token()}",
        fail=f"test_{_token()}",
        passes=f"test_{_token()}",
        message=_token() + _token(),
        package=package,
    )
    with contextlib.suppress(OSError):  # a link on the way: no canary runs, and that shows
        write_inside(work, canary.path, canary.source().encode())
    return canary


def _suite_file(runner: str, work: str, tests: tuple[str, ...], module: str) -> str | None:
    """The repo's file a language suite's canary is appended to: the root source of the
    selection's first target (cargo: ``src/lib.rs`` when that is no target's), the first
    selected file (node); None when there is none. CTest's is a script of its own."""
    first = split(tests[0])[0]
    if runner == "ctest":
        return module + ".cmake"
    if runner == "cargo" and cargo.target_of(first) is None:
        first = next((f for f in ("src/lib.rs", "src/main.rs") if os.path.isfile(os.path.join(work, f))), "")
    path = os.path.join(work, first)
    return first if first and os.path.isfile(path) and not os.path.islink(path) else None


def _place_suite(runner: str, work: str, tests: tuple[str, ...]) -> Canary | None:
    module = f"tests_{_token()}"
    file = _suite_file(runner, work, tests, module)
    if file is None:
        return None
    canary = Canary(
        runner=runner,
        directory=os.path.dirname(file),
        module=module,
        cls=module,
        fail=f"test_{_token()}",
        passes=f"test_{_token()}",
        message=_token() + _token(),
        file=file,
    )
    old = b"" if runner == "ctest" else read_inside(work, file, MAX_APPEND_BYTES)
    if old is not None:  # too big to read back: no canary runs, and that shows
        with contextlib.suppress(OSError):
            write_inside(work, file, old + canary.source().encode())
    return canary


def canary_args(work: str, canary: Canary | None) -> tuple[str, ...]:
    """The canary's argument for the runner (a language suite's: its test ids), if its
    file is in the view."""
    if canary is None or not os.path.isfile(os.path.join(work, canary.path)):
        return ()
    return canary.ids() if canary.runner in SUITES else (canary.arg(),)
