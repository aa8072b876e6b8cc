"""Records and helpers shared by the toolchains of every language. Pure: no I/O.

A language's toolchain is described as data — the :class:`Step` argv the pipeline runs in
order inside the scratch directory — and read back by a pure parser from the
:class:`StepOutput` of each step that ran, into :class:`LanguageEvidence`.
"""

from __future__ import annotations

import signal as signals
from collections.abc import Callable, Iterable, Mapping
from typing import Final, Literal

import attrs

from .._types import FAILURE_ORDER, MESSAGE_CAP_CHARS, FailureClass

#: The name of a language beyond Python (`aexec._languages.LANGUAGES` holds each one's object).
LangName = Literal["c", "cpp", "rust", "java", "javascript", "sql", "bash"]
#: The request types a language other than Python answers.
LangRequestType = Literal["build_check", "run_entry"]
LANG_REQUEST_TYPES: Final[tuple[LangRequestType, ...]] = ("build_check", "run_entry")
#: What a step does: builds the program (``compile``, ``link``, ``check``, ``prepare``)
#: or runs it (``run``).
RUN_STEP: Final = "run"

#: Environment every step runs with: English, ASCII-quoted messages (GCC's quotes follow
#: the locale) and Rust panics without a backtrace.
BASE_ENV: Final[tuple[tuple[str, str], ...]] = (("LC_ALL", "C"), ("RUST_BACKTRACE", "0"))

#: Signals a kernel cap sends: the hard-limit SIGKILL, CPU time, file size (as ``_normalize``).
RESOURCE_SIGNALS: Final = frozenset({signals.SIGKILL, signals.SIGXCPU, signals.SIGXFSZ})


@attrs.frozen
class Step:
    """One process to run, in order, in ``cwd``; the pipeline stops at the first that fails.

    ``env`` is added to the run's environment; ``stdin_file`` (relative to ``cwd``) is fed
    as standard input when set. ``evidence_file`` is a file the step may write its
    structured evidence to: the pipeline reads it after the step (if it exists) and passes
    its text as :attr:`StepOutput.diagnostics`.
    """

    name: str
    argv: tuple[str, ...]
    cwd: str
    env: tuple[tuple[str, str], ...] = BASE_ENV
    evidence_file: str | None = None
    stdin_file: str | None = None

    @property
    def runs_candidate(self) -> bool:
        return self.name == RUN_STEP


@attrs.frozen
class StepOutput:
    """What one step returned, uninterpreted."""

    name: str
    exit_code: int | None
    signal: int | None = None
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""
    #: The text of the step's ``evidence_file``, when it wrote one.
    diagnostics: str | None = None
    #: The run's memory cgroup killed a process while this step ran.
    oom_killed: bool = False

    @property
    def failed(self) -> bool:
        return self.timed_out or self.oom_killed or self.signal is not None or self.exit_code != 0


@attrs.frozen
class LangFinding:
    """One failure the toolchain reported: its class, ``file:line`` and message."""

    failure_class: FailureClass
    location: str
    message: str
    #: The step it was read from.
    step: str = ""
    #: ``Type: message`` of the exception or panic behind it, when there was one.
    exception: str | None = None


@attrs.frozen
class LanguageEvidence:
    """The findings of one request's steps, the primary one first (spec §3.5 order)."""

    language: LangName
    findings: tuple[LangFinding, ...]
    #: ``Type: message`` of the uncaught exception or panic, if the program raised one.
    exception: str | None
    #: Every build step succeeded (nothing failed before the program could run).
    compiled: bool
    #: The program itself was started.
    ran: bool
    #: A step failed and its output followed no convention the parser knows.
    parse_uncertain: bool = False
    #: The exit status and signal of the last step that ran.
    exit_code: int | None = None
    signal: int | None = None

    @property
    def primary(self) -> LangFinding | None:
        return self.findings[0] if self.findings else None


#: A language's reading of one failed step: the findings it explains, in reported order.
StepParser = Callable[[StepOutput, str], list[LangFinding]]


def cap(text: str) -> str:
    return text[:MESSAGE_CAP_CHARS]


def relative(path: str, scratch: str) -> str:
    """``path`` as the candidate knows it: relative to the scratch directory."""
    root = scratch.rstrip("/") + "/"
    if path.startswith(root):
        return path[len(root) :]
    if path.startswith("./"):
        return path[2:]
    return path


