"""Stage (f), the pure half: what identifies a run (spec §3.6).

``key = SHA-256(code ‖ environment ‖ command)``, computed from the declared inputs
before anything runs; `artifact_version` is the "code" part, the provenance every
observation carries. The store behind the keys is ``aexec._pipeline.cache``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any


def cache_key(**parts: Any) -> str:
    """SHA-256 over the canonical JSON of the declared inputs."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()


def artifact_version(
    repo_hash: str | None, patch: str | None, code: str | None, command: Iterable[str] | None
) -> str:
    """SHA-256 of what ran: the repo's content hash, the patch, the snippet, the argv."""
    h = hashlib.sha256()
    for part in (repo_hash, patch, code, None if command is None else "\0".join(command)):
        h.update(b"-" if part is None else b"+" + part.encode("utf-8", "surrogateescape"))
        h.update(b"\x1e")
    return h.hexdigest()


# -- environments aexec builds (issue 30, ``aexec._environments``) ------------------------


def resolution_key(*, spec: Any, interpreter: str, setup_hash: str, index: Any) -> str:
    """What a declared environment resolves from (the spec, the interpreter, the repo's
    setup files, the package index): its answer is the lock."""
    return cache_key(role="env-resolution", spec=spec, interpreter=interpreter, setup=setup_hash, index=index)


def environment_key(*, interpreter: str, lock_hash: str, setup_hash: str) -> str:
    """What is built: the interpreter, the resolved lock and the repo's setup files. Two
    specs that resolve to one lock share one environment."""
    return cache_key(role="environment", interpreter=interpreter, lock=lock_hash, setup=setup_hash)
