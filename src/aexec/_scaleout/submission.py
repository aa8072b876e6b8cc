"""Scale-out: the driver's side, which submits candidates to Ray and collects them.

* **dedup** — identical candidates (same fields but ``id``, same repository content) are
  submitted once; the others share the observation with ``cache_hit`` set.
* **bounded submission** — at most ``max_in_flight`` tasks exist at once.
* **repositories once** — each repository is packed once (``aexec._scaleout.archive``)
  and ``ray.put`` once; tasks get a reference, fetched only by a node that has not
  unpacked it yet.
* **retries** — a task lost with its worker process or node is submitted again (at most
  ``max_retries`` times), and its observation says so (``flags.retried``). A candidate
  is never observed twice: a lost task has no result, and each index is filled once.
* **cancellation** — cancelling the call cancels every task in flight (``ray.cancel``)
  and waits, shielded, for them to end (at most ``CANCEL_WAIT_S``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import attrs

from .. import _serde
from .._log import get_logger
from .._pipeline.request import Checked
from .._records import Candidate, ExecutionObservation
from .._stages.assemble import unobserved
from .._stages.keys import submission_key
from .._types import DEFAULT_CPU_CORES, default_ram_mib
from .._version import VERSION
from .archive import pack_repo
from .worker import import_ray, remote_task

__all__ = ["submit_all"]

log = get_logger(__name__)

#: Tasks in flight per cluster CPU when ``max_in_flight`` is not given.
IN_FLIGHT_PER_CPU = 2
#: How long one ``ray.wait`` blocks a driver thread; bounds how late a cancel is seen.
WAIT_POLL_S = 0.2
#: After ``ray.cancel``, how long the driver waits for the remote aexec to kill its
#: candidates and remove their scratch roots before it re-raises anyway.
CANCEL_WAIT_S = 30.0


@attrs.define
class _Job:
    """One distinct candidate: the indices that share it, and its attempts so far."""

    key: str
    indices: list[int]
    attempts: int = 0
    lost: list[str] = attrs.Factory(list)


def _repo_paths(items: list[Candidate]) -> list[str]:
    return sorted({os.path.abspath(c.repo) for c in items if c.repo is not None})


def _resources(candidate: Candidate) -> dict[str, Any]:
    cores = candidate.policy.cpu_cores or DEFAULT_CPU_CORES
    ram_mib = candidate.policy.ram_mib or default_ram_mib(candidate.request_type)
    return {"num_cpus": float(cores), "memory": int(ram_mib) * 1024 * 1024}


def _retryable(ray: Any) -> tuple[type[BaseException], ...]:
    """What Ray raises when a task was lost with the machine, not failed by its code."""
    e = ray.exceptions
    return (
        e.WorkerCrashedError,
        e.NodeDiedError,
        e.LocalRayletDiedError,
        e.ObjectLostError,
        e.OutOfMemoryError,
    )


def _describe(error: BaseException, ray: Any) -> str:
    if isinstance(error, ray.exceptions.RayTaskError) and error.cause is not None:
        error = error.cause
    last = (str(error).strip().splitlines() or [""])[-1]
    return f"{type(error).__name__}: {last}" if last else type(error).__name__


def _collect(ray: Any, refs: list[Any], timeout: float) -> list[tuple[Any, Any, BaseException | None]]:
    """(ref, result, error) of every ref that is done, waiting at most ``timeout`` for one."""
    ready, rest = ray.wait(refs, num_returns=1, timeout=timeout)
    if ready and rest:
        more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
        ready += more
    out: list[tuple[Any, Any, BaseException | None]] = []
    for ref in ready:
        try:
            out.append((ref, ray.get(ref), None))
        except Exception as e:
            out.append((ref, None, e))
    return out


def _cancel_and_wait(ray: Any, refs: list[Any], wait_s: float) -> None:
    for ref in refs:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=False, recursive=True)
    if refs:
        with contextlib.suppress(Exception):
            _, left = ray.wait(refs, num_returns=len(refs), timeout=wait_s)
            if left:
                log.warning("ray_cancel_unconfirmed", tasks=len(left), waited_s=wait_s)


def _connect(ray: Any, address: str | None) -> None:
    if not ray.is_initialized():
        ray.init(address=address)
        log.info("ray_connected", address=address, resources=ray.cluster_resources())


async def submit_all(
    checked: list[Checked],
    *,
    address: str | None,
    cache_dir: str | None,
    max_in_flight: int | None,
    max_retries: int,
    on_observation: Callable[[int, ExecutionObservation], None] | None,
    node_cache: str | None,
) -> list[ExecutionObservation]:
    """Observe ``checked`` candidates on the Ray cluster at ``address``, in input order
    (`aexec.RayExecutor` says what it guarantees)."""
    items = [c.candidate for c in checked]
    results: list[ExecutionObservation | None] = [None] * len(items)
    if not items:
        return []
    ray = import_ray()
    _connect(ray, address)
    if max_in_flight is None:
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        max_in_flight = max(1, int(cpus * IN_FLIGHT_PER_CPU))

    # Repositories: one archive per distinct tree, in the object store once.
    repo_keys: dict[str, str] = {}
    archives: dict[str, Any] = {}
    for path in _repo_paths(items):
        key, data = await anyio.to_thread.run_sync(pack_repo, path)
        repo_keys[path] = key
        if key not in archives:
            archives[key] = await anyio.to_thread.run_sync(ray.put, data)
            log.debug("ray_repo_put", repo=path, repo_key=key[:12], bytes=len(data))

    def repo_key_of(c: Candidate) -> str | None:
        return None if c.repo is None else repo_keys[os.path.abspath(c.repo)]

    jobs: dict[str, _Job] = {}
    for i, c in enumerate(items):
        key = submission_key(attrs.asdict(c, recurse=True), repo_key_of(c), aexec=VERSION)
        jobs.setdefault(key, _Job(key, [])).indices.append(i)
    queue = deque(jobs.values())
    pending: dict[Any, _Job] = {}
    retryable = _retryable(ray)
    remote = remote_task(ray)

    def submit(job: _Job) -> None:
        c = items[job.indices[0]]
        rk = repo_key_of(c)
        job.attempts += 1
        ref = remote.options(name=f"aexec:{c.id}", **_resources(c)).remote(
            c, None if rk is None else [archives[rk]], rk, cache_dir, VERSION, sys.executable, node_cache
        )
        pending[ref] = job
        log.debug(
            "ray_submitted", candidate=c.id, attempt=job.attempts, in_flight=len(pending), job=job.key[:12]
        )

    def deliver(job: _Job, obs: ExecutionObservation) -> None:
        first = job.indices[0]
        for i in job.indices:
            got = obs if i == first else attrs.evolve(obs, id=items[i].id, cache_hit=True)
            results[i] = got
            if on_observation is not None:
                on_observation(i, got)

    def finish(job: _Job, payload: Any, error: BaseException | None) -> None:
        first = job.indices[0]
        c = items[first]
        if error is None:
            obs = _serde.structure(payload["observation"])
            if job.attempts > 1:
                obs = attrs.evolve(obs, flags=attrs.evolve(obs.flags, retried=True))
            log.debug(
                "ray_observed",
                candidate=c.id,
                node=payload["node"],
                worker_pid=payload["worker_pid"],
                unpacked=payload["unpacked"],
                repo_key=repo_key_of(c),
                attempt=job.attempts,
                verdict=obs.verdict,
            )
            deliver(job, obs)
            return
        reason = _describe(error, ray)
        if isinstance(error, retryable) and job.attempts <= max_retries:
            job.lost.append(reason)
            log.warning("ray_retry", candidate=c.id, attempt=job.attempts, error=reason)
            queue.appendleft(job)
            return
        if isinstance(error, retryable):
            message = f"lost with its Ray worker {job.attempts} times: {'; '.join([*job.lost, reason])}"
        else:
            message = f"the Ray task failed: {reason}"
        log.error("ray_unobserved", candidate=c.id, error=message)
        obs = unobserved(
            ident=c.id, classification=checked[first].classification, message=message, aexec_version=VERSION
        )
        if job.attempts > 1:
            obs = attrs.evolve(obs, flags=attrs.evolve(obs.flags, retried=True))
        deliver(job, obs)

    try:
        while queue or pending:
            while queue and len(pending) < max_in_flight:
                submit(queue.popleft())
            done = await anyio.to_thread.run_sync(_collect, ray, list(pending), WAIT_POLL_S)
            for ref, payload, error in done:
                finish(pending.pop(ref), payload, error)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_cancel_and_wait, ray, list(pending), CANCEL_WAIT_S)
        raise
    out = [r for r in results if r is not None]
    assert len(out) == len(items), "an observation was lost"
    return out