def loc(file: str, line: int | str | None, scratch: str) -> str:
    return f"{relative(file, scratch)}:{line}" if line not in (None, "", 0) else relative(file, scratch)


def signal_name(sig: int) -> str:
    try:
        return signals.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def ordered(findings: Iterable[LangFinding]) -> tuple[LangFinding, ...]:
    """Primary first (first true in ``FAILURE_ORDER``, earliest on a tie), then the rest as seen."""
    seen = list(findings)
    if not seen:
        return ()
    rank = {c: i for i, c in enumerate(FAILURE_ORDER)}
    primary = min(range(len(seen)), key=lambda i: (rank[seen[i].failure_class], i))
    return (seen[primary], *seen[:primary], *seen[primary + 1 :])


def tool(tools: Mapping[str, str] | None, name: str) -> str:
    """The executable to run for ``name``: the pipeline's resolved path, else the bare name."""
    return (tools or {}).get(name, name)


def cap_findings(out: StepOutput, timeout_s: float | None, where: str = "") -> tuple[LangFinding, ...]:
    """The findings every step shares: the deadline, the memory cgroup, a cap's signal."""
    step = out.name
    if out.timed_out:
        deadline = f"the {timeout_s:g} s deadline" if timeout_s else "the deadline"
        what = "the program" if step == RUN_STEP else f"the {step} step"
        return (LangFinding("timeout", where, f"{what} was still running at {deadline}", step),)
    if out.oom_killed:
        msg = "killed by the run's memory cap (cgroup OOM)"
        return (LangFinding("resource", where, msg, step),)
    if out.signal in RESOURCE_SIGNALS:
        msg = f"killed by {signal_name(out.signal)} (a resource cap)"
        return (LangFinding("resource", where, msg, step),)
    return ()


def exit_finding(out: StepOutput, where: str = "") -> LangFinding:
    """A failed step nothing else explains: a signal or a non-zero exit (``runtime``)."""
    if out.signal is not None:
        return LangFinding("runtime", where, f"killed by {signal_name(out.signal)}", out.name)
    return LangFinding("runtime", where, f"exited with status {out.exit_code}", out.name)


def first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def parse_steps(
    language: LangName,
    outputs: tuple[StepOutput, ...],
    scratch: str,
    timeout_s: float | None,
    parse_step: StepParser,
) -> LanguageEvidence:
    """Read every step that ran: its caps, then the language's own evidence of a failure.

    A failed step the language parser cannot explain is a ``runtime`` failure when it ran
    the program (a plain non-zero exit or a signal is a convention of its own), and a
    ``compile`` failure flagged ``parse_uncertain`` when it was a build step.
    """
    found: list[LangFinding] = []
    uncertain = False
    for out in outputs:
        caps = cap_findings(out, timeout_s)
        found.extend(caps)
        if out.timed_out or not out.failed:
            continue
        own = parse_step(out, scratch)
        found.extend(own)
        if own or caps:
            continue
        if out.name == RUN_STEP:
            found.append(exit_finding(out))
        else:
            uncertain = True
            what = (
                f"killed by {signal_name(out.signal)}"
                if out.signal
                else f"exited with status {out.exit_code}"
            )
            message = first_line(out.stderr) or first_line(out.stdout) or what
            found.append(LangFinding("compile", "", cap(f"{out.name} step {what}: {message}"), out.name))
    return evidence(language, outputs, found, uncertain=uncertain)


def evidence(
    language: LangName,
    outputs: tuple[StepOutput, ...],
    findings: Iterable[LangFinding],
    *,
    compiled: bool | None = None,
    uncertain: bool = False,
) -> LanguageEvidence:
    """Assemble the evidence record: order the findings, pick the exception, read the flags."""
    found = ordered(findings)
    ran = any(o.name == RUN_STEP for o in outputs)
    built = all(not o.failed for o in outputs if o.name != RUN_STEP)
    last = outputs[-1] if outputs else None
    return LanguageEvidence(
        language=language,
        findings=found,
        exception=next((f.exception for f in found if f.exception), None),
        compiled=built if compiled is None else compiled,
        ran=ran,
        parse_uncertain=uncertain,
        exit_code=last.exit_code if last else None,
        signal=last.signal if last else None,
    )
