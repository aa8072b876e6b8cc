"""``discriminate``: 2+ candidates of one task, grouped by what they were seen to do.

The spec's ``discriminate → diagnostic_probe`` row (§3.1) and its one learned step (§4)::

    observe_many(candidates)                    every candidate run, as by `observe`
    → group by behaviour                        identical verdict, class and per-test verdicts
    → fire the probe step?                      only if every candidate is a `discriminate`
                                                request (``probe_gated``), a prober is given,
                                                and the suite cannot tell them apart
    → one call → ≤ 8 schema-checked probes      any parse failure: no probe, no second call
    → each probe run on each candidate          a `probe` request under the same isolation
    → probe evidence, regroup                   never a test result, never a pass

Grouping is deterministic: groups are ordered by their first member, members by input
order. Probe outcomes split groups; they never change a verdict or ``test_results``
(spec §8 invariant 7).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from .._api import observe_many
from .._errors import RequestError
from .._log import get_logger
from .._records import Candidate, ExecutionObservation, Policy
from .._types import FailureClass, TestVerdict, Verdict
from .probe import (
    PROBE_MAX_COMPLETION_TOKENS,
    PROBE_PROMPT_ARTIFACT_CHARS,
    PROBE_PROMPT_TESTS,
    PROBE_STDOUT_CHARS,
    PROBE_TEMPERATURE,
    Prober,
    ProbeSpec,
    bounded,
    parse_probes,
    probe_messages,
)

log = get_logger(__name__)

__all__ = ["BehaviourGroup", "Discrimination", "ProbeStep", "discriminate", "task_key"]


@attrs.frozen
class BehaviourGroup:
    """Candidates that behaved identically: same verdict, class, per-test verdicts, probes."""

    #: Indexes into the candidates, in input order.
    members: tuple[int, ...]
    ids: tuple[str | int | None, ...]
    verdict: Verdict
    failure_class: FailureClass | None
    #: Tests every member passed.
    passed: tuple[str, ...]
    #: Tests every member did not pass, with the verdict they got.
    not_passed: tuple[tuple[str, TestVerdict], ...]
    #: ``(probe_id, outcome)`` per probe run: ``"ok"`` or the failure class.
    probes: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class ProbeStep:
    """What the one learned step (spec §4) did, and why."""

    #: Every candidate is a `discriminate` request (classification set ``probe_gated``).
    armed: bool
    #: ``adequate`` (the suite tells the candidates apart), ``no_suite``, ``all_pass``,
    #: ``all_fail_identically`` or ``identical`` (one group of some other verdict).
    oracle: str
    #: The model was called (at most once).
    fired: bool
    calls: int
    #: One line: why it did not fire, or what came of the call.
    outcome: str
    #: The probes that were accepted and run (empty unless the answer passed the schema).
    probes: tuple[ProbeSpec, ...] = ()


@attrs.frozen
class Discrimination:
    """The result of `discriminate`: behaviour groups, who passed what, every observation."""

    groups: tuple[BehaviourGroup, ...]
    #: ``(test, indexes of the candidates that passed it)``, by test name.
    passed_by: tuple[tuple[str, tuple[int, ...]], ...]
    #: One per candidate, in input order; probe results are in their ``probe_evidence``.
    observations: tuple[ExecutionObservation, ...]
    probe: ProbeStep
    #: The ``property`` the caller asked about (the question the probes were to settle).
    question: str | None = None

    @property
    def discriminated(self) -> bool:
        """More than one behaviour was seen."""
        return len(self.groups) > 1


def task_key(candidate: Candidate) -> tuple[str | None, tuple[str, ...] | None]:
    """What makes candidates "of one task": the same repository and test selection."""
    repo = None if candidate.repo is None else os.path.normpath(os.path.abspath(candidate.repo))
    return repo, candidate.tests


def _check(items: Sequence[Candidate]) -> None:
    if len(items) < 2:
        raise RequestError(f"discriminate needs 2 or more candidates of one task, got {len(items)}")
    first = task_key(items[0])
    for i, c in enumerate(items[1:], start=1):
        key = task_key(c)
        if key[0] != first[0]:
            raise RequestError(
                f"candidate {i} ({c.id!r}): repo {c.repo!r} differs from candidate 0's {items[0].repo!r};"
                " all candidates must be of one task"
            )
        if key[1] != first[1]:
            raise RequestError(
                f"candidate {i} ({c.id!r}): tests {list(c.tests or [])} differ from candidate 0's"
                f" {list(items[0].tests or [])}; all candidates must be of one task"
            )


def _outcome(evidence: dict[str, Any]) -> tuple[str, str, str]:
    return (str(evidence["probe_id"]), str(evidence["outcome"]), str(evidence["stdout"]))


def _signature(index: int, obs: ExecutionObservation) -> tuple[Any, ...]:
    vector = tuple(sorted((t.test, t.verdict) for t in obs.test_results))
    klass = obs.failure.failure_class if obs.failure is not None else None
    probes = tuple(_outcome(e) for e in obs.probe_evidence)
    # aexec's own failure to observe is no behaviour: such a candidate stands alone.
    alone = index if obs.verdict == "error" else None
    return (obs.verdict, klass, vector, probes, alone)


def group(observations: Sequence[ExecutionObservation]) -> tuple[BehaviourGroup, ...]:
    """Deterministic behavioural clustering: identical signatures, first-member order."""
    buckets: dict[tuple[Any, ...], list[int]] = {}
    for i, obs in enumerate(observations):
        buckets.setdefault(_signature(i, obs), []).append(i)
    out = []
    for members in buckets.values():
        head = observations[members[0]]
        out.append(
            BehaviourGroup(
                members=tuple(members),
                ids=tuple(observations[m].id for m in members),
                verdict=head.verdict,
                failure_class=head.failure.failure_class if head.failure is not None else None,
                passed=tuple(sorted(t.test for t in head.test_results if t.verdict == "passed")),
                not_passed=tuple(
                    sorted((t.test, t.verdict) for t in head.test_results if t.verdict != "passed")
                ),
                probes=tuple((str(e["probe_id"]), str(e["outcome"])) for e in head.probe_evidence),
            )
        )
    return tuple(out)


def _passed_by(observations: Sequence[ExecutionObservation]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    tests = sorted({t.test for o in observations for t in o.test_results})
    return tuple(
        (
            name,
            tuple(
                i
                for i, o in enumerate(observations)
                if any(t.test == name and t.verdict == "passed" for t in o.test_results)
            ),
        )
        for name in tests
    )


def _oracle(observations: Sequence[ExecutionObservation], groups: Sequence[BehaviourGroup]) -> str:
    if not any(t.verdict != "skipped" for o in observations for t in o.test_results):
        return "no_suite"
    if len(groups) > 1:
        return "adequate"
    verdict = groups[0].verdict
    return {"pass": "all_pass", "fail": "all_fail_identically"}.get(verdict, "identical")


def _describe(i: int, c: Candidate) -> dict[str, Any]:
    out: dict[str, Any] = {"candidate": c.id if c.id is not None else i}
    if c.patch is not None:
        out["patch"] = bounded(c.patch, PROBE_PROMPT_ARTIFACT_CHARS)
    if c.code is not None:
        out["code"] = bounded(c.code, PROBE_PROMPT_ARTIFACT_CHARS)
    if c.command is not None:
        out["command"] = list(c.command)
    return out


def _existing_tests(observations: Iterable[ExecutionObservation]) -> list[str]:
    names = sorted({t.test for o in observations for t in o.test_results})
    shown = names[:PROBE_PROMPT_TESTS]
    if len(names) > len(shown):
        shown.append(f"... and {len(names) - len(shown)} more")
    return shown


def probe_candidate(index: int, candidate: Candidate, probe: ProbeSpec) -> Candidate:
    """The `probe` request that runs ``probe`` against ``candidate``: its repo and patch,
    its interpreter and caps, the probe as the snippet (after the candidate's own snippet,
    if it is one). The mode's own deadline (30 s) applies."""
    program = probe.program
    if candidate.code is not None:
        program = f"{candidate.code}\n\n# --- aexec diagnostic probe {probe.probe_id} ---\n{probe.program}"
    ident = candidate.id if candidate.id is not None else index
    return Candidate(
        "probe",
        "probe_program",
        id=f"{ident}#probe:{probe.probe_id}",
        code=program,
        repo=candidate.repo,
        patch=candidate.patch,
        python=candidate.python,
        policy=Policy(ram_mib=candidate.policy.ram_mib, cpu_cores=candidate.policy.cpu_cores),
    )


