"""Closed sets and named defaults (layer 0: stdlib only).

Every number the spec pins (§3.2) is a named constant here, so a reader finds each cap
in one place and the rest of the code refers to it by name.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from ._driver.wire import MESSAGE_CAP

RequestType = Literal["build_check", "run_entry", "run_suite", "probe", "discriminate"]
ArtifactShape = Literal["patch", "snippet", "command", "test_subset", "probe_program"]
Mode = Literal["compile_parse", "targeted_execution", "test_execution", "diagnostic_probe"]
FailureClass = Literal[
    "compile", "syntax", "assertion", "runtime", "timeout", "resource", "type", "dependency"
]
TestVerdict = Literal["passed", "failed", "errored", "skipped"]
LanguageName = Literal["python", "c", "cpp", "rust", "java", "javascript", "sql", "bash"]
Verdict = Literal["pass", "fail", "empty_success", "tampered", "error"]
#: How pytest loads the interpreter's plugins (a request's ``pytest_plugins``).
PluginLoading = Literal["auto", "none"]
PLUGIN_LOADING: Final[tuple[PluginLoading, ...]] = ("auto", "none")

REQUEST_TYPES: Final[tuple[RequestType, ...]] = (
    "build_check",
    "run_entry",
    "run_suite",
    "probe",
    "discriminate",
)
ARTIFACT_SHAPES: Final[tuple[ArtifactShape, ...]] = (
    "patch",
    "snippet",
    "command",
    "test_subset",
    "probe_program",
)

LANGUAGE_NAMES: Final[tuple[LanguageName, ...]] = (
    "python",
    "c",
    "cpp",
    "rust",
    "java",
    "javascript",
    "sql",
    "bash",
)
#: The Python test runners of a ``run_suite`` (a request's ``runner``; `aexec._runners`).
RunnerName = Literal["pytest", "unittest", "django", "sympy"]
RUNNER_NAMES: Final[tuple[RunnerName, ...]] = ("pytest", "unittest", "django", "sympy")
#: How expected pytest ids name the tests: as SWE-bench's parser of that name writes them.
TestIds = Literal["pytest", "pytest_options", "matplotlib"]
TEST_IDS: Final[tuple[TestIds, ...]] = ("pytest", "pytest_options", "matplotlib")

#: The failure-class vocabulary in the spec's order (§3.5): the order tables print it in.
FAILURE_CLASSES: Final[tuple[FailureClass, ...]] = get_args(FailureClass)
#: The spec's first-true order (§3.5, and the contract's "rules a scorer relies on").
FAILURE_ORDER: Final[tuple[FailureClass, ...]] = (
    "timeout",
    "resource",
    "syntax",
    "compile",
    "type",
    "dependency",
    "assertion",
    "runtime",
)

#: §3.2 isolation defaults.
DEFAULT_CPU_CORES: Final = 1.0
DEFAULT_RAM_MIB: Final = 512
#: A test suite's (``run_suite``) default RAM: a project's own tests (thread pools,
#: numpy, a compiler) need more than a snippet, and SWE-bench's harness runs them with
#: no cap at all. The memory cgroup charges only what is used, so a roomy cap costs
#: nothing until it is used; under the RLIMIT_AS fallback 4 GiB still holds a few
#: hundred threads' 8 MiB stack reservations.
DEFAULT_SUITE_RAM_MIB: Final = 4096


def default_ram_mib(request_type: str) -> int:
    """The RAM cap a request gets when its policy declares none."""
    return DEFAULT_SUITE_RAM_MIB if request_type == "run_suite" else DEFAULT_RAM_MIB


DEFAULT_TIMEOUT_S: Final[dict[Mode, float]] = {
    "compile_parse": 60.0,
    "targeted_execution": 30.0,
    "test_execution": 120.0,
    "diagnostic_probe": 30.0,
}
#: Each captured stream keeps at most this many bytes; the rest is drained and counted.
#: A request may declare another cap (``policy.output_kib``, at most `MAX_OUTPUT_KIB`).
STREAM_CAP_BYTES: Final = 64 * 1024
MAX_OUTPUT_KIB: Final = 64 * 1024
TRUNCATION_MARKER: Final = "\n[aexec: {dropped} more bytes of {stream} not kept (cap {cap} bytes)]\n"
#: §3.4 caps on parsed evidence: the driver's own caps (`aexec._driver.wire`), one source.
MESSAGE_CAP_CHARS: Final = MESSAGE_CAP
#: At most this many secondary failures are kept beside the primary one.
SECONDARY_FAILURE_CAP: Final = 50
#: The on-disk behavioural cache keeps at most this many observations (LRU).
DEFAULT_CACHE_ENTRIES: Final = 20_000
#: The RLIMIT_CPU backstop sits this far above the wall-clock deadline, so a timeout
#: is always seen as a timeout (the contract: "set any backstop above the deadline").
CPU_BACKSTOP_MARGIN_S: Final = 2.0
#: Upper bounds on what a request may declare.
MAX_TIMEOUT_S: Final = 3600.0
MIN_RAM_MIB: Final = 16
MAX_RAM_MIB: Final = 1 << 20
#: Declared caps beyond RAM and CPU (spec §3.2 leaves them to us; docs/isolation.md).
DEFAULT_DISK_MIB: Final = 512
DEFAULT_PIDS: Final = 256
DEFAULT_OPEN_FILES: Final = 1024
#: ``changes``: at most this many paths listed, this many bytes hashed in all, diffs of
#: text files up to this size, each diff cut at this many characters.
CHANGES_LISTED: Final = 200
CHANGES_HASH_BYTES: Final = 64 << 20
CHANGES_DIFF_FILE_BYTES: Final = 64 << 10
CHANGES_DIFF_CHARS: Final = 8192

# A run's inputs and outputs beside its source (``stdin``, ``files``, ``fetch_files``).
#: The most standard input a request may carry (UTF-8 bytes).
MAX_STDIN_BYTES: Final = 8 << 20
#: ``files``: at most this many, each at most `MAX_FILE_BYTES` decoded, all together at
#: most `MAX_FILES_BYTES`.
MAX_FILES: Final = 256
MAX_FILE_BYTES: Final = 16 << 20
MAX_FILES_BYTES: Final = 32 << 20
#: ``fetch_files``: at most this many paths; a file over `MAX_FETCH_BYTES`, or past
#: `MAX_FETCH_TOTAL_BYTES` of them all, is returned as null.
MAX_FETCH_FILES: Final = 64
MAX_FETCH_BYTES: Final = 8 << 20
MAX_FETCH_TOTAL_BYTES: Final = 16 << 20
#: The longest path of ``files`` and ``fetch_files`` (characters).
MAX_INPUT_PATH: Final = 1024
