"""SQL with the sqlite3 shell: the toolchain steps and the pure parser of their evidence.

The script runs in ``sqlite3 -bail -batch`` on an empty in-memory database; the shell
stops at the first failing statement and reports it by its documented convention:
``Parse error near line 3: no such column: b`` (the statement could not be prepared) or
``Runtime error near line 4: UNIQUE constraint failed: t.a (19)`` (it failed while running).

``build_check`` prepares every statement and runs none of the data statements: the same
shell reads a copy of the script in which each statement is prefixed with ``EXPLAIN``
(preparing ``EXPLAIN s`` compiles ``s``; stepping it lists the bytecode, it does not run
``s``). Schema statements (``CREATE``, ``DROP``, ``ALTER``) are the exception: they are
executed, on the empty database, because the statements after them are prepared against
the schema they declare. A ``CREATE TABLE … AS SELECT`` therefore runs its query.
The prefixes go on the statements' own lines and dot-commands become blank lines, so
the shell's line numbers are the script's.
"""

from __future__ import annotations

import posixpath
import re
import sqlite3
from collections.abc import Mapping
from typing import Final

from .._types import FailureClass
from ._common import (
    RUN_STEP,
    LangFinding,
    LangRequestType,
    LanguageEvidence,
    Step,
    StepOutput,
    cap,
    evidence,
    loc,
    parse_steps,
    tool,
)
from ._language import Census, Language

SOURCE: Final = "main.sql"
PREPARE_FILE: Final = ".aexec_prepare.sql"
#: Statements ``build_check`` executes (they only shape the schema of the empty database).
SCHEMA_KEYWORDS: Final = frozenset({"CREATE", "DROP", "ALTER"})


def _first_token(sql: str) -> int:
    """Offset of the statement's first token, past whitespace and comments."""
    i = 0
    while i < len(sql):
        if sql[i].isspace():
            i += 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = len(sql) if j < 0 else j + 1
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = len(sql) if j < 0 else j + 2
        else:
            return i
    return len(sql)


def _explained(statement: str) -> str:
    start = _first_token(statement)
    word = re.match(r"[A-Za-z]+", statement[start:])
    keyword = word[0].upper() if word else ""
    if not keyword or keyword in SCHEMA_KEYWORDS or keyword == "EXPLAIN":
        return statement
    return f"{statement[:start]}EXPLAIN {statement[start:]}"


def prepare_script(code: str) -> str:
    """The script ``build_check`` reads: every data statement behind ``EXPLAIN``, same lines."""
    out: list[str] = []
    pending = ""
    for line in code.splitlines(keepends=True):
        if line.startswith(".") and _first_token(pending) == len(pending):
            out.append(pending + ("\n" if line.endswith("\n") else ""))  # a dot-command
            pending = ""
            continue
        for ch in line:
            pending += ch
            if ch == ";" and sqlite3.complete_statement(pending):
                out.append(_explained(pending))
                pending = ""
    out.append(_explained(pending) if pending.strip() else pending)
    return "".join(out)


def support_files(request_type: LangRequestType, code: str) -> dict[str, str]:
    """Files the pipeline writes into the scratch directory beside ``main.sql``."""
    return {PREPARE_FILE: prepare_script(code)} if request_type == "build_check" else {}


def steps(
    request_type: LangRequestType, scratch: str, tools: Mapping[str, str] | None, ram_mib: int | None = None
) -> tuple[Step, ...]:
    """``build_check``: the shell over the EXPLAIN copy; ``run_entry``: over the script,
    with SQLite's heap capped at ``ram_mib`` (``PRAGMA hard_heap_limit``, its echo sent to
    /dev/null): past it the statement fails "out of memory" at its line, as under
    RLIMIT_AS, where the run's memory cgroup (RAM + disk) would let it grow further."""
    shell = tool(tools, "sqlite3")
    if request_type == "build_check":
        argv = (shell, "-bail", "-batch", "-cmd", ".output /dev/null", ":memory:", f".read {PREPARE_FILE}")
        return (Step("prepare", argv, scratch),)
    heap: tuple[str, ...] = ()
    if ram_mib:
        limit = f"PRAGMA hard_heap_limit={ram_mib << 20}"
        heap = ("-cmd", ".output /dev/null", "-cmd", limit, "-cmd", ".output")
    return (Step(RUN_STEP, (shell, "-bail", "-batch", *heap, ":memory:", f".read {SOURCE}"), scratch),)


def version_argv(tools: Mapping[str, str] | None) -> tuple[str, ...]:
    return (tool(tools, "sqlite3"), "--version")


def version(line: str) -> str:
    """``3.40.1`` of ``3.40.1 2022-12-28 14:03:47 <hash>``."""
    return " ".join(line.split()[:1]) or line


# ---- reading the shell ------------------------------------------------------------------

