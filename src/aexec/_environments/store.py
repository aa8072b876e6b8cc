"""The environments root's records (I/O): JSON written atomically, one file lock per key,
the failures recorded so that a key is not built again (``aexec env gc`` forgets them;
one recorded by another aexec version counts as absent: its builder may have been the
fault), and the bytes a directory alone holds."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping

from .._log import get_logger
from .._version import VERSION
from .spec import EnvBroken

log = get_logger(__name__)

__all__ = [
    "check_failed",
    "fail",
    "locked",
    "once",
    "read_json",
    "recorded_failure",
    "unique_bytes",
    "write_json",
]


def read_json(path: str) -> dict[str, object] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: str, data: Mapping[str, object]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(root: str, key: str) -> Iterator[None]:
    """Hold ``key``'s file lock (one holder across threads and processes)."""
    os.makedirs(os.path.join(root, "locks"), exist_ok=True)
    fd = os.open(os.path.join(root, "locks", key), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def recorded_failure(root: str, key: str) -> dict[str, object] | None:
    """``key``'s recorded failure, if this aexec version recorded it (another version's,
    or one without a version, is absent: logged ``env_failure_stale``, built again)."""
    path = os.path.join(root, "failed", key + ".json")
    failed = read_json(path)
    if failed is not None and failed.get("aexec_version") != VERSION:
        was = failed.get("aexec_version")
        log.info("env_failure_stale", key=key[:12], recorded_by=was, aexec_version=VERSION, path=path)
        return None
    return failed


def check_failed(root: str, key: str) -> None:
    """Raise ``key``'s recorded failure (`recorded_failure`) as `EnvBroken`, if any."""
    failed = recorded_failure(root, key)
    if failed is not None:
        raise EnvBroken(str(failed.get("kind", "build")), str(failed.get("message", "")))


def fail(root: str, key: str, kind: str, message: str) -> EnvBroken:
    """Record the failure (not offline: that one may be the missing network's)."""
    if not os.environ.get("UV_OFFLINE"):
        write_json(
            os.path.join(root, "failed", key + ".json"),
            {"kind": kind, "message": message, "at": time.time(), "aexec_version": VERSION},
        )
    return EnvBroken(kind, message)


def unique_bytes(path: str) -> int:
    """Bytes of the regular files under ``path`` with no other link (what it alone costs)."""
    total = 0
    for top, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(top, name))
                if st.st_nlink == 1 and stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


def once(
    root: str, key: str, record: str, make: Callable[[], dict[str, object]]
) -> tuple[bool, dict[str, object]]:
    """(True, the JSON at ``record``) if there is one, else (False, what ``make()`` returns,
    written there): ``make`` runs once per key across threads and processes (under the
    key's lock, looked for again once held), never after a failure recorded for the key."""
    hit = read_json(record)
    if hit is not None:
        return True, hit
    check_failed(root, key)
    with locked(root, key):
        hit = read_json(record)
        if hit is not None:
            return True, hit
        check_failed(root, key)
        made = make()
        write_json(record, made)
        return False, made
