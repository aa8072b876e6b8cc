"""SandboxFusion's ``/run_code``, spoken by aexec (pure: no I/O).

The request and response are those of SandboxFusion's PyPI client ``sandbox-fusion``
0.3.7 (``RunCodeRequest``, ``RunCodeResponse``). `request` turns a request body into an
aexec `Candidate` (a ``run_entry`` snippet in the mapped language), or into the error
SandboxFusion itself answers a request it cannot take (FastAPI's ``422`` validation
body: ``{"detail": [{"type", "loc", "msg", "input"}]}``). `response` turns the
observation into SandboxFusion's answer:

* ``status``: ``Success`` when every step finished with exit status 0, ``Failed`` when the
  candidate failed (a non-zero exit, a signal, a compile error, a timeout), and
  ``SandboxError`` only when aexec itself could not observe the run (its ``error``
  verdict) — never for anything the candidate did;
* ``compile_result`` (compiled languages only: C, C++, Rust, Java) and ``run_result``,
  each ``{"status": Finished|TimeLimitExceeded|Error, "execution_time", "return_code",
  "stdout", "stderr"}``; a compile error has no ``run_result``, as in SandboxFusion.

aexec runs a compiled snippet under one deadline for the build and the run, so the
request's ``compile_timeout + run_timeout`` is that deadline, and a deadline hit is
reported as the run's (``TimeLimitExceeded``); ``execution_time`` is the whole run's.
``stdin`` is the program's standard input, ``files`` (path → base64) are written beside
the source before the run, and ``fetch_files`` are read back after it into the answer's
``files`` (path → base64; a path the run left absent, or over its cap, is left out): the
request's ``stdin``, ``files`` and ``fetch_files`` (docs/contract.md). A path that leaves
the run's directory is refused (422 naming the field).

Output follows SandboxFusion's runner: each of stdout and stderr keeps its first MiB
(`OUTPUT_KIB`, the request's ``policy.output_kib``), the rest is dropped without a mark. A
memory failure is what SandboxFusion reports for one: the run ``Finished`` with a non-zero
``return_code``, never a time limit. A language SandboxFusion names but aexec does not
run here (`Unavailable`) is SandboxFusion's ``SandboxError`` answer, not a 422.
"""

from __future__ import annotations

import math
import re
import signal
from typing import Any

import attrs

from .._errors import RequestError
from .._records import Candidate, ExecutionObservation, Policy
from .._types import TRUNCATION_MARKER, LanguageName

#: SandboxFusion's language names (its ``Language`` literal, plus the aliases its users
#: send) → aexec's.
LANGUAGES: dict[str, LanguageName] = {
    "python": "python",
    "python3": "python",
    "cpp": "cpp",
    "c": "c",
    "rust": "rust",
    "java": "java",
    "nodejs": "javascript",
    "javascript": "javascript",
    "js": "javascript",
    "sql": "sql",
    "bash": "bash",
}
#: SandboxFusion's other languages (its ``Language`` literal, and its PyPI client's):
#: known to its clients, so answered in its own form (`Unavailable`), not as unknown (422).
OTHER_LANGUAGES: frozenset[str] = frozenset(
    [
        "go",
        "go_test",
        "php",
        "csharp",
        "typescript",
        "cuda",
        "lua",
        "R",
        "perl",
        "D_ut",
        "ruby",
        "scala",
        "julia",
        "pytest",
        "junit",
        "kotlin_script",
        "jest",
        "verilog",
        "python_gpu",
        "lean",
        "swift",
        "racket",
        "python2",
        "gtest",
        "react",
    ]
)
#: SandboxFusion's runner keeps the first MiB of each stream (``_MAX_CAPTURED_OUTPUT_BYTES``).
OUTPUT_KIB = 1024
#: verl's client waits ``compile_timeout + run_timeout`` plus this (its ``API_TIMEOUT``)
#: for an answer, then gives up; it retries a 504 only.
CLIENT_SLACK_S = 10.0
#: What a run may take beyond its deadline (preparing, the kill, the pipes' grace,
#: collecting, the answer) at least; the server measures it (`Gate.overhead`).
RUN_OVERHEAD_S = 3.0
#: aexec languages with a compile step SandboxFusion reports as ``compile_result``.
COMPILED: frozenset[str] = frozenset({"c", "cpp", "rust", "java"})
#: Failure classes of a build step (docs/contract.md: "before the program runs").
BUILD_CLASSES: frozenset[str] = frozenset({"syntax", "compile", "type", "dependency"})
#: aexec's name of a field → SandboxFusion's.
_FIELDS = {"policy.timeout_s": "run_timeout", "policy.ram_mib": "memory_limit_MB"}
#: SandboxFusion's default timeouts (seconds).
DEFAULT_TIMEOUT_S = 10.0


