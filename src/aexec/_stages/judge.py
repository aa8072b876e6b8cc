"""The judge: which runs a job needs, and what they mean (spec §3.3–§3.7). Pure: no I/O.

The pipeline's shell (`aexec._pipeline.witness`) only feeds it::

    needs = first_runs(job)
    while needs:
        results = <run each of needs, concurrently> ...
        needs = next_runs(job, results)
    return conclude(job, results)

A job's first runs are its run (for an unpatched suite, the call's one unpatched run of
its selection) and, for a patched suite, the FAIL_TO_PASS before-run beside it. Then:

- a pass (or a grade that would resolve) is confirmed by a re-run in a fresh scratch
  root, and the two are reconciled (``reverified`` / ``nondeterministic``);
- a pytest run that shows its selection cannot run in the declared environment
  (`env_fault`) is the environment's only if the unpatched repo's run fails the same
  way: that run (the shared unpatched one) is asked for next.

`conclude` assembles the observation: the patch readings' refusals, the tamper check,
empty success and the grade (``assemble``, ``graded``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

import attrs

from .. import _runners as runners
from .._errors import PatchError
from .._records import CanaryReport, Candidate, EnvFault, Environment, ExecutionObservation
from .._types import TestVerdict
from . import canary as canaries
from .assemble import (
    Head,
    Run,
    assemble,
    graded,
    instance_error,
    ran_tests,
    reconcile,
    refused,
    same_tests,
    tag,
    touches_oracle,
    touches_suite_oracle,
)
from .classify import Classification, Runner
from .envfault import env_fault, pristine_fault
from .grade import oracle_paths_touched, would_resolve
from .normalize import failures
from .policy import with_scratch

#: An observation's error when the request's own oracle cannot be applied.
ORACLE = "test_patch does not apply (an error of the instance, not of the candidate): "

#: What a run is for: the job's own, the FAIL_TO_PASS before-run, the confirming re-run
#: of a pass, the unpatched repo's run behind an environment fault.
Role = Literal["first", "before", "confirm", "pristine"]


class Job(Protocol):
    """What the judge reads of a job (``aexec._pipeline.session.Job``)."""

    @property
    def candidate(self) -> Candidate: ...
    @property
    def classification(self) -> Classification: ...
    @property
    def runner(self) -> Runner: ...
    @property
    def env(self) -> Environment: ...
    @property
    def version(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def aexec_version(self) -> str: ...
    @property
    def guarded(self) -> bool: ...
    @property
    def patches(self) -> Patches: ...
    @property
    def repo_modules(self) -> frozenset[str]: ...


@attrs.frozen
class Patches:
    """What the request's patches touch, read when the job is made (``git apply --numstat``)."""

    #: Repo-relative paths the candidate's ``patch`` touches.
    touched: tuple[str, ...] = ()
    #: Repo-relative paths the request's ``test_patch`` touches (the oracle's files).
    oracle: tuple[str, ...] = ()
    #: Why the ``patch`` cannot be read (nothing runs), or None.
    unreadable: str | None = None
    #: Why the ``test_patch`` cannot be read (nothing runs), or None.
    oracle_unreadable: str | None = None


@attrs.frozen
class Need:
    """One execution the judge asks for."""

    role: Role
    #: With the candidate's patch (else the repo as it is).
    patched: bool
    #: The call's one unpatched run of this selection (shared by the jobs on its repo).
    shared: bool


@attrs.frozen
class Outcome:
    """What one execution came back with, as data: its run, or why nothing ran."""

    run: Run | None = None
    #: The patch changed the runner's configuration (pytest's, or a suite's test part).
    config_changed: bool = False
    #: The candidate's patch does not apply: git's reason (nothing ran).
    refused: str | None = None
    #: The request's ``test_patch`` does not apply: git's reason (nothing ran).
    oracle_refused: str | None = None
    #: The patched copy's C extensions do not build (``aexec._pipeline.rebuild``): the
    #: build's tail (no test ran).
    build_failed: str | None = None
    #: Which fixtures and markers the run found missing a file of the repo defines.
    defines: frozenset[tuple[str, str]] = frozenset()
    #: A before-run's per-test verdicts (it may come from the cache, without a run).
    verdicts: Mapping[str, TestVerdict] | None = None


@attrs.frozen
class Results:
    """The outcomes so far, by role."""

    first: Outcome | None = None
    before: Outcome | None = None
    confirm: Outcome | None = None
    pristine: Outcome | None = None

    def with_outcome(self, role: Role, outcome: Outcome) -> Results:
        return attrs.evolve(self, **{role: outcome})


