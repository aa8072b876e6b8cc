"""Languages beyond Python: the pure toolchain descriptions and parsers of ``aexec._languages``.

The parser tests read real recorded outputs (``tests/data/languages/<language>/*.json``,
written by ``tests/data/languages/record.py``); the ``slow`` test runs a few of the
same programs live to show the recordings still match the installed toolchains.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from aexec._languages import (
    LANGUAGES,
    Language,
    StepOutput,
    parse,
    parse_version,
    source_name,
    steps,
    support_files,
    version_argv,
)
from aexec._languages.sql import prepare_script
from aexec._types import FAILURE_ORDER, MESSAGE_CAP_CHARS

DATA = Path(__file__).resolve().parent.parent / "data" / "languages"
FIXTURES = sorted(DATA.glob("*/*.json"))

#: Classes a language cannot produce (docs/languages.md says why).
CANNOT_OCCUR = {
    ("javascript", "compile"),  # node reports every error before the run as a SyntaxError
    ("sql", "assertion"),  # SQLite has no assert; a failed CHECK or RAISE() is runtime
}


def _load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def _recorder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("aexec_lang_record", DATA / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


record = _recorder()


def test_fixtures_were_recorded() -> None:
    assert len(FIXTURES) >= 60


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_recorded_output_parses_to_its_class_and_location(path: Path) -> None:
    rec = _load(path)
    ev = parse(rec["language"], record.step_outputs(rec), rec["scratch"], timeout_s=rec["timeout_s"])
    primary = ev.primary
    got = (primary.failure_class, primary.location) if primary else (None, "")
    assert got == (rec["expected_class"], rec["expected_location"]), [f.message for f in ev.findings]
    assert ev.language == rec["language"]
    for finding in ev.findings:
        assert len(finding.message) <= MESSAGE_CAP_CHARS
        assert rec["scratch"] not in finding.location
    if rec["expected_class"] is None:
        assert ev.compiled and not ev.findings and not ev.parse_uncertain
        assert ev.ran == (rec["request_type"] == "run_entry")
    if rec["request_type"] == "build_check":
        assert not ev.ran
    if rec["expected_class"] in ("assertion", "resource", "runtime"):
        assert ev.compiled and ev.ran
    # the parse is a function of its input
    assert parse(rec["language"], record.step_outputs(rec), rec["scratch"], timeout_s=rec["timeout_s"]) == ev


def test_every_class_is_recorded_for_every_language_where_it_can_occur() -> None:
    seen = {(p.parent.name, _load(p)["expected_class"]) for p in FIXTURES}
    for language in LANGUAGES:
        for cls in FAILURE_ORDER:
            if (language, cls) in CANNOT_OCCUR:
                assert (language, cls) not in seen
            else:
                assert (language, cls) in seen, f"no {cls} fixture for {language}"
        assert (language, None) in seen, f"no passing fixture for {language}"


def test_findings_are_ordered_primary_first() -> None:
    rec = _load(DATA / "rust" / "dependency_import.json")
    ev = parse("rust", record.step_outputs(rec), rec["scratch"])
    rank = {c: i for i, c in enumerate(FAILURE_ORDER)}
    assert ev.findings[0].failure_class == min((f.failure_class for f in ev.findings), key=rank.__getitem__)
    # javac's cascade after a missing package follows from it: dependency, not compile
    rec = _load(DATA / "java" / "dependency.json")
    ev = parse("java", record.step_outputs(rec), rec["scratch"])
    assert [f.failure_class for f in ev.findings] == ["dependency", "dependency"]
    assert [f.location for f in ev.findings] == ["Main.java:1", "Main.java:5"]


def test_exception_is_named_for_uncaught_errors() -> None:
    cases: dict[tuple[Language, str], str] = {
        ("java", "assertion"): "java.lang.AssertionError: x should be two",
        ("javascript", "type"): "TypeError: Cannot read properties of undefined (reading 'port')",
        ("cpp", "runtime_exception"): "std::runtime_error: boom",
    }
    for (language, name), exc in cases.items():
        rec = _load(DATA / language / f"{name}.json")
        assert parse(language, record.step_outputs(rec), rec["scratch"]).exception == exc
    rec = _load(DATA / "rust" / "assertion.json")
    exception = parse("rust", record.step_outputs(rec), rec["scratch"]).exception
    assert exception is not None and exception.startswith(
        "panic: assertion `left == right` failed: two items"
    )


def test_a_cgroup_oom_kill_is_resource() -> None:
    # The flag comes from the pipeline (the memory cgroup's event count), not from a
    # toolchain's output: the program's own output is whatever it printed before the kill.
    outs = (StepOutput("compile", 0), StepOutput("link", 0), StepOutput("run", None, 9, oom_killed=True))
    ev = parse("c", outs, "/s")
    assert ev.primary is not None and ev.primary.failure_class == "resource"
    assert "memory cap" in ev.primary.message


def test_a_compiler_at_the_deadline_is_timeout() -> None:
    ev = parse("rust", (StepOutput("compile", None, 9, timed_out=True),), "/s", timeout_s=60)
    assert ev.primary is not None
    assert (ev.primary.failure_class, ev.primary.step) == ("timeout", "compile")
    assert "60 s" in ev.primary.message and not ev.compiled and not ev.ran


def test_a_build_step_that_follows_no_convention_is_flagged() -> None:
    ev = parse("c", (StepOutput("compile", 4, stderr="gcc: internal compiler error: Killed\n"),), "/s")
    assert ev.parse_uncertain and ev.primary is not None and ev.primary.failure_class == "compile"


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("request_type", ["build_check", "run_entry"])
def test_steps_are_plain_argv(language: Any, request_type: Any) -> None:
    plan = steps(language, request_type, "/scratch/x", ram_mib=256)
    assert plan, "at least one step"
    for step in plan:
        assert step.cwd == "/scratch/x"
        assert all(isinstance(a, str) and a for a in step.argv)
        assert step.argv[0] not in ("sh", "bash", "/bin/sh")
    runs = [s for s in plan if s.runs_candidate]
    assert len(runs) == (request_type == "run_entry")
    if runs:
        assert plan[-1].runs_candidate
    assert source_name(language) in {"main.c", "main.cpp", "main.rs", "Main.java", "main.js", "main.sql"}
    files = support_files(language, request_type, "SELECT 1;\n")
    assert source_name(language) not in files


def test_steps_use_the_resolved_tools_and_caps() -> None:
    plan = steps("java", "run_entry", "/s", tools={"java": "/opt/jdk/bin/java"}, ram_mib=256)
    assert plan[-1].argv[:3] == ("/opt/jdk/bin/java", "-ea", "-Xmx128m")
    node = steps("javascript", "run_entry", "/s", ram_mib=512)[-1]
    assert "--max-old-space-size=256" in node.argv and node.evidence_file == "/s/.aexec_node_error.json"
    # SQLite's heap capped at the RAM cap, its PRAGMA's echo kept out of the program's stdout
    sql = steps("sql", "run_entry", "/s", ram_mib=256)[-1].argv
    assert sql[-2:] == (":memory:", ".read main.sql")
    assert "PRAGMA hard_heap_limit=268435456" in sql and sql.count("-cmd") == 3
    assert steps("c", "run_entry", "/s")[-1].argv == ("/s/main",)
    assert version_argv("rust", tools={"rustc": "/r/rustc"}) == ("/r/rustc", "--version")
    with pytest.raises(ValueError, match="run_suite"):
        steps("c", "run_suite", "/s")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown language"):
        steps("cobol", "run_entry", "/s")  # type: ignore[arg-type]


def test_parse_version_reads_the_first_line() -> None:
    assert parse_version("c", "gcc (Debian 12.2.0-14) 12.2.0\nCopyright\n") == "gcc (Debian 12.2.0-14) 12.2.0"
    assert parse_version("sql", "3.40.1 2022-12-28 14:03:47 df5c\n") == "3.40.1"
    assert parse_version("java", "", "javac 17.0.15\n") == "javac 17.0.15"


def test_the_sql_prepare_script_keeps_lines_and_runs_no_data_statement() -> None:
    code = (
        ".mode column\n"
        "CREATE TABLE t(a); INSERT INTO t VALUES (1);\n"
        "-- a comment\n"
        "SELECT a\n  FROM t;\n"
        "CREATE TRIGGER tr AFTER INSERT ON t BEGIN\n  DELETE FROM t;\nEND;\n"
        "explain select 1;\n"
        "SELECT 'no semicolon'"
    )
    out = prepare_script(code)
    assert out.count("\n") == code.count("\n")
    assert out.splitlines() == [
        "",
        "CREATE TABLE t(a); EXPLAIN INSERT INTO t VALUES (1);",
        "-- a comment",
        "EXPLAIN SELECT a",
        "  FROM t;",
        "CREATE TRIGGER tr AFTER INSERT ON t BEGIN",
        "  DELETE FROM t;",
        "END;",
        "explain select 1;",
        "EXPLAIN SELECT 'no semicolon'",
    ]