@attrs.frozen
class Invalid(Exception):
    """A request SandboxFusion would refuse: its 422 body, for one field."""

    field: str
    message: str
    value: Any = None
    kind: str = "value_error"

    def body(self) -> dict[str, Any]:
        return {
            "detail": [
                {"type": self.kind, "loc": ["body", self.field], "msg": self.message, "input": self.value}
            ]
        }


def _timeout(body: dict[str, Any], name: str) -> float:
    value = body.get(name, DEFAULT_TIMEOUT_S)
    if value is None:
        return DEFAULT_TIMEOUT_S
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise Invalid(name, f"{name} must be a positive number of seconds", value)
    return float(value)


@attrs.frozen
class Unavailable(Exception):
    """A language SandboxFusion has and aexec does not run here: its ``SandboxError``."""

    language: str

    def body(self) -> dict[str, Any]:
        message = f"aexec runs no {self.language} here (its languages: {', '.join(LANGUAGES)})"
        return {
            "status": "SandboxError",
            "message": message,
            "compile_result": None,
            "run_result": None,
            "executor_pod_name": None,
            "files": {},
        }


def start_within(body: dict[str, Any], candidate: Candidate, overhead: float = RUN_OVERHEAD_S) -> float:
    """Seconds a request may wait to start and still end before its client gives up:
    the client's patience (verl's: ``compile_timeout + run_timeout + 10``) less the
    run's own deadline and ``overhead``, what a run takes beyond its own time."""
    patience = _timeout(body, "compile_timeout") + _timeout(body, "run_timeout") + CLIENT_SLACK_S
    return max(0.0, patience - (candidate.policy.timeout_s or DEFAULT_TIMEOUT_S) - overhead)


def request(
    body: Any,
    *,
    request_id: str | None = None,
    python: str | None = None,
) -> Candidate:
    """A ``/run_code`` body → the `Candidate` that runs it; `Invalid` names what is wrong,
    `Unavailable` a language of SandboxFusion's aexec does not run. A Python program runs
    in ``python`` (an interpreter) when the server has one."""
    if not isinstance(body, dict):
        raise Invalid("body", "the request must be a JSON object", None, "model_attributes_type")
    code = body.get("code")
    if not isinstance(code, str):
        raise Invalid("code", "Field required" if code is None else "code must be a string", code, "missing")
    name = body.get("language")
    if name in OTHER_LANGUAGES:
        raise Unavailable(name)
    if name not in LANGUAGES:
        expected = ", ".join(f"'{n}'" for n in LANGUAGES)
        raise Invalid(
            "language", f"Input should be {expected} (the languages aexec runs)", name, "literal_error"
        )
    language = LANGUAGES[name]
    stdin = body.get("stdin")
    files = body.get("files") or None
    if isinstance(files, dict):  # a path with no content (null) is no file
        files = {path: data for path, data in files.items() if data is not None} or None
    elif files is not None:
        raise Invalid("files", "files must be an object of path → base64 content", None, "dict_type")
    fetch = body.get("fetch_files") or None
    if fetch is not None and not isinstance(fetch, list):
        raise Invalid("fetch_files", "fetch_files must be a list of paths", None, "list_type")
    run = _timeout(body, "run_timeout")
    timeout = run + _timeout(body, "compile_timeout") if language in COMPILED else run
    ram = body.get("memory_limit_MB")
    try:
        policy = Policy(
            timeout_s=timeout,
            ram_mib=ram if isinstance(ram, int) and not isinstance(ram, bool) and ram > 0 else None,
            output_kib=OUTPUT_KIB,
        )
        return Candidate(
            "run_entry",
            "snippet",
            id=request_id,
            code=code,
            language=language,
            policy=policy,
            stdin=stdin or None,
            files=files,
            fetch_files=fetch,
            python=python if language == "python" else None,
        )
    except RequestError as e:
        field = str(e).split(" ", 1)[0].split(":", 1)[0].split("[", 1)[0]
        raise Invalid(_FIELDS.get(field, field), str(e), None) from None