def runs_suite(job: Job) -> bool:
    """Does the job run a test suite (pytest, or a language's: ``run_suite`` of a repo)?
    Such a job gets per-test verdicts, the before-run and the confirming re-run."""
    c = job.candidate
    return runners.python_suite(job.runner) or (c.language != "python" and c.request_type == "run_suite")


def first_runs(job: Job) -> tuple[Need, ...]:
    """The job's run and, for a patched suite, its before-run beside it (none when a
    patch cannot be read: nothing runs)."""
    if job.patches.unreadable is not None or job.patches.oracle_unreadable is not None:
        return ()
    suite, patched = runs_suite(job), job.candidate.patch is not None
    first = Need("first", patched=patched, shared=suite and not patched)
    return (first, Need("before", patched=False, shared=True)) if suite and patched else (first,)


def stopped(results: Results) -> bool:
    """Nothing ran that can be judged: a patch of the request did not apply. (A refused
    first run makes its before-run moot: the shell may cancel it.)"""
    first, before = results.first, results.before
    return (
        first is None
        or first.run is None
        or first.oracle_refused is not None
        or (before is not None and before.oracle_refused is not None)
    )


def next_runs(job: Job, results: Results) -> tuple[Need, ...]:
    """What the job needs next: the confirming re-run of a pass, then the unpatched run
    behind an environment fault; nothing once the observation can be concluded."""
    if stopped(results):
        return ()
    patched = job.candidate.patch is not None
    if results.confirm is None and _confirms(job, results):
        return (Need("confirm", patched=patched, shared=False),)
    if results.pristine is None and patched and (_fault(job, results) or _canary_reason(job, results)):
        return (Need("pristine", patched=False, shared=True),)
    return ()


def _canary_reason(job: Job, results: Results) -> str | None:
    """Why the job's canary (its run's, or its confirming re-run's) says its verdicts
    cannot be trusted; the unpatched repo's run is then the control (docs/oracle.md)."""
    if not job.guarded:
        return None
    return canaries.misbehaved(_canary(results))


def _canary(results: Results) -> CanaryReport | None:
    first, confirm = _first(results).run, results.confirm
    again = None if confirm is None or confirm.run is None else confirm.run.canary
    return canaries.worst(None if first is None else first.canary, again)


def _canary_verdict(job: Job, results: Results, run: Run) -> tuple[bool, EnvFault | None]:
    """(tampered, the environment's fault) by the canary: a canary that misbehaves in the
    unpatched repo's run too (or in an unpatched candidate's own run) is the environment's."""
    reason = _canary_reason(job, results)
    if reason is None:
        return False, None
    pristine = run if job.candidate.patch is None else _pristine_run(results)
    control = None if pristine is None else canaries.misbehaved(pristine.canary)
    if pristine is None or control is None:
        return True, None
    message = f"the canary: {reason}" + ("" if control == reason else f"; unpatched: {control}")
    return False, EnvFault(kind="canary", message=message, pristine_exit_code=pristine.evidence.exit_code)


def _pristine_run(results: Results) -> Run | None:
    return None if results.pristine is None else results.pristine.run


def _confirms(job: Job, results: Results) -> bool:
    """A pass claim (a passing suite, or a grade whose expected tests all passed) of a
    guarded suite: it is re-run in a fresh scratch root before it is believed."""
    run = _first(results).run
    assert run is not None
    passed = not failures(run.evidence, job.env.timeout_s) and ran_tests(run.evidence.tests) > 0
    resolves = would_resolve(job.candidate, tag(run.evidence.tests, None))
    return job.guarded and runs_suite(job) and (passed or resolves)


def _first(results: Results) -> Outcome:
    assert results.first is not None
    return results.first


def _believed(job: Job, results: Results) -> tuple[Run, frozenset[tuple[str, str]], bool | None]:
    """The run to believe, what the repo defines of what it missed, and ``reverified``
    (None: no re-run): a confirming re-run that disagrees replaces the run's verdicts
    with the worse of the two per test."""
    first, confirm = _first(results), results.confirm
    run = first.run
    assert run is not None
    if confirm is None:
        return run, first.defines, None
    again = _ran(confirm)
    merged, agreed = reconcile(run.evidence, again.evidence)
    passed = not failures(run.evidence, job.env.timeout_s) and ran_tests(run.evidence.tests) > 0
    if not passed:  # a failing suite re-run for its grade: agreement is per test
        agreed = same_tests(run.evidence, again.evidence)
    if agreed:
        return run, first.defines, True
    return attrs.evolve(again, evidence=merged), confirm.defines, False


def _ran(outcome: Outcome) -> Run:
    """The run of a later execution of what ran a moment ago: a patch of the request that
    does not apply now means the host changed under us (an error of aexec's, not a verdict)."""
    if outcome.run is None:
        raise PatchError(outcome.refused or outcome.oracle_refused or "nothing ran")
    return outcome.run


