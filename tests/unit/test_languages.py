"""Languages beyond Python: the pure toolchain descriptions and parsers of ``aexec._languages``.

The parser tests read real recorded outputs (``tests/data/languages/<language>/*.json``,
written by ``tests/data/languages/record.py``); the ``slow`` test runs a few of the
same programs live to show the recordings still match the installed toolchains.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from aexec import _languages as langs
from aexec._languages import LANGUAGES, LangName, StepOutput
from aexec._languages.sql import prepare_script
from aexec._stages.assemble import touches_suite_oracle
from aexec._types import FAILURE_ORDER, LANGUAGE_NAMES, MESSAGE_CAP_CHARS

DATA = Path(__file__).resolve().parent.parent / "data" / "languages"
FIXTURES = sorted(DATA.glob("*/*.json"))

#: Classes a language cannot produce (docs/languages.md says why).
CANNOT_OCCUR = {
    ("javascript", "compile"),  # node reports every error before the run as a SyntaxError
    ("sql", "assertion"),  # SQLite has no assert; a failed CHECK or RAISE() is runtime
    ("bash", "assertion"),  # bash has no assert statement
    ("bash", "compile"),  # nothing but bash's parser runs before the script
    ("bash", "type"),  # every value is a string
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
    ev = langs.language(rec["language"]).parse(
        record.step_outputs(rec), rec["scratch"], timeout_s=rec["timeout_s"]
    )
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
    assert (
        langs.language(rec["language"]).parse(
            record.step_outputs(rec), rec["scratch"], timeout_s=rec["timeout_s"]
        )
        == ev
    )


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
    ev = langs.language("rust").parse(record.step_outputs(rec), rec["scratch"])
    rank = {c: i for i, c in enumerate(FAILURE_ORDER)}
    assert ev.findings[0].failure_class == min((f.failure_class for f in ev.findings), key=rank.__getitem__)
    # javac's cascade after a missing package follows from it: dependency, not compile
    rec = _load(DATA / "java" / "dependency.json")
    ev = langs.language("java").parse(record.step_outputs(rec), rec["scratch"])
    assert [f.failure_class for f in ev.findings] == ["dependency", "dependency"]
    assert [f.location for f in ev.findings] == ["Main.java:1", "Main.java:5"]


def test_exception_is_named_for_uncaught_errors() -> None:
    cases: dict[tuple[LangName, str], str] = {
        ("java", "assertion"): "java.lang.AssertionError: x should be two",
        ("javascript", "type"): "TypeError: Cannot read properties of undefined (reading 'port')",
        ("cpp", "runtime_exception"): "std::runtime_error: boom",
    }
    for (language, name), exc in cases.items():
        rec = _load(DATA / language / f"{name}.json")
        assert langs.language(language).parse(record.step_outputs(rec), rec["scratch"]).exception == exc
    rec = _load(DATA / "rust" / "assertion.json")
    exception = langs.language("rust").parse(record.step_outputs(rec), rec["scratch"]).exception
    assert exception is not None and exception.startswith(
        "panic: assertion `left == right` failed: two items"
    )


def test_a_cgroup_oom_kill_is_resource() -> None:
    # The flag comes from the pipeline (the memory cgroup's event count), not from a
    # toolchain's output: the program's own output is whatever it printed before the kill.
    outs = (StepOutput("compile", 0), StepOutput("link", 0), StepOutput("run", None, 9, oom_killed=True))
    ev = langs.language("c").parse(outs, "/s")
    assert ev.primary is not None and ev.primary.failure_class == "resource"
    assert "memory cap" in ev.primary.message


def test_a_compiler_at_the_deadline_is_timeout() -> None:
    ev = langs.language("rust").parse((StepOutput("compile", None, 9, timed_out=True),), "/s", timeout_s=60)
    assert ev.primary is not None
    assert (ev.primary.failure_class, ev.primary.step) == ("timeout", "compile")
    assert "60 s" in ev.primary.message and not ev.compiled and not ev.ran


def test_a_build_step_that_follows_no_convention_is_flagged() -> None:
    ev = langs.language("c").parse(
        (StepOutput("compile", 4, stderr="gcc: internal compiler error: Killed\n"),), "/s"
    )
    assert ev.parse_uncertain and ev.primary is not None and ev.primary.failure_class == "compile"


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("request_type", ["build_check", "run_entry"])
def test_steps_are_plain_argv(language: Any, request_type: Any) -> None:
    plan = langs.language(language).steps(request_type, "/scratch/x", ram_mib=256)
    assert plan, "at least one step"
    for step in plan:
        assert step.cwd == "/scratch/x"
        assert all(isinstance(a, str) and a for a in step.argv)
        # no shell between aexec and a toolchain (bash's own steps run bash on the file)
        assert step.argv[0] not in ("sh", "bash", "/bin/sh") or (language == "bash" and "-c" not in step.argv)
    runs = [s for s in plan if s.runs_candidate]
    assert len(runs) == (request_type == "run_entry")
    if runs:
        assert plan[-1].runs_candidate
    assert langs.language(language).source in {
        "main.c",
        "main.cpp",
        "main.rs",
        "Main.java",
        "main.js",
        "main.sql",
        "main.sh",
    }
    files = langs.language(language).support_files(request_type, "SELECT 1;\n")
    assert langs.language(language).source not in files


def test_the_registry_holds_one_object_per_language() -> None:
    assert list(LANGUAGES) == ["c", "cpp", "rust", "java", "javascript", "sql", "bash"]
    # what a request may name (checked in layer 1, below the registry): python and these
    assert LANGUAGE_NAMES[1:] == tuple(LANGUAGES) and LANGUAGE_NAMES[0] == "python"
    for name, lang in LANGUAGES.items():
        assert isinstance(lang, langs.Language) and lang.name == name and langs.language(name) is lang
    assert {n: lang.runner().name for n, lang in LANGUAGES.items() if lang.suite} == {
        "c": "ctest",
        "cpp": "ctest",
        "rust": "cargo",
        "javascript": "nodetest",
    }
    assert langs.SUITE_LANGUAGES == ("c", "cpp", "rust", "javascript")
    with pytest.raises(ValueError, match="java has no test-suite runner"):
        langs.language("java").runner()
    # Python is the default path, not an entry; an unknown name says which ones there are.
    for name in ("python", "cobol"):
        with pytest.raises(ValueError, match=f"^unknown language '{name}'; expected one of c, cpp, rust,"):
            langs.language(name)


def test_the_pipeline_files_and_steps_come_from_the_object() -> None:
    sql = langs.language("sql")
    assert set(sql.files("run_entry", "SELECT 1;")) == {"main.sql", ".aexec_census.sql"}
    assert set(sql.files("build_check", "SELECT 1;")) == {"main.sql", ".aexec_prepare.sql"}
    run = sql.plan("run_entry", "/s", ram_mib=64)[-1]
    assert run.argv[-1] == ".read .aexec_census.sql" and run.evidence_file == "/s/.aexec_tables.txt"
    assert sql.tables(StepOutput("run", 0, diagnostics="t\t2\tABC\nempty\t0\tx\n")) == (("t", 2, "abc"),)
    assert langs.language("c").tables(StepOutput("run", 0, diagnostics="t\t2\tABC\n")) == ()
    js = langs.language("javascript")
    assert set(js.files("run_suite", None)) == {".aexec_node_reporter.mjs"}
    assert js.plan("run_suite", "/w", home="/h", tests=["test/a.test.js"])[0].argv[1] == "--test"
    cargo = langs.language("rust").plan("run_suite", "/w", home="/h", tests=None)
    assert ("CARGO_HOME", "/h/.aexec_cargo") in cargo[0].env
    with pytest.raises(ValueError, match="sql has no test-suite runner"):
        sql.files("run_suite", None)
    with pytest.raises(ValueError, match="a snippet needs `code`"):
        sql.files("run_entry", None)
    # The tamper guard of a snippet (every language's, suite or not) finds no test file.
    for name in LANGUAGES:
        assert not touches_suite_oracle(name, [], None, False)


#: Where the pipeline may still name a language: Python is the default path.
_DEFAULT = "python"
SRC = Path(langs.__file__).resolve().parents[1]


def _names_a_language(node: ast.expr) -> bool:
    text = ast.unparse(node).lower()
    return "lang" in text


def test_no_module_dispatches_a_language_by_its_name() -> None:
    """A language (or a runner) is one more object in the registry, not one more rung:
    no ``language == "rust"`` / ``language in ("c", "cpp")`` outside the registry's
    objects, no ``# type: ignore`` narrowing a name to a language, and no alias of a
    private reader (``check_findings = _check_findings``)."""
    names = set(LANGUAGES)
    found: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        where = path.relative_to(SRC)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                consts = {
                    c.value
                    for side in sides
                    for c in ast.walk(side)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
                if consts & names and any(_names_a_language(s) for s in sides):
                    found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Name)
                and node.value.id == "_" + node.targets[0].id.lstrip("_")
                and "_languages" in str(where)
            ):
                found.append(f"{where}:{node.lineno}: alias {node.targets[0].id} = {node.value.id}")
        for i, line in enumerate(text.splitlines(), 1):
            if "type: ignore" in line and "lang" in line.lower():
                found.append(f"{where}:{i}: {line.strip()}")
    assert found == [], "\n".join(found)
    assert _DEFAULT not in names


def test_steps_use_the_resolved_tools_and_caps() -> None:
    plan = langs.language("java").steps("run_entry", "/s", tools={"java": "/opt/jdk/bin/java"}, ram_mib=256)
    assert plan[-1].argv[:3] == ("/opt/jdk/bin/java", "-ea", "-Xmx128m")
    node = langs.language("javascript").steps("run_entry", "/s", ram_mib=512)[-1]
    assert "--max-old-space-size=256" in node.argv and node.evidence_file == "/s/.aexec_node_error.json"
    # SQLite's heap capped at the RAM cap, its PRAGMA's echo kept out of the program's stdout
    sql = langs.language("sql").steps("run_entry", "/s", ram_mib=256)[-1].argv
    assert sql[-2:] == (":memory:", ".read main.sql")
    assert "PRAGMA hard_heap_limit=268435456" in sql and sql.count("-cmd") == 3
    assert langs.language("c").steps("run_entry", "/s")[-1].argv == ("/s/main",)
    assert langs.language("rust").version_argv(tools={"rustc": "/r/rustc"}) == ("/r/rustc", "--version")
    with pytest.raises(ValueError, match="run_suite"):
        langs.language("c").steps("run_suite", "/s")
    with pytest.raises(ValueError, match="unknown language"):
        langs.language("cobol")


def test_parse_version_reads_the_first_line() -> None:
    assert (
        langs.language("c").parse_version("gcc (Debian 12.2.0-14) 12.2.0\nCopyright\n")
        == "gcc (Debian 12.2.0-14) 12.2.0"
    )
    assert langs.language("sql").parse_version("3.40.1 2022-12-28 14:03:47 df5c\n") == "3.40.1"
    assert langs.language("java").parse_version("", "javac 17.0.15\n") == "javac 17.0.15"


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
