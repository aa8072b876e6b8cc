"""The wire between the library and the driver inside the boundary (layer 0: stdlib only).

Two processes speak here, in JSON, and both import this one module: the library as
``aexec._driver.wire``, the driver (run by path in the candidate's interpreter) as a
module of its own package (see `aexec._driver`):

* the library writes one `Instructions` document per run (``spec.json``), with a `Box`
  when the kernel boundary is built; `BytecodeJob` is the compile job of
  ``_driver/__main__.py --bytecode``;
* the driver appends one `Record` per event to the run's report file, a JSON object a
  line, flushed as it goes, so what was reported before a kill survives it.
  `decode_report` is the one reader of that file.

The caps the driver applies to what it reports are named here too, so the two sides
cannot disagree about them.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypedDict, Union

#: Frames kept of an exception's traceback (the innermost ones).
FRAME_CAP = 32
#: Characters kept of an exception's message, or a collection error's text.
MESSAGE_CAP = 4096
#: Where every run's view holds its copy of the repo too (`Box.repo_view`): the path an
#: environment's editable install of the repo names (``aexec._environments.build``).
REPO_VIEW = "/.aexec-repo"
#: The exit status of a run whose boundary could not be built; nothing of it ran.
BOX_FAILED = 125
#: The exit status of a warm run that ended as soon as it started (`GoColdRecord`).
GO_COLD = 124
#: The most of the report file that is read back.
REPORT_CAP_BYTES = 16 * 1024 * 1024

Runner = Literal[
    "pytest", "snippet", "command", "compile_snippet", "compile_tree", "steps", "unittest", "django", "sympy"
]
#: Of each step's stdout and stderr, the report keeps this many characters: the first
#: and the last half of it, with `CUT_MARKER` between them when more was written.
STEP_STREAM_CAP = 64 * 1024
#: Of a step's evidence file (its structured diagnostics), the report keeps this much.
STEP_EVIDENCE_CAP = 1024 * 1024
CUT_MARKER = "\n[aexec: {dropped} characters not kept]\n"


class Box(TypedDict):
    """The kernel boundary the driver builds (root, namespaces available).

    The run's filesystem is a new root holding only what is listed here (see
    ``aexec._driver.view.build_view``); nothing else of the host is in it.
    """

    #: The driver's parent must be one of these (aexec, or its fork server).
    supervisor_pids: list[int]
    uid: int
    gid: int
    #: Bound writable at its own path (the run's ``work``, ``home``, ``tmp``, report).
    scratch_root: str
    #: Host paths bound read-only at their own path (a symlink is made as that link):
    #: the system directories and the toolchain's prefixes. Absent ones are skipped.
    readonly: list[str]
    #: Paths under a ``readonly`` tree covered by an empty read-only tmpfs (the original repo).
    hidden: list[str]
    #: A directory bound read-only as /etc: the host's, cut to what programs read.
    etc: str | None
    #: The scratch tmp, bound writable over each of ``tmp_targets``.
    tmp: str
    tmp_targets: list[str]
    #: The run's copy of the repo (under ``scratch_root``), bound at `REPO_VIEW` as well.
    repo_view: str | None
    #: Install the syscall filter (``_driver/seccomp.py``) in the candidate.
    seccomp: bool


class StepSpec(TypedDict):
    """One toolchain step of the ``steps`` runner (``aexec._languages.Step``, planned)."""

    name: str
    argv: list[str]
    cwd: str
    #: Added to the run's environment.
    env: dict[str, str]
    #: Read (capped) after the step, if it exists, into the step's record.
    evidence_file: str | None
    #: Fed as standard input (else /dev/null).
    stdin_file: str | None
    #: ``RLIMIT_*`` overrides for this step's process alone (a JVM's address space).
    rlimits: dict[str, int]
    #: Its stdout goes to the run's stdout (the program); else to the run's stderr.
    stdout_is_program: bool


class Instructions(TypedDict):
    """What one run is: ``python -s _driver/__main__.py SPEC.json`` reads this."""

    runner: Runner
    report: str
    cwd: str
    sys_path: list[str]
    #: ``RLIMIT_*`` name -> soft and hard value.
    rlimits: dict[str, int]
    box: Box | None
    #: ``cgroup.procs`` files the run's outer process joins.
    cgroups: list[str]
    snippet: str | None
    #: A ``command``'s argv; for the ``unittest``, ``django`` and ``sympy`` runners, the
    #: command they stand for (``-m unittest -v …``, ``tests/runtests.py …``, ``bin/test …``).
    argv: list[str]
    pytest_args: list[str]
    #: Modules a build check imports after compiling the tree.
    import_modules: list[str]
    #: The ``steps`` runner's steps, in order (languages beyond Python); else empty.
    steps: list[StepSpec]
    #: The candidate's standard input (the request's ``stdin``), else None: /dev/null.
    stdin_file: str | None
    #: What a workspace's command adds to its environment (never the driver's own).
    command_env: dict[str, str]
    #: A graded run's canary test file (repo-relative; `aexec._stages.canary`): pytest
    #: runs its tests after every other test, whatever the repo's hooks reordered.
    canary: str | None


class BytecodeJob(TypedDict):
    """``python -I _driver/__main__.py --bytecode < JOB``: compile ``files`` of ``root`` into ``out``."""

    root: str
    out: str
    files: list[str]
    rewrite: list[str]


# -- the fork server's socket (``aexec._boundary.forkserver`` <-> ``_driver/__main__.py --serve``) --


class ServerReady(TypedDict, total=False):
    """The server's first datagram: ready (with the top-level modules it imported) or not."""

    ok: bool
    modules: list[str]
    error: str
    #: How the server knew what a pytest start imports: ``cached``, ``computed``,
    #: ``failed``, or ``none`` (not asked: not a pytest server, or no plugins loaded).
    startup: str
    #: How many datagrams follow this one, each a JSON list of ``[path, mtime_ns,
    #: size]`` (-1, -1: no such file): the files behind every module the server
    #: imported, as they were when it was ready.
    files: int