def _return_code(obs: ExecutionObservation) -> int | None:
    if obs.exit_code is not None:
        return obs.exit_code
    if obs.signal is not None and not obs.timed_out:
        try:
            return -int(signal.Signals[obs.signal])
        except KeyError:
            return None
    return None


_MARK = re.compile(
    re.escape(TRUNCATION_MARKER)
    .replace(r"\{dropped\}", r"\d+")
    .replace(r"\{stream\}", r"(?:stdout|stderr)")
    .replace(r"\{cap\}", r"(\d+)")
    + r"\Z"
)


def uncut(text: str, cap_kib: int) -> str:
    """A stream as SandboxFusion returns one: its first bytes, without aexec's mark of
    what was dropped (`TRUNCATION_MARKER`, written only after ``cap_kib`` KiB kept)."""
    m = _MARK.search(text)
    if m is None or int(m.group(1)) != cap_kib * 1024:
        return text
    return text[: m.start()]


def _command(
    status: str, obs: ExecutionObservation, *, stdout: str, stderr: str, rc: int | None
) -> dict[str, Any]:
    return {
        "status": status,
        "execution_time": obs.duration,
        "return_code": rc,
        "stdout": uncut(stdout, obs.environment.stdout_cap_kib),
        "stderr": uncut(stderr, obs.environment.stderr_cap_kib),
    }


def compiler_text(obs: ExecutionObservation) -> str:
    """The compiler's errors as a compiler prints them: aexec has gcc and rustc write
    JSON diagnostics (its evidence), which a SandboxFusion user, or a model shown the
    error, expects as ``main.cpp:1: error: ...`` lines: rendered from the observation's
    normalized failures. Text output (javac's) is kept as it is."""
    if not obs.stderr.lstrip().startswith(("[", "{")) or not obs.failures:
        return obs.stderr
    lines = []
    for f in obs.failures:
        message = f.message if f.message.startswith("error") else f"error: {f.message}"
        lines.append(f"{f.location}: {message}" if f.location else message)
    return "\n".join(lines) + "\n"


def response(obs: ExecutionObservation, language: str) -> dict[str, Any]:
    """An observation of a `request`'s candidate → SandboxFusion's ``RunCodeResponse``."""
    out: dict[str, Any] = {"status": "Success", "message": "", "compile_result": None, "run_result": None}
    out["files"] = {path: data for path, data in (obs.files_out or {}).items() if data is not None}
    out["executor_pod_name"] = None
    if obs.verdict == "error":
        out["status"] = "SandboxError"
        out["message"] = f"aexec could not observe the run: {obs.error}"
        return out
    compiled = language in COMPILED
    failure = obs.failure
    if compiled and failure is not None and failure.failure_class in BUILD_CLASSES:
        out["status"] = "Failed"
        out["compile_result"] = _command(
            "Finished", obs, stdout=obs.stdout, stderr=compiler_text(obs), rc=_return_code(obs)
        )
        return out
    if compiled:
        out["compile_result"] = {
            "status": "Finished",
            "execution_time": None,
            "return_code": 0,
            "stdout": "",
            "stderr": "",
        }
    rc = _return_code(obs)
    # A memory failure (the cap's kill, or the runtime's own report) ends the run, as in
    # SandboxFusion: Finished with a non-zero status, whatever the clock said.
    memory = any(f.failure_class == "resource" for f in obs.failures)
    timed_out = obs.timed_out and not memory
    if memory and not rc:
        rc = -signal.SIGKILL
    status = "TimeLimitExceeded" if timed_out else "Finished"
    out["run_result"] = _command(status, obs, stdout=obs.stdout, stderr=obs.stderr, rc=rc)
    if timed_out or rc != 0 or failure is not None:
        out["status"] = "Failed"
    return out
