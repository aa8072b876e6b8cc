"""Test suites in languages beyond Python (``run_suite`` with a ``repo``). Pure: no I/O.

What every language's suite shares: how a selector picks test ids, the per-test result
record, and the :class:`Suite` object each runner exports: its tools beyond its
language's, its steps and parser, and the rules of its tamper guard (which files are the
language's tests, and which part of a file configures the runner). The runners are
`cargo` (Rust, ``cargo test``), `nodetest` (JavaScript, ``node --test``) and `ctest`
(C and C++, CMake and CTest).

Test ids are ``<file>::<name>`` like pytest's node ids, so a selector is a file (every
test of it), a file and a name (that test), or a file and a name prefix that ends at a
separator (``::`` for Rust modules, `` > `` for node suites):

* Rust: ``<target source>::<libtest path>`` — ``src/lib.rs::tests::adds``,
  ``tests/api.rs::api_add``, ``src/main.rs::tests::x``;
* JavaScript: ``<test file>::<suite> > <test>`` — ``test/math.test.js::math > adds``;
* C/C++: ``CMakeLists.txt::<ctest name>`` (CTest's names are the project's, declared by
  ``add_test`` in its CMake files) — ``CMakeLists.txt::add_big``.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import attrs

from ._common import LanguageEvidence, Step, StepOutput
from .canary import SuiteCanary

SuiteVerdict = Literal["passed", "failed", "errored", "skipped"]


@attrs.frozen
class SuiteEvidence:
    """What a suite's steps showed: the per-test verdicts (selected, in reported order)
    and the findings (a failed build, each failed test with its location, the deadline)."""

    evidence: LanguageEvidence
    tests: tuple[tuple[str, SuiteVerdict], ...]
    #: The repo's files the selected tests are built from, when the selection names the
    #: runner's ids (`selects_ids`) and the steps found them; None: not known.
    sources: tuple[str, ...] | None = None


# ---- selection ----------------------------------------------------------------------------


def split(selector: str) -> tuple[str, str | None]:
    """``(file, name)`` of a selector; ``name`` is None for a whole file (or directory)."""
    path, sep, name = selector.partition("::")
    return posixpath.normpath(path) if path else ".", (name if sep else None)


def matches(test_id: str, selector: str) -> bool:
    """Does ``selector`` pick ``test_id``? A whole file or directory picks every test in
    it; a name picks itself and what is nested under it (``::``, `` > ``)."""
    path, name = split(selector)
    tid_path, _, tid_name = test_id.partition("::")
    if name is None:
        return path == "." or tid_path == path or tid_path.startswith(path + "/")
    return tid_path == path and (
        tid_name == name or tid_name.startswith(name + "::") or tid_name.startswith(name + " > ")
    )


def selected(test_id: str, selectors: Sequence[str] | None) -> bool:
    return selectors is None or any(matches(test_id, s) for s in selectors)


def selects_ids(id_file: str | None, selectors: Sequence[str] | None) -> bool:
    """Does the selection name tests by the runner's ids (``CMakeLists.txt::add_big``),
    anchored to ``id_file`` (None: the runner's ids are anchored to the tests' sources)?"""
    return id_file is not None and any(split(s)[0] == id_file for s in selectors or ())


def is_test_file(patterns: Sequence[str], path: str) -> bool:
    """Does ``path`` (repo-relative) match one of ``patterns`` (fnmatch on the path, and on
    its basename)?"""
    path = posixpath.normpath(path)
    base = posixpath.basename(path)
    return any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(base, p) for p in patterns)


# ---- the runner's object -------------------------------------------------------------------

#: ``(work, home, tests, tools, canary)`` → the steps: the repo's view, the scratch home,
#: the selection, the run's canary (`aexec._languages.canary`).
SuiteSteps = Callable[
    [str, str, Sequence[str] | None, Mapping[str, str] | None, SuiteCanary | None], tuple[Step, ...]
]
#: ``(outputs, work, tests, timeout_s)`` → what the steps showed.
SuiteParse = Callable[[tuple[StepOutput, ...], str, Sequence[str] | None, float | None], SuiteEvidence]


@attrs.frozen
class Suite:
    """A language's test-suite runner (``run_suite`` of a repo). Pure: no I/O.

    The pipeline writes `support_files` into the repo's view, runs ``steps(work, home,
    tests)`` in order like a snippet's, and reads them back with ``parse``. The tamper
    guard asks `is_test_file` and `oracle_text` of each file a patch touches.
    """

    #: The runner's name: ``cargo``, ``nodetest``, ``ctest``.
    name: str
    #: Executables it needs beyond its language's ``tools`` (looked up the same way).
    tools: tuple[str, ...]
    _steps: SuiteSteps
    _parse: SuiteParse
    #: The language's test files (fnmatch on the repo-relative path, and on its basename).
    test_files: tuple[str, ...]
    #: ``(path, text or None)`` → the part of the file that configures the suite; None
    #: when the file holds none. A patch that changes it is tampering.
    _oracle_text: Callable[[str, str | None], str | None]
    #: aexec's own files the steps need in the repo's view: ``(name, text)``.
    support: tuple[tuple[str, str], ...] = ()
    #: What the steps write under the scratch home (relative; directories end in ``/``).
    own_files: tuple[str, ...] = ()
    #: The file its test ids are anchored to when they are the runner's, not a test
    #: source's (CTest: ``CMakeLists.txt::add_big``); None: ids start with the test's file.
    id_file: str | None = None

    def steps(
        self,
        work: str,
        home: str,
        tests: Sequence[str] | None,
        *,
        tools: Mapping[str, str] | None = None,
        canary: SuiteCanary | None = None,
    ) -> tuple[Step, ...]:
        """The steps that run ``tests`` (None: the whole suite; empty: none) of the project in
        ``work``, and ``canary``'s tests with them; caches and build trees go under ``home``
        (the scratch home)."""
        return self._steps(work, home, tests, tools, canary)

    def parse(
        self,
        outputs: Sequence[StepOutput],
        work: str,
        tests: Sequence[str] | None,
        *,
        timeout_s: float | None = None,
    ) -> SuiteEvidence:
        """The per-test verdicts (of the selection) and findings of the steps. Same input, same output."""
        return self._parse(tuple(outputs), work, tests, timeout_s)

    def support_files(self) -> dict[str, str]:
        return dict(self.support)

    def is_test_file(self, path: str) -> bool:
        """Is ``path`` (repo-relative) one of the language's test files?"""
        return is_test_file(self.test_files, path)

    def oracle_text(self, path: str, text: str | None) -> str | None:
        """The part of ``path`` that configures the suite, from its ``text`` (None: absent);
        None when ``path`` holds no such part."""
        return self._oracle_text(posixpath.normpath(path), text)

    def selects_ids(self, selectors: Sequence[str] | None) -> bool:
        """Does the selection name tests by the runner's ids (``CMakeLists.txt::add_big``)?"""
        return selects_ids(self.id_file, selectors)
