"""The canary of a graded run (issue 44): two tests aexec writes into the repo's view,
run by the repo's own runner in the same process as its tests. Pure: no I/O.

One must fail (an ``assert`` with a fresh random message), one must pass; their file,
class and function names and the message are fresh per run (the shell draws them,
`aexec._pipeline.canary`), so no patch can know them. A patch that makes the runner
unable to report a failure (a result whose ``addFailure`` calls ``addSuccess``, a
rewritten ``TestReport``, a run that ends with ``os._exit(0)``) shows on the canary:

* `split` takes the canary's tests and exceptions out of a run's evidence (they are
  never the candidate's results) and undoes the exit status their failure caused;
* `misbehaved` says why a run's canary cannot be trusted (its must-fail test passed,
  was skipped or never reported; its must-pass test did not pass), or None;
* `machinery` lists the paths of a patch that are the runner's own test machinery
  (``oracle_touched``): not tampering by itself, what a reviewer looks at first.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

import attrs

from .._languages import LanguageEvidence
from .._languages import canary as lang_canary
from .._records import CanaryReport
from .parse import Evidence

#: The runner's own test machinery, by runner: a patch's paths under these
#: (repo-relative) change how the run reports its tests.
MACHINERY: dict[str, tuple[str, ...]] = {
    "pytest": ("src/_pytest/", "_pytest/", "src/pytest/", "src/pytest.py", "pytest.py"),
    "django": ("django/test/", "tests/runtests.py"),
    "sympy": ("sympy/testing/", "sympy/utilities/runtests.py", "sympy/utilities/pytest.py", "bin/test"),
    "unittest": ("unittest/", "Lib/unittest/"),
}

_FAILED: frozenset[str] = frozenset({"failed", "errored"})
#: The language suites that get a canary (`aexec._languages.canary`).
SUITES: frozenset[str] = frozenset(lang_canary.FAILED_EXIT)


@attrs.frozen
class Canary:
    """One run's canary: where it is written and what it is named (all repo-relative)."""

    runner: str
    #: The directory its file is written in (``""``: the repo's root).
    directory: str
    #: Its module (the file's stem), class, must-fail and must-pass test names.
    module: str
    cls: str
    fail: str
    passes: str
    message: str
    #: The dotted package of ``directory`` as the runner imports it (unittest, Django).
    package: str = ""
    #: A language suite's (`SUITES`): the file its tests are written in (cargo, node:
    #: appended to the repo's own; CTest: its script).
    file: str = ""

    @property
    def path(self) -> str:
        return self.file or posixpath.join(self.directory, self.module + ".py")

    def arg(self) -> str:
        """What is appended to the runner's selection: a path, or a module label."""
        if self.runner in ("unittest", "django"):
            return f"{self.package}.{self.module}" if self.package else self.module
        return self.path

    def ids(self) -> tuple[str, ...]:
        """A language suite's canary tests, as its parser names them (must-fail first)."""
        return lang_canary.ids(self.runner, self.file, self.module, self.fail, self.passes)

    def source(self) -> str:
        """The test module, in the runner's own idiom (Django: a ``SimpleTestCase``,
        whose ``__call__`` is Django's own machinery); a language suite's text."""
        if self.runner in SUITES:
            return lang_canary.source(self.runner, self.module, self.fail, self.passes, self.message)
        fail = f"assert False, {self.message!r}"
        if self.runner in ("pytest", "sympy"):
            return f"def {self.fail}():\n    {fail}\n\n\ndef {self.passes}():\n    pass\n"
        if self.runner == "django":
            head, base = "from django.test import SimpleTestCase\n", "SimpleTestCase"
        else:
            head, base = "import unittest\n", "unittest.TestCase"
        return (
            f"{head}\n\nclass {self.cls}({base}):\n"
            f"    def {self.fail}(self):\n        {fail}\n\n"
            f"    def {self.passes}(self):\n        pass\n"
        )

    def owns(self, nodeid: str | None) -> bool:
        return nodeid is not None and any(n in nodeid for n in (self.module, self.fail, self.passes))


#: What the canary's fresh names are called in an observation: its output, its file
#: and its tests are the same text in every run (a cached, a warm and a cold
#: observation of one candidate agree), while the run itself saw fresh names.
LABELS = (
    "aexec-canary-message",
    "aexec_canary",
    "AexecCanary",
    "test_aexec_canary_fails",
    "test_aexec_canary_passes",
)


def scrub(text: str, canary: Canary | None) -> str:
    """``text`` (a run's output) with the canary's fresh names as `LABELS`, a name the
    runner cut short at its line width (``…: 66fea0...``) too."""
    if canary is None:
        return text
    names = (canary.message, canary.module, canary.cls, canary.fail, canary.passes)
    for fresh, label in zip(names, LABELS, strict=True):
        text = text.replace(fresh, label)
        rand = fresh[len(fresh.rstrip("0123456789abcdef")) :]
        stem = fresh[: len(fresh) - len(rand)]
        for k in range(len(rand) - 1, 0, -1):
            cut = stem + rand[:k] + "..."
            if k >= 3 or stem:
                text = text.replace(cut, label + "...")
            else:  # one or two random characters: only where an exception's message starts
                text = text.replace("Error: " + cut, "Error: " + label + "...")
    return text


def _verdict(ev: Evidence, canary: Canary, name: str) -> str:
    for t in ev.tests:
        if name in t.nodeid and not t.collection:
            return t.verdict
    return "missing"


