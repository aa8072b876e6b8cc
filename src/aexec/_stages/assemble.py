"""Stage (g): observation assembly and its guards (spec §3.7). Pure: no I/O.

Guards: empty success (nothing failed, no test ran → flagged, never a pass), the
determinism check (a passing suite's confirming re-run must agree), and the diff-scope
anti-gaming check (a patch that touches the oracle is flagged ``tampered``), and the
SWE-bench-style grade of a request that expects tests (`graded`, by ``grade``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection, Iterable, Mapping

import attrs

from .. import _languages as langs
from .._records import (
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
    runner's configuration (``config_changed``: `aexec._languages.oracle_text` of a
    touched file differs before and after the patch)?

    A selection by the runner's ids (C/C++: ``CMakeLists.txt::<ctest name>``) runs the
    test files its tests are built from, ``test_sources``; every test file when those
    are not known (None)."""
    if config_changed:
        return True
    lang: langs.Language = language  # type: ignore[assignment]
    whole_suite = selectors is None
    chosen = list(selectors or ())
    targets = [langs.split(s)[0] for s in chosen]
    by_id = langs.selects_ids(lang, chosen)
    built_from = None if test_sources is None else set(test_sources)
    for path in map(posixpath.normpath, paths):
        if not langs.is_test_file(lang, path):
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


_NO_MODULE = re.compile(r"No module named '([^']+)'")
#: pytest could not find what the selection names: the request's doing, not the environment's.
_NOT_FOUND = re.compile(r"^ERROR: (?:file or directory )?not found", re.M)
#: What a candidate's patch may change that pytest reads at start.
_START_FILES = PYTEST_FILES | {"tox.ini", "setup.cfg", "pyproject.toml"}


def _start_error(stderr: str, cwd: str) -> str:
    """The line pytest said its start failed with, without the scratch path."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    said = [ln for ln in lines if re.match(r"\S+: error: ", ln)]
    said = said or [ln for ln in lines if ln.startswith(("ERROR:", "INTERNALERROR>")) and "usage:" not in ln]
    line = (said or lines[-1:] or ["no message"])[0]
    return line.replace(cwd + "/", "").replace(cwd, ".")[:300]


def env_fault(
    ev: Evidence, stderr: str, *, cwd: str, touched: Iterable[str], repo_modules: Collection[str]
) -> tuple[str, str] | None:
    """``(kind, message)`` when a pytest run shows that its selection cannot run in the
    declared environment (see `EnvFault.kind`), else None. Only a run in which no test
    ran qualifies, and never one whose patch touched what failed: a module named in a
    failing frame, a collection error's file, or a file pytest reads at start.
    """
    if ev.runner != "pytest" or ran_tests(ev.tests) or ev.timed_out or ev.oom_killed or ev.signal is not None:
        return None
    touched = [posixpath.normpath(p) for p in touched]
    # A conftest that failed to import for another reason than a missing module is pytest
    # refusing to start (below: ``usage``), as when its exception was not read at all.
    errors = [
        e
        for e in ev.errors
        if e.phase != "conftest" or (e.is_a("ImportError") and _NO_MODULE.search(e.message))
    ]
    collect = [e for e in errors if e.phase in ("collect", "conftest")]
    if any(
        f.file and not f.file.startswith(("/", "<")) for e in errors if e not in collect for f in e.frames
    ):
        return None  # pytest's start failed in the repo's own code (a module shadowing one of pytest's)
    for e in errors:
        m = _NO_MODULE.search(e.message)
        if (
            e.phase == "import"
            and e.is_a("ImportError")
            and m
            and m[1].split(".")[0] in ("pytest", "_pytest")
        ):
            return "no_pytest", f"the interpreter cannot import pytest ({e.name}: {e.message})"
    if collect:
        missing: set[str] = set()
        for e in collect:
            m = _NO_MODULE.search(e.message)
            if not (e.is_a("ImportError") and m) or m[1].split(".")[0] in repo_modules:
                return None  # a fault of the code, not of the environment
            where = {posixpath.normpath(f.file) for f in e.frames} | {(e.nodeid or "").split("::")[0]}
            if where & set(touched):
                return None
            missing.add(m[1])
        names = ", ".join(f"'{n}'" for n in sorted(missing))
        return "missing_module", f"collection imports {names}, which neither the repo nor the interpreter has"
    if any(posixpath.basename(p) in _START_FILES for p in touched):
        return None
    if ev.pytest_exit == 4 and not _NOT_FOUND.search(stderr):
        return "usage", f"pytest refused to start (usage error): {_start_error(stderr, cwd)}"
    if ev.pytest_exit == 3 or (ev.pytest_exit is None and ev.exit_code not in (0, None)):
        return "internal", f"pytest or a plugin failed at start: {_start_error(stderr, cwd)}"
    return None


def pristine_fault(
    fault: tuple[str, str], pristine: Run, found: tuple[str, str] | None, timeout_s: float
) -> EnvFault | None:
    """The `EnvFault` of a run whose ``fault`` the unpatched repo's run shows the same way
    (``found``: its own `env_fault`), else None."""
    if found is None or found[0] != fault[0] or (fault[0] == "missing_module" and found[1] != fault[1]):
        return None
    return EnvFault(
        kind=fault[0],
        message=fault[1],
        pristine_exit_code=pristine.evidence.exit_code,
        pristine_failures=tuple(f.failure for f in failures(pristine.evidence, timeout_s)),
        pristine_stderr=pristine.stderr[-2000:],
    )


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
