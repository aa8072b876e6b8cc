"""A request checked once: `validate` turns a `Candidate` into a `Checked` one.

Every rule a request must meet is checked here, before anything runs, and what the
checks find (the classification, the runner, the interpreter's path, the tests a graded
request selects) is kept in the `Checked` record that the `Session` makes its `Job` from:
nothing is checked or resolved twice.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import attrs

from .._errors import RequestError
from .._records import Candidate
from .._stages import grade
from .._stages.classify import Classification, Runner, route
from .toolchain import resolve_python


@attrs.frozen
class Checked:
    """A candidate that passed `validate`, with what the checks found."""

    #: The request, its ``tests`` filled in from its expectations (`grade.selection`).
    candidate: Candidate
    classification: Classification
    runner: Runner
    #: The interpreter the candidate runs under, as an absolute path (`resolve_python`).
    python: str


def validate(candidate: Candidate) -> Checked:
    """Check a candidate before anything runs; raises `RequestError` naming the field."""
    grade.check(candidate)
    # Graded without `tests`: the files its expected node ids name are the selection.
    tests = grade.selection(candidate)
    if tests != candidate.tests:  # else the caller's record, not a copy of it
        candidate = attrs.evolve(candidate, tests=tests)
    classification, runner = route(candidate)
    python = resolve_python(candidate.python)
    if candidate.repo is not None:
        if not os.path.isdir(candidate.repo):
            raise RequestError(f"repo: {candidate.repo!r} is not a directory")
        diffs = (candidate.patch or "") + (candidate.test_patch or "")
        for field, i, sel in grade.named(candidate) if candidate.runner == "pytest" else ():
            path = sel.split("::", 1)[0]
            if f"+++ b/{path}" not in diffs and not os.path.exists(os.path.join(candidate.repo, path)):
                raise RequestError(f"{field}[{i}]: {path!r} does not exist in repo {candidate.repo!r}")
    return Checked(candidate, classification, runner, python)


def validate_all(candidates: Iterable[Candidate]) -> list[Checked]:
    """`validate` each candidate; a malformed one raises `RequestError` naming its index."""
    out = []
    for i, c in enumerate(candidates):
        try:
            out.append(validate(c))
        except RequestError as e:
            raise RequestError(f"candidate {i} ({c.id!r}): {e}") from None
    return out


def selections(candidates: Iterable[Candidate]) -> dict[str, tuple[str, ...] | None]:
    """Per repo, the union of the candidates' test selections (None if one runs it all)."""
    union: dict[str, set[str] | None] = {}
    for c in candidates:
        if c.repo is None:
            continue
        have = union.setdefault(c.repo, set())
        tests = grade.selection(c)
        if tests is None:
            union[c.repo] = None
        elif have is not None:
            have.update(tests)
    return {repo: None if tests is None else tuple(sorted(tests)) for repo, tests in union.items()}