#: The most of those stamps' JSON the server sends in one datagram (well under a
#: socket's send buffer, which bounds a datagram's size).
FILES_DATAGRAM_BYTES = 32 * 1024


class SpawnRequest(TypedDict):
    """Fork a run: with it travels one fd, the run's reply socket (`SpawnReply`). The
    server makes and drains the run's stdout and stderr, keeping ``cap`` bytes of each
    (``_driver/outputs.py``). With ``box`` the run is forked straight into new PID,
    mount and network namespaces as their init; the reply's ``pid`` is then the init's.
    """

    spec: str
    cwd: str
    env: dict[str, str]
    box: bool
    cap: int


class SpawnReply(TypedDict, total=False):
    """On the reply socket: ``pid`` at once; the raw wait ``status`` when reaped; once
    both pipes ended (at most `EOF_GRACE_S` after the reap) bytes kept of each (``out``,
    ``err``) and not (``dropped``), then those bytes in datagrams of at most
    `OUTPUT_DATAGRAM_BYTES`. ``status`` and ``out`` may share a datagram."""

    pid: int
    #: The pid is the init of the run's namespaces (``SpawnRequest.box``).
    init: bool
    status: int
    out: int
    err: int
    dropped: list[int]


#: After a run is reaped, how long its pipes may stay open; the most of its kept output a
#: reply datagram carries (under a socket's send buffer).
EOF_GRACE_S, OUTPUT_DATAGRAM_BYTES = 1.0, 64 * 1024


# -- report records: one per event, in the order they happened --------------------------


class ExceptionRecord(TypedDict, total=False):
    kind: Literal["exception"]
    #: ``collect setup call teardown`` (pytest), ``run``, ``compile``, ``import``, ``spawn``.
    phase: str
    type: str
    bases: list[str]
    message: str
    errno: int | None
    #: ``[file, line, function]``, innermost last, at most `FRAME_CAP`.
    frames: list[list[Any]]
    nodeid: str
    module: str


class ExitRecord(TypedDict):
    """The snippet raised ``SystemExit`` with this code (its ``repr``)."""

    kind: Literal["exit"]
    code: str


class ChildRecord(TypedDict):
    """A ``command``'s process ended."""

    kind: Literal["child"]
    exit: int | None
    signal: int | None


class MainRecord(TypedDict):
    """The candidate's process ended (written by the driver's init)."""

    kind: Literal["main"]
    exit: int | None
    signal: int | None


class UsageRecord(TypedDict):
    """CPU and peak memory of everything the init reaped."""

    kind: Literal["usage"]
    cpu_s: float
    maxrss_kib: int


class CollectedRecord(TypedDict):
    kind: Literal["collected"]
    count: int


