"""SWE-bench-style grading (issue 18, goal 4). Pure: no I/O.

A ``run_suite`` request may carry the tests it is expected to make pass
(``fail_to_pass``, ``pass_to_pass``: pytest node ids exactly as pytest prints them) and
an oracle ``test_patch``. The pipeline applies the oracle after the candidate's patch
(``aexec._pipeline.run``); this module says what the request selects when it names no
``tests``, which files are the oracle's, and whether the observed per-test verdicts
resolve the instance:

    resolved  ⇔  every expected FAIL_TO_PASS test passed
               ∧ every expected PASS_TO_PASS test passed
               ∧ the candidate did not tamper ∧ the observation is not ``error``

An expected test that was never collected did not pass.

An expected id answers to the tests that ran as SWE-bench's harness resolves it
(swebench 5.0.2 ``grading._resolve_case``): the test with exactly that id; failing that,
when the id has more ``[`` than ``]`` (a parametrized id SWE-bench cut at its first
space, ``t.py::test_f[a`` for ``t.py::test_f[a b]``), every test whose id starts with
it. Where SWE-bench's parser for the repo rewrites ids (``test_ids``, `swebench_id`), a
test also answers to the id that parser writes for it. It passed when it answers to one
test or more and every one of them passed. An id no test answers to is named in the
observation (`unmatched`), with the reason.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Iterable, Mapping

from .. import _runners as runners
from .._errors import RequestError
from .._records import Candidate, ExpectedFailures, TestResult, UnmatchedTest
from .._types import TestIds

__all__ = [
    "check",
    "cut_short",
    "expected",
    "expects",
    "grade",
    "matches",
    "named",
    "oracle_paths_touched",
    "selection",
    "swebench_id",
    "test_file",
    "unmatched",
    "would_resolve",
]


def expects(candidate: Candidate) -> bool:
    """Does the request carry an expectation to grade against?"""
    return candidate.fail_to_pass is not None or candidate.pass_to_pass is not None


def test_file(nodeid: str) -> str:
    """The file a node id names (``tests/test_x.py::test_f[a b]`` → ``tests/test_x.py``)."""
    return posixpath.normpath(nodeid.split("::", 1)[0])


def cut_short(nodeid: str) -> bool:
    """Is ``nodeid`` a parametrized id cut short (more ``[`` than ``]``), as SWE-bench ships
    an id whose parameters hold a space?"""
    return nodeid.count("[") > nodeid.count("]")


def swebench_id(test: str, rule: TestIds) -> str:
    """The name SWE-bench's parser ``rule`` gives the test pytest calls ``test``.

    ``pytest``: the id itself. ``pytest_options``: a parametrized id's parameters (from
    its first ``[`` to its last ``]``) that start with one ``/`` and hold no ``*`` stand
    for ``/`` and their last path component: ``t.py::f[/tmp/x/m.py]`` → ``t.py::f[/m.py]``.
    ``matplotlib``: ``MouseButton.LEFT`` is ``1`` and ``MouseButton.RIGHT`` ``3``.
    """
    if rule == "matplotlib":
        return test.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3")
    start, end = test.find("["), test.rfind("]")
    if rule == "pytest" or start < 0 or end < start:
        return test
    option = test[start + 1 : end]
    if option.startswith("/") and not option.startswith("//") and "*" not in option:
        option = "/" + option.rsplit("/", 1)[-1]
    return f"{test[:start]}[{option}]"


def matches(nodeid: str, ran: Collection[str], rule: TestIds = "pytest") -> list[str]:
    """The ids of the tests that ran that the expected ``nodeid`` answers to (swebench's
    ``_resolve_case``, on the names SWE-bench's parser ``rule`` gives them): itself, else
    every one so named, else, for an id cut short, every one whose name starts with it."""
    if nodeid in ran:
        return [nodeid]
    if "::" not in nodeid and runners.unittest_form(nodeid) is not None:
        # A unittest name in the other form: ``t (m.C)`` is ``t (m.C.t)`` (Python 3.11+).
        return [t for t in ran if runners.same_test(nodeid, t)]
    names = {t: swebench_id(t, rule) for t in ran}
    found = [t for t, name in names.items() if name == nodeid]
    if found or not cut_short(nodeid):
        return found
    return [t for t, name in names.items() if name.startswith(nodeid)]


def _selector(sel: str) -> str:
    """A selector pytest can select: an id cut short (``t.py::test_f[a``, which pytest
    answers with "not found") selects its test function, every parameter it may stand for."""
    path, sep, rest = sel.partition("::")
    return path + sep + rest.split("[", 1)[0] if sep and cut_short(rest) else sel


def expected(candidate: Candidate) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return candidate.fail_to_pass or (), candidate.pass_to_pass or ()


def selection(candidate: Candidate) -> tuple[str, ...] | None:
    """What the run selects: the request's ``tests``; without them, when tests are
    expected, the test files those node ids name (in first-seen order)."""
    if candidate.runner != "pytest":  # the runner's labels (SWE-bench's test directives)
        if candidate.tests is not None or not expects(candidate):
            return candidate.tests
        suite = runners.get(candidate.runner)
        return suite.labels(
            runners.patch_paths(candidate.test_patch), (*expected(candidate)[0], *expected(candidate)[1])
        )
    if candidate.tests is not None and candidate.language == "python":
        return tuple(dict.fromkeys(_selector(sel) for sel in candidate.tests))
    if candidate.tests is not None:
        return candidate.tests
    if not expects(candidate):
        return None
    f2p, p2p = expected(candidate)
    return tuple(dict.fromkeys(test_file(n) for n in (*f2p, *p2p)))


def named(candidate: Candidate) -> list[tuple[str, int, str]]:
    """Every expected node id and selector of the request: (field, index, id)."""
    out = []
    for name in ("fail_to_pass", "pass_to_pass"):
        out += [(name, i, n) for i, n in enumerate(getattr(candidate, name) or ())]
    return out + [("tests", i, sel) for i, sel in enumerate(candidate.tests or ())]


def check(candidate: Candidate) -> None:
    """The grading fields' own rules (no I/O); raises `RequestError` naming the field."""
    graded = expects(candidate) or candidate.test_patch is not None
    if graded and (candidate.request_type != "run_suite" or candidate.repo is None):
        raise RequestError("`fail_to_pass`, `pass_to_pass` and `test_patch` need a run_suite with `repo`")
    if expects(candidate) and not (candidate.fail_to_pass or candidate.pass_to_pass):
        raise RequestError("`fail_to_pass` and `pass_to_pass` are both empty: nothing to grade")
    for name in ("fail_to_pass", "pass_to_pass"):
        for i, nodeid in enumerate(getattr(candidate, name) or ()):
            if candidate.runner != "pytest":
                if not nodeid.strip():
                    raise RequestError(f"{name}[{i}] is an empty test name")
                continue  # the runner's own test names, not paths
            path = nodeid.split("::", 1)[0]
            if not path or path.startswith(("/", "-")) or ".." in path.split("/"):
                raise RequestError(f"{name}[{i}]: {nodeid!r} is not a node id relative to the repo")
    if candidate.test_patch is not None and not candidate.test_patch.strip():
        raise RequestError("`test_patch` is empty")


def oracle_paths_touched(touched: Iterable[str], oracle: Iterable[str]) -> bool:
    """Does the candidate's patch touch a file the oracle ``test_patch`` touches?

    Such edits never run (the oracle's files are reset before it is applied, as
    SWE-bench's evaluation does), and they are edits of the oracle: tampering.
    """
    mine = {posixpath.normpath(p) for p in touched}
    return any(posixpath.normpath(p) in mine for p in oracle)


def grade(
    candidate: Candidate, results: Iterable[TestResult], *, tampered: bool, error: bool
) -> tuple[bool | None, ExpectedFailures | None]:
    """(``resolved``, the expected tests that did not pass); (None, None) without an
    expectation. Every expected test counts by its own node id: one that is absent from
    ``results`` (never collected, never run) did not pass."""
    if not expects(candidate):
        return None, None
    verdicts = {r.test: r.verdict for r in results}

    def passed(nodeid: str) -> bool:
        found = matches(nodeid, verdicts, candidate.test_ids)
        return bool(found) and all(verdicts[t] == "passed" for t in found)

    f2p, p2p = expected(candidate)
    missing = ExpectedFailures(
        fail_to_pass=tuple(n for n in f2p if error or not passed(n)),
        pass_to_pass=tuple(n for n in p2p if error or not passed(n)),
    )
    ok = not missing.fail_to_pass and not missing.pass_to_pass
    return ok and not tampered and not error, missing


def _why(nodeid: str, verdicts: Mapping[str, str]) -> str:
    """Why no test that ran answers to the expected ``nodeid``."""
    if not verdicts:
        return "no test ran"
    if "::" not in nodeid and runners.unittest_form(nodeid) is not None:
        return "no test that ran has this name (in either unittest form)"
    path = test_file(nodeid)
    if verdicts.get(path) == "errored":
        return f"its file {path} did not collect"
    if not any(test_file(t) == path for t in verdicts):
        return f"no test of its file {path} ran"
    if cut_short(nodeid):
        return "a parametrized id cut short (more '[' than ']'): no test that ran starts with it"
    return "no test that ran has this id"


def unmatched(candidate: Candidate, results: Iterable[TestResult]) -> tuple[UnmatchedTest, ...] | None:
    """The expected ids no test in ``results`` answers to, each with the reason; None
    without an expectation."""
    if not expects(candidate):
        return None
    verdicts = {r.test: r.verdict for r in results}
    return tuple(
        UnmatchedTest(field, nodeid, _why(nodeid, verdicts))
        for field, _, nodeid in named(candidate)
        if field != "tests" and not matches(nodeid, verdicts, candidate.test_ids)
    )


def would_resolve(candidate: Candidate, results: Iterable[TestResult]) -> bool:
    """Every expected test passed (before the tamper and re-run guards have their say)."""
    resolved, _ = grade(candidate, results, tampered=False, error=False)
    return resolved is True
