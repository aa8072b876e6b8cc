"""Frozen records (layer 1): what goes into aexec and what comes out.

Records hold plain data (strings, numbers, tuples), never live objects, so an observation
can be stored, compared and sent anywhere; ``_serde`` turns each into the contract's JSON.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._environments.spec import EnvSpec
from ._errors import RequestError
from ._inputs import Files, bounded, check_inputs, has_inputs, to_files, valid_text
from ._types import (
    ARTIFACT_SHAPES,
    DEFAULT_DISK_MIB,
    DEFAULT_OPEN_FILES,
    DEFAULT_PIDS,
    LANGUAGE_NAMES,
    PLUGIN_LOADING,
    REQUEST_TYPES,
    RUNNER_NAMES,
    TEST_IDS,
    ArtifactShape,
    FailureClass,
    LanguageName,
    Mode,
    PluginLoading,
    RequestType,
    RunnerName,
    TestIds,
    TestVerdict,
    Verdict,
)

__all__ = [
    "CanaryReport",
    "Candidate",
    "Change",
    "EnvFault",
    "Environment",
    "ExecutionObservation",
    "ExpectedFailures",
    "Failure",
    "Flags",
    "FsBoundary",
    "Policy",
    "ResourceUsage",
    "TableChange",
    "TestResult",
    "UnmatchedTest",
]


@attrs.frozen
class Policy:
    """Declared overrides of the isolation defaults (spec §3.2); ``None`` keeps the default.
    Each is checked against its bounds when the record is made (`policy_bounds`): the
    command line and the Python API reject the same values, before anything runs."""

    timeout_s: float | None = attrs.field(default=None, validator=bounded)
    ram_mib: int | None = attrs.field(default=None, validator=bounded)
    cpu_cores: float | None = attrs.field(default=None, validator=bounded)
    output_kib: int | None = attrs.field(default=None, validator=bounded)  # each stream's cap


def _to_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen
class Candidate:
    """One request: what the runtime is asked to establish about one artifact.

    The fields are the contract's request fields. ``repo`` is a path; it is never
    written to — the candidate runs on a scratch copy of it.
    """

    request_type: RequestType
    artifact_shape: ArtifactShape
    id: str | int | None = None
    code: str | None = None
    command: tuple[str, ...] | None = attrs.field(default=None, converter=_to_tuple)
    repo: str | None = None
    patch: str | None = None
    #: pytest selectors. ``None`` (omitted) runs the whole suite; ``[]`` selects nothing.
    tests: tuple[str, ...] | None = attrs.field(default=None, converter=_to_tuple)
    python: str | None = None
    policy: Policy = Policy()
    #: The toolchain family (contract: "Added: languages beyond Python").
    language: LanguageName = attrs.field(default="python", validator=attrs.validators.in_(LANGUAGE_NAMES))

    #: ``"auto"``: pytest loads the interpreter's plugins as plain pytest does (entry
    #: points); ``"none"``: it auto-loads none (``-p`` and ``pytest_plugins`` still load).
    pytest_plugins: PluginLoading = attrs.field(
        default="auto", validator=attrs.validators.in_(PLUGIN_LOADING)
    )

    # SWE-bench-style grading (``aexec._stages.grade``): the expected tests, as pytest node
    # ids (or as SWE-bench's parser ``test_ids`` names them), and the oracle diff applied
    # after ``patch`` (never counted as tampering).
    fail_to_pass: tuple[str, ...] | None = attrs.field(default=None, converter=_to_tuple)
    pass_to_pass: tuple[str, ...] | None = attrs.field(default=None, converter=_to_tuple)
    test_patch: str | None = None
    test_ids: TestIds = attrs.field(default="pytest", validator=attrs.validators.in_(TEST_IDS))
    #: A declared environment aexec builds (``aexec._environments``), instead of ``python``.
    environment: EnvSpec | None = None

    #: A Python ``run_suite``'s test runner (`aexec._runners`) and why it was chosen.
    runner: RunnerName = "pytest"
    runner_reason: str | None = None

    #: A run_entry's stdin, files (path → base64) and files read back (`aexec._inputs`).
    stdin: str | None = None
    files: Files | None = attrs.field(default=None, converter=to_files)
    fetch_files: tuple[str, ...] | None = attrs.field(default=None, converter=_to_tuple)

    def __attrs_post_init__(self) -> None:
        _check_candidate(self)


def _check_candidate(c: Candidate) -> None:
    """Every field of a request, checked as it is made; raises `RequestError` naming it."""
    for name, allowed in (("request_type", REQUEST_TYPES), ("artifact_shape", ARTIFACT_SHAPES)):
        value = getattr(c, name)
        if value not in allowed:
            raise RequestError(f"unknown {name} {value!r} (expected one of {', '.join(allowed)})")
    if c.id is not None:
        if isinstance(c.id, bool) or not isinstance(c.id, str | int):
            raise RequestError(f"id must be a string or an integer, got {type(c.id).__name__}")
        if isinstance(c.id, str):
            valid_text("id", c.id)
    for name in ("code", "patch", "test_patch", "runner_reason", "repo", "python"):
        if getattr(c, name) is not None:
            valid_text(name, getattr(c, name), path=name in ("repo", "python"))
    for name in ("command", "tests", "fail_to_pass", "pass_to_pass"):
        value = getattr(c, name)
        if value is None:
            continue
        if not isinstance(value, tuple):
            raise RequestError(f"{name} must be a list of strings, got {type(value).__name__}")
        for i, item in enumerate(value):
            valid_text(f"{name}[{i}]", item, path=name == "command")
    if c.runner not in RUNNER_NAMES:
        raise RequestError(f"unknown runner {c.runner!r} (expected one of {', '.join(RUNNER_NAMES)})")
    if not isinstance(c.policy, Policy):
        raise RequestError(f"policy must be an aexec.Policy, got {type(c.policy).__name__}")
    if c.environment is not None and not isinstance(c.environment, EnvSpec):
        raise RequestError(f"environment must be an EnvSpec, got {type(c.environment).__name__}")
    if c.environment is not None and (c.python is not None or c.repo is None or c.language != "python"):
        raise RequestError("`environment` needs a Python request with a `repo`, and no `python`")
    check_inputs(c.stdin, c.files, c.fetch_files)
    if has_inputs(c.stdin, c.files, c.fetch_files) and c.request_type != "run_entry":
        raise RequestError("stdin, files and fetch_files are for a run_entry (a snippet or a command)")


@attrs.frozen
class FsBoundary:
    scratch_root: str
    #: True only when the kernel keeps the original repository read-only for the run.
    repo_ro: bool
    #: How the candidate sees the repository: ``"copy"`` (a scratch copy) or ``"none"``.
    repo_view: str = "none"


@attrs.frozen
class Environment:
    """The isolation policy a run was held to (spec §3.2), recorded in its observation.

    ``enforced`` says, per mechanism, what was actually applied — never more than that.
    """

    toolchain: str
    toolchain_version: str
    cpu_cap_cores: float
    ram_cap_mib: int
    timeout_s: float
    fs_boundary: FsBoundary
    network: str
    stdout_cap_kib: int
    stderr_cap_kib: int
    enforced: dict[str, str] = attrs.field(factory=dict)
    #: What the candidate may write in all, beyond the repo view it starts with.
    disk_cap_mib: int = DEFAULT_DISK_MIB
    #: Processes and threads of the run at once.
    pids_cap: int = DEFAULT_PIDS
    open_files_cap: int = DEFAULT_OPEN_FILES
    #: Provenance (else None): the built environment's key, its lock's SHA-256, its in-place
    #: build's key, and whether this run rebuilt that in its copy (a patch touched a source).
    environment_key: str | None = None
    lock_hash: str | None = None
    inplace_key: str | None = None
    inplace_rebuilt: bool | None = None
    #: What the in-place build has in place of the repo's own build (matplotlib's ft2font).
    inplace_note: str | None = None


@attrs.frozen
class TestResult:
    test: str
    verdict: TestVerdict
    f2p: bool = False
    p2p: bool = False


@attrs.frozen
class Failure:
    failure_class: FailureClass
    location: str
    message: str
    exit_code: int | None
    duration: float


@attrs.frozen
class Flags:
    #: Nothing failed, but no test ran: never evidence of correctness.
    empty_success: bool = False
    #: The patch touched a selected test file, a conftest.py or pytest configuration.
    tampered: bool = False
    #: The confirming re-run disagreed with the first run.
    nondeterministic: bool = False
    #: The raw output did not follow the toolchain's conventions; passed through unguessed.
    parse_uncertain: bool = False
    #: A passing suite was re-run in a fresh scratch root and the re-run agreed.
    reverified: bool = False
    #: Lost with its machine (a Ray worker or node died), run again elsewhere: this is that run.
    retried: bool = False
    #: The selection cannot run in the declared environment, and the unpatched repo fails
    #: the same way: not the candidate's fault (``verdict`` is ``error``; see `EnvFault`).
    env_broken: bool = False


@attrs.frozen
class EnvFault:
    """Why a selection cannot run in its environment, with the unpatched run's evidence."""

    #: ``usage`` (pytest refused its configuration or arguments), ``internal`` (pytest or
    #: a plugin crashed at start), ``no_pytest`` (the interpreter has no pytest),
    #: ``missing_module`` (collection imports a module neither the repo nor the
    #: interpreter has), ``unknown_marker`` (a marker under ``--strict-markers`` no file
    #: of the repo registers), ``missing_fixture`` (a fixture no file of the repo
    #: defines): see docs/contract.md.
    kind: str
    message: str
    #: The unpatched repo's run: its exit status, its failures and the end of its stderr
    #: (for an unpatched candidate, its own run).
    pristine_exit_code: int | None
    pristine_failures: tuple[Failure, ...] = ()
    pristine_stderr: str = ""


