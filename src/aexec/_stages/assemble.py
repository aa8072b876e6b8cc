"""Stage (g): observation assembly and its guards (spec §3.7). Pure: no I/O.

Guards: empty success (nothing failed, no test ran → flagged, never a pass), the
determinism check (a passing suite's confirming re-run must agree), and the diff-scope
anti-gaming check (a patch that touches the oracle is flagged ``tampered``), and the
SWE-bench-style grade of a request that expects tests (`graded`, by ``grade``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping

import attrs

from .. import _languages as langs
from .._records import (
    CanaryReport,
    Candidate,
    Change,
    EnvFault,
    Environment,
    ExecutionObservation,
    Failure,
    Flags,
    FsBoundary,
    ResourceUsage,
    TableChange,
    TestResult,
)
from .._types import TestVerdict, Verdict
from .classify import Classification
from .grade import grade, unmatched
from .normalize import failures, signal_name
from .parse import Evidence, ParsedTest

#: Names that configure pytest wherever they stand.
PYTEST_FILES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml"})

_WORSE: dict[TestVerdict, int] = {"passed": 0, "skipped": 1, "failed": 2, "errored": 3}


def touches_oracle(paths: Iterable[str], selectors: Iterable[str] | None, config_changed: bool) -> bool:
    """The diff-scope check: does a patch touch a selected test file or pytest's config?

    ``selectors`` is None when the whole suite is selected: then every test file counts.
    """
    if config_changed:
        return True
    whole_suite = selectors is None
    targets = [posixpath.normpath(s.split("::", 1)[0]) for s in selectors or ()]
    for path in paths:
        name = posixpath.basename(path)
        if name in PYTEST_FILES:
            return True
        if whole_suite and (name.startswith("test_") or name.endswith("_test.py")):
            return True  # the whole suite is selected: every test file is the oracle
        for t in targets:
            if path == t or path.startswith(t + "/") or t in ("", "."):
                return True
    return False


def touches_suite_oracle(
    language: str,
    paths: Iterable[str],
    selectors: Iterable[str] | None,
    config_changed: bool,
    test_sources: Iterable[str] | None = None,
) -> bool:
    """The diff-scope check of a suite in a language beyond Python (docs/languages.md,
    "Test suites"): does a patch touch one of the language's test files that the
    selection runs (every one when the whole suite runs), or change the test part of the
    runner's configuration (``config_changed``: `aexec._languages.Suite.oracle_text` of a
    touched file differs before and after the patch)?

    A selection by the runner's ids (C/C++: ``CMakeLists.txt::<ctest name>``) runs the
    test files its tests are built from, ``test_sources``; every test file when those
    are not known (None)."""
    if config_changed:
        return True
    suite = langs.language(language).suite
    if suite is None:  # a snippet's language: no test files, no runner to configure
        return False
    whole_suite = selectors is None
    chosen = list(selectors or ())
    targets = [langs.split(s)[0] for s in chosen]
    by_id = suite.selects_ids(chosen)
    built_from = None if test_sources is None else set(test_sources)
    for path in map(posixpath.normpath, paths):
        if not suite.is_test_file(path):
            continue
        if whole_suite or any(t == "." or path == t or path.startswith(t + "/") for t in targets):
            return True
        if by_id and (built_from is None or path in built_from):
            return True
    return False


def ran_tests(tests: Iterable[ParsedTest]) -> int:
    """Tests that ran: neither skipped nor a collector listed for its collection error."""
    return sum(1 for t in tests if t.verdict != "skipped" and not t.collection)


def reconcile(first: Evidence, second: Evidence) -> tuple[Evidence, bool]:
    """Merge a passing run with its confirming re-run: (the evidence to believe, agreed)."""
    a = {t.nodeid: t.verdict for t in first.tests}
    b = {t.nodeid: t.verdict for t in second.tests}
    if a == b and not failures(second, 0.0):
        return first, True
    merged = {n: max(a.get(n, "errored"), b.get(n, "errored"), key=_WORSE.__getitem__) for n in a | b}
    collectors = {t.nodeid for t in (*first.tests, *second.tests) if t.collection}
    tests = tuple(ParsedTest(n, v, collection=n in collectors) for n, v in merged.items())
    return attrs.evolve(second, tests=tests), False


def same_tests(first: Evidence, second: Evidence) -> bool:
    """Did two runs give every test the same verdict (whatever the verdicts were)?"""
    return {t.nodeid: t.verdict for t in first.tests} == {t.nodeid: t.verdict for t in second.tests}


def tag(after: Iterable[ParsedTest], before: Mapping[str, TestVerdict] | None) -> tuple[TestResult, ...]:
    """FAIL_TO_PASS: failed, errored or absent before, passed after. PASS_TO_PASS: passed both."""
    out = []
    for t in after:
        prior = None if before is None else before.get(t.nodeid, "absent")
        out.append(
            TestResult(
                test=t.nodeid,
                verdict=t.verdict,
                f2p=t.verdict == "passed" and prior in ("failed", "errored", "absent"),
                p2p=t.verdict == "passed" and prior == "passed",
            )
        )
    return tuple(out)


def verdict_of(failure: Failure | None, flags: Flags) -> Verdict:
    if flags.env_broken:
        return "error"  # not the candidate's: the environment cannot run the selection
    if flags.tampered:
        return "tampered"
    if failure is not None:
        return "fail"
    if flags.empty_success:
        return "empty_success"
    return "pass"


@attrs.frozen
class Head:
    """What every observation of one request says about where it came from."""

    ident: str | int | None
    classification: Classification
    artifact_version: str
    cache_key: str
    aexec_version: str


@attrs.frozen
class Run:
    """One execution's evidence with where it happened."""

    evidence: Evidence
    stdout: str
    stderr: str
    cwd: str
    scratch_root: str
    changed_state: str
    cpu_s: float | None
    peak_ram_mib: int | None
    #: ``changed_state`` path by path (`aexec._boundary.trees.list_changes`).
    changes: tuple[Change, ...] = ()
    changes_omitted: int = 0
    #: The request's ``fetch_files`` read back: path → base64 or None.
    files_out: dict[str, str | None] | None = None
    #: What the run's canary showed (`aexec._stages.canary.split`), if it had one.
    canary: CanaryReport | None = None


