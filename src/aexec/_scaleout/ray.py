"""Scale-out: ``observe_many(..., executor=RayExecutor())`` on a Ray cluster, with the
same observations.

Ray only places the work. Every distinct candidate becomes one Ray task whose resource
request is the candidate's declared caps (``num_cpus`` = its CPU cap, ``memory`` = its
RAM cap), and inside that task aexec's **local** pipeline observes it — the supervisor,
the whole-tree kill, the caps and the network deny are aexec's, exactly as on one
machine; none of it is delegated to Ray's task cancellation. The observation comes back
as the contract's JSON (``_serde``), so what the driver returns is the same record a
local run returns.

What the driver does around that:

* **dedup** — identical candidates (same fields but ``id``, same repository content) are
  submitted once; the others share the observation with ``cache_hit`` set, as
  ``observe_many`` does locally. ``cache_dir`` is handed to every task: on shared storage
  it is one behavioural cache for the whole cluster, on a local path one per node.
* **bounded submission** — at most ``max_in_flight`` tasks exist at once (default: twice
  the cluster's CPUs), so a million candidates never become a million tasks.
* **repositories once per node** — each repository is packed once into a
  content-addressed archive, ``ray.put`` once, and unpacked once per node into
  ``node_cache`` (a path on the workers; default ``<the node's tmp>/aexec-ray-repos``;
  the CLI takes it from ``$AEXEC_RAY_NODE_CACHE``); candidates run on that
  node-local copy. Nothing in an observation names the repository's path, so the
  records stay comparable.
* **retries** — a task lost with its worker process or node is submitted again (at most
  ``max_retries`` times), and its observation says so (``flags.retried``). A candidate
  is never observed twice: a lost task has no result, and each index is filled once.
* **cancellation** — ``ray.cancel`` reaches the task as an interrupt; the task cancels
  its anyio scope, so aexec kills the candidate's process tree and removes its scratch
  roots before the task ends.

``import aexec`` never imports Ray; it is imported inside functions, when a call is made.
This module is the door (`RayExecutor`); behind it are ``archive`` (packing and
unpacking repositories), ``worker`` (the task) and ``submission`` (the driver's loop).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from .._api import observe_many
from .._errors import RequestError
from .._pipeline.request import validate_all
from .._records import Candidate, ExecutionObservation
from .submission import submit_all

__all__ = ["RayExecutor", "observe_many_ray"]

#: How many times a task lost with its worker or node is submitted again.
DEFAULT_RAY_RETRIES = 3
#: The CLI's ``node_cache`` (only the CLI reads it, on the driver).
NODE_CACHE_ENV = "AEXEC_RAY_NODE_CACHE"


@attrs.frozen
class RayExecutor:
    """Where ``observe_many(..., executor=RayExecutor(...))`` sends its candidates: the one
    door to a Ray cluster."""

    address: str | None = None
    max_in_flight: int | None = None
    max_retries: int = DEFAULT_RAY_RETRIES
    #: Where each node unpacks repository archives (a path on the workers; None: the
    #: node's ``<tmp>/aexec-ray-repos``).
    node_cache: str | None = None

    async def observe_many(
        self,
        candidates: Iterable[Candidate],
        *,
        limit: int | None = None,
        cache_dir: str | None = None,
        on_observation: Callable[[int, ExecutionObservation], None] | None = None,
    ) -> list[ExecutionObservation]:
        """``observe_many`` on a Ray cluster: the same observations, in input order.

        ``limit``, when given, bounds the tasks in flight (and so the candidates running at
        once) unless ``max_in_flight`` is set here.

        Connects with ``ray.init(address=address)`` — blocking the event loop while Ray
        starts or connects — unless this process is already connected (then ``address`` is
        not used); ``"ray://head:10001"`` reaches a remote
        cluster (e.g. KubeRay) through Ray Client, ``None`` follows ``RAY_ADDRESS`` or starts a
        local Ray. Every worker needs the same aexec version (checked), ``git``, and any
        interpreter a candidate names in ``python``. ``cache_dir`` is a path on the workers;
        so is ``node_cache``, where each node unpacks repository archives (default: the
        node's ``<tmp>/aexec-ray-repos``).

        Every candidate is checked on the driver before anything is submitted; a malformed
        one raises `RequestError` naming its index. Identical candidates are observed once.
        At most ``max_in_flight`` tasks are submitted at once (default: twice the cluster's
        CPUs). A task lost with its worker or node is run again, up to ``max_retries``
        times, and its observation has ``flags.retried``; past that, or when the task itself
        fails (e.g. aexec is missing on the worker), the candidate's observation has
        ``verdict == "error"`` saying why. ``on_observation(index, obs)`` is called once per
        index as observations arrive.

        **Cancellation:** cancelling the call cancels every submitted task (``ray.cancel``,
        not forced); inside each, aexec's own cancel scope kills the candidate's whole
        process tree and removes its scratch roots. The call waits, shielded, until those
        tasks have ended (at most ``CANCEL_WAIT_S``), then re-raises. Observations already
        passed to ``on_observation`` stay valid.
        """
        checked = validate_all(candidates)
        max_in_flight = self.max_in_flight if self.max_in_flight is not None else limit
        if max_in_flight is not None and max_in_flight < 1:
            raise RequestError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if self.max_retries < 0:
            raise RequestError(f"max_retries must be >= 0, got {self.max_retries}")
        return await submit_all(
            checked,
            address=self.address,
            cache_dir=cache_dir,
            max_in_flight=max_in_flight,
            max_retries=self.max_retries,
            on_observation=on_observation,
            node_cache=self.node_cache,
        )


async def observe_many_ray(
    candidates: Iterable[Candidate],
    *,
    address: str | None = None,
    cache_dir: str | None = None,
    max_in_flight: int | None = None,
    max_retries: int = DEFAULT_RAY_RETRIES,
    on_observation: Callable[[int, ExecutionObservation], None] | None = None,
    node_cache: str | None = None,
) -> list[ExecutionObservation]:
    """``observe_many(candidates, executor=RayExecutor(...))``, kept for its callers: the
    same door (`RayExecutor.observe_many` says what it does)."""
    executor = RayExecutor(address, max_in_flight, max_retries, node_cache)
    return await observe_many(
        candidates, cache_dir=cache_dir, on_observation=on_observation, executor=executor
    )
