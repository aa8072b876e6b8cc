"""Scale-out: repositories packed once on the driver, unpacked once per node.

Each repository is packed into a content-addressed archive (`pack_repo`), ``ray.put``
once by the driver (``aexec._scaleout.submission``), and unpacked once per node into
its node cache (`node_repo`), where the node's tasks run candidates on it. Plain files
and the standard library only: Ray is not imported here.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Callable

from .._boundary.trees import EXCLUDED_NAMES

__all__ = ["ARCHIVE_GZIP_LEVEL", "node_cache_dir", "node_repo", "pack_repo"]

#: gzip level of repository archives: source compresses well even at the cheapest level.
ARCHIVE_GZIP_LEVEL = 1


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
