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
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from .._errors import RequestError
from .._records import Candidate, ExpectedFailures, TestResult

__all__ = [
    "check",
    "expected",
    "expects",
    "grade",
    "named",
    "oracle_paths_touched",
    "selection",
    "test_file",
    "would_resolve",
]


def expects(candidate: Candidate) -> bool:
    """Does the request carry an expectation to grade against?"""
    return candidate.fail_to_pass is not None or candidate.pass_to_pass is not None


def test_file(nodeid: str) -> str:
    """The file a node id names (``tests/test_x.py::test_f[a b]`` → ``tests/test_x.py``)."""
    return posixpath.normpath(nodeid.split("::", 1)[0])


def expected(candidate: Candidate) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return candidate.fail_to_pass or (), candidate.pass_to_pass or ()


def selection(candidate: Candidate) -> tuple[str, ...] | None:
    """What the run selects: the request's ``tests``; without them, when tests are
    expected, the test files those node ids name (in first-seen order)."""
    if candidate.tests is not None or not expects(candidate):
        return candidate.tests
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
    passed = {r.test for r in results if r.verdict == "passed"}
    f2p, p2p = expected(candidate)
    missing = ExpectedFailures(
        fail_to_pass=tuple(n for n in f2p if error or n not in passed),
        pass_to_pass=tuple(n for n in p2p if error or n not in passed),
    )
    ok = not missing.fail_to_pass and not missing.pass_to_pass
    return ok and not tampered and not error, missing


def would_resolve(candidate: Candidate, results: Iterable[TestResult]) -> bool:
    """Every expected test passed (before the tamper and re-run guards have their say)."""
    resolved, _ = grade(candidate, results, tampered=False, error=False)
    return resolved is True