@attrs.frozen
class CanaryReport:
    """A graded run's canary (docs/oracle.md): its two tests' fresh names and verdicts."""

    file: str
    fail_test: str
    fail: str  # the must-fail test's verdict (``missing``: never reported)
    pass_test: str
    passed: str
    message_seen: bool = False  # its random message was seen in an exception of the run
    stopped: bool = False  # killed, crashed, or stopped by its own error before any test
    #: Why the run's verdicts cannot be trusted, or None.
    reason: str | None = None


@attrs.frozen
class ExpectedFailures:
    """The expected tests of a graded request that did not pass (failed, errored,
    skipped, or never collected), by node id."""

    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()


@attrs.frozen
class UnmatchedTest:
    """An expected test id of a graded request that no test that ran answers to
    (`aexec._stages.grade.matches`): it did not pass, and ``reason`` says why."""

    field: str  # fail_to_pass or pass_to_pass
    test: str
    reason: str


@attrs.frozen
class ResourceUsage:
    #: CPU seconds used over (wall seconds × the core cap), clipped to 0..1.
    peak_cpu: float | None = None
    peak_ram_mib: int | None = None


@attrs.frozen
class Change:
    """One path a run added, modified or deleted under its scratch root (``changes``)."""

    #: Relative to the scratch root (``work/out.txt``, ``tmp/x``).
    path: str
    change: str  # "added" | "modified" | "deleted"
    size: int | None  # bytes now (None when deleted)
    #: SHA-256 of the contents now; None when deleted, not a regular file, or over the cap.
    sha256: str | None
    #: A unified diff, for a small text file whose earlier text is known; else None.
    diff: str | None = None
    #: The diff was cut at its cap.
    diff_cut: bool = False


