"""Scale-out: the body of one Ray task, aexec's local pipeline inside a Ray worker.

The task unpacks the candidate's repository on its node (``aexec._scaleout.archive``),
observes the candidate with the local ``observe_many`` (aexec's supervisor, whole-tree
kill, caps and network deny, exactly as on one machine) and returns the observation as
the contract's JSON. ``ray.cancel`` reaches it as an interrupt; it then cancels its
anyio scope, so aexec kills the candidate's process tree and removes its scratch roots
before the task ends.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from .. import _serde
from .._api import observe_many
from .._errors import AexecError
from .._records import Candidate, ExecutionObservation
from .._version import VERSION
from .archive import node_cache_dir, node_repo

__all__ = ["import_ray", "remote_task"]

#: How often a task checks whether it was cancelled (and lets a pending interrupt in).
CANCEL_POLL_S = 0.1


def import_ray() -> Any:
    """Ray, imported on first use (``import aexec`` never imports it)."""
    try:
        import ray
    except ImportError:
        raise AexecError("observing on Ray needs Ray: pip install 'aexec[ray]'") from None
    return ray


async def _observe_until_cancelled(
    candidate: Candidate, cache_dir: str | None, cancelled: Callable[[], bool]
) -> ExecutionObservation | None:
    """The candidate's observation, or ``None`` when Ray cancelled the task first.

    ``ray.cancel`` sets the task's cancel flag and interrupts the worker's main thread;
    the interrupt is only acted on when the event loop wakes, so this polls both.
    Either way aexec's cancel scope is cancelled, which kills the tree and removes the
    scratch roots in shielded scopes.
    """
    result: list[ExecutionObservation] = []
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while True:  # Ray's flag has no event to wait on; each wake-up also lets
                await anyio.sleep(CANCEL_POLL_S)  # a pending interrupt be handled
                if cancelled():
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(watch)
        # One process at a time: the task holds exactly the caps it asked Ray for.
        result = await observe_many([candidate], limit=1, cache_dir=cache_dir)
        tg.cancel_scope.cancel()
    return result[0] if result else None


def _driver_python(path: str) -> str | None:
    """The driver's interpreter path, when it names this worker's own interpreter.

    A candidate without ``python`` runs on "the interpreter running aexec", and its path
    is part of the observation and the cache key. Ray may start workers by another name
    of the same interpreter (``bin/python3`` for ``bin/python``); then the driver's name
    is used, so a worker records what a local run records. On a node where it is not the
    same file in the same directory, the worker's own interpreter is used.
    """
    try:
        same = os.path.dirname(path) == os.path.dirname(sys.executable) and os.path.samefile(
            path, sys.executable
        )
    except OSError:
        return None
    return path if same else None


def _task(
    candidate: Candidate,
    archive: list[Any] | None,
    repo_key: str | None,
    cache_dir: str | None,
    version: str,
    driver_python: str,
    node_cache: str | None = None,
) -> dict[str, Any]:
    """The body of one Ray task. ``archive`` is ``[ObjectRef]``: nested, so Ray does not
    fetch it unless this node has yet to unpack it."""
    ray = import_ray()
    if version != VERSION:
        raise AexecError(f"aexec {VERSION} on this Ray worker, aexec {version} on the driver")
    unpacked = False
    if archive is not None and repo_key is not None:
        repo, unpacked = node_repo(repo_key, lambda: ray.get(archive[0]), node_cache_dir(node_cache))
        candidate = attrs.evolve(candidate, repo=repo)
    if candidate.python is None:
        candidate = attrs.evolve(candidate, python=_driver_python(driver_python))
    ctx = ray.get_runtime_context()
    # Older Rays have no cancel flag: their interrupt alone then cancels the scope.
    cancelled = getattr(ctx, "is_canceled", lambda: False)
    obs = anyio.run(_observe_until_cancelled, candidate, cache_dir, cancelled)
    if obs is None:
        raise KeyboardInterrupt  # how Ray's cancellation ends a task
    return {
        "observation": _serde.unstructure(obs),
        "node": ctx.get_node_id(),
        "worker_pid": os.getpid(),
        "unpacked": unpacked,
    }


def remote_task(ray: Any) -> Any:
    """`_task` as a Ray remote function (Ray retries nothing itself: the driver does)."""
    return ray.remote(max_retries=0, retry_exceptions=False)(_task)
