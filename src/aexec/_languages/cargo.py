"""A Rust crate's test suite with Cargo: the steps, and the pure parser of their output.

Two steps, both ``cargo test --offline`` with ``CARGO_HOME`` and ``CARGO_TARGET_DIR``
inside the scratch root (the boundary has no network; a crate must have no external
dependencies, or vendored ones):

* ``build``: ``--no-run --message-format=json`` — rustc's JSON diagnostics, wrapped in
  Cargo's ``compiler-message`` records on stdout, read like a snippet's (`rust`);
  Cargo's own errors (a manifest that does not parse, a dependency it cannot resolve
  offline) are read from its ``error:`` lines;
* ``run``: ``--no-fail-fast`` — every test binary runs. Stable Rust has no structured
  test output (libtest's ``--format json`` needs nightly), so libtest's documented
  pretty output is read: ``test <path> ... ok|FAILED|ignored`` per test, and the
  ``failures:`` section's ``---- <path> stdout ----`` blocks (the panic, its
  ``file:line``). Which binary a block came from is Cargo's ``Running <source> (…)``
  line on stderr: the k-th ``running N tests`` block on stdout belongs to the k-th.

``--tests`` runs the library's, the binaries' and the integration tests' harnesses;
doc-tests are not run.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Final

from .._types import FailureClass
from . import rust
from ._common import (
    BASE_ENV,
    RUN_STEP,
    LangFinding,
    Step,
    StepOutput,
    cap,
    cap_findings,
    evidence,
    exit_finding,
    first_line,
    loc,
    tool,
)
from .canary import SuiteCanary
from .suite import Suite, SuiteEvidence, SuiteVerdict, is_test_file, selected, split

#: Under the scratch home: Cargo's home and its target directory (aexec's own files).
CARGO_HOME: Final = ".aexec_cargo"
TARGET_DIR: Final = ".aexec_target"


#: The directories of a crate's target roots and Cargo's flag for each.
_TARGET_FLAG: Final = {"tests": "--test", "src/bin": "--bin", "examples": "--example", "benches": "--bench"}


def target_of(path: str) -> tuple[str, ...] | None:
    """Cargo's flag for the target whose root source is ``path``; None if not a root."""
    if path == "src/lib.rs":
        return ("--lib",)
    if path == "src/main.rs":
        return ("--bins",)
    m = re.fullmatch(r"(tests|src/bin|examples|benches)/([\w-]+)(?:\.rs|/main\.rs)", path)
    if m:
        return (_TARGET_FLAG[m[1]], m[2])
    return None


def targets(tests: Sequence[str] | None) -> tuple[str, ...]:
    """The targets the selection needs: each selector's root source, else all (``--tests``).

    Each target is one ``(flag, name)`` pair, de-duplicated as a pair: ``--test a --test b``,
    never ``--test a b`` (a bare ``b`` after the targets is libtest's name filter)."""
    found: list[tuple[str, ...]] = []
    for sel in tests or ():
        target = target_of(split(sel)[0])
        if target is None:
            return ("--tests",)
        found.append(target)
    return tuple(arg for pair in dict.fromkeys(found) for arg in pair) if found else ("--tests",)


def filters(tests: Sequence[str] | None) -> tuple[str, ...]:
    """libtest's name filters (substring matches; the result is cut to the selection)."""
    names = [split(s)[1] for s in tests or ()]
    if not names or any(n is None for n in names):
        return ()
    return tuple(dict.fromkeys(n for n in names if n))


def steps(
    work: str,
    home: str,
    tests: Sequence[str] | None,
    tools: Mapping[str, str] | None,
    canary: SuiteCanary | None = None,
) -> tuple[Step, ...]:
    cargo = tool(tools, "cargo")
    env = (
        *BASE_ENV,
        ("CARGO_HOME", posixpath.join(home, CARGO_HOME)),
        ("CARGO_TARGET_DIR", posixpath.join(home, TARGET_DIR)),
        ("CARGO_TERM_COLOR", "never"),
        ("CARGO_NET_OFFLINE", "true"),
        ("CARGO_INCREMENTAL", "0"),
        ("RUSTC", tool(tools, "rustc")),
    )
    chosen = targets(tests)
    build = Step(
        "build", (cargo, "test", "--offline", "--no-run", "--message-format=json", *chosen), work, env
    )
    if tests is not None and not tests:
        return (build,)  # an empty selection: nothing runs (the crate is still built)
    run_argv = (
        cargo,
        "test",
        "--offline",
        "--no-fail-fast",
        *chosen,
        "--",
        "--color",
        "never",
        *filters((*(tests or ()), *(canary.tests if canary else ()))),
    )
    return build, Step(RUN_STEP, run_argv, work, env)


