"""Rust with rustc: the toolchain steps and the pure parser of their evidence.

The compile step writes rustc's structured diagnostics (``--error-format=json``, one
JSON object per line on stderr), read by ``level``, ``code``, the primary span and the
message. The program is read by the standard library's conventions on stderr: a panic
(``thread 'main' panicked at main.rs:3:5:`` then its message) and the allocation-failure
abort (``memory allocation of N bytes failed``).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from typing import Any, Final

from .._types import FailureClass
from ._common import (
    RUN_STEP,
    LangFinding,
    LangRequestType,
    LanguageEvidence,
    Step,
    StepOutput,
    cap,
    loc,
    parse_steps,
    tool,
)
from ._language import Language

SOURCE: Final = "main.rs"
PROGRAM: Final = "main"
EDITION: Final = "2021"


def steps(
    request_type: LangRequestType, scratch: str, tools: Mapping[str, str] | None, ram_mib: int | None = None
) -> tuple[Step, ...]:
    """Compile and link with rustc (``build_check`` stops here), then run (a native
    program: the memory cap is the kernel's, ``ram_mib`` sizes nothing)."""
    argv = (
        tool(tools, "rustc"),
        "--edition",
        EDITION,
        "--error-format=json",
        "--color=never",
        "-C",
        "debuginfo=1",
        "-o",
        PROGRAM,
        SOURCE,
    )
    out = [Step("compile", argv, scratch)]
    if request_type == "run_entry":
        out.append(Step(RUN_STEP, (posixpath.join(scratch, PROGRAM),), scratch))
    return tuple(out)


def version_argv(tools: Mapping[str, str] | None) -> tuple[str, ...]:
    return (tool(tools, "rustc"), "--version")


# ---- reading the compiler ---------------------------------------------------------------

#: Error codes of a type the compiler rejects: mismatched types, unsatisfied trait bounds
#: (``cannot add `&str` to `{integer}```), operators and casts on the wrong type.
TYPE_CODES: Final = frozenset({"E0308", "E0277", "E0369", "E0600", "E0604", "E0605", "E0606", "E0614"})
#: Unresolved import, crate not found.
DEPENDENCY_CODES: Final = frozenset({"E0432", "E0463"})
# The parser's messages carry no code: "expected `;`, found `}`", "unexpected closing
# delimiter", "this file contains an unclosed delimiter", "unterminated double quote string".
_SYNTAX = re.compile(
    r"^expected |^unexpected |unclosed delimiter|^unterminated |^mismatched closing delimiter|"
    r"^unknown start of token|^missing (?:`|type for)|^found invalid character|"
    r"^incorrect (?:unicode )?escape|^prefix `.*` is unknown|^invalid (?:suffix|character|literal)|"
    r"^leading `\+` is not supported|^comparison operators cannot be chained|^expressions? must"
)
# E0433 is a missing crate when rustc says so (1.95: "cannot find module or crate `rand`",
# label "use of unresolved module or unlinked crate"; older: "use of undeclared crate or
# module"); the same code also names an undeclared type (``Strng::new()``), a compile error.
_MISSING_CRATE = re.compile(r"module or crate|undeclared crate|unlinked crate")
_NOT_ERRORS = re.compile(r"^aborting due to |^Some errors have detailed|^For more information about")


def _code(d: Mapping[str, Any]) -> str | None:
    code = d.get("code")
    return str(code.get("code")) if isinstance(code, dict) and code.get("code") else None


def _labels(d: Mapping[str, Any]) -> str:
    labels = [str(s.get("label") or "") for s in d.get("spans") or () if isinstance(s, dict)]
    return "\n".join([str(d.get("message", "")), *labels])


def _class(d: Mapping[str, Any]) -> FailureClass:
    code = _code(d)
    message = str(d.get("message", ""))
    if code in DEPENDENCY_CODES or (code == "E0433" and _MISSING_CRATE.search(_labels(d))):
        return "dependency"
    if code in TYPE_CODES:
        return "type"
    if code is None and _SYNTAX.search(message):
        return "syntax"
    return "compile"


_LD = re.compile(r"(?P<file>[\w./-]+\.rs):(?P<line>\d+):?(?:\d+:)? undefined reference")


def _location(d: Mapping[str, Any], scratch: str) -> str:
    spans = [s for s in d.get("spans") or () if isinstance(s, dict)]
    for s in sorted(spans, key=lambda s: not s.get("is_primary")):
        if s.get("file_name"):
            return loc(str(s["file_name"]), s.get("line_start"), scratch)
    m = _LD.search(str(d.get("rendered") or ""))  # a link error names no span
    return loc(m["file"], m["line"], scratch) if m else ""


def _primary_label(d: Mapping[str, Any]) -> str:
    for s in d.get("spans") or ():
        if isinstance(s, dict) and s.get("is_primary") and s.get("label"):
            return str(s["label"])
    return ""


def diagnostics(stderr: str) -> list[dict[str, Any]]:
    """rustc's JSON diagnostics, one per line; a line that is not one is skipped."""
    out: list[dict[str, Any]] = []
    for line in stderr.splitlines():
        if not line.startswith("{"):
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and d.get("$message_type", "diagnostic") == "diagnostic":
            out.append(d)
    return out


def compile_findings(out: StepOutput, scratch: str) -> list[LangFinding]:
    found: list[LangFinding] = []
    for d in diagnostics(out.stderr):
        message = str(d.get("message", ""))
        if d.get("level") not in ("error", "error: internal compiler error") or _NOT_ERRORS.search(message):
            continue
        code = _code(d)
        text = f"error[{code}]: {message}" if code else message
        label = _primary_label(d)
        if label and label not in message:
            text = f"{text}: {label}"  # "mismatched types: expected `i32`, found `&str`"
        found.append(LangFinding(_class(d), _location(d, scratch), cap(text), out.name))
    return found


# ---- reading the program ----------------------------------------------------------------

# "thread 'main' panicked at main.rs:3:5:\nmessage" (Rust ≥ 1.73; ≥ 1.92 adds "(tid)"),
# or the older "thread 'main' panicked at 'message', main.rs:3:5".
PANIC = re.compile(
    r"^thread '(?P<thread>[^']*)'(?: \(\d+\))? panicked at "
    r"(?:(?P<file>[^\n:]+):(?P<line>\d+):\d+:\n(?P<msg>(?:(?!note: )[^\n]*\n?)*)"
    r"|'(?P<oldmsg>.*?)', (?P<oldfile>[^\n:]+):(?P<oldline>\d+):\d+$)",
    re.M,
)
_ALLOC = re.compile(r"^memory allocation of (?P<n>\d+) bytes failed", re.M)
ASSERTION = re.compile(r"^assertion (?:failed|`left [!=]= right` failed)")


def _run_findings(out: StepOutput, scratch: str) -> list[LangFinding]:
    found: list[LangFinding] = []
    m = PANIC.search(out.stderr)
    if m:
        if m["file"] is not None:
            message, where = m["msg"].strip(), loc(m["file"], m["line"], scratch)
        else:
            message, where = m["oldmsg"], loc(m["oldfile"], m["oldline"], scratch)
        cls: FailureClass = "assertion" if ASSERTION.match(message) else "runtime"
        exc = cap(f"panic: {message}")
        found.append(
            LangFinding(cls, where, cap(f"thread '{m['thread']}' panicked: {message}"), out.name, exc)
        )
    a = _ALLOC.search(out.stderr)
    if a:
        msg = f"memory allocation of {a['n']} bytes failed"
        found.append(LangFinding("resource", "", msg, out.name, msg))
    if "has overflowed its stack" in out.stderr:
        found.append(LangFinding("runtime", "", "stack overflow", out.name, "stack overflow"))
    return found


def _parse_step(out: StepOutput, scratch: str) -> list[LangFinding]:
    if out.name == "compile":
        return compile_findings(out, scratch)
    return _run_findings(out, scratch)


def parse(outputs: tuple[StepOutput, ...], scratch: str, timeout_s: float | None = None) -> LanguageEvidence:
    """The evidence of a Rust request's steps. Same input, same output."""
    return parse_steps("rust", outputs, scratch, timeout_s, _parse_step)


#: Rust with rustc (its suites run with Cargo: `cargo`, joined in the registry).
LANGUAGE: Final = Language(
    name="rust",
    source=SOURCE,
    tools=("rustc",),
    steps=steps,
    parse=parse,
    version_argv=version_argv,
    own_files=(PROGRAM,),
)
