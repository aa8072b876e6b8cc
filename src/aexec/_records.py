"""Frozen records (layer 1): what goes into aexec and what comes out.

Records hold plain data — strings, numbers, tuples — never live objects, so an
observation can be stored, compared and sent anywhere. ``_serde`` turns each record into
the contract's JSON and back.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._types import (
    ARTIFACT_SHAPES,
    DEFAULT_DISK_MIB,
    DEFAULT_OPEN_FILES,
    DEFAULT_PIDS,
    PLUGIN_LOADING,
    REQUEST_TYPES,
    ArtifactShape,
    FailureClass,
    Mode,
    PluginLoading,
    RequestType,
    TestVerdict,
    Verdict,
)
from ._wire import Record

__all__ = [
    "Candidate",
    "EnvFault",
    "Environment",
    "ExecutionObservation",
    "Failure",
    "Flags",
    "FsBoundary",
    "Policy",
    "RawRun",
    "ResourceUsage",
    "TestResult",
]


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


@attrs.frozen
class Policy:
    """Declared overrides of the isolation defaults (spec §3.2); ``None`` keeps the default."""

    timeout_s: float | None = attrs.field(default=None, validator=_positive)
    ram_mib: int | None = attrs.field(default=None, validator=_positive)
    cpu_cores: float | None = attrs.field(default=None, validator=_positive)


def _to_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen
class Candidate:
    """One request: what the runtime is asked to establish about one artifact.

    The fields are the contract's request fields. ``repo`` is a path; it is never
    written to — the candidate runs on a scratch copy of it.
    """

    request_type: RequestType = attrs.field(validator=attrs.validators.in_(REQUEST_TYPES))
    artifact_shape: ArtifactShape = attrs.field(validator=attrs.validators.in_(ARTIFACT_SHAPES))
    id: str | int | None = None
    code: str | None = None
    command: tuple[str, ...] | None = attrs.field(default=None, converter=_to_tuple)
    repo: str | None = None
    patch: str | None = None
    #: pytest selectors. ``None`` (omitted) runs the whole suite; ``[]`` selects nothing.
    tests: tuple[str, ...] | None = attrs.field(default=None, converter=_to_tuple)
    python: str | None = None
    policy: Policy = Policy()
    #: ``"auto"``: pytest loads the interpreter's plugins as plain pytest does (entry
    #: points); ``"none"``: it auto-loads none (``-p`` and ``pytest_plugins`` still load).
    pytest_plugins: PluginLoading = attrs.field(
        default="auto", validator=attrs.validators.in_(PLUGIN_LOADING)
    )


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
    #: The run was lost with the machine it ran on (a Ray worker or node died) and was
    #: run again elsewhere; this is the observation of the run that finished.
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
    #: interpreter has).
    kind: str
    message: str
    #: The unpatched repo's run: its exit status, its failures and the end of its stderr
    #: (for an unpatched candidate, its own run).
    pristine_exit_code: int | None
    pristine_failures: tuple[Failure, ...] = ()
    pristine_stderr: str = ""


@attrs.frozen
class ResourceUsage:
    #: CPU seconds used over (wall seconds × the core cap), clipped to 0..1.
    peak_cpu: float | None = None
    peak_ram_mib: int | None = None


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
    #: Set with ``flags.env_broken``: the environment's fault and the evidence for it.
    env_fault: EnvFault | None = None


@attrs.frozen
class RawRun:
    """What the runtime returned, uninterpreted."""

    exit_code: int | None
    signal: int | None
    timed_out: bool
    duration: float
    stdout: str
    stderr: str
    records: tuple[Record, ...]
    #: Lines of the report that were not records (the driver never writes one).
    bad_records: int
    cpu_s: float | None
    peak_ram_mib: int | None
    #: The run's memory cgroup killed a process of it.
    oom_killed: bool = False
