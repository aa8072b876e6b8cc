"""Stage (f), the stateful half: the behavioural cache and dedup (spec §3.6).

`DiskCache` stores one JSON document per key (`aexec._stages.keys`), written
atomically, bounded (past ``max_entries`` the least recently used go), and
self-verifying: each entry carries its key and the SHA-256 of its value, and an entry
whose key or hash does not match (another entry copied over it, a torn or edited file)
is a miss, logged, and overwritten by the next put. `Memo` is the one "run once per
key" helper: in-process dedup (N identical requests, or N candidates sharing one
before-run, pay for one run), optionally in front of the disk cache, with the disk
I/O in worker threads so that it never blocks the event loop. `Rechecked` holds the
last recheck of what runs rest on (an interpreter, a fork server) for
`Options.recheck_s`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Literal, TypeVar

import anyio
import anyio.to_thread

from .._boundary.trees import read_regular
from .._log import get_logger
from .._types import DEFAULT_CACHE_ENTRIES

log = get_logger(__name__)

T = TypeVar("T")

#: Where a `Memo` answer came from: the disk cache, another caller's run, or this run.
Source = Literal["disk", "shared", "ran"]


def _digest(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class DiskCache:
    """A bounded directory of ``<key>.json`` documents; safe to share between processes.

    Blocking: call it from a worker thread (`Memo` does).
    """

    def __init__(self, directory: str, max_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        self.directory = directory
        self.max_entries = max_entries
        os.makedirs(directory, exist_ok=True)
        #: Entries, counted at the first put (in its worker thread, not where the cache is
        #: made: a session makes it on the event loop, and the listing scales with the dir).
        self._count: int | None = None

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key + ".json")

    def get(self, key: str) -> Any | None:
        """The value stored under ``key``, or None (absent, unreadable, or not its own)."""
        path = self._path(key)
        if not os.path.lexists(path):
            return None
        raw = read_regular(path)  # never blocks on a FIFO, never follows a link
        try:
            if raw is None:
                raise ValueError("not a regular file")
            entry = json.loads(raw)
        except (ValueError, RecursionError) as e:
            log.warning("cache_entry_unreadable", key=key, error=str(e))
            return None
        if (
            not isinstance(entry, dict)
            or entry.get("key") != key
            or "value" not in entry
            or entry.get("sha256") != _digest(entry["value"])
        ):
            log.warning("cache_entry_mismatch", key=key, path=path)
            return None
        try:
            os.utime(path)  # recency, for LRU
        except OSError:
            pass
        return entry["value"]

    def put(self, key: str, value: Any) -> None:
        entry = {"key": key, "sha256": _digest(value), "value": value}
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f, ensure_ascii=False)
            target = self._path(key)
            existed = os.path.lexists(target)
            if (existed and not os.path.isfile(target)) or os.path.islink(target):
                _remove(target)  # a damaged entry (a directory, FIFO, link): replaced
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        if self._count is None:
            self._count = sum(1 for n in os.listdir(self.directory) if n.endswith(".json"))
        elif not existed:
            self._count += 1
        if not existed and self._count > self.max_entries:
            self._prune()

    def _prune(self) -> None:
        entries = []
        for name in os.listdir(self.directory):
            if name.endswith(".json") and not name.startswith(".tmp-"):
                try:
                    entries.append((os.stat(os.path.join(self.directory, name)).st_mtime_ns, name))
                except FileNotFoundError:
                    continue
        entries.sort()
        # Drop down to 90% so pruning is not paid on every put.
        excess = len(entries) - int(self.max_entries * 0.9)
        for _, name in entries[: max(excess, 0)]:
            try:
                os.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass
        self._count = len(entries) - max(excess, 0)


class Inflight(Generic[T]):
    """Run each key once per process: later callers wait for the first and share its result."""

    def __init__(self, keep: int = 256) -> None:
        self._keep = keep
        self._done: OrderedDict[str, T] = OrderedDict()
        self._running: dict[str, anyio.Event] = {}

    async def run(self, key: str, fn: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """Returns ``(result, shared)``; ``shared`` is true when another caller ran it."""
        while True:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key], True
            event = self._running.get(key)
            if event is None:
                break
            await event.wait()  # if that caller failed, the loop runs it here instead
        event = self._running[key] = anyio.Event()
        try:
            result = await fn()
            self._done[key] = result
            if len(self._done) > self._keep:
                self._done.popitem(last=False)
            return result, False
        finally:
            del self._running[key]
            event.set()


class Rechecked(Generic[T]):
    """The last recheck of each key and when it began: one asked for less than ``hold``
    seconds after it began gets its answer instead of rechecking (``hold`` 0: never,
    every call rechecks). A recheck sees every edit made before it began, so an edit is
    seen by every call that begins ``hold`` seconds after it, at the latest."""

    def __init__(self, hold: float = 0.0) -> None:
        self.hold = hold
        self._last: dict[str, tuple[float, T]] = {}

    def fresh(self, key: str) -> T | None:
        """The answer of the last recheck of ``key``, if still held; else None."""
        last = self._last.get(key)
        if last is None or time.monotonic() - last[0] >= self.hold:
            return None
        return last[1]

    def checked(self, key: str, value: T, began: float) -> None:
        """Hold ``value``, the answer of a recheck of ``key`` that began at ``began``
        (`time.monotonic`)."""
        if self.hold > 0:
            self._last[key] = (began, value)

    async def run(self, key: str, check: Callable[[], Awaitable[T]]) -> T:
        """The held answer, or ``check()``'s (then held from the moment it began)."""
        found = self.fresh(key)
        if found is None:
            began = time.monotonic()
            found = await check()
            self.checked(key, found, began)
        return found


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread, abandoned (left to finish alone) if cancelled."""
    return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)


class Memo(Generic[T]):
    """Each key computed once per session (``dedup``), and with a ``disk`` cache once
    for as long as the entry lives there: ``await memo.get(key, compute)``.

    ``encode``/``decode`` turn a value into the cache's JSON and back; a stored value
    ``decode`` rejects (raises) is a miss and is computed afresh.
    """

    def __init__(
        self,
        *,
        disk: DiskCache | None = None,
        encode: Callable[[T], Any] = lambda v: v,
        decode: Callable[[Any], T] = lambda v: v,
        dedup: bool = True,
    ) -> None:
        self._disk = disk
        self._encode = encode
        self._decode = decode
        self._inflight: Inflight[T] | None = Inflight() if dedup else None

    async def get(
        self,
        key: str,
        compute: Callable[[], Awaitable[T]],
        valid: Callable[[T], bool] | None = None,
        store: Callable[[T], bool] | None = None,
    ) -> tuple[T, Source]:
        """The value for ``key``; a stored one is used only if it decodes and ``valid``
        (e.g. it names the key and artifact it was made for) accepts it. A computed value
        ``store`` rejects is shared within the session but never written to disk."""
        if self._disk is not None:
            hit = await in_thread(self._disk.get, key)
            if hit is not None:
                try:
                    value = self._decode(hit)
                    if valid is not None and not valid(value):
                        raise ValueError("the entry is another request's")
                    return value, "disk"
                except Exception as e:  # a stale or foreign entry: compute afresh
                    log.warning("cache_entry_invalid", key=key[:12], error=str(e))

        async def compute_and_store() -> T:
            value = await compute()
            if self._disk is not None and (store is None or store(value)):
                try:
                    await in_thread(self._disk.put, key, self._encode(value))
                except OSError as e:  # a full or read-only cache loses the entry, not the value
                    log.warning("cache_write_failed", key=key[:12], error=str(e))
            return value

        if self._inflight is None:
            return await compute_and_store(), "ran"
        value, shared = await self._inflight.run(key, compute_and_store)
        return value, "shared" if shared else "ran"