def evidence(probe: ProbeSpec, obs: ExecutionObservation) -> dict[str, Any]:
    """One probe's result as probe evidence: a hypothesis, never an authoritative test."""
    if obs.verdict == "error":
        outcome = "error"
    else:
        outcome = "ok" if obs.failure is None else obs.failure.failure_class
    return {
        "probe_id": probe.probe_id,
        "program": probe.program,
        "expected": probe.expected,
        "authoritative": False,
        "outcome": outcome,
        "verdict": obs.verdict,
        "failure_class": None if obs.failure is None else obs.failure.failure_class,
        "exception": obs.exception,
        "exit_code": obs.exit_code,
        "timed_out": obs.timed_out,
        "stdout": obs.stdout[:PROBE_STDOUT_CHARS],
        "duration": obs.duration,
        "artifact_version": obs.artifact_version,
        "error": obs.error,
    }


async def discriminate(
    candidates: Iterable[Candidate],
    *,
    property: str | None = None,
    prober: Prober | None = None,
    cache_dir: str | None = None,
    limit: int | None = None,
) -> Discrimination:
    """Observe 2+ candidates of one task and group them by observed behaviour.

    Candidates are "of one task" when they share ``repo`` and ``tests``; otherwise, or
    with fewer than two, `RequestError` is raised before anything runs. ``property`` is
    the behaviour the suite leaves open, for the probe prompt. ``prober`` is the one model
    client (`OpenAIProber`, `ScriptedProber`); without it the step is absent and the
    result is fully deterministic. With it, the model is called at most once, and only
    when every candidate is a ``discriminate`` request and the suite cannot tell them
    apart (all pass, all fail identically, or no test ran). Probe results land in each
    observation's ``probe_evidence``; verdicts and ``test_results`` are never changed.

    **Cancellation:** cancelling the call cancels the model request (if one is in
    flight) and kills every running candidate's and probe's process tree, removing their
    scratch roots in shielded scopes, then re-raises. Nothing is retried.
    """
    items = list(candidates)
    _check(items)
    observations = await observe_many(items, limit=limit, cache_dir=cache_dir)
    groups = group(observations)
    oracle = _oracle(observations, groups)
    armed = all(o.probe_gated for o in observations)
    step = ProbeStep(armed=armed, oracle=oracle, fired=False, calls=0, outcome="")
    unarmed = next((i for i, o in enumerate(observations) if not o.probe_gated), None)
    broken = next((i for i, o in enumerate(observations) if o.verdict == "error"), None)
    if prober is None:
        step = attrs.evolve(step, outcome="absent: no probe client configured")
    elif unarmed is not None:
        c = items[unarmed]
        step = attrs.evolve(
            step,
            outcome=f"not armed: candidate {unarmed} ({c.id!r}) is a {c.request_type} request;"
            " only discriminate requests arm the probe step",
        )
    elif broken is not None:
        who = f"candidate {broken} ({items[broken].id!r})"
        why = (
            f"the environment of {who} is broken"
            if observations[broken].flags.env_broken
            else f"aexec could not observe {who}"
        )
        step = attrs.evolve(step, outcome=f"not fired: {why}")
    elif oracle == "adequate":
        step = attrs.evolve(
            step, outcome=f"not needed: the suite tells the candidates apart ({len(groups)} groups)"
        )
    else:
        step = await _fire(items, observations, property, prober, step)
        if step.probes:
            probe_runs = [probe_candidate(i, c, p) for i, c in enumerate(items) for p in step.probes]
            seen = await observe_many(probe_runs, limit=limit, cache_dir=cache_dir)
            n = len(step.probes)
            observations = [
                attrs.evolve(
                    obs,
                    probe_evidence=obs.probe_evidence
                    + tuple(evidence(p, seen[i * n + j]) for j, p in enumerate(step.probes)),
                )
                for i, obs in enumerate(observations)
            ]
            groups = group(observations)
            step = attrs.evolve(
                step,
                outcome=f"{step.outcome}; {n} probes run on {len(items)} candidates → {len(groups)} groups",
            )
    log.info(
        "discriminated",
        candidates=len(items),
        groups=len(groups),
        oracle=oracle,
        probe_fired=step.fired,
        probes=len(step.probes),
    )
    return Discrimination(
        groups=groups,
        passed_by=_passed_by(observations),
        observations=tuple(observations),
        probe=step,
        question=property,
    )