# sqlite3 ≥ 3.34: "Parse error near line 3: …" / "Runtime error near line 4: … (19)";
# older shells: "Error: near line 3: …".
_ERROR = re.compile(
    r"^(?:(?P<kind>Parse|Runtime) error|Error:)(?: near line (?P<line>\d+))?: (?P<msg>.*?)(?: \((?P<code>\d+)\))?$",
    re.M,
)
_PARSE_ERROR = re.compile(r"^(?:Parse error|Error: near line \d+: (?:near .*: )?syntax error)", re.M)
_SYNTAX = re.compile(r"syntax error$|^incomplete input$|^unrecognized token|^unterminated ")
_TYPE = re.compile(r"^cannot store \w+ value in \w+ column|^datatype mismatch")
_RESOURCE = re.compile(r"^out of memory$|^string or blob too big$|^database or disk is full$")


def error_class(kind: str | None, message: str) -> FailureClass:
    """The class of one shell error, by its message and whether it failed to prepare."""
    if _SYNTAX.search(message):
        return "syntax"
    if _RESOURCE.search(message):
        return "resource"
    if message.startswith("no such module"):
        return "dependency"
    if _TYPE.search(message):
        return "type"
    if kind == "Parse" or message.startswith(("no such ", "ambiguous column name")):
        return "compile"
    return "runtime"


def _findings(out: StepOutput, scratch: str) -> list[LangFinding]:
    found: list[LangFinding] = []
    for m in _ERROR.finditer(out.stderr):
        kind = m["kind"]
        where = loc(SOURCE, m["line"], scratch) if m["line"] else SOURCE
        label = f"{kind} error" if kind else "Error"
        found.append(LangFinding(error_class(kind, m["msg"]), where, cap(f"{label}: {m['msg']}"), out.name))
    return found


def parse(outputs: tuple[StepOutput, ...], scratch: str, timeout_s: float | None = None) -> LanguageEvidence:
    """The evidence of a SQL request's steps. Same input, same output."""
    ev = parse_steps("sql", outputs, scratch, timeout_s, _findings)
    # The shell prepares each statement just before running it: the script "compiled"
    # when no statement failed to prepare.
    compiled = ev.compiled and not any(o.name == RUN_STEP and _PARSE_ERROR.search(o.stderr) for o in outputs)
    return evidence("sql", outputs, ev.findings, compiled=compiled, uncertain=ev.parse_uncertain)


# ---- the table census: which tables' rows a run changed (``changed_tables``) ---------------

#: A script the run step reads after the candidate's (same shell, same in-memory
#: database): it writes ``table<TAB>rows<TAB>SHA3-256 of its rows`` per table to
#: `CENSUS_OUT`, through a query it generates (the shell has no dynamic SQL of its own).
#: With ``-bail`` it runs only when the candidate's script ran to its end without error.
CENSUS_FILE: Final = ".aexec_census.sql"
CENSUS_GEN: Final = ".aexec_census_gen.sql"
CENSUS_OUT: Final = ".aexec_tables.txt"
CENSUS_SCRIPT: Final = f"""\
.bail off
.headers off
.mode list
.separator "\\t" "\\n"
.once {CENSUS_GEN}
SELECT 'SELECT ' || quote(name) || ', count(*), hex(sha3_query(' || quote('SELECT * FROM "' || replace(name, '"', '""') || '"') || ')) FROM "' || replace(name, '"', '""') || '";' FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name;
.output {CENSUS_OUT}
.read {CENSUS_GEN}
.output stdout
"""
#: At most this many tables are read from the census.
CENSUS_TABLES: Final = 200


def with_census(step: Step) -> Step:
    """The run step, reading the census after the script; its evidence file is the census."""
    return Step(
        step.name,
        (*step.argv, f".read {CENSUS_FILE}"),
        step.cwd,
        step.env,
        evidence_file=posixpath.join(step.cwd, CENSUS_OUT),
        stdin_file=step.stdin_file,
    )


def census(text: str | None) -> tuple[tuple[str, int, str], ...]:
    """``(table, rows, digest)`` of every table the census found with rows, sorted by name.

    The database starts empty, so a table with rows at the end is one whose rows changed.
    """
    out: list[tuple[str, int, str]] = []
    for line in (text or "").splitlines()[:CENSUS_TABLES]:
        parts = line.rsplit("\t", 2)
        if len(parts) == 3 and parts[1].isdigit() and int(parts[1]) > 0:
            out.append((parts[0], int(parts[1]), parts[2].lower()))
    return tuple(sorted(out))


#: SQL with the sqlite3 shell, and the census of the tables a run changed.
LANGUAGE: Final = Language(
    name="sql",
    source=SOURCE,
    tools=("sqlite3",),
    steps=steps,
    parse=parse,
    version_argv=version_argv,
    support_files=support_files,
    version=version,
    census=Census(CENSUS_FILE, CENSUS_SCRIPT, with_census, census),
)
