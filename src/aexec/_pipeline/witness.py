"""Observing one job: the spec's pipeline over the runs it needs (§3.3–§3.7).

(f) the cache, then the loop that feeds the pure judge (``aexec._stages.judge``): it
runs what the judge asks for (`run`: (c) with (d) inside; the FAIL_TO_PASS before-run,
the confirming re-run, the unpatched run behind an environment fault), and the judge
concludes (e)/(g). Identical jobs share one observation; a before-run and an unpatched
candidate's run of the same selection are one execution.
"""

from __future__ import annotations

import anyio
import attrs

from .._environments.spec import EnvBroken
from .._log import get_logger
from .._records import Candidate, EnvFault, ExecutionObservation
from .._stages import judge
from .._stages.assemble import graded, unobserved
from .._stages.classify import Classification
from .._stages.judge import Need, Outcome, Results
from .._stages.keys import before_key, unpatched_key
from .._stages.plan import Scratch
from .run import run
from .session import Job, Session

log = get_logger(__name__)


async def observe_one(session: Session, job: Job, leftover: list[Scratch]) -> ExecutionObservation:
    """The job's observation: from the cache, shared with an identical job, or witnessed
    (the scratch roots its runs leave are added to ``leftover``, for the caller to remove)."""
    obs, source = await session.observations.get(
        job.key,
        lambda: witness(session, job, leftover),
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


async def witness(session: Session, job: Job, leftover: list[Scratch]) -> ExecutionObservation:
    """Run what the judge asks for, batch by batch, and let it conclude."""
    results = Results()
    needs = judge.first_runs(job)
    while needs:
        results = await _execute_all(session, job, needs, results, leftover)
        needs = judge.next_runs(job, results)
    obs = judge.conclude(job, results)
    blog = log.bind(candidate=job.candidate.id)
    if obs.flags.nondeterministic:
        blog.warning("nondeterministic", cache_key=job.key[:12])
    blog.info(
        "observed", verdict=obs.verdict, failure_class=obs.failure.failure_class if obs.failure else None
    )
    return obs


async def _execute_all(
    session: Session, job: Job, needs: tuple[Need, ...], results: Results, leftover: list[Scratch]
) -> Results:
    """``results`` with the outcomes of ``needs``, run concurrently. A first run that
    ran nothing (a patch did not apply) cancels the rest: they are moot."""
    if len(needs) == 1:
        return results.with_outcome(needs[0].role, await _execute(session, job, needs[0], leftover))
    got: list[tuple[Need, Outcome]] = []

    async def one(need: Need, scope: anyio.CancelScope) -> None:
        out = await _execute(session, job, need, leftover)
        got.append((need, out))
        if need.role == "first" and out.run is None:
            scope.cancel()

    async with anyio.create_task_group() as tg:
        for need in needs:
            tg.start_soon(one, need, tg.cancel_scope)
    for need, out in got:
        results = results.with_outcome(need.role, out)
    return results


async def _execute(session: Session, job: Job, need: Need, leftover: list[Scratch]) -> Outcome:
    """One execution the judge asked for: the before-run's verdicts (cached, shared), the
    call's unpatched run (shared), or a run of its own in a fresh scratch root."""
    if need.role == "before":
        return await _before(session, job, leftover)
    if need.shared:
        out = await _unpatched(session, job, leftover)
    else:
        done = await run(session, job, patched=need.patched)
        leftover.append(done.scratch)
        out = done.outcome
    if need.role == "first":
        _log_first(job, out)
    return out


def _log_first(job: Job, out: Outcome) -> None:
    blog = log.bind(candidate=job.candidate.id)
    if out.refused is not None:
        blog.info("patch_refused", error=out.refused)
    elif out.oracle_refused is not None:
        blog.info("test_patch_refused", error=out.oracle_refused)
    elif out.run is not None:
        ev = out.run.evidence
        blog.info("executed", exit_code=ev.exit_code, timed_out=ev.timed_out, duration=round(ev.duration, 3))


async def _before(session: Session, job: Job, leftover: list[Scratch]) -> Outcome:
    """Per-test verdicts of the selection on the unpatched repo (cached, shared); with a
    ``test_patch``, on the unpatched repo with the oracle applied (SWE-bench's before).
    A refused oracle is shared within the call, never stored."""
    key = before_key(
        job.candidate,
        aexec=session.version,
        repo_hash=job.repo_hash,
        environment=job.declared,
        toolchain=job.tool.identity,
    )

    async def compute() -> Outcome:
        done = await _unpatched(session, job, leftover)
        if done.run is None:
            return done
        return Outcome(verdicts={t.nodeid: t.verdict for t in done.run.evidence.tests})

    out, _ = await session.befores.get(key, compute, store=lambda o: o.verdicts is not None)
    return out


async def _unpatched(session: Session, job: Job, leftover: list[Scratch]) -> Outcome:
    """The job's selection on its repo as it is, run once per call (§3.6): the before-run
    of every patched candidate and the first run of an unpatched one share it."""
    key = unpatched_key(
        job.candidate,
        job.runner,
        aexec=session.version,
        repo_hash=job.repo_hash,
        environment=job.declared,
        toolchain=job.tool.identity,
    )

    async def compute() -> Outcome:
        done = await run(session, job, patched=False)
        leftover.append(done.scratch)
        return done.outcome

    out, _ = await session.unpatched.get(key, compute)
    return out


def environment_broken(
    candidate: Candidate, classification: Classification, error: EnvBroken, aexec_version: str
) -> ExecutionObservation:
    """The ``env_broken`` observation of a candidate whose declared environment cannot be
    had (kind ``unsupported`` or ``build``, with uv's log tail): nothing of it ran."""
    obs = unobserved(
        ident=candidate.id,
        classification=classification,
        message=f"environment {error.kind}: {error.message.splitlines()[0]}",
        aexec_version=aexec_version,
    )
    fault = EnvFault(kind=error.kind, message=error.message, pristine_exit_code=None)
    obs = attrs.evolve(obs, flags=attrs.evolve(obs.flags, env_broken=True), env_fault=fault)
    return graded(obs, candidate)


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
