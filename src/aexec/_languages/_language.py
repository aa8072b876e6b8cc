"""The object each language beyond Python exports: :class:`Language`. Pure: no I/O.

A language is data and four functions of its own module: the file its ``code`` is
written to, the executables it needs, the steps of a request, the parser of their
outputs, the version probe. `aexec._languages` keeps every one by name (``LANGUAGES``,
``language(name)``); the pipeline asks it for the object and calls its methods, so a
new language, or a new suite runner for one, is one more object, not one more branch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

import attrs

from ._common import (
    LANG_REQUEST_TYPES,
    LangName,
    LangRequestType,
    LanguageEvidence,
    Step,
    StepOutput,
    first_line,
)
from .canary import SuiteCanary
from .suite import Suite

#: Files aexec writes beside the source start with this (hooks, evidence, scripts).
OWN_PREFIX: Final = ".aexec"

#: ``(request_type, scratch, tools, ram_mib)`` → the steps of a ``build_check`` or ``run_entry``.
Steps = Callable[[LangRequestType, str, Mapping[str, str] | None, int | None], tuple[Step, ...]]
#: ``(outputs, scratch, timeout_s)`` → the evidence of the steps that ran.
Parse = Callable[[tuple[StepOutput, ...], str, float | None], LanguageEvidence]
#: ``tools`` → the argv whose output names the toolchain's version.
VersionArgv = Callable[[Mapping[str, str] | None], tuple[str, ...]]
#: ``(request_type, code)`` → files the steps need beside the source (name → text).
SupportFiles = Callable[[LangRequestType, str], dict[str, str]]


def no_files(request_type: LangRequestType, code: str) -> dict[str, str]:
    return {}


def version_line(line: str) -> str:
    return line


@attrs.frozen
class Census:
    """What a language's program leaves that the pipeline reads after it has run (sql:
    the tables whose rows changed), with the run step's own evidence file."""

    #: A script written beside the source of a ``run_entry`` (name, text).
    file: str
    script: str
    #: The run step, made to read it after the program.
    step: Callable[[Step], Step]
    #: The step's evidence → ``(table, rows, digest)`` of each table whose rows changed.
    read: Callable[[str | None], tuple[tuple[str, int, str], ...]]