def split(ev: Evidence, canary: Canary | None) -> tuple[Evidence, CanaryReport | None]:
    """The run's evidence without its canary, and what the canary showed. The exit status
    the must-fail test alone caused (1) is undone: pytest's 5 when nothing else ran."""
    if canary is None:
        return ev, None
    if ev.lang is not None:
        return _split_suite(ev, ev.lang, canary)
    tests = tuple(t for t in ev.tests if not canary.owns(t.nodeid))
    errors = tuple(e for e in ev.errors if not canary.owns(e.nodeid))
    fail, passed = _verdict(ev, canary, canary.fail), _verdict(ev, canary, canary.passes)
    seen = any(canary.message in e.message for e in ev.errors if canary.owns(e.nodeid))
    # Killed, crashed (a failing exit before the runner's end), or failed before any test
    # ran (a module that does not import interrupts pytest's collection; a usage error):
    # a canary not reached is no sign. An exit 0 before the end is one (``os._exit(0)``
    # from a test), and so is a canary missing from a run whose tests ran.
    failing = ev.exit_code not in (0, None)
    crashed = ev.pytest_exit is None and failing
    interrupted = failing and not any(not t.collection for t in ev.tests)
    stopped = ev.timed_out or ev.oom_killed or ev.signal is not None or crashed or interrupted
    report = _report(canary, fail, passed, seen, stopped)
    exit_code, pytest_exit = ev.exit_code, ev.pytest_exit
    own = bool(errors) or any(t.verdict in _FAILED for t in tests)
    if fail in _FAILED and not (stopped or own) and exit_code == 1 and pytest_exit in (1, None):
        nothing = ev.runner == "pytest" and not tests
        exit_code = 5 if nothing else 0
        pytest_exit = None if pytest_exit is None else exit_code
    in_flight = None if canary.owns(ev.in_flight) else ev.in_flight
    out = attrs.evolve(
        ev, tests=tests, errors=errors, exit_code=exit_code, pytest_exit=pytest_exit, in_flight=in_flight
    )
    return out, report


def _report(canary: Canary, fail: str, passed: str, seen: bool, stopped: bool) -> CanaryReport:
    """What the canary showed, under its fixed labels (`scrub`)."""
    return CanaryReport(
        file=scrub(canary.path, canary),
        fail_test=scrub(canary.fail, canary),
        fail=fail,
        pass_test=scrub(canary.passes, canary),
        passed=passed,
        message_seen=seen,
        stopped=stopped,
    )


def _split_suite(ev: Evidence, lang: LanguageEvidence, canary: Canary) -> tuple[Evidence, CanaryReport]:
    """`split` for a language suite: its findings too. A canary not reached is no sign when
    the run was cut, a step before the tests failed, a finding names no reported test (a
    crashed test binary, an exit nothing explains), or the canary's own file errored."""
    tests = tuple(t for t in ev.tests if not canary.owns(t.nodeid))
    mine = [f for f in lang.findings if canary.owns(f.message)]
    found = tuple(f for f in lang.findings if not canary.owns(f.message))
    fail, passed = _verdict(ev, canary, canary.fail), _verdict(ev, canary, canary.passes)
    named = tuple(t.nodeid + ":" for t in tests)
    stopped = (
        ev.timed_out
        or ev.oom_killed
        or ev.signal is not None
        or not lang.compiled
        or any(not f.message.startswith(named) for f in found)
        or any(t.nodeid == canary.path and t.verdict == "errored" for t in tests)
    )
    seen = any(canary.message in f.message + (f.exception or "") for f in mine)
    report = _report(canary, fail, passed, seen, stopped)
    exit_code = ev.exit_code
    alone = not found and not any(t.verdict in _FAILED for t in tests)
    if fail in _FAILED and alone and not stopped and exit_code == lang_canary.FAILED_EXIT[canary.runner]:
        exit_code = 0  # the must-fail test's failure alone made the runner's status
    exception = next((f.exception for f in found if f.exception), None)
    lang = attrs.evolve(lang, findings=found, exception=exception, exit_code=exit_code)
    return attrs.evolve(ev, tests=tests, exit_code=exit_code, lang=lang), report


def misbehaved(report: CanaryReport | None) -> str | None:
    """Why the canary of a run says its verdicts cannot be trusted, or None."""
    if report is None:
        return None
    why = []
    if report.fail not in _FAILED and not (report.fail == "missing" and report.stopped):
        why.append(f"the must-fail canary test {report.fail_test} was reported {report.fail}")
    if report.passed != "passed" and not (report.passed == "missing" and report.stopped):
        why.append(f"the must-pass canary test {report.pass_test} was reported {report.passed}")
    return "; ".join(why) or None


def judged(report: CanaryReport | None, reason: str | None) -> CanaryReport | None:
    return None if report is None else attrs.evolve(report, reason=reason)


def machinery(runner: str, paths: Iterable[str]) -> tuple[str, ...]:
    """The paths of a patch that are the runner's own test machinery (``oracle_touched``)."""
    roots = MACHINERY.get(runner, ())
    out = []
    for path in map(posixpath.normpath, paths):
        if any(path == r or (r.endswith("/") and path.startswith(r)) for r in roots):
            out.append(path)
    return tuple(dict.fromkeys(out))


def worst(first: CanaryReport | None, second: CanaryReport | None) -> CanaryReport | None:
    """Of a run and its confirming re-run, the canary that misbehaved (else the first)."""
    if misbehaved(first) is None and misbehaved(second) is not None:
        return second
    return first