async def _fire(
    items: Sequence[Candidate],
    observations: Sequence[ExecutionObservation],
    prop: str | None,
    prober: Prober,
    step: ProbeStep,
) -> ProbeStep:
    """The one call. Whatever goes wrong, the answer is "no probe" — never a second call."""
    why = {
        "no_suite": "no candidate ran a test",
        "all_pass": "every candidate passes the suite identically",
        "all_fail_identically": "every candidate fails the suite identically",
    }.get(step.oracle, "every candidate behaves identically on the suite")
    messages = probe_messages(
        [_describe(i, c) for i, c in enumerate(items)], prop, _existing_tests(observations)
    )
    log.info("probe_call", reason=why)
    try:
        text = await prober.complete(
            messages, temperature=PROBE_TEMPERATURE, max_completion_tokens=PROBE_MAX_COMPLETION_TOKENS
        )
    except Exception as e:  # a failed call is "no probe"; cancellation is not caught
        log.warning("probe_call_failed", error=str(e))
        return attrs.evolve(step, fired=True, calls=1, outcome=f"fired ({why}); no probe: call failed: {e}")
    probes, problem = parse_probes(text)
    if problem is not None:
        log.warning("probe_answer_rejected", reason=problem)
        return attrs.evolve(step, fired=True, calls=1, outcome=f"fired ({why}); no probe: {problem}")
    return attrs.evolve(step, fired=True, calls=1, outcome=f"fired ({why})", probes=probes)
