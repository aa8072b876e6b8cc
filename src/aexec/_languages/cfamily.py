"""C and C++ with GCC: the toolchain steps and the pure parser of their evidence.

The compile step writes GCC's structured diagnostics (``-fdiagnostics-format=json``, a
JSON array on stderr, GCC ≥ 9) and is read by their ``kind``, ``option`` and
``message`` fields. The link step is read by the linker's text convention
(``file:line: undefined reference to …``, ``-g`` gives the line). The program's own
failures are read from the C runtime's and libstdc++'s conventions on stderr
(``prog: main.c:5: main: Assertion `…' failed.``, ``terminate called after throwing an
instance of '…'``) and from the signal that ended it.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from functools import partial
from typing import Any, Final, Literal

from .._types import FailureClass
from ._common import (
    BASE_ENV,
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

CFamily = Literal["c", "cpp"]
SOURCE: Final[dict[CFamily, str]] = {"c": "main.c", "cpp": "main.cpp"}
COMPILER: Final[dict[CFamily, str]] = {"c": "gcc", "cpp": "g++"}
STD: Final[dict[CFamily, str]] = {"c": "-std=gnu17", "cpp": "-std=gnu++17"}
#: GCC 14 makes these errors by default; asking GCC 12 for the same keeps one verdict
#: for one program across compiler versions.
C_ERRORS: Final = (
    "-Werror=implicit-function-declaration",
    "-Werror=implicit-int",
    "-Werror=int-conversion",
    "-Werror=incompatible-pointer-types",
)
#: Flags of one language only: C's errors (C++ makes them errors already).
EXTRA: Final[dict[CFamily, tuple[str, ...]]] = {"c": C_ERRORS, "cpp": ()}
OBJECT: Final = "main.o"
PROGRAM: Final = "main"


def steps(
    language: CFamily,
    request_type: LangRequestType,
    scratch: str,
    tools: Mapping[str, str] | None,
    ram_mib: int | None = None,
) -> tuple[Step, ...]:
    """Compile to an object file, link (``build_check`` stops here), then run (a native
    program: the memory cap is the kernel's, ``ram_mib`` sizes nothing)."""
    cc = tool(tools, COMPILER[language])
    compile_argv = (
        cc,
        STD[language],
        "-fdiagnostics-format=json",
        "-fno-diagnostics-color",
        "-g",
        "-O0",
        *EXTRA[language],
        "-c",
        SOURCE[language],
        "-o",
        OBJECT,
    )
    link_argv = (cc, "-g", OBJECT, "-o", PROGRAM, "-lm")
    out = [Step("compile", compile_argv, scratch), Step("link", link_argv, scratch)]
    if request_type == "run_entry":
        out.append(Step(RUN_STEP, (posixpath.join(scratch, PROGRAM),), scratch, BASE_ENV))
    return tuple(out)


def version_argv(language: CFamily, tools: Mapping[str, str] | None) -> tuple[str, ...]:
    return (tool(tools, COMPILER[language]), "--version")


# ---- reading the compiler ---------------------------------------------------------------

_SYNTAX = re.compile(
    r"^expected |\bexpected (?:[^ ]+ )?(?:before|at end of|after|at|in)\b|^stray |"
    r"^missing terminating|^unterminated |^invalid preprocessing directive|"
    r"^#(?:else|endif|elif) without|^unbalanced "
)
_TYPE = re.compile(
    r"incompatible types?\b|invalid conversion|cannot convert|invalid operands|"
    r"conversion from .* to non-scalar type|no match for .?operator|no matching function for call|"
    r"invalid initialization of|cannot bind |could not convert|invalid cast|"
    r"makes (?:pointer from integer|integer from pointer)|used struct type value where scalar|"
    r"wrong type argument|assignment to expression with array type|void value not ignored|"
    r"invalid use of void expression|subscripted value is neither"
)
_TYPE_OPTIONS = frozenset({"-Werror=int-conversion", "-Werror=incompatible-pointer-types"})
_MISSING = re.compile(r"^(?P<file>.+): No such file or directory$")


def diag_class(d: Mapping[str, Any]) -> FailureClass:
    message = str(d.get("message", ""))
    if d.get("kind") == "fatal error" and _MISSING.match(message):
        return "dependency"
    if _SYNTAX.search(message):
        return "syntax"
    if d.get("option") in _TYPE_OPTIONS or _TYPE.search(message):
        return "type"
    return "compile"


def _diag_location(d: Mapping[str, Any], scratch: str) -> str:
    for place in d.get("locations") or ():
        caret = place.get("caret") if isinstance(place, dict) else None
        if isinstance(caret, dict) and caret.get("file"):
            return loc(str(caret["file"]), caret.get("line"), scratch)
    return ""


def _json_diagnostics(stderr: str) -> list[dict[str, Any]] | None:
    """The JSON array GCC writes; ``None`` when stderr holds none (a crash, a kill)."""
    for line in stderr.splitlines():
        if line.startswith("["):
            try:
                parsed = json.loads(line)
            except ValueError:
                return None
            return [d for d in parsed if isinstance(d, dict)] if isinstance(parsed, list) else None
    return None


def _compile_findings(out: StepOutput, scratch: str) -> list[LangFinding]:
    found: list[LangFinding] = []
    for d in _json_diagnostics(out.stderr) or ():
        if d.get("kind") not in ("error", "fatal error"):
            continue
        message = str(d.get("message", ""))
        if d.get("option"):
            message = f"{message} [{d['option']}]"
        found.append(LangFinding(diag_class(d), _diag_location(d, scratch), cap(message), out.name))
    return found


# GNU ld: "/abs/main.c:4: undefined reference to `f'" (with -g), or "main.c:(.text+0x5): …".
_LD = re.compile(
    r"^(?P<file>[^:\n]+):(?:(?P<line>\d+)|\([^)]*\)): (?P<msg>(?:undefined reference|multiple definition)[^\n]*)$",
    re.M,
)
_LD_OTHER = re.compile(r"^(?:/\S*/)?ld(?:\.\w+)?: (?P<msg>.+)$", re.M)


def link_findings(out: StepOutput, scratch: str) -> list[LangFinding]:
    found = [
        LangFinding("compile", loc(m["file"], m["line"], scratch), cap(m["msg"]), out.name)
        for m in _LD.finditer(out.stderr)
    ]
    if not found:
        found = [
            LangFinding("compile", "", cap(m["msg"]), out.name)
            for m in _LD_OTHER.finditer(out.stderr)
            if not m["msg"].startswith(("warning:", "note:"))
        ][:1]
    return found


# ---- reading the program ----------------------------------------------------------------

# glibc: "main: main.c:5: main: Assertion `x == 2' failed."
_ASSERT = re.compile(
    r"^(?:[^:\n]*: )?(?P<file>[^:\n]+):(?P<line>\d+): [^\n]*?Assertion (?P<expr>.+) failed\.$", re.M
)
# libstdc++: "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  …"
_TERMINATE = re.compile(
    r"terminate called after throwing an instance of '(?P<type>[^']+)'(?:\n\s*what\(\):\s*(?P<what>[^\n]*))?"
)
_BAD_ALLOC = ("std::bad_alloc", "std::bad_array_new_length")


def run_findings(out: StepOutput, scratch: str) -> list[LangFinding]:
    found: list[LangFinding] = []
    m = _ASSERT.search(out.stderr)
    if m:
        msg = f"Assertion {m['expr']} failed"
        found.append(LangFinding("assertion", loc(m["file"], m["line"], scratch), cap(msg), out.name, msg))
    t = _TERMINATE.search(out.stderr)
    if t:
        exc = f"{t['type']}: {t['what']}" if t["what"] else t["type"]
        cls: FailureClass = "resource" if t["type"] in _BAD_ALLOC else "runtime"
        found.append(LangFinding(cls, "", cap(f"uncaught exception {exc}"), out.name, cap(exc)))
    return found


def _parse_step(out: StepOutput, scratch: str) -> list[LangFinding]:
    if out.name == "compile":
        return _compile_findings(out, scratch)
    if out.name == "link":
        return link_findings(out, scratch)
    return run_findings(out, scratch)


def parse(
    language: CFamily, outputs: tuple[StepOutput, ...], scratch: str, timeout_s: float | None = None
) -> LanguageEvidence:
    """The evidence of a C or C++ request's steps. Same input, same output."""
    return parse_steps(language, outputs, scratch, timeout_s, _parse_step)


def _language(name: CFamily) -> Language:
    return Language(
        name=name,
        source=SOURCE[name],
        tools=(COMPILER[name],),
        steps=partial(steps, name),
        parse=partial(parse, name),
        version_argv=partial(version_argv, name),
        own_files=(OBJECT, PROGRAM),
    )


#: C and C++ with GCC (their suites run with CMake and CTest: `ctest`, joined in the registry).
C: Final = _language("c")
CPP: Final = _language("cpp")
