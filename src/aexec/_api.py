"""The front door: ``observe`` and ``observe_many``, thin wrappers over an `Observer`.

The `Observer` (``aexec._pipeline``) is the client: it checks the candidates and runs
the spec's stages over them. Without an observer of the caller's own, a shared one per
`Options` is used, so that warm interpreters serve later calls too; `aclose` gives its
resources back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import attrs

from ._boundary.supervise import Supervisor
from ._environments.spec import EnvSpec
from ._options import Options
from ._pipeline.observer import Executor, Observer
from ._pipeline.request import validate
from ._pipeline.workspace import Workspace
from ._records import Candidate, ExecutionObservation, Policy
from ._version import VERSION

__all__ = [
    "VERSION",
    "Executor",
    "Workspace",
    "aclose",
    "observe",
    "observe_many",
    "observer",
    "session",
    "validate",
]


def observer(options: Options | None = None, *, supervisor: Supervisor | None = None) -> Observer:
    """A new `Observer` (use it as ``async with aexec.observer(options) as o: ...``)."""
    return Observer(options, supervisor=supervisor)


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


def _shared_observer(options: Options | None) -> Observer:
    opts = options if options is not None else Options()
    # What an observer keeps between calls depends on these options only.
    kept = attrs.evolve(opts, limit=None, cache_dir=None, ablate=frozenset())
    return _shared.get(kept) or _shared.setdefault(kept, Observer(kept))


def session(
    *,
    repo: str | None = None,
    python: str | None = None,
    environment: EnvSpec | None = None,
    policy: Policy | None = None,
    options: Options | None = None,
    observer: Observer | None = None,
    stream_cap: int | None = None,
) -> Workspace:
    """A workspace an agent works in: ``async with aexec.session(repo=...) as s:``.

    The workspace is a scratch copy of ``repo`` (empty without one) that lives until the
    block ends. ``await s.exec(argv)`` runs one command in it under the whole boundary
    and returns its observation; ``s.write_file``, ``s.read_file`` stay inside it;
    ``s.diff()`` is its patch against ``repo``; ``s.grade(fail_to_pass=...,
    pass_to_pass=..., test_patch=...)`` observes that patch in a fresh copy, with every
    guard. ``python`` or ``environment`` (`EnvSpec`) choose the interpreter, ``policy``
    each command's caps (``exec(timeout=...)`` overrides its timeout), ``stream_cap``
    the bytes kept of each output stream. See ``docs/sessions.md``.

    **Cancellation:** a cancelled ``exec`` kills its command's tree; leaving the block
    removes the workspace, shielded.
    """
    return Workspace(
        observer if observer is not None else _shared_observer(options),
        repo=repo,
        python=python,
        environment=environment,
        policy=policy,
        stream_cap=stream_cap,
    )


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
    own, closed when it returns. Either way, this is `Observer.observe_many`.

    **Cancellation:** cancelling the call kills every running candidate's process tree
    and removes every scratch root, in shielded scopes, then re-raises; observations
    already passed to ``on_observation`` stay valid.

    With an ``executor`` (e.g. ``aexec.RayExecutor()``, the one door to scale out) the
    candidates are observed there instead (each by this same local pipeline, wherever it
    runs).
    """
    async with contextlib.AsyncExitStack() as own:
        if observer is None:
            opts = options = options if options is not None else Options()
            if supervisor is not None:
                observer = await own.enter_async_context(Observer(opts, supervisor=supervisor))
            else:
                observer = _shared_observer(opts)
        return await observer.observe_many(
            candidates,
            limit=limit,
            cache_dir=cache_dir,
            on_observation=on_observation,
            executor=executor,
            options=options,
        )