@attrs.frozen
class TableChange:
    """A table of a ``sql`` run whose rows changed (the database starts empty)."""

    table: str
    rows_before: int
    rows_after: int
    #: SHA-3 of the table's rows at the end (the sqlite shell's ``sha3_query``).
    digest: str


@attrs.frozen
class ExecutionObservation:
    """The single structured observation of one run (spec §3.7, plus the contract's fields)."""

    id: str | int | None
    action: Mode
    verdict: Verdict
    environment: Environment
    cwd: str
    artifact_version: str
    exit_code: int | None
    duration: float
    timed_out: bool
    stdout: str
    stderr: str
    exception: str | None
    changed_state: str
    test_results: tuple[TestResult, ...]
    resource_usage: ResourceUsage
    failure: Failure | None
    flags: Flags
    request_type: RequestType
    probe_gated: bool
    #: The signal that ended the process, when one did (``"SIGKILL"``), else ``None``.
    signal: str | None = None
    #: Every failure seen, primary first (bounded); ``failure`` is ``failures[0]``.
    failures: tuple[Failure, ...] = ()
    probe_evidence: tuple[dict[str, Any], ...] = ()
    cache_hit: bool = False
    cache_key: str = ""
    #: Set only with ``verdict == "error"``: aexec itself could not observe the candidate,
    #: or (``flags.env_broken``) the environment cannot run its selection.
    error: str | None = None
    aexec_version: str = ""
    #: What the run changed, path by path (deterministic order, bounded): ``changed_state``
    #: is its summary.
    changes: tuple[Change, ...] = ()
    #: Changed paths not listed in ``changes`` (over its cap).
    changes_omitted: int = 0
    changed_tables: tuple[TableChange, ...] = ()  # ``sql``: the tables whose rows changed
    #: Graded requests only (else None): every expected FAIL_TO_PASS and PASS_TO_PASS
    #: test passed, the candidate did not tamper, and the observation is not ``error``.
    resolved: bool | None = None
    #: Graded requests only (else None): which expected tests did not pass.
    expected_failures: ExpectedFailures | None = None
    #: Graded requests only (else None): the expected ids no test that ran answers to,
    #: each with the reason (also in ``expected_failures``).
    expected_unmatched: tuple[UnmatchedTest, ...] | None = None
    #: Set with ``flags.env_broken``: the environment's fault and the evidence for it.
    env_fault: EnvFault | None = None
    runner: str | None = None  # a Python run_suite's runner, and why it was chosen
    runner_reason: str | None = None
    #: ``fetch_files`` after the run: path → base64 (None: absent or over its cap).
    files_out: dict[str, str | None] | None = None
    #: A graded suite's canary (docs/oracle.md); the paths of the runner's own test
    #: machinery the patch changed (not tampering by itself).
    canary: CanaryReport | None = None
    oracle_touched: tuple[str, ...] = ()