def _tampered(job: Job, results: Results, run: Run) -> bool:
    """The diff-scope check: a guarded patch that touches the oracle (a selected test
    file, the runner's configuration, the ``test_patch``'s files)."""
    c, touched = job.candidate, job.patches.touched
    if not job.guarded or c.patch is None:
        return False
    config_changed = _first(results).config_changed
    if c.language != "python":
        sources = run.evidence.test_sources
        guard = touches_suite_oracle(c.language, touched, c.tests, config_changed, sources)
    elif job.runner in runners.OWN_RUNNERS:  # its test tree, entry point and start-up files
        guard = runners.get(job.runner).touches_oracle(touched)
    else:
        guard = touches_oracle(touched, c.tests, config_changed)
    return guard or oracle_paths_touched(touched, job.patches.oracle)


def _fault(job: Job, results: Results) -> tuple[str, str] | None:
    """The believed run's environment fault (`env_fault`), unless the patch tampered."""
    if not runners.python_suite(job.runner) or job.candidate.repo is None:
        return None
    run, defines, _ = _believed(job, results)
    if _tampered(job, results, run):
        return None
    return env_fault(
        run.evidence,
        run.stderr,
        cwd=run.cwd,
        touched=job.patches.touched,
        repo_modules=job.repo_modules,
        repo_defines=defines,
        stdout=run.stdout,
    )


def _env_fault(job: Job, results: Results) -> EnvFault | None:
    """The environment's fault: the run's, shown the same way by the unpatched repo's run
    (for an unpatched candidate its own run is that run)."""
    fault = _fault(job, results)
    if fault is None:
        return None
    if job.candidate.patch is None:
        p, defines, _ = _believed(job, results)
    else:
        assert results.pristine is not None
        p, defines = _ran(results.pristine), results.pristine.defines
    found = env_fault(
        p.evidence,
        p.stderr,
        cwd=p.cwd,
        touched=[],
        repo_modules=job.repo_modules,
        repo_defines=defines,
        stdout=p.stdout,
    )
    return pristine_fault(fault, p, found, job.env.timeout_s)


def head(job: Job) -> Head:
    c = job.candidate
    return Head(c.id, job.classification, job.version, job.key, job.aexec_version)


def conclude(job: Job, results: Results) -> ExecutionObservation:
    """The job's observation from its ``results`` (`next_runs` asked for nothing more)."""
    c, env, patches = job.candidate, job.env, job.patches
    if patches.oracle_unreadable is not None:
        return graded(
            instance_error(head(job), environment=env, message=ORACLE + patches.oracle_unreadable), c
        )
    if patches.unreadable is not None:
        return graded(refused(head(job), environment=env, message=f"patch refused: {patches.unreadable}"), c)
    first = _first(results)
    if first.refused is not None:  # the candidate's patch goes first: it did not land
        return graded(
            refused(head(job), environment=env, message=f"patch does not apply: {first.refused}"), c
        )
    if first.build_failed is not None:  # the candidate's patch breaks the in-place build
        return graded(refused(head(job), environment=env, message=first.build_failed), c)
    broken = first.oracle_refused or (results.before.oracle_refused if results.before else None)
    if broken is not None or first.run is None:
        return graded(instance_error(head(job), environment=env, message=ORACLE + str(broken)), c)
    run, _, reverified = _believed(job, results)
    before = None if results.before is None else results.before.verdicts
    fault = _env_fault(job, results)
    by_canary, canary_fault = _canary_verdict(job, results, run)
    tampered = _tampered(job, results, run)
    obs = assemble(
        head(job),
        environment=with_scratch(env, run.scratch_root),
        run=run,
        before=before,
        reverified=reverified,
        tampered=tampered or (by_canary and fault is None),
        fault=fault or (None if tampered else canary_fault),
    )
    seen = _canary(results)
    obs = attrs.evolve(
        obs,
        canary=canaries.judged(seen, canaries.misbehaved(seen)),
        oracle_touched=canaries.machinery(job.runner, patches.touched) if c.patch is not None else (),
    )
    return graded(with_runner(obs, job), c)


def with_runner(obs: ExecutionObservation, job: Job) -> ExecutionObservation:
    """A Python suite's observation names its runner and why it was chosen."""
    c = job.candidate
    if not runners.python_suite(job.runner) or c.request_type != "run_suite":
        return obs
    default = (
        "the request's `runner`" if c.runner != "pytest" else "the default: the request names no `runner`"
    )
    return attrs.evolve(obs, runner=job.runner, runner_reason=c.runner_reason or default)
