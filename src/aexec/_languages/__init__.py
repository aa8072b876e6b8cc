"""Languages beyond Python (contract: "Added: languages beyond Python"). Pure: no I/O.

The interface the pipeline calls, for one request in ``language``:

1. write ``source_name(language)`` (the request's ``code``) and every file of
   ``support_files(language, request_type, code)`` into the scratch directory;
2. run ``steps(language, request_type, scratch, ...)`` in order, each in its ``cwd``
   with its ``env`` added, stopping after the first that fails (non-zero exit, signal,
   deadline); the request's ``timeout_s`` covers all of them together;
3. hand each step's :class:`StepOutput` (with the text of its ``evidence_file``, if it
   wrote one) to ``parse(language, outputs, scratch)``, which returns the
   :class:`LanguageEvidence`: the findings, primary first in the spec's order.

``version_argv(language)`` is the probe for ``environment.toolchain``; its output is
read by ``parse_version``. ``TOOLS`` names the executables each language needs, so the
pipeline can resolve them (``tools={"rustc": "/root/.cargo/bin/rustc"}``) or report a
missing one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from . import cargo, cfamily, ctest, java, javascript, nodetest, rust, sql
from ._common import (
    LANG_REQUEST_TYPES,
    LANGUAGES,
    LangFinding,
    LangRequestType,
    Language,
    LanguageEvidence,
    Step,
    StepOutput,
    first_line,
)
from .suite import (
    SUITE_LANGUAGES,
    SUITE_TOOLS,
    SuiteEvidence,
    is_test_file,
    oracle_text,
    selects_ids,
    split,
)

__all__ = [
    "LANGUAGES",
    "LANG_REQUEST_TYPES",
    "OWN_PREFIX",
    "SUITE_LANGUAGES",
    "SUITE_TOOLS",
    "TOOLS",
    "LangFinding",
    "LangRequestType",
    "Language",
    "LanguageEvidence",
    "Step",
    "StepOutput",
    "SuiteEvidence",
    "census",
    "is_test_file",
    "oracle_text",
    "own_files",
    "parse",
    "parse_suite",
    "parse_version",
    "pipeline_steps",
    "pipeline_support_files",
    "selects_ids",
    "source_name",
    "split",
    "steps",
    "suite_own_files",
    "suite_steps",
    "suite_support_files",
    "support_files",
    "version_argv",
]

#: The executables each language's steps run (keys of the ``tools`` mapping).
TOOLS: Final[dict[Language, tuple[str, ...]]] = {
    "c": ("gcc",),
    "cpp": ("g++",),
    "rust": ("rustc",),
    "java": ("javac", "java"),
    "javascript": ("node",),
    "sql": ("sqlite3",),
}


def _check(language: str, request_type: str) -> None:
    if language not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}; expected one of {', '.join(LANGUAGES)}")
    if request_type not in LANG_REQUEST_TYPES:
        raise ValueError(f"{language} answers build_check and run_entry, not {request_type!r}")


def source_name(language: Language) -> str:
    """The file the request's ``code`` is written to, in the scratch directory."""
    if language in ("c", "cpp"):
        return cfamily.SOURCE[language]
    return {"rust": rust.SOURCE, "java": java.SOURCE, "javascript": javascript.SOURCE, "sql": sql.SOURCE}[
        language
    ]


def support_files(language: Language, request_type: LangRequestType, code: str) -> dict[str, str]:
    """Files the steps need beside the source (name relative to the scratch dir → text)."""
    _check(language, request_type)
    if language == "javascript" and request_type == "run_entry":
        return javascript.support_files()
    if language == "sql":
        return sql.support_files(request_type, code)
    return {}


def steps(
    language: Language,
    request_type: LangRequestType,
    scratch: str,
    *,
    tools: Mapping[str, str] | None = None,
    ram_mib: int | None = None,
) -> tuple[Step, ...]:
    """The argv steps for ``request_type`` in the scratch directory ``scratch`` (absolute).

    ``build_check`` builds only (javascript: a syntax check; sql: every statement
    prepared, none of the data statements run); ``run_entry`` builds, then runs. ``tools``
    maps an executable's name to the path to run; ``ram_mib`` (the memory cap) sizes the
    JVM's and V8's heaps below it, and SQLite's ``hard_heap_limit`` at it, so running out
    is the runtime's own report.
    """
    _check(language, request_type)
    if language in ("c", "cpp"):
        return cfamily.steps(language, request_type, scratch, tools)
    if language == "rust":
        return rust.steps(request_type, scratch, tools)
    if language == "java":
        return java.steps(request_type, scratch, tools, ram_mib)
    if language == "javascript":
        return javascript.steps(request_type, scratch, tools, ram_mib)
    return sql.steps(request_type, scratch, tools, ram_mib)