# ---- reading Cargo and libtest ------------------------------------------------------------

_CARGO_ERROR = re.compile(r"^error: (?P<msg>.+)$", re.M)
_TOML_AT = re.compile(r"TOML parse error at line (?P<line>\d+)")
_OFFLINE_DEP = re.compile(
    r"no matching package|failed to select a version|failed to (?:get|download)|offline|vendor"
)


def _build_findings(out: StepOutput, work: str) -> list[LangFinding]:
    diags: list[str] = []
    for line in out.stdout.splitlines():
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(rec, dict)
            and rec.get("reason") == "compiler-message"
            and isinstance(rec.get("message"), dict)
        ):
            diags.append(json.dumps(rec["message"]))
    found = rust.compile_findings(StepOutput(out.name, out.exit_code, stderr="\n".join(diags)), work)
    if found:
        return found
    m = _CARGO_ERROR.search(out.stderr)
    if m is None:
        return []
    msg = m["msg"].replace(work.rstrip("/") + "/", "")
    toml = _TOML_AT.search(out.stderr)
    if toml or "failed to parse manifest" in msg:
        return [
            LangFinding("syntax", loc("Cargo.toml", toml["line"] if toml else None, work), cap(msg), out.name)
        ]
    cls: FailureClass = "dependency" if _OFFLINE_DEP.search(out.stderr) else "compile"
    detail = first_line(out.stderr[m.end() :].replace("Caused by:", "")) if cls == "dependency" else ""
    text = f"{msg}: {detail}" if detail and detail not in msg else msg
    return [LangFinding(cls, "Cargo.toml", cap(text.replace(work.rstrip("/") + "/", "")), out.name)]


_RUNNING = re.compile(r"^\s*Running (?:unittests )?(?P<src>\S+) \(", re.M)
_BLOCK = re.compile(r"^running \d+ tests?$", re.M)
_RESULT = re.compile(r"^test (?P<name>\S+)(?: - should panic)? \.\.\. (?P<v>ok|FAILED|ignored)\b", re.M)
_SECTION = re.compile(r"^---- (?P<name>\S+) stdout ----$", re.M)
_SECTION_END = re.compile(r"^(?:failures:|---- \S+ stdout ----)$", re.M)
_CRASH = re.compile(
    r"to rerun pass `(?P<target>[^`]+)`\s*\n\s*Caused by:\s*\n\s*process didn't exit successfully: .*?"
    r"\((?:signal: (?P<sig>\d+)|exit status: (?P<status>\d+))",
    re.S,
)
_VERDICT: Final[dict[str, SuiteVerdict]] = {"ok": "passed", "FAILED": "failed", "ignored": "skipped"}


def _failure(test_id: str, text: str, work: str) -> LangFinding:
    """A failed test's finding, from its ``---- name stdout ----`` section."""
    m = rust.PANIC.search(text)
    if m is None:
        why = "did not panic as expected" if "did not panic" in text else first_line(text) or "failed"
        cls: FailureClass = "assertion" if "did not panic" in text or not text.strip() else "runtime"
        return LangFinding(cls, "", cap(f"{test_id}: {why}"), RUN_STEP)
    if m["file"] is not None:
        message, where = m["msg"].strip(), loc(m["file"], m["line"], work)
    else:
        message, where = m["oldmsg"], loc(m["oldfile"], m["oldline"], work)
    cls = "assertion" if rust.ASSERTION.match(message) else "runtime"
    return LangFinding(cls, where, cap(f"{test_id}: panicked: {message}"), RUN_STEP, cap(f"panic: {message}"))


def _run(
    out: StepOutput, work: str, tests: Sequence[str] | None
) -> tuple[list[tuple[str, SuiteVerdict]], list[LangFinding], bool, bool]:
    sources = [m["src"] for m in _RUNNING.finditer(out.stderr)]
    starts = [m.start() for m in _BLOCK.finditer(out.stdout)]
    uncertain = len(sources) != len(starts)
    results: list[tuple[str, SuiteVerdict]] = []
    found: list[LangFinding] = []
    explained = False  # a test (selected or not) failed, or a test binary crashed
    for k, start in enumerate(starts):
        block = out.stdout[start : starts[k + 1] if k + 1 < len(starts) else len(out.stdout)]
        src = sources[k] if k < len(sources) else "?"
        sections = {m["name"]: m.end() for m in _SECTION.finditer(block)}
        for m in _RESULT.finditer(block):
            tid = f"{src}::{m['name']}"
            explained = explained or m["v"] == "FAILED"
            if not selected(tid, tests):
                continue
            verdict = _VERDICT[m["v"]]
            results.append((tid, verdict))
            if verdict == "failed":
                at = sections.get(m["name"])
                text = ""
                if at is not None:
                    end = _SECTION_END.search(block, at)
                    text = block[at : end.start() if end else len(block)]
                found.append(_failure(tid, text, work))
    for m in _CRASH.finditer(out.stderr):
        explained = True
        if m["sig"] is not None:  # a test binary killed: its tests did not all report
            sig = int(m["sig"])
            crash = StepOutput(RUN_STEP, None, sig)
            found.extend(cap_findings(crash, None) or (exit_finding(crash),))
            found[-1] = LangFinding(
                found[-1].failure_class, "", f"test binary `{m['target']}`: {found[-1].message}", RUN_STEP
            )
    return results, found, explained, uncertain