class CollectErrorRecord(TypedDict):
    kind: Literal["collect_error"]
    nodeid: str
    text: str


class MissingRecord(TypedDict):
    """pytest found no ``fixture`` a test requests (its setup failed with "fixture 'x'
    not found"), or no ``marker`` of that name under ``--strict-markers`` (its module
    failed to collect): read from pytest's own objects, not its text."""

    kind: Literal["missing"]
    nodeid: str
    what: Literal["fixture", "marker"]
    name: str


class StartRecord(TypedDict):
    kind: Literal["start"]
    nodeid: str


class TestRecord(TypedDict):
    kind: Literal["test"]
    nodeid: str
    verdict: Literal["passed", "failed", "errored", "skipped"]


class EndRecord(TypedDict):
    """pytest's own exit status."""

    kind: Literal["end"]
    exitstatus: int


class StepStartRecord(TypedDict):
    """A toolchain step (``steps`` runner) started."""

    kind: Literal["step_start"]
    name: str


class StepRecord(TypedDict):
    """A toolchain step ended: its status, its streams and evidence file, capped."""

    kind: Literal["step"]
    name: str
    exit: int | None
    signal: int | None
    stdout: str
    stderr: str
    #: The evidence file's text, if the step wrote one.
    evidence: str | None


class GoColdRecord(TypedDict):
    """A run forked by a warm server ended once pytest had read the repo's configuration,
    before it ran anything of the repo's: the modules the server imported ahead are not
    as this configuration has pytest import them (``reason``). The library runs it cold."""

    kind: Literal["go_cold"]
    reason: str


# Union, not |: the driver may run on an interpreter older than the library's.
Record = Union[  # noqa: UP007
    ExceptionRecord,
    ExitRecord,
    ChildRecord,
    MainRecord,
    UsageRecord,
    CollectedRecord,
    CollectErrorRecord,
    MissingRecord,
    StartRecord,
    TestRecord,
    EndRecord,
    StepStartRecord,
    StepRecord,
    GoColdRecord,
]

#: Every record kind, with the fields a record of it must carry and their types.
RECORD_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "exception": {},
    "exit": {"code": (str,)},
    "child": {"exit": (int, type(None)), "signal": (int, type(None))},
    "main": {"exit": (int, type(None)), "signal": (int, type(None))},
    "usage": {"cpu_s": (int, float), "maxrss_kib": (int,)},
    "collected": {"count": (int,)},
    "collect_error": {"nodeid": (str,), "text": (str,)},
    "missing": {"nodeid": (str,), "what": (str,), "name": (str,)},
    "start": {"nodeid": (str,)},
    "test": {"nodeid": (str,), "verdict": (str,)},
    "end": {"exitstatus": (int,)},
    "step_start": {"name": (str,)},
    "step": {
        "name": (str,),
        "exit": (int, type(None)),
        "signal": (int, type(None)),
        "stdout": (str,),
        "stderr": (str,),
        "evidence": (str, type(None)),
    },
    "go_cold": {"reason": (str,)},
}


def keep(text: str, cap: int) -> str:
    """``text`` within ``cap`` characters: its first and last half, the cut marked."""
    if len(text) <= cap:
        return text
    half = cap // 2
    return text[:half] + CUT_MARKER.format(dropped=len(text) - 2 * half) + text[-half:]


def encode(kind: str, fields: dict[str, Any]) -> str:
    """One report line (without its newline); unserializable values become their repr."""
    return json.dumps({**fields, "kind": kind}, default=repr)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def decode(line: bytes | str) -> Record | None:
    """One report line as a record, or None if it is not one of `RECORD_FIELDS`' kinds
    with the fields that kind needs (a candidate may have scribbled on the file)."""
    try:
        value = json.loads(line, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("kind"), str):
        return None  # a kind of another type (a list, say) is not even hashable
    need = RECORD_FIELDS.get(value["kind"])
    if need is None:
        return None
    for name, types in need.items():
        # present, even when it may be null: a missing field is not a null one
        if name not in value or not isinstance(value[name], types) or isinstance(value[name], bool):
            return None
    return value  # type: ignore[return-value]


def decode_report(data: bytes) -> tuple[tuple[Record, ...], int]:
    """Every record of a report file's contents, and how many lines were not records."""
    records: list[Record] = []
    bad = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        record = decode(line)
        if record is None:
            bad += 1
        else:
            records.append(record)
    return tuple(records), bad