def assemble(
    head: Head,
    *,
    environment: Environment,
    run: Run,
    before: Mapping[str, TestVerdict] | None,
    reverified: bool | None,
    tampered: bool,
    fault: EnvFault | None = None,
) -> ExecutionObservation:
    """The single `ExecutionObservation` of a run. ``reverified`` is None when no re-run
    happened; ``fault`` is the environment's, when the selection cannot run in it."""
    ev = run.evidence
    found = failures(ev, environment.timeout_s)
    primary = found[0].failure if found else None
    flags = Flags(
        empty_success=primary is None and ran_tests(ev.tests) == 0,
        tampered=tampered,
        nondeterministic=reverified is False,
        parse_uncertain=ev.parse_uncertain,
        reverified=reverified is True,
        env_broken=fault is not None,
    )
    cpu = None
    if run.cpu_s is not None and ev.duration > 0:
        cpu = round(min(1.0, run.cpu_s / (ev.duration * environment.cpu_cap_cores)), 4)
    return ExecutionObservation(
        id=head.ident,
        action=head.classification.mode,
        verdict=verdict_of(primary, flags),
        environment=environment,
        cwd=run.cwd,
        artifact_version=head.artifact_version,
        exit_code=ev.exit_code,
        signal=None if ev.signal is None else signal_name(ev.signal),
        duration=round(ev.duration, 6),
        timed_out=ev.timed_out,
        stdout=run.stdout,
        stderr=run.stderr,
        exception=found[0].exception if found else None,
        changed_state=run.changed_state,
        test_results=tag(ev.tests, before),
        resource_usage=ResourceUsage(peak_cpu=cpu, peak_ram_mib=run.peak_ram_mib),
        failure=primary,
        failures=tuple(f.failure for f in found),
        flags=flags,
        request_type=head.classification.request_type,
        probe_gated=head.classification.probe_gated,
        cache_key=head.cache_key,
        aexec_version=head.aexec_version,
        changes=run.changes,
        changes_omitted=run.changes_omitted,
        files_out=run.files_out,
        changed_tables=tuple(TableChange(t, 0, rows, digest) for t, rows, digest in ev.tables),
        error=None if fault is None else f"environment: {fault.message}",
        env_fault=fault,
    )


def _nothing_ran(
    head: Head, environment: Environment, verdict: Verdict, changed_state: str, failure: Failure | None
) -> ExecutionObservation:
    return ExecutionObservation(
        id=head.ident,
        action=head.classification.mode,
        verdict=verdict,
        environment=environment,
        cwd="",
        artifact_version=head.artifact_version,
        exit_code=None,
        duration=0.0,
        timed_out=False,
        stdout="",
        stderr="",
        exception=None,
        changed_state=changed_state,
        test_results=(),
        resource_usage=ResourceUsage(),
        failure=failure,
        failures=() if failure is None else (failure,),
        flags=Flags(),
        request_type=head.classification.request_type,
        probe_gated=head.classification.probe_gated,
        cache_key=head.cache_key,
        aexec_version=head.aexec_version,
    )


def refused(head: Head, *, environment: Environment, message: str) -> ExecutionObservation:
    """The observation of a candidate whose patch could not be applied: nothing ran.

    The artifact does not build, so the class is ``compile``, located at the patch.
    """
    failure = Failure("compile", "patch", message, None, 0.0)
    return _nothing_ran(head, environment, "fail", "nothing ran", failure)


def instance_error(head: Head, *, environment: Environment, message: str) -> ExecutionObservation:
    """The request's own oracle (its ``test_patch``) cannot be applied: nothing ran, and
    nothing is charged to the candidate: ``verdict == "error"``, the reason in ``error``."""
    return attrs.evolve(_nothing_ran(head, environment, "error", "nothing ran", None), error=message)


def graded(obs: ExecutionObservation, candidate: Candidate) -> ExecutionObservation:
    """``obs`` with its SWE-bench-style grade (``aexec._stages.grade``), when the request
    expected tests; unchanged otherwise."""
    resolved, missing = grade(
        candidate, obs.test_results, tampered=obs.flags.tampered, error=obs.verdict == "error"
    )
    if resolved is None:
        return obs
    return attrs.evolve(
        obs,
        resolved=resolved,
        expected_failures=missing,
        expected_unmatched=unmatched(candidate, obs.test_results),
    )


def unobserved(
    *, ident: str | int | None, classification: Classification, message: str, aexec_version: str
) -> ExecutionObservation:
    """aexec itself failed to observe this candidate: say so, claim nothing else."""
    env = Environment(
        toolchain="",
        toolchain_version="",
        cpu_cap_cores=0.0,
        ram_cap_mib=0,
        timeout_s=0.0,
        fs_boundary=FsBoundary("", repo_ro=False),
        network="deny_by_default",
        stdout_cap_kib=0,
        stderr_cap_kib=0,
    )
    head = Head(ident, classification, "", "", aexec_version)
    return attrs.evolve(_nothing_ran(head, env, "error", "unknown", None), error=message)
