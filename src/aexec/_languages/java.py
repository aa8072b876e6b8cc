"""Java with javac and the JVM: the toolchain steps and the pure parser of their evidence.

javac has no structured output, so its documented message convention is read
(``Main.java:3: error: ';' expected``), with the compiler's locale pinned to English.
The program runs with assertions on (``-ea``); an uncaught exception is read from the
JVM's convention (``Exception in thread "main" java.lang.AssertionError: …`` then
``\\tat Main.main(Main.java:4)`` frames), and the launcher's own ``Error: …`` lines.
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
    loc,
    parse_steps,
    tool,
)
from ._language import Language

SOURCE: Final = "Main.java"
MAIN_CLASS: Final = "Main"
CLASSES: Final = "classes"
#: The heap is this share of the memory cap, leaving room for the JVM's own memory, so
#: running out of heap is an ``OutOfMemoryError`` the program reports, not a cgroup kill.
HEAP_SHARE: Final = 0.5
MIN_HEAP_MIB: Final = 8
_JVM: Final = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Duser.language=en", "-Duser.country=US")


def heap_mib(ram_mib: int) -> int:
    return max(MIN_HEAP_MIB, int(ram_mib * HEAP_SHARE))


def steps(
    request_type: LangRequestType, scratch: str, tools: Mapping[str, str] | None, ram_mib: int | None
) -> tuple[Step, ...]:
    """Compile with javac into ``classes/`` (``build_check`` stops here), then run with ``-ea``."""
    javac = (
        tool(tools, "javac"),
        *(f"-J{flag}" for flag in _JVM),
        "-encoding",
        "UTF-8",
        "-d",
        CLASSES,
        SOURCE,
    )
    out = [Step("compile", javac, scratch)]
    if request_type == "run_entry":
        heap = (f"-Xmx{heap_mib(ram_mib)}m",) if ram_mib else ()
        java = (tool(tools, "java"), "-ea", *heap, *_JVM, "-cp", CLASSES, MAIN_CLASS)
        out.append(Step(RUN_STEP, java, scratch))
    return tuple(out)


def version_argv(tools: Mapping[str, str] | None) -> tuple[str, ...]:
    return (tool(tools, "javac"), "-version")


# ---- reading the compiler ---------------------------------------------------------------

_ERROR = re.compile(r"^(?:(?P<file>[^\s:][^:\n]*\.java):(?P<line>\d+): )?error: (?P<msg>[^\n]*)$", re.M)
_DETAIL = re.compile(r"^\s+(?:symbol|location|required|found|reason):.*$")
_SYNTAX = re.compile(
    r"\bexpected$|^illegal start of |^not a statement|^unclosed |^reached end of file while parsing|"
    r"^illegal character|^'(?:else|catch|finally)' without|^orphaned |^malformed |"
    r"^illegal (?:line end|unicode escape|escape char)|^empty character literal|^invalid method declaration|"
    r"^unclosed comment|^illegal text block"
)
_TYPE = re.compile(r"^incompatible types|^bad operand types? |^inconvertible types|^incomparable types")
_DEPENDENCY = re.compile(r"^package \S+ does not exist|^cannot access ")


def _class(message: str) -> FailureClass:
    if _SYNTAX.search(message):
        return "syntax"
    if _TYPE.search(message):
        return "type"
    if _DEPENDENCY.search(message):
        return "dependency"
    return "compile"


_IMPORT = re.compile(r"^\s*import\s+(?:static\s+)?[\w.]+\.(?P<name>\w+|\*)\s*;")
_SYMBOL = re.compile(r"^\s+symbol:\s+(?:class|variable|interface)\s+(?P<name>\w+)")


def _compile_findings(out: StepOutput, scratch: str) -> list[LangFinding]:
    """javac's errors in its order; a symbol imported from a missing package is a dependency.

    javac goes on past ``package … does not exist`` and then cannot find each name that
    import would have declared; those follow from the missing package, so they are read
    as ``dependency`` too (a wildcard import claims every class javac cannot find).
    """
    found: list[LangFinding] = []
    missing: set[str] = set()
    lines = out.stderr.splitlines()
    for i, line in enumerate(lines):
        m = _ERROR.match(line)
        if not m:
            continue
        following: list[str] = []
        for nxt in lines[i + 1 : i + 8]:  # this error's own lines, up to the next one
            if _ERROR.match(nxt):
                break
            following.append(nxt)
        detail = [d.strip() for d in following if _DETAIL.match(d)]
        message = "; ".join([m["msg"], *detail])
        cls = _class(m["msg"])
        imported = _IMPORT.match(following[0]) if following else None
        if cls == "dependency" and imported:
            missing.add(imported["name"])
        symbol = next((s for s in map(_SYMBOL.match, following) if s), None)
        if cls == "compile" and symbol and (symbol["name"] in missing or "*" in missing):
            cls = "dependency"
            message += " (imported from a package that does not exist)"
        where = loc(m["file"], m["line"], scratch) if m["file"] else ""
        found.append(LangFinding(cls, where, cap(message), out.name))
    return found


# ---- reading the program ----------------------------------------------------------------

_UNCAUGHT = re.compile(r'^Exception in thread "(?P<thread>[^"]*)" (?P<type>[\w.$]+)(?:: (?P<msg>.*))?$', re.M)
_FRAME = re.compile(r"^\s+at (?P<where>[^(\s]+)\((?P<file>[^:)]+):(?P<line>\d+)\)$", re.M)
_LAUNCHER = re.compile(r"^Error: (?P<msg>Could not find or load main class .*|Main method .*)$", re.M)
_VM_INIT = re.compile(r"^Error occurred during initialization of VM\n(?P<msg>[^\n]*)", re.M)


def exception_class(name: str) -> FailureClass:
    short = name.rsplit(".", 1)[-1]
    if short == "AssertionError":
        return "assertion"
    if short == "OutOfMemoryError":
        return "resource"
    if short == "NoClassDefFoundError":
        return "dependency"
    return "runtime"


def _frame_location(text: str, scratch: str) -> str:
    """The innermost frame of the program's own code (classes outside a JDK module)."""
    frames = list(_FRAME.finditer(text))
    own = [f for f in frames if "/" not in f["where"]] or frames
    return loc(own[0]["file"], own[0]["line"], scratch) if own else ""


