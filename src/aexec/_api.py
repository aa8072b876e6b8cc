"""The front door: ``observe`` and ``observe_many``.

Check every candidate, then hand them to an `Observer` (``aexec._pipeline``), which runs
the spec's stages over them. Without an observer of the caller's own, a shared one per
`Options` is used, so that warm interpreters serve later calls too; `aclose` gives its
resources back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Protocol

import attrs

from ._boundary.supervise import Supervisor
from ._errors import RequestError
from ._options import Options
from ._pipeline.observer import Observer
from ._pipeline.toolchain import resolve_python
from ._records import Candidate, ExecutionObservation
from ._stages import grade
from ._stages.classify import Classification, Runner, check

VERSION = "0.2.0"


def validate(candidate: Candidate) -> tuple[Classification, Runner]:
    """Check a candidate before anything runs; raises `RequestError` naming the field."""
    grade.check(candidate)
    # Graded without `tests`: the files its expected node ids name are the selection.
    candidate = attrs.evolve(candidate, tests=grade.selection(candidate))
    classification, runner = check(candidate)
    resolve_python(candidate.python)
    if candidate.repo is not None:
        if not os.path.isdir(candidate.repo):
            raise RequestError(f"repo: {candidate.repo!r} is not a directory")
        diffs = (candidate.patch or "") + (candidate.test_patch or "")
        for field, i, sel in grade.named(candidate) if candidate.runner == "pytest" else ():
            path = sel.split("::", 1)[0]
            if f"+++ b/{path}" not in diffs and not os.path.exists(os.path.join(candidate.repo, path)):
                raise RequestError(f"{field}[{i}]: {path!r} does not exist in repo {candidate.repo!r}")
    return classification, runner


def observer(options: Options | None = None, *, supervisor: Supervisor | None = None) -> Observer:
    """A new `Observer` (use it as ``async with aexec.observer(options) as o: ...``)."""
    return Observer(options, supervisor=supervisor, version=VERSION)


#: The shared observers of ``observe_many`` calls made without one, by their options.
_shared: dict[Options, Observer] = {}


async def aclose() -> None:
    """Close the shared observers (their warm interpreters, their bytecode stores).

    **Cancellation:** shielded; a later call starts afresh.
    """
    closing = list(_shared.values())
    _shared.clear()
    for o in closing:
        await o.aclose()


class Executor(Protocol):
    """Somewhere else to run ``observe_many`` (e.g. `aexec.RayExecutor`), same records out."""

    async def observe_many(
        self,
        candidates: Iterable[Candidate],
        *,
        limit: int | None = None,
        cache_dir: str | None = None,
        on_observation: Callable[[int, ExecutionObservation], None] | None = None,
    ) -> list[ExecutionObservation]: ...


async def observe(
    candidate: Candidate,
    *,
    cache_dir: str | None = None,
    options: Options | None = None,
    observer: Observer | None = None,
) -> ExecutionObservation:
    """Run one candidate under its declared boundary and return its observation.

    Raises `RequestError` (before anything runs) when the candidate is malformed; a
    candidate that fails is an observation, not an exception.

    **Cancellation:** cancelling the call kills every process of the run (the whole
    tree, in its PID namespace) and removes its scratch roots, in shielded scopes,
    then re-raises the cancellation. Nothing of the run outlives the call.
    """
    return (await observe_many([candidate], cache_dir=cache_dir, options=options, observer=observer))[0]


async def observe_many(
    candidates: Iterable[Candidate],
    *,
    limit: int | None = None,
    cache_dir: str | None = None,
    on_observation: Callable[[int, ExecutionObservation], None] | None = None,
    executor: Executor | None = None,
    options: Options | None = None,
    supervisor: Supervisor | None = None,
    observer: Observer | None = None,
) -> list[ExecutionObservation]:
    """Observe many candidates concurrently; the results are in input order.

    At most ``limit`` runs are under way at once (default: 4 per core), and of those at
    most one per core while busy: a run that sleeps or waits gives its core to the next
    (``aexec._boundary.admission``). An explicit ``limit`` below the core count caps both.
    Identical candidates (same code, environment and command) run once and share the
    observation, as do the FAIL_TO_PASS before-runs of candidates on one repo. With
    ``cache_dir``, observations persist across calls. ``on_observation(index, obs)`` is
    called as each one is assembled. Every candidate is checked before anything runs; a
    malformed one raises `RequestError` naming its index. An error inside aexec while
    observing one candidate yields an observation with ``verdict == "error"`` for it and
    leaves the others untouched.

    ``options`` (`Options`) say how aexec runs (``limit`` and ``cache_dir`` override
    theirs); ``supervisor`` replaces the one that runs each invocation (a test's fake,
    or a wrapper that counts); ``observer`` is an `Observer` of the caller's own. Without
    one, calls with equal options share an observer whose warm interpreters outlive the
    call (`aclose` stops them); with a ``supervisor``, the call gets an observer of its
    own, closed when it returns.

    **Cancellation:** cancelling the call kills every running candidate's process tree
    and removes every scratch root, in shielded scopes, then re-raises; observations
    already passed to ``on_observation`` stay valid.

    With an ``executor`` the candidates are observed there instead (each by this same
    local pipeline, wherever it runs).
    """
    base = options if options is not None else observer.options if observer is not None else Options()
    opts = attrs.evolve(
        base,
        limit=limit if limit is not None else base.limit,
        cache_dir=cache_dir if cache_dir is not None else base.cache_dir,
    )
    if executor is not None:
        return await executor.observe_many(
            candidates, limit=opts.limit, cache_dir=opts.cache_dir, on_observation=on_observation
        )
    items = list(candidates)
    checked = []
    for i, c in enumerate(items):
        try:
            checked.append(validate(c))
        except RequestError as e:
            raise RequestError(f"candidate {i} ({c.id!r}): {e}") from None
    if observer is not None:
        return await observer.observe_checked(items, checked, options=opts, on_observation=on_observation)
    if supervisor is not None:
        async with Observer(opts, supervisor=supervisor, version=VERSION) as own:
            return await own.observe_checked(items, checked, options=opts, on_observation=on_observation)
    # What an observer keeps between calls depends on these options only.
    kept = attrs.evolve(opts, limit=None, cache_dir=None, ablate=frozenset())
    shared = _shared.get(kept)
    if shared is None:
        shared = _shared[kept] = Observer(kept, version=VERSION)
    return await shared.observe_checked(items, checked, options=opts, on_observation=on_observation)
