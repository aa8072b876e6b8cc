"""Stage (f): behavioural caching and dedup (spec §3.6).

``key = SHA-256(code ‖ environment ‖ command)``, computed from the declared inputs
before anything runs. The disk cache stores one JSON document per key, written
atomically, and is bounded: past ``max_entries`` the least recently used are removed.
``Inflight`` deduplicates identical keys inside one process, so N identical requests
(or N candidates sharing one FAIL_TO_PASS before-run) pay for one run.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
import structlog

from ._types import DEFAULT_CACHE_ENTRIES

log = structlog.get_logger(__name__)

T = TypeVar("T")


def cache_key(**parts: Any) -> str:
    """SHA-256 over the canonical JSON of the declared inputs."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()


class DiskCache:
    """A bounded directory of ``<key>.json`` documents; safe to share between processes."""

    def __init__(self, directory: str, max_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        self.directory = directory
        self.max_entries = max_entries
        os.makedirs(directory, exist_ok=True)
        self._count = sum(1 for n in os.listdir(directory) if n.endswith(".json"))

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, key + ".json")

    def get(self, key: str) -> Any | None:
        path = self._path(key)
        try:
            with open(path, encoding="utf-8") as f:
                value = json.load(f)
            os.utime(path)  # recency, for LRU
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            log.warning("cache_entry_unreadable", key=key, error=str(e))
            return None
        return value

    def put(self, key: str, value: Any) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(value, f, ensure_ascii=False)
            existed = os.path.exists(self._path(key))
            os.replace(tmp, self._path(key))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        if not existed:
            self._count += 1
            if self._count > self.max_entries:
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
