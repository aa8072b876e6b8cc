"""Observing one job: the spec's pipeline over the runs it needs (§3.3–§3.7).

(f) the cache, then (c) the run (`run_once`) with the FAIL_TO_PASS before-run beside it,
(d)/(e) inside the run's parse and the guards' normalize, the confirming re-run of a
pass, and (g) assembly. Identical jobs share one observation; a before-run and an
unpatched candidate's run of the same selection are one execution.
"""

from __future__ import annotations

import anyio
import attrs

from .. import _runners as runners
from .._boundary.forkserver import top_level_names
from .._boundary.patch import PatchError, patch_paths
from .._boundary.scratch import import_roots
from .._boundary.trees import texts_naming
from .._log import get_logger
from .._records import Candidate, EnvFault, ExecutionObservation
from .._stages.assemble import (
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
    unobserved,
)
from .._stages.classify import Classification
from .._stages.envfault import defined_in, env_fault, pristine_fault, wanted
from .._stages.grade import oracle_paths_touched, would_resolve
from .._stages.keys import artifact_version, cache_key
from .._stages.normalize import failures
from .._stages.policy import with_scratch
from .._types import TestVerdict
from .cache import in_thread
from .run import OracleError, run_once
from .session import Job, Session

log = get_logger(__name__)

_ORACLE = "test_patch does not apply (an error of the instance, not of the candidate): "


async def observe_one(session: Session, job: Job) -> ExecutionObservation:
    """The job's observation: from the cache, shared with an identical job, or witnessed."""
    obs, source = await session.observations.get(
        job.key,
        lambda: witness(session, job),
        valid=lambda o: o.cache_key == job.key and o.artifact_version == job.version,
    )
    blog = log.bind(candidate=job.candidate.id)
    if obs.expected_unmatched:  # said without -v: the grade of these ids is "did not pass"
        blog.warning(
            "expected_unmatched", tests=[f"{u.field} {u.test!r}: {u.reason}" for u in obs.expected_unmatched]
        )
    if source != "ran":
        blog.info("cache_hit", source=source, cache_key=job.key[:12])
        return attrs.evolve(obs, id=job.candidate.id, cache_hit=True)
    return obs


def _oracle(job: Job) -> dict[str, str]:
    """The oracle's part of a before-run's key (nothing without one: keys unchanged)."""
    return {} if job.candidate.test_patch is None else {"test_patch": job.candidate.test_patch}


async def _before(session: Session, job: Job, oracle: list[str]) -> dict[str, TestVerdict]:
    """Per-test verdicts of the selection on the unpatched repo (cached, shared); with a
    ``test_patch``, on the unpatched repo with the oracle applied (SWE-bench's before)."""
    key = cache_key(
        aexec=session.version,
        role="before",
        code=artifact_version(job.repo_hash, None, None, None),
        environment=job.declared,
        tests=job.candidate.tests,
        toolchain=job.tool.fingerprint,
        **_oracle(job),
        plugins=job.candidate.pytest_plugins,
        **({"command": job.candidate.command} if job.candidate.command else {}),
    )

    async def run() -> dict[str, TestVerdict]:
        done, _ = await _unpatched(session, job, oracle)
        return {t.nodeid: t.verdict for t in done.evidence.tests}

    verdicts, _ = await session.befores.get(key, run)
    return verdicts


async def _unpatched(session: Session, job: Job, oracle: list[str]) -> tuple[Run, bool]:
    """The job's selection on its repo as it is, run once per call (§3.6): the before-run
    of every patched candidate and the first run of an unpatched one share it."""
    c = job.candidate
    key = cache_key(
        aexec=session.version,
        role="unpatched",
        code=artifact_version(job.repo_hash, None, c.code, c.command),
        environment=job.declared,
        tests=c.tests,
        runner=job.runner,
        toolchain=job.tool.fingerprint,
        **_oracle(job),
        plugins=c.pytest_plugins,
    )

    async def run() -> tuple[Run, bool]:
        done = await run_once(session, job, patch=None, touched=[], oracle=oracle)
        assert not isinstance(done, PatchError)  # no patch, nothing to refuse
        return done

    done, _ = await session.unpatched.get(key, run)
    return done


def runs_suite(job: Job) -> bool:
    """Does the job run a test suite (pytest, or a language's: ``run_suite`` of a repo)?
    Such a job gets per-test verdicts, the before-run and the confirming re-run."""
    if job.runner == "pytest" or job.runner in runners.OWN_RUNNERS:
        return True
    return job.lang is not None and job.candidate.request_type == "run_suite"