def version_argv(language: Language, *, tools: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The argv whose output names the toolchain's version (``environment.toolchain``)."""
    if language in ("c", "cpp"):
        return cfamily.version_argv(language, tools)
    if language == "rust":
        return rust.version_argv(tools)
    if language == "java":
        return java.version_argv(tools)
    if language == "javascript":
        return javascript.version_argv(tools)
    if language == "sql":
        return sql.version_argv(tools)
    raise ValueError(f"unknown language {language!r}")


def parse_version(language: Language, stdout: str, stderr: str = "") -> str:
    """The version line of ``version_argv``'s output (first non-empty line)."""
    text = first_line(stdout) or first_line(stderr)
    if language == "sql":
        return " ".join(text.split()[:1]) or text  # "3.40.1 2022-12-28 14:03:47 <hash>"
    return text


def parse(
    language: Language,
    outputs: tuple[StepOutput, ...] | list[StepOutput],
    scratch: str,
    *,
    timeout_s: float | None = None,
) -> LanguageEvidence:
    """The evidence of the steps that ran, in order. Pure: same input, same output.

    ``scratch`` is the directory the steps ran in; paths under it are shown relative
    (``main.c:3``). ``timeout_s`` only words the timeout message.
    """
    outs = tuple(outputs)
    if language in ("c", "cpp"):
        return cfamily.parse(language, outs, scratch, timeout_s)
    if language == "rust":
        return rust.parse(outs, scratch, timeout_s)
    if language == "java":
        return java.parse(outs, scratch, timeout_s)
    if language == "javascript":
        return javascript.parse(outs, scratch, timeout_s)
    if language == "sql":
        return sql.parse(outs, scratch, timeout_s)
    raise ValueError(f"unknown language {language!r}")


# ---- what the pipeline adds: the sql table census, and the files that are aexec's ------

#: Files aexec writes beside the source start with this (hooks, evidence, scripts).
OWN_PREFIX: Final = ".aexec"


def pipeline_support_files(language: Language, request_type: str, code: str) -> dict[str, str]:
    """`support_files`, and for a ``sql`` run the table census script (`sql.with_census`);
    for ``run_suite``, `suite_support_files`."""
    if request_type == "run_suite":
        return suite_support_files(language)
    assert request_type in LANG_REQUEST_TYPES
    files = support_files(language, request_type, code)
    if language == "sql" and request_type == "run_entry":
        files[sql.CENSUS_FILE] = sql.CENSUS_SCRIPT
    return files


def pipeline_steps(
    language: Language,
    request_type: str,
    scratch: str,
    *,
    tools: Mapping[str, str] | None = None,
    ram_mib: int | None = None,
    home: str | None = None,
    tests: Sequence[str] | None = None,
) -> tuple[Step, ...]:
    """`steps`, with a ``sql`` run reading the table census after the script; for
    ``run_suite``, `suite_steps` (``scratch`` is the repo's view, ``home`` the scratch home)."""
    if request_type == "run_suite":
        return suite_steps(language, scratch, home or scratch, tests, tools=tools)
    assert request_type in LANG_REQUEST_TYPES
    planned = steps(language, request_type, scratch, tools=tools, ram_mib=ram_mib)
    if language == "sql" and request_type == "run_entry":
        return tuple(sql.with_census(s) if s.runs_candidate else s for s in planned)
    return planned


# ---- test suites (run_suite with a repo): aexec._languages.suite ---------------------------


def _check_suite(language: str) -> None:
    if language not in SUITE_LANGUAGES:
        raise ValueError(f"run_suite answers {', '.join(SUITE_LANGUAGES)} (and python), not {language!r}")


def suite_steps(
    language: Language,
    work: str,
    home: str,
    tests: Sequence[str] | None,
    *,
    tools: Mapping[str, str] | None = None,
) -> tuple[Step, ...]:
    """The steps that run ``tests`` (None: the whole suite; empty: none) of the project in
    ``work``; caches and build trees go under ``home`` (the scratch home)."""
    _check_suite(language)
    if language == "rust":
        return cargo.steps(work, home, tests, tools)
    if language == "javascript":
        return nodetest.steps(work, tests, tools)
    return ctest.steps(work, home, tests, tools)


def suite_support_files(language: Language) -> dict[str, str]:
    """Files a suite's steps need in the repo's view (aexec's own, `OWN_PREFIX`)."""
    _check_suite(language)
    if language == "javascript":
        return nodetest.support_files()
    return ctest.support_files() if language in ("c", "cpp") else {}


def suite_own_files(language: Language) -> tuple[str, ...]:
    """What a suite's steps write under the scratch home (relative; directories end in ``/``)."""
    if language == "rust":
        return (cargo.CARGO_HOME + "/", cargo.TARGET_DIR + "/")
    if language in ("c", "cpp"):
        return (ctest.BUILD_DIR + "/", ctest.JUNIT_FILE, ctest.SOURCES_FILE)
    return ()


def parse_suite(
    language: Language,
    outputs: tuple[StepOutput, ...] | list[StepOutput],
    work: str,
    tests: Sequence[str] | None,
    *,
    timeout_s: float | None = None,
) -> SuiteEvidence:
    """The per-test verdicts (of the selection) and findings of a suite's steps. Pure."""
    _check_suite(language)
    outs = tuple(outputs)
    if language == "rust":
        return cargo.parse(outs, work, tests, timeout_s)
    if language == "javascript":
        return nodetest.parse(outs, work, tests, timeout_s)
    assert language in ("c", "cpp")
    return ctest.parse(language, outs, work, tests, timeout_s)


def census(text: str | None) -> tuple[tuple[str, int, str], ...]:
    """The tables of a ``sql`` run whose rows changed: ``(table, rows, digest)``, by name."""
    return sql.census(text)


def own_files(language: Language) -> tuple[str, ...]:
    """What the build writes in the scratch directory (relative; a directory ends in ``/``):
    aexec's own, never reported as a change the run made (nor are `OWN_PREFIX` files)."""
    if language in ("c", "cpp"):
        return (cfamily.OBJECT, cfamily.PROGRAM)
    if language == "rust":
        return (rust.PROGRAM,)
    if language == "java":
        return (java.CLASSES + "/",)
    return ()
