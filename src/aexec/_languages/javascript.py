"""JavaScript with node: the toolchain steps and the pure parser of their evidence.

``build_check`` is ``node --check main.js`` (node's parser, nothing runs), read by node's
convention for a SyntaxError: ``/path/main.js:3`` then the source line, a caret and
``SyntaxError: …``. ``run_entry`` checks the same way, then runs ``main.js`` with a small
stdlib-only hook preloaded (``--require``) that records the error ending the program as
JSON (``name``, ``message``, ``stack``, ``code``) in a side file. It listens on
``uncaughtExceptionMonitor``, which observes without changing node's own handling: the
program prints, exits and is timed exactly as without the hook. A V8 fatal error (the
heap limit) never reaches JavaScript and is read from stderr.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import unquote

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

SOURCE: Final = "main.js"
HOOK_FILE: Final = ".aexec_node_hook.js"
EVIDENCE_FILE: Final = ".aexec_node_error.json"
EVIDENCE_ENV: Final = "AEXEC_NODE_EVIDENCE"
#: V8's old space is this share of the memory cap: the heap limit is then met as node's
#: own "heap out of memory", not as a kill by the cgroup.
HEAP_SHARE: Final = 0.5
MIN_HEAP_MIB: Final = 16

#: The preloaded hook (stdlib only). It removes its variable from the environment and
#: records the last uncaught error; ``uncaughtExceptionMonitor`` leaves node's handling be.
HOOK_SOURCE: Final = """\
'use strict';
// aexec: record the uncaught error that ends the program, as JSON, in a side file.
const fs = require('fs');
const out = process.env.AEXEC_NODE_EVIDENCE;
delete process.env.AEXEC_NODE_EVIDENCE;
if (out) {
  process.on('uncaughtExceptionMonitor', (err, origin) => {
    let rec;
    try {
      const obj = err !== null && (typeof err === 'object' || typeof err === 'function');
      const ctor = obj && err.constructor && typeof err.constructor.name === 'string';
      rec = {
        origin: String(origin),
        name: obj && err.name !== undefined ? String(err.name) : typeof err,
        constructor: ctor ? err.constructor.name : null,
        message: obj ? String(err.message === undefined ? '' : err.message) : String(err),
        stack: obj && typeof err.stack === 'string' ? err.stack : null,
        code: obj && err.code !== undefined ? String(err.code) : null,
      };
    } catch (e) {
      rec = { origin: String(origin), name: 'unknown', message: '', stack: null, code: null };
    }
    try {
      fs.writeFileSync(out, JSON.stringify(rec) + '\\n');
    } catch (e) {
      // nothing to do: the program's stderr still holds node's own report
    }
  });
}
"""


def heap_mib(ram_mib: int) -> int:
    return max(MIN_HEAP_MIB, int(ram_mib * HEAP_SHARE))


def support_files(request_type: LangRequestType, code: str) -> dict[str, str]:
    """Files the pipeline writes into the scratch directory beside ``main.js``: the hook,
    for a run."""
    return {HOOK_FILE: HOOK_SOURCE} if request_type == "run_entry" else {}


def steps(
    request_type: LangRequestType, scratch: str, tools: Mapping[str, str] | None, ram_mib: int | None
) -> tuple[Step, ...]:
    """``node --check`` (``build_check`` stops here), then run with the hook preloaded."""
    node = tool(tools, "node")
    out = [Step("check", (node, "--check", SOURCE), scratch)]
    if request_type == "run_entry":
        heap = (f"--max-old-space-size={heap_mib(ram_mib)}",) if ram_mib else ()
        evidence = posixpath.join(scratch, EVIDENCE_FILE)
        argv = (node, *heap, "--require", posixpath.join(scratch, HOOK_FILE), SOURCE)
        env = (*BASE_ENV, (EVIDENCE_ENV, evidence))
        out.append(Step(RUN_STEP, argv, scratch, env, evidence_file=evidence))
    return tuple(out)


def version_argv(tools: Mapping[str, str] | None) -> tuple[str, ...]:
    return (tool(tools, "node"), "--version")


# ---- reading node -----------------------------------------------------------------------

# "/scratch/main.js:3" heads node's report of an error it can place in the source.
_HEAD = re.compile(r"^(?P<file>[^\n]+?\.[cm]?js):(?P<line>\d+)$", re.M)
# "TypeError: x is not a function", "AssertionError [ERR_ASSERTION]: …", "Error: Cannot find module 'x'"
_ERROR_LINE = re.compile(r"^(?P<name>[A-Za-z_$][\w$]*)(?: \[(?P<code>[A-Z_0-9]+)\])?: (?P<msg>[^\n]*)$", re.M)
_FRAME = re.compile(r"^\s+at (?:.*? \()?(?P<file>[^()\s]+?):(?P<line>\d+):\d+\)?$", re.M)
_HEAP = re.compile(r"^FATAL ERROR: (?P<msg>.*(?:heap out of memory|Allocation failed).*)$", re.M)
_INVALID_SIZE = re.compile(r"^# Fatal JavaScript invalid size error.*$", re.M)


# ES modules: "Cannot find module '/repo/x.js' imported from /repo/index.js" (no line).
_IMPORTED_FROM = re.compile(r"\bimported from (?P<file>[^\n]+?)\s*$", re.M)


def _path(file: str) -> str:
    """A file node names: a path (CommonJS) or a ``file://`` URL (an ES module's)."""
    return unquote(file.removeprefix("file://")) if file.startswith("file://") else file