async def witness(session: Session, job: Job) -> ExecutionObservation:
    """Run the job (and what its verdict needs) and assemble its observation."""
    candidate, env = job.candidate, job.env
    suite = runs_suite(job)
    blog = log.bind(candidate=candidate.id)
    head = Head(candidate.id, job.classification, job.version, job.key, session.version)
    touched: list[str] = []
    oracle: list[str] = []
    before: dict[str, TestVerdict] | None = None
    broken: OracleError | None = None
    if candidate.test_patch is not None:
        try:
            oracle = await in_thread(patch_paths, candidate.test_patch)
        except PatchError as e:
            return graded(instance_error(head, environment=env, message=_ORACLE + str(e)), candidate)
    try:
        if candidate.patch is not None:
            touched = await in_thread(patch_paths, candidate.patch)
    except PatchError as e:
        return graded(refused(head, environment=env, message=f"patch refused: {e}"), candidate)
    async with anyio.create_task_group() as tg:
        if suite and candidate.patch is not None:

            async def get_before() -> None:
                nonlocal before, broken
                try:
                    before = await _before(session, job, oracle)
                except OracleError as e:
                    broken = e

            tg.start_soon(get_before)
        done: tuple[Run, bool] | PatchError | None = None
        try:
            if suite and candidate.patch is None:
                done = await _unpatched(session, job, oracle)
            else:
                done = await run_once(session, job, patch=candidate.patch, touched=touched, oracle=oracle)
        except OracleError as e:
            broken = e
            tg.cancel_scope.cancel()  # the instance is broken: no before-run is needed
        else:
            if isinstance(done, PatchError):
                tg.cancel_scope.cancel()  # no before-run is needed for a patch that cannot land
    if isinstance(done, PatchError):  # the candidate's patch goes first: it did not land
        blog.info("patch_refused", error=str(done))
        return graded(refused(head, environment=env, message=f"patch does not apply: {done}"), candidate)
    if broken is not None or done is None:
        blog.info("test_patch_refused", error=str(broken))
        return graded(instance_error(head, environment=env, message=_ORACLE + str(broken)), candidate)
    run, config_changed = done
    blog.info(
        "executed",
        exit_code=run.evidence.exit_code,
        timed_out=run.evidence.timed_out,
        duration=round(run.evidence.duration, 3),
    )
    reverified: bool | None = None
    passed = not failures(run.evidence, env.timeout_s) and ran_tests(run.evidence.tests)
    # A graded run whose expected tests all passed is a pass claim too: confirm it.
    resolves = would_resolve(candidate, tag(run.evidence.tests, None))
    if session.guarded and suite and (passed or resolves):
        redo = await run_once(session, job, patch=candidate.patch, touched=touched, oracle=oracle)
        if isinstance(redo, PatchError):  # it applied a moment ago: the host changed under us
            raise redo
        again = redo[0]
        merged, agreed = reconcile(run.evidence, again.evidence)
        if not passed:  # a failing suite re-run for its grade: agreement is per test
            agreed = same_tests(run.evidence, again.evidence)
        reverified = agreed
        if not agreed:
            blog.warning("nondeterministic", cache_key=job.key[:12])
            run = attrs.evolve(again, evidence=merged)
    tampered = session.guarded and candidate.patch is not None
    if candidate.language != "python":
        sources = run.evidence.test_sources
        guard = touches_suite_oracle(candidate.language, touched, candidate.tests, config_changed, sources)
    elif job.runner in runners.OWN_RUNNERS:  # its test tree, entry point and start-up files
        guard = runners.get(job.runner).touches_oracle(touched)
    else:
        guard = touches_oracle(touched, candidate.tests, config_changed)
    tampered = tampered and (guard or oracle_paths_touched(touched, oracle))
    fault = None if tampered else await _env_fault(session, job, run, touched, oracle)
    obs = assemble(
        head,
        environment=with_scratch(env, run.scratch_root),
        run=run,
        before=before,
        reverified=reverified,
        tampered=tampered,
        fault=fault,
    )
    obs = graded(with_runner(obs, job), candidate)
    blog.info(
        "observed", verdict=obs.verdict, failure_class=obs.failure.failure_class if obs.failure else None
    )
    return obs


def with_runner(obs: ExecutionObservation, job: Job) -> ExecutionObservation:
    """A Python suite's observation names its runner and why it was chosen."""
    c = job.candidate
    if (job.runner != "pytest" and job.runner not in runners.OWN_RUNNERS) or c.request_type != "run_suite":
        return obs
    default = (
        "the request's `runner`" if c.runner != "pytest" else "the default: the request names no `runner`"
    )
    return attrs.evolve(obs, runner=job.runner, runner_reason=c.runner_reason or default)


async def _env_fault(
    session: Session, job: Job, run: Run, touched: list[str], oracle: list[str]
) -> EnvFault | None:
    """The environment's fault, when the run shows its selection cannot run in the
    declared environment and the unpatched repo fails the same way (for an unpatched
    candidate its own run is that run)."""
    repo = job.candidate.repo
    if (job.runner != "pytest" and job.runner not in runners.OWN_RUNNERS) or repo is None:
        return None
    names = await in_thread(lambda: top_level_names(import_roots(repo)))
    defines = await in_thread(repo_defines, repo, wanted(run.evidence))
    fault = env_fault(
        run.evidence,
        run.stderr,
        cwd=run.cwd,
        touched=touched,
        repo_modules=names,
        repo_defines=defines,
        stdout=run.stdout,
    )
    if fault is None:
        return None
    pristine = run
    if job.candidate.patch is not None:
        pristine, _ = await _unpatched(session, job, oracle)
        defines = await in_thread(repo_defines, repo, wanted(pristine.evidence))
    found = env_fault(
        pristine.evidence,
        pristine.stderr,
        cwd=pristine.cwd,
        touched=[],
        repo_modules=names,
        repo_defines=defines,
        stdout=pristine.stdout,
    )
    return pristine_fault(fault, pristine, found, job.env.timeout_s)


def repo_defines(repo: str, want: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which of ``want`` (fixtures and markers pytest found missing) a file of the
    unpatched repo defines."""
    found: set[tuple[str, str]] = set()
    for path, text in texts_naming(repo, {name for _, name in want}):
        found |= defined_in(path, text, want)
    return found


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for e in error.exceptions for leaf in _leaves(e)]
    return [error]


def unobservable(
    candidate: Candidate, classification: Classification, error: BaseException, aexec_version: str
) -> ExecutionObservation:
    """The ``error`` observation of a candidate aexec could not observe: one line per cause."""
    message = "; ".join(
        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}" for e in _leaves(error)
    )
    obs = unobserved(
        ident=candidate.id, classification=classification, message=message, aexec_version=aexec_version
    )
    return graded(obs, candidate)
