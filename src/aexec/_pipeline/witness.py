"""Observing one job: the spec's pipeline over the runs it needs (§3.3–§3.7).

(f) the cache, then (c) the run (`run_once`) with the FAIL_TO_PASS before-run beside it,
(d)/(e) inside the run's parse and the guards' normalize, the confirming re-run of a
pass, and (g) assembly. Identical jobs share one observation; a before-run and an
unpatched candidate's run of the same selection are one execution.
"""

from __future__ import annotations

import anyio
import attrs

from .._boundary.forkserver import top_level_names
from .._boundary.patch import PatchError, patch_paths
from .._boundary.scratch import import_roots
from .._log import get_logger
from .._records import Candidate, EnvFault, ExecutionObservation
from .._stages.assemble import (
    Head,
    Run,
    assemble,
    env_fault,
    pristine_fault,
    ran_tests,
    reconcile,
    refused,
    touches_oracle,
    unobserved,
)
from .._stages.classify import Classification
from .._stages.keys import artifact_version, cache_key
from .._stages.normalize import failures
from .._stages.policy import with_scratch
from .._types import TestVerdict
from .cache import in_thread
from .run import run_once
from .session import Job, Session

log = get_logger(__name__)


async def observe_one(session: Session, job: Job) -> ExecutionObservation:
    """The job's observation: from the cache, shared with an identical job, or witnessed."""
    obs, source = await session.observations.get(job.key, lambda: witness(session, job))
    if source != "ran":
        log.bind(candidate=job.candidate.id).info("cache_hit", source=source, cache_key=job.key[:12])
        return attrs.evolve(obs, id=job.candidate.id, cache_hit=True)
    return obs


async def _before(session: Session, job: Job) -> dict[str, TestVerdict]:
    """Per-test verdicts of the selection on the unpatched repo (cached, shared)."""
    key = cache_key(
        aexec=session.version,
        role="before",
        code=artifact_version(job.repo_hash, None, None, None),
        environment=job.declared,
        tests=job.candidate.tests,
        toolchain=job.tool.fingerprint,
        plugins=job.candidate.pytest_plugins,
        **({"command": job.candidate.command} if job.candidate.command else {}),
    )

    async def run() -> dict[str, TestVerdict]:
        done, _ = await _unpatched(session, job)
        return {t.nodeid: t.verdict for t in done.evidence.tests}

    verdicts, _ = await session.befores.get(key, run)
    return verdicts


async def _unpatched(session: Session, job: Job) -> tuple[Run, bool]:
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
        plugins=c.pytest_plugins,
    )

    async def run() -> tuple[Run, bool]:
        done = await run_once(session, job, patch=None, touched=[])
        assert not isinstance(done, PatchError)  # no patch, nothing to refuse
        return done

    done, _ = await session.unpatched.get(key, run)
    return done


async def witness(session: Session, job: Job) -> ExecutionObservation:
    """Run the job (and what its verdict needs) and assemble its observation."""
    candidate, runner, env = job.candidate, job.runner, job.env
    blog = log.bind(candidate=candidate.id)
    head = Head(candidate.id, job.classification, job.version, job.key, session.version)
    touched: list[str] = []
    before: dict[str, TestVerdict] | None = None
    try:
        if candidate.patch is not None:
            touched = await in_thread(patch_paths, candidate.patch)
    except PatchError as e:
        return refused(head, environment=env, message=f"patch refused: {e}")
    async with anyio.create_task_group() as tg:
        if runner == "pytest" and candidate.patch is not None:

            async def get_before() -> None:
                nonlocal before
                before = await _before(session, job)

            tg.start_soon(get_before)
        done: tuple[Run, bool] | PatchError
        if runner == "pytest" and candidate.patch is None:
            done = await _unpatched(session, job)
        else:
            done = await run_once(session, job, patch=candidate.patch, touched=touched)
        if isinstance(done, PatchError):
            tg.cancel_scope.cancel()  # no before-run is needed for a patch that cannot land
    if isinstance(done, PatchError):
        blog.info("patch_refused", error=str(done))
        return refused(head, environment=env, message=f"patch does not apply: {done}")
    run, config_changed = done
    blog.info(
        "executed",
        exit_code=run.evidence.exit_code,
        timed_out=run.evidence.timed_out,
        duration=round(run.evidence.duration, 3),
    )
    reverified: bool | None = None
    passed = not failures(run.evidence, env.timeout_s) and ran_tests(run.evidence.tests)
    if session.guarded and runner == "pytest" and passed:
        redo = await run_once(session, job, patch=candidate.patch, touched=touched)
        if isinstance(redo, PatchError):  # it applied a moment ago: the host changed under us
            raise redo
        again = redo[0]
        merged, agreed = reconcile(run.evidence, again.evidence)
        reverified = agreed
        if not agreed:
            blog.warning("nondeterministic", cache_key=job.key[:12])
            run = attrs.evolve(again, evidence=merged)
    tampered = session.guarded and candidate.patch is not None
    tampered = tampered and touches_oracle(touched, candidate.tests, config_changed)
    fault = None if tampered else await _env_fault(session, job, run, touched)
    obs = assemble(
        head,
        environment=with_scratch(env, run.scratch_root),
        run=run,
        before=before,
        reverified=reverified,
        tampered=tampered,
        fault=fault,
    )
    blog.info(
        "observed", verdict=obs.verdict, failure_class=obs.failure.failure_class if obs.failure else None
    )
    return obs


async def _env_fault(session: Session, job: Job, run: Run, touched: list[str]) -> EnvFault | None:
    """The environment's fault, when the run shows its selection cannot run in the
    declared environment and the unpatched repo fails the same way (for an unpatched
    candidate its own run is that run)."""
    repo = job.candidate.repo
    if job.runner != "pytest" or repo is None:
        return None
    names = await in_thread(lambda: top_level_names(import_roots(repo)))
    fault = env_fault(run.evidence, run.stderr, cwd=run.cwd, touched=touched, repo_modules=names)
    if fault is None:
        return None
    pristine = run
    if job.candidate.patch is not None:
        pristine, _ = await _unpatched(session, job)
    found = env_fault(pristine.evidence, pristine.stderr, cwd=pristine.cwd, touched=[], repo_modules=names)
    return pristine_fault(fault, pristine, found, job.env.timeout_s)


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
    return unobserved(
        ident=candidate.id, classification=classification, message=message, aexec_version=aexec_version
    )