def parse(
    outputs: tuple[StepOutput, ...], work: str, tests: Sequence[str] | None, timeout_s: float | None
) -> SuiteEvidence:
    found: list[LangFinding] = []
    results: list[tuple[str, SuiteVerdict]] = []
    uncertain = False
    for out in outputs:
        caps = cap_findings(out, timeout_s)
        found.extend(caps)
        if out.timed_out:
            continue
        if out.name == "build":
            if out.failed and not caps:
                own = _build_findings(out, work)
                uncertain = uncertain or not own
                found.extend(own or [exit_finding(out)])
            continue
        got, failed, explained, unsure = _run(out, work, tests)
        results.extend(got)
        found.extend(failed)
        uncertain = uncertain or unsure or "characters not kept]" in out.stdout
        if out.failed and not caps and not explained:
            found.append(exit_finding(out))  # cargo failed and no test or binary says why
            uncertain = True
    return SuiteEvidence(evidence("rust", outputs, found, uncertain=uncertain), tuple(results))


# ---- the tamper guard: Rust's tests and Cargo's configuration of them ----------------------

#: A crate's test files (fnmatch on the repo-relative path, and on its basename).
TEST_FILES: Final = ("tests/*", "benches/*")
_CARGO_TEST_TABLE = re.compile(
    r"^\[\[?\s*(?:test|bench|lib|bin|dev-dependencies|profile\.test|profile\.bench"
    r"|target\.[^\]]*\.dev-dependencies)\s*\]\]?\s*$"
)
_TOML_TABLE = re.compile(r"^\[\[?[^\]]+\]\]?\s*(?:#.*)?$")
_RUST_TEST_ATTR = re.compile(r"#\[\s*(?:cfg\s*\(\s*test\s*\)|test|should_panic[^\]]*|ignore[^\]]*)\s*\]")


def _cargo_tests(text: str) -> str:
    """The tables of a Cargo.toml that configure tests: ``[[test]]``, ``[[bench]]``,
    ``[lib]``/``[[bin]]`` (their ``test``/``harness`` keys), ``[dev-dependencies]``,
    ``[profile.test]``/``[profile.bench]``."""
    out: list[str] = []
    keep = False
    for line in text.splitlines():
        stripped = line.strip()
        if _TOML_TABLE.match(stripped):
            keep = bool(_CARGO_TEST_TABLE.match(stripped.split("#", 1)[0].strip()))
        if keep and stripped and not stripped.startswith("#"):
            out.append(stripped)
    return "\n".join(out)


def _braced(text: str, start: int) -> str:
    """From ``start``, the item up to its matching ``}`` (or ``;`` before any ``{``)."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == ";" and depth == 0:
            return text[start : i + 1]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return text[start:]


def _rust_tests(text: str) -> str:
    """The test items of a Rust source: each ``#[cfg(test)]`` / ``#[test]`` item whole
    (by brace matching, which a brace inside a string literal can shift the same way on
    both sides of a patch)."""
    out: list[str] = []
    end = 0
    for m in _RUST_TEST_ATTR.finditer(text):
        if m.start() < end:
            continue  # inside an item already taken
        item = _braced(text, m.start())
        end = m.start() + len(item)
        out.append(item)
    return "\n".join(out)


def oracle_text(path: str, text: str | None) -> str | None:
    """The part of ``path`` that configures the crate's tests: Cargo's configuration, a
    manifest's test tables, a source's test items."""
    base = posixpath.basename(path)
    if path in (".cargo/config", ".cargo/config.toml"):
        return text or ""
    if base == "Cargo.toml":
        return _cargo_tests(text or "")
    if path.endswith(".rs") and not is_test_file(TEST_FILES, path):
        return _rust_tests(text or "")
    return None


#: ``cargo test`` (Rust).
SUITE: Final = Suite(
    name="cargo",
    tools=("cargo",),
    steps=steps,
    parse=parse,
    test_files=TEST_FILES,
    oracle_text=oracle_text,
    own_files=(CARGO_HOME + "/", TARGET_DIR + "/"),
)