def _run_findings(out: StepOutput, scratch: str) -> list[LangFinding]:
    m = _UNCAUGHT.search(out.stderr)
    if m:
        exc = f"{m['type']}: {m['msg']}" if m["msg"] is not None else m["type"]
        where = _frame_location(out.stderr[m.end() :], scratch)
        msg = cap(f'Exception in thread "{m["thread"]}" {exc}')
        return [LangFinding(exception_class(m["type"]), where, msg, out.name, cap(exc))]
    launcher = _LAUNCHER.search(out.stderr)
    if launcher:  # the compiled code has no runnable Main: an error before the program ran
        return [LangFinding("compile", SOURCE, cap(launcher["msg"]), out.name)]
    vm = _VM_INIT.search(out.stderr)
    if vm:
        cls: FailureClass = "resource" if re.search(r"heap|memory|reserve", vm["msg"], re.I) else "runtime"
        return [LangFinding(cls, "", cap(f"the JVM did not start: {vm['msg']}"), out.name)]
    return []


def _parse_step(out: StepOutput, scratch: str) -> list[LangFinding]:
    if out.name == "compile":
        return _compile_findings(out, scratch)
    return _run_findings(out, scratch)


def parse(outputs: tuple[StepOutput, ...], scratch: str, timeout_s: float | None = None) -> LanguageEvidence:
    """The evidence of a Java request's steps. Same input, same output."""
    return parse_steps("java", outputs, scratch, timeout_s, _parse_step)


#: Java with javac and the JVM.
LANGUAGE: Final = Language(
    name="java",
    source=SOURCE,
    tools=("javac", "java"),
    steps=steps,
    parse=parse,
    version_argv=version_argv,
    own_files=(CLASSES + "/",),
    reserves_address_space=True,
)
