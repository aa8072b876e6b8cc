"""The `Observer`: what outlives one call, and the loop that observes a call's candidates.

An observer owns the process-level state a harness wants kept warm between calls —
the isolation probe, the interpreters probed, the warm fork servers, the compiled
bytecode store without a cache dir — and gives it back with `Observer.aclose` (or
``async with``). Nothing of it is a module global: two observers share nothing.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import anyio
import attrs

from .._boundary.isolation import Isolation, detect_isolation
from .._boundary.leftovers import default_registry, register, sweep_cgroups, sweep_leftovers
from .._boundary.supervise import LocalSupervisor, Supervisor
from .._environments.spec import EnvBroken
from .._log import get_logger
from .._options import Options
from .._records import Candidate, Environment, ExecutionObservation
from .._stages.plan import Scratch
from .._version import VERSION
from .cache import in_thread
from .request import Checked, selections, validate_all
from .run import remove_scratches
from .session import WAITING_RUNS_PER_CORE, Session
from .small import remove_small
from .warm import Warm
from .witness import environment_broken, observe_one, unobservable

log = get_logger(__name__)

#: Entries an observer's memos of declared environments keep at most (`Observer.session`).
MEMOS = 4096


class Executor(Protocol):
    """Somewhere else to run ``observe_many`` (e.g. `aexec.RayExecutor`), same records out.

    It checks the candidates itself (each raises `RequestError` naming its index, before
    anything runs), as ``observe_many`` does.
    """

    async def observe_many(
        self,
        candidates: Iterable[Candidate],
        *,
        limit: int | None = None,
        cache_dir: str | None = None,
        on_observation: Callable[[int, ExecutionObservation], None] | None = None,
    ) -> list[ExecutionObservation]: ...


class Observer:
    """Observes candidates under `Options`; see the module docstring.

    **Cancellation:** `aclose` is shielded: it stops every fork server (runs they started
    die with them) and removes the observer's own bytecode store.
    """

    def __init__(
        self,
        options: Options | None = None,
        *,
        supervisor: Supervisor | None = None,
        version: str = VERSION,
    ) -> None:
        self.options = options if options is not None else Options()
        self.supervisor: Supervisor = supervisor if supervisor is not None else LocalSupervisor()
        self.version = version
        #: The interpreters, fork servers, bytecode store and /etc its sessions share.
        self.warm = Warm(self.options, version)
        self._isolation: Isolation | None = None
        self._swept: set[str] = set()
        #: What its calls' jobs declare, by what `declare` is a function of, and the
        #: isolation's record per view (`Session.job`): pure, so made once per observer,
        #: not per call (a server's every request is a call). Emptied past `MEMOS`.
        self._declared: dict[tuple[Any, ...], tuple[Environment, Any]] = {}
        self._enforced: dict[tuple[tuple[str, ...], str], dict[str, str]] = {}

    async def __aenter__(self) -> Observer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the fork servers and remove what the observer made for itself."""
        await self.warm.aclose()

    async def isolation(self, scratch_base: str) -> Isolation:
        """What the kernel allows, probed once; each new scratch base (and, at the probe,
        the cgroup tree) is first swept of what dead aexec processes left there."""
        # No lock: an observer may serve calls on different event loops (and backends);
        # two calls racing here each probe, which is harmless.
        if scratch_base not in self._swept:
            self._swept.add(scratch_base)
            registry = self.options.registry or default_registry()
            await in_thread(sweep_leftovers, registry, scratch_base)
            try:
                await in_thread(register, registry, scratch_base)
            except OSError as e:  # an unwritable registry: sweeping after a kill is on TMPDIR alone
                log.warning("registry_unwritable", registry=registry, error=str(e))
        if self._isolation is None:
            found = await in_thread(
                lambda: detect_isolation(namespaces=self.options.namespaces, cgroups=self.options.cgroups)
            )
            if found.cgroups is not None:
                await in_thread(sweep_cgroups, found.cgroups)
            self._isolation = found
        return self._isolation

    async def session(self, opts: Options, selected: dict[str, tuple[str, ...] | None]) -> Session:
        """A `Session` for one call under ``opts`` (its admission: ``opts.limit`` runs at
        once, default 4 per core), on this observer's isolation and warm state."""
        cores = os.cpu_count() or 1
        slots = opts.limit if opts.limit is not None else WAITING_RUNS_PER_CORE * cores
        scratch_base = opts.scratch_dir or tempfile.gettempdir()
        isolation = await self.isolation(scratch_base)
        for memo in (self._declared, self._enforced):
            if len(memo) > MEMOS:  # a client's every timeout its own entry: bounded
                memo.clear()
        return Session(
            self.warm,
            opts,
            scratch_base,
            isolation,
            self.supervisor,
            limit=slots,
            cpu_slots=cores,
            selections=selected,
            declared=self._declared,
            enforced=self._enforced,
        )

    async def observe_many(
        self,
        candidates: Iterable[Candidate],
        *,
        limit: int | None = None,
        cache_dir: str | None = None,
        on_observation: Callable[[int, ExecutionObservation], None] | None = None,
        executor: Executor | None = None,
        options: Options | None = None,
    ) -> list[ExecutionObservation]:
        """Observe ``candidates`` concurrently; the results are in input order.

        Every candidate is checked (`validate`) before anything runs; a malformed one
        raises `RequestError` naming its index. ``options`` are the call's (default: the
        observer's own): their ``limit``, ``cache_dir`` and ``ablate`` are the call's, the
        rest the observer's; ``limit`` and ``cache_dir`` here override theirs. With an
        ``executor``, the candidates are observed there instead (it checks them itself).
        ``aexec.observe_many`` documents the rest: it is this method on a shared observer.
        """
        base = self.options if options is None else options
        opts = base  # a new record only for an override (its converters cost ~20 µs)
        if limit is not None or cache_dir is not None:
            opts = attrs.evolve(
                base,
                limit=limit if limit is not None else base.limit,
                cache_dir=cache_dir if cache_dir is not None else base.cache_dir,
            )
        if executor is not None:
            return await executor.observe_many(
                candidates, limit=opts.limit, cache_dir=opts.cache_dir, on_observation=on_observation
            )
        # Each entry is let go (set to None) once it is taken.
        items: list[Checked | None] = list(validate_all(candidates))
        session = await self.session(
            opts, selections(c.candidate for c in items if c is not None and c.runner == "pytest")
        )
        slots = session.slots.limit
        results: list[ExecutionObservation | None] = [None] * len(items)

        async def observe_at(i: int, leftover: list[Scratch]) -> None:
            """Candidate ``i`` observed and delivered; its scratch roots left in
            ``leftover``, for the caller to remove (after the delivery: issue 20)."""
            checked = items[i]
            assert checked is not None  # each index is taken once
            # Observed candidates are let go as they are done: a call of 100,000
            # holds each only until its observation is made (issue 20, goal 4).
            items[i] = None
            try:
                job = await session.job(i, checked)
                obs = await observe_one(session, job, leftover)
            except EnvBroken as e:  # the environment's fault, never the candidate's
                obs = environment_broken(checked.candidate, checked.classification, e, self.version)
                log.warning("environment_broken", candidate=checked.candidate.id, kind=e.kind)
            except Exception as e:
                obs = unobservable(checked.candidate, checked.classification, e, self.version)
                log.error("observation_failed", candidate=checked.candidate.id, error=obs.error)
            results[i] = obs
            if on_observation is not None:
                on_observation(i, obs)

        if len(items) == 1 and on_observation is None:
            # One candidate, no callback (`observe`; each request of a server): observed
            # in the caller's task, without the workers' stream and task group, and its
            # roots removed here if small, else in one worker-thread hop, not handed to
            # the remover and waited for (issue 42). A callback's error stays in a
            # group, as for many.
            leftover: list[Scratch] = []
            try:
                await observe_at(0, leftover)
            finally:
                remove_small(leftover)
                await remove_scratches(leftover)
            return [r for r in results if r is not None]

        send, receive = anyio.create_memory_object_stream[int](max_buffer_size=len(items) or 1)
        for i in range(len(items)):
            send.send_nowait(i)
        send.close()
        remover, ticket = self.warm.remover, 0

        async def worker() -> None:
            # A candidate's scratch roots are removed after its observation is
            # delivered, not on its way (issue 20): latency, not less cleanup. Small ones
            # here; the others are handed to the remover's thread (no thread hop per
            # candidate), and the call waits for them all at its end.
            nonlocal ticket
            leftover: list[Scratch] = []
            try:
                async for i in receive:
                    try:
                        await observe_at(i, leftover)
                    finally:
                        remove_small(leftover)
                        ticket = remover.put(leftover) if leftover else ticket
            finally:
                ticket = remover.put(leftover) if leftover else ticket

        try:
            with receive:
                async with anyio.create_task_group() as tg:
                    for _ in range(min(len(items), 4 * slots + 4)):
                        tg.start_soon(worker)
        finally:
            await remover.wait(ticket)
        return [r for r in results if r is not None]