@attrs.frozen
class Language:
    """One language beyond Python: how a ``snippet`` of it is built, run and read.

    For one request: write `files` into the scratch directory; run `plan`'s steps in
    order, each in its ``cwd`` with its ``env`` added, stopping after the first that
    fails (the request's ``timeout_s`` covers them together); hand each step's
    :class:`StepOutput` (with the text of its ``evidence_file``) to `parse` (``run_suite``
    of a repo: ``suite.parse``). ``version_argv`` is the probe for
    ``environment.toolchain``, read by `parse_version`.
    """

    name: LangName
    #: The file the request's ``code`` is written to, in the scratch directory.
    source: str
    #: The executables its steps run (keys of the ``tools`` mapping).
    tools: tuple[str, ...]
    _steps: Steps
    _parse: Parse
    _version_argv: VersionArgv
    _support_files: SupportFiles = no_files
    #: The version of the probe's first non-empty line.
    _version: Callable[[str], str] = version_line
    #: What the build writes in the scratch directory (relative; a directory ends in
    #: ``/``): aexec's own, never reported as a change the run made.
    own_files: tuple[str, ...] = ()
    #: The runtime reserves far more address space than it uses (the JVM's class space,
    #: V8's code range): under the RLIMIT_AS fallback its program gets it lifted.
    reserves_address_space: bool = False
    #: What the pipeline reads after a ``run_entry`` (sql's table census).
    census: Census | None = None
    #: Its test-suite runner (``run_suite`` of a repo), if it has one.
    suite: Suite | None = None

    def _check(self, request_type: str) -> LangRequestType:
        for known in LANG_REQUEST_TYPES:
            if request_type == known:
                return known
        raise ValueError(f"{self.name} answers build_check and run_entry, not {request_type!r}")

    def support_files(self, request_type: str, code: str) -> dict[str, str]:
        """Files the steps need beside the source (name relative to the scratch dir → text)."""
        return self._support_files(self._check(request_type), code)

    def steps(
        self,
        request_type: str,
        scratch: str,
        *,
        tools: Mapping[str, str] | None = None,
        ram_mib: int | None = None,
    ) -> tuple[Step, ...]:
        """The argv steps for ``request_type`` in the scratch directory ``scratch`` (absolute).

        ``build_check`` builds only (javascript: a syntax check; sql: every statement
        prepared, none of the data statements run); ``run_entry`` builds, then runs.
        ``tools`` maps an executable's name to the path to run; ``ram_mib`` (the memory
        cap) sizes the JVM's and V8's heaps below it, and SQLite's ``hard_heap_limit`` at
        it, so running out is the runtime's own report.
        """
        return self._steps(self._check(request_type), scratch, tools, ram_mib)

    def parse(
        self, outputs: Sequence[StepOutput], scratch: str, *, timeout_s: float | None = None
    ) -> LanguageEvidence:
        """The evidence of the steps that ran, in order. Pure: same input, same output.

        ``scratch`` is the directory the steps ran in; paths under it are shown relative
        (``main.c:3``). ``timeout_s`` only words the timeout message.
        """
        return self._parse(tuple(outputs), scratch, timeout_s)

    def version_argv(self, *, tools: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """The argv whose output names the toolchain's version (``environment.toolchain``)."""
        return self._version_argv(tools)

    def parse_version(self, stdout: str, stderr: str = "") -> str:
        """The version line of ``version_argv``'s output (first non-empty line)."""
        return self._version(first_line(stdout) or first_line(stderr))

    # ---- what the pipeline runs: the census, and a repo's suite --------------------------

    def runner(self) -> Suite:
        """Its suite runner; ValueError when it has none."""
        if self.suite is None:
            raise ValueError(f"{self.name} has no test-suite runner (run_suite of a repo)")
        return self.suite

    def files(self, request_type: str, code: str | None) -> dict[str, str]:
        """Every file the pipeline writes into the run's ``work`` dir: the source, its
        `support_files` and a ``run_entry``'s census script; for ``run_suite`` (the repo
        is the source), the suite's own files only."""
        if request_type == "run_suite":
            return self.runner().support_files()
        if code is None:
            raise ValueError(f"{self.name} {request_type}: a snippet needs `code`")
        files = {self.source: code, **self.support_files(request_type, code)}
        if self.census is not None and request_type == "run_entry":
            files[self.census.file] = self.census.script
        return files

    def plan(
        self,
        request_type: str,
        scratch: str,
        *,
        tools: Mapping[str, str] | None = None,
        ram_mib: int | None = None,
        home: str | None = None,
        tests: Sequence[str] | None = None,
        canary: SuiteCanary | None = None,
    ) -> tuple[Step, ...]:
        """The steps the pipeline runs: `steps`, with a ``run_entry`` reading its census
        after the program; for ``run_suite``, the suite's steps (``scratch`` is the repo's
        view, ``home`` the scratch home), with the run's ``canary``."""
        if request_type == "run_suite":
            return self.runner().steps(scratch, home or scratch, tests, tools=tools, canary=canary)
        planned = self.steps(request_type, scratch, tools=tools, ram_mib=ram_mib)
        census = self.census
        if census is not None and request_type == "run_entry":
            return tuple(census.step(s) if s.runs_candidate else s for s in planned)
        return planned

    def tables(self, run: StepOutput | None) -> tuple[tuple[str, int, str], ...]:
        """The census of a run step that succeeded: the tables whose rows changed."""
        if self.census is None or run is None:
            return ()
        return self.census.read(run.diagnostics)
