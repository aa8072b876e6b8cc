"""Bash scripts: the toolchain steps and the pure parser of their evidence.

``build_check`` is ``bash -n main.sh`` (bash's parser, nothing runs). ``run_entry`` runs
``bash main.sh`` alone, as SandboxFusion does: bash reads and runs a script a command at a
time, so the lines before a syntax error run and print, and a check step first would
change what the program does. Evidence is bash's own convention on stderr, one message a
line: ``main.sh: line 3: syntax error near unexpected token `fi'``, ``main.sh: line 2:
foo: command not found`` (exit status 127), ``main.sh: line 5: x: unbound variable``.
"""

from __future__ import annotations

import re
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
    parse_steps,
    tool,
)
from ._language import Language

SOURCE: Final = "main.sh"

# "main.sh: line 3: syntax error near unexpected token `fi'"; bash -n also prints
# "main.sh: line 4: `fi'" (the offending line) after it, which is not a message of its own.
_LINE = re.compile(r"^(?P<file>[^\n:]+): line (?P<line>\d+): (?P<msg>[^\n]*)$", re.M)
# The parser's errors; "syntax error in expression" / "syntax error: operand expected"
# are arithmetic evaluated while the script runs (runtime).
_SYNTAX = re.compile(r"syntax error near|syntax error: unexpected end of file|unexpected EOF")


def steps(
    request_type: LangRequestType, scratch: str, tools: Mapping[str, str] | None, ram_mib: int | None
) -> tuple[Step, ...]:
    """``bash -n main.sh`` for ``build_check``; ``bash main.sh`` for ``run_entry``."""
    bash = tool(tools, "bash")
    if request_type == "build_check":
        return (Step("check", (bash, "-n", SOURCE), scratch),)
    return (Step(RUN_STEP, (bash, SOURCE), scratch),)


def version_argv(tools: Mapping[str, str] | None) -> tuple[str, ...]:
    return (tool(tools, "bash"), "--version")


def message_class(message: str, exit_code: int | None) -> FailureClass:
    if _SYNTAX.search(message):
        return "syntax"
    if message.endswith("command not found") or exit_code == 127:
        return "dependency"
    return "runtime"


def _parse_step(out: StepOutput, scratch: str) -> list[LangFinding]:
    found = []
    for m in _LINE.finditer(out.stderr):
        message = m["msg"]
        if message.startswith("`") and message.endswith("'"):  # the echo of the offending line
            continue
        where = f"{SOURCE}:{m['line']}" if m["file"].endswith(SOURCE) else ""
        cls = message_class(message, out.exit_code)
        found.append(LangFinding(cls, where, cap(message), out.name))
    # Only the message that explains the exit: bash goes on after most errors, so an
    # earlier "command not found" is not why a script exits 1 at its end.
    syntax = [f for f in found if f.failure_class == "syntax"]
    if syntax:
        return syntax[:1]
    if out.exit_code == 127:
        return [f for f in found if f.failure_class == "dependency"][-1:]
    return found[-1:] if found and out.exit_code in (1, 2) else []


def parse(outputs: tuple[StepOutput, ...], scratch: str, timeout_s: float | None = None) -> LanguageEvidence:
    """The evidence of a bash request's steps. Same input, same output."""
    return parse_steps("bash", outputs, scratch, timeout_s, _parse_step)


#: Bash (SandboxFusion's ``bash``; no suite runner).
LANGUAGE: Final = Language(
    name="bash",
    source=SOURCE,
    tools=("bash",),
    steps=steps,
    parse=parse,
    version_argv=version_argv,
)
