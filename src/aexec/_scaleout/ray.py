"""Scale-out (layer 4.5): ``observe_many`` on a Ray cluster, with the same observations.

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

``import aexec`` never imports Ray; this module imports it inside its functions.

Longer than 400 lines because scale-out is one concern end to end — packing repos for
nodes, bounded submission, retries of lost tasks, cancellation — around one Ray API
that is imported lazily; split, each piece would import Ray's handles from the others.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import os
import shutil
import stat
import sys
import tarfile
import tempfile
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import anyio
import anyio.to_thread
import attrs

from .. import _serde
from .._api import VERSION, observe_many, validate
from .._boundary.trees import EXCLUDED_NAMES
from .._errors import AexecError, RequestError
from .._log import get_logger
from .._records import Candidate, ExecutionObservation
from .._stages.assemble import unobserved
from .._stages.classify import Classification, Runner
from .._stages.keys import cache_key
from .._types import DEFAULT_CPU_CORES, default_ram_mib

__all__ = ["RayExecutor", "observe_many_ray"]

log = get_logger(__name__)

#: How many times a task lost with its worker or node is submitted again.
DEFAULT_RAY_RETRIES = 3
#: Tasks in flight per cluster CPU when ``max_in_flight`` is not given.
IN_FLIGHT_PER_CPU = 2
#: How long one ``ray.wait`` blocks a driver thread; bounds how late a cancel is seen.
WAIT_POLL_S = 0.2
#: How often a task checks whether it was cancelled (and lets a pending interrupt in).
CANCEL_POLL_S = 0.1
#: After ``ray.cancel``, how long the driver waits for the remote aexec to kill its
#: candidates and remove their scratch roots before it re-raises anyway.
CANCEL_WAIT_S = 30.0
#: The CLI's ``node_cache`` (only the CLI reads it, on the driver).
NODE_CACHE_ENV = "AEXEC_RAY_NODE_CACHE"
#: gzip level of repository archives: source compresses well even at the cheapest level.
ARCHIVE_GZIP_LEVEL = 1


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise AexecError("observing on Ray needs Ray: pip install 'aexec[ray]'") from None
    return ray


# --- repositories: packed once, put once, unpacked once per node ---------------------


def pack_repo(repo: str) -> tuple[str, bytes]:
    """``(key, archive)``: a gzip'd tar of what a repo view of ``repo`` holds.

    It holds what ``make_view`` copies (files, directories, symlinks; modes and mtimes)
    and nothing it skips (VCS metadata, caches, ``.pyc``). ``key`` is the SHA-256 over
    every entry's path, type, mode and content — the same tree always has the same key.
    """
    h = hashlib.sha256()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(rel: str) -> None:
            for name in sorted(os.listdir(os.path.join(repo, rel))):
                if name in EXCLUDED_NAMES or name.endswith(".pyc"):
                    continue
                arc = f"{rel}/{name}" if rel else name
                path = os.path.join(repo, arc)
                info = tar.gettarinfo(path, arcname=arc)
                if info.islnk():  # a hard link: a view holds a copy of the file
                    info.type, info.linkname, info.size = tarfile.REGTYPE, "", os.lstat(path).st_size
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                head = f"{info.type.decode()}{stat.S_IMODE(info.mode):o}\0{arc}\0"
                h.update(head.encode("utf-8", "surrogateescape"))
                if info.isreg():
                    with open(path, "rb") as f:
                        data = f.read()
                    info.size = len(data)
                    h.update(data)
                    tar.addfile(info, io.BytesIO(data))
                elif info.isdir():
                    tar.addfile(info)
                    add(arc)
                elif info.issym():
                    h.update(info.linkname.encode("utf-8", "surrogateescape"))
                    tar.addfile(info)
                h.update(b"\0")  # sockets, fifos, devices: not code, not copied

        add("")
    return h.hexdigest(), gzip.compress(raw.getvalue(), compresslevel=ARCHIVE_GZIP_LEVEL, mtime=0)


def node_cache_dir(node_cache: str | None = None) -> str:
    """Where this node unpacks repository archives: ``node_cache``, else its tmp's
    ``aexec-ray-repos``."""
    return node_cache or os.path.join(tempfile.gettempdir(), "aexec-ray-repos")


def node_repo(key: str, fetch: Callable[[], bytes], root: str) -> tuple[str, bool]:
    """The node-local copy of archive ``key`` under ``root``: ``(path, unpacked_now)``.

    Concurrent tasks on one node unpack it once (a file lock per key); the directory
    appears whole or not at all (unpacked beside it, then renamed). ``fetch`` — the
    object-store read — runs only when this node has not unpacked the archive yet.
    """
    dest = os.path.join(root, key)
    if os.path.isdir(dest):
        return dest, False
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, f".{key}.lock"), "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.isdir(dest):
            return dest, False
        tmp = tempfile.mkdtemp(dir=root, prefix=f".unpack-{key[:16]}-")
        try:
            with tarfile.open(fileobj=io.BytesIO(fetch()), mode="r:gz") as tar:
                if hasattr(tarfile, "tar_filter"):  # 3.11.4+: refuse members outside tmp
                    tar.extractall(tmp, filter="tar")
                else:  # pragma: no cover - our own archive: relative names, built by pack_repo
                    tar.extractall(tmp)
            os.rename(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dest, True


# --- the task: aexec's local pipeline inside a Ray worker ----------------------------


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
    ray = _import_ray()
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


_remote_task: Any = None


def _remote(ray: Any) -> Any:
    global _remote_task
    if _remote_task is None:
        _remote_task = ray.remote(max_retries=0, retry_exceptions=False)(_task)
    return _remote_task


# --- the driver ----------------------------------------------------------------------


@attrs.define
class _Job:
    """One distinct candidate: the indices that share it, and its attempts so far."""

    key: str
    indices: list[int]
    attempts: int = 0
    lost: list[str] = attrs.Factory(list)


def _repo_paths(items: list[Candidate]) -> list[str]:
    return sorted({os.path.abspath(c.repo) for c in items if c.repo is not None})


def _submission_key(candidate: Candidate, repo_key: str | None) -> str:
    fields = attrs.asdict(candidate, recurse=True)
    fields["id"] = None
    fields["repo"] = repo_key
    return cache_key(aexec=VERSION, candidate=fields)


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
    """``observe_many`` on a Ray cluster: the same observations, in input order.

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
    items = list(candidates)
    checked: list[tuple[Classification, Runner]] = []
    for i, c in enumerate(items):
        try:
            checked.append(validate(c))
        except RequestError as e:
            raise RequestError(f"candidate {i} ({c.id!r}): {e}") from None
    if max_in_flight is not None and max_in_flight < 1:
        raise RequestError(f"max_in_flight must be >= 1, got {max_in_flight}")
    if max_retries < 0:
        raise RequestError(f"max_retries must be >= 0, got {max_retries}")
    results: list[ExecutionObservation | None] = [None] * len(items)
    if not items:
        return []
    ray = _import_ray()
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
        key = _submission_key(c, repo_key_of(c))
        jobs.setdefault(key, _Job(key, [])).indices.append(i)
    queue = deque(jobs.values())
    pending: dict[Any, _Job] = {}
    retryable = _retryable(ray)
    remote = _remote(ray)

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
        obs = unobserved(ident=c.id, classification=checked[first][0], message=message, aexec_version=VERSION)
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


@attrs.frozen
class RayExecutor:
    """Where ``observe_many(..., executor=RayExecutor(...))`` sends its candidates.

    ``limit``, when given to ``observe_many``, bounds the tasks in flight (and so the
    candidates running at once) unless ``max_in_flight`` is set here.
    """

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
        """`observe_many_ray` with this executor's settings.

        **Cancellation:** as `observe_many_ray`: remote tasks are cancelled, their
        candidates killed by aexec inside them, and the call waits for that.
        """
        return await observe_many_ray(
            candidates,
            address=self.address,
            cache_dir=cache_dir,
            max_in_flight=self.max_in_flight if self.max_in_flight is not None else limit,
            max_retries=self.max_retries,
            on_observation=on_observation,
            node_cache=self.node_cache,
        )