def _where(file: str, line: int | str | None, scratch: str) -> str:
    return loc(_path(file), line, scratch)


def check_findings(out: StepOutput, scratch: str) -> list[LangFinding]:
    head = _HEAD.search(out.stderr)
    err = next((e for e in _ERROR_LINE.finditer(out.stderr) if e["name"] == "SyntaxError"), None)
    if err is None:
        return []
    where = _where(head["file"], head["line"], scratch) if head else ""
    msg = f"SyntaxError: {err['msg']}"
    return [LangFinding("syntax", where, cap(msg), out.name, cap(msg))]


def error_class(name: str, code: str | None, message: str) -> FailureClass:
    """The class of an uncaught error at run time, by its name and node's error code."""
    if code in ("MODULE_NOT_FOUND", "ERR_MODULE_NOT_FOUND") or message.startswith("Cannot find module"):
        return "dependency"
    if name == "AssertionError" or code == "ERR_ASSERTION":
        return "assertion"
    if name == "TypeError":
        return "type"
    if name == "RangeError" and "allocation failed" in message:
        return "resource"
    return "runtime"


def stack_location(stack: str, scratch: str) -> str:
    """The innermost frame in the candidate's files (not node's internals, not the hook)."""
    for f in _FRAME.finditer(stack):
        file = _path(f["file"])
        if file.startswith("node:") or file.endswith(HOOK_FILE):
            continue
        return loc(file, f["line"], scratch)
    return ""


def _record(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        rec = json.loads(text)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def run_findings(out: StepOutput, scratch: str) -> list[LangFinding]:
    heap = _HEAP.search(out.stderr) or _INVALID_SIZE.search(out.stderr)
    if heap:
        return [LangFinding("resource", "", cap(heap[0].strip("# ")), out.name, cap(heap[0].strip("# ")))]
    rec = _record(out.diagnostics)
    if rec is not None:
        name = str(rec.get("name") or rec.get("constructor") or "Error")
        message = str(rec.get("message") or "")
        code = str(rec["code"]) if rec.get("code") else None
        stack = str(rec.get("stack") or "")
    else:  # no side file: node's own report on stderr ("Uncaught" convention)
        line = _ERROR_LINE.search(out.stderr)
        if line is None:
            return []
        name, message, code, stack = line["name"], line["msg"], line["code"], out.stderr[line.end() :]
    cls = error_class(name, code, message)
    importer = _IMPORTED_FROM.search(message) if cls == "dependency" else None
    message = message.replace(scratch.rstrip("/") + "/", "")  # "Require stack:\n- main.js"
    exc = f"{name}: {message}" if message else name
    where = stack_location(stack, scratch)
    if not where and importer:  # an ES module's import: node's frames are its own, no line
        where = _where(importer["file"], None, scratch)
    if not where:
        head = _HEAD.search(out.stderr)
        where = _where(head["file"], head["line"], scratch) if head else ""
    return [LangFinding(cls, where, cap(exc), out.name, cap(exc))]


def _parse_step(out: StepOutput, scratch: str) -> list[LangFinding]:
    if out.name == "check":
        return check_findings(out, scratch)
    return run_findings(out, scratch)


def parse(outputs: tuple[StepOutput, ...], scratch: str, timeout_s: float | None = None) -> LanguageEvidence:
    """The evidence of a JavaScript request's steps. Same input, same output."""
    return parse_steps("javascript", outputs, scratch, timeout_s, _parse_step)


#: JavaScript with node (its suites run with ``node --test``: `nodetest`, joined in the registry).
LANGUAGE: Final = Language(
    name="javascript",
    source=SOURCE,
    tools=("node",),
    steps=steps,
    parse=parse,
    version_argv=version_argv,
    support_files=support_files,
    reserves_address_space=True,
)
