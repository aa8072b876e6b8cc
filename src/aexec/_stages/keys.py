"""Stage (f), the pure half: what identifies a run, and every other key aexec makes.

``key = SHA-256(code ‖ environment ‖ command)``, computed from the declared inputs
before anything runs (spec §3.6); `artifact_version` is the "code" part, the provenance
every observation carries. The store behind the keys is ``aexec._pipeline.cache``.

Every key is made here, by a pure function of what it names, so what a key covers is
read in one file: an observation's (`observation_key`), a before-run's and an unpatched
run's (`before_key`, `unpatched_key`), a compiled repo's (`bytecode_key`), a probed
interpreter's (`toolchain_key`) and language toolchain's (`lang_fingerprint`), what the
keys take of an interpreter (`toolchain_identity`, with `sources_key`), a warm
fork server's (`server_key`) and a Ray submission's (`submission_key`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from .._records import Candidate
from .grade import expects
from .plan import PYTEST_ARGS


def cache_key(**parts: Any) -> str:
    """SHA-256 over the canonical JSON of the declared inputs."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()


def artifact_version(
    repo_hash: str | None,
    patch: str | None,
    code: str | None,
    command: Iterable[str] | None,
    inputs: str | None = None,
) -> str:
    """SHA-256 of what ran: the repo's content hash, the patch, the snippet, the argv, and
    its `run_inputs` (stdin, files, fetch_files; nothing without them)."""
    h = hashlib.sha256()
    parts = [repo_hash, patch, code, None if command is None else "\0".join(command)]
    for part in parts if inputs is None else [*parts, inputs]:
        h.update(b"-" if part is None else b"+" + part.encode("utf-8", "surrogateescape"))
        h.update(b"\x1e")
    return h.hexdigest()


def run_inputs(candidate: Candidate) -> str | None:
    """What a run is given beside its code (stdin, files) and asked back (fetch_files), as
    canonical JSON; None without any, so the keys of requests without them are unchanged."""
    c = candidate
    if c.stdin is None and not c.files and not c.fetch_files:
        return None
    return json.dumps([c.stdin, [list(f) for f in c.files or ()], list(c.fetch_files or ())])


def observation_key(
    candidate: Candidate,
    runner: str,
    *,
    aexec: str,
    code: str,
    environment: Mapping[str, Any],
    toolchain: str,
    language_toolchain: str | None = None,
) -> str:
    """The behavioural cache key of ``candidate``'s observation (spec §3.6): ``code`` is
    its `artifact_version`, ``environment`` its declared environment, ``toolchain`` the
    interpreter's fingerprint (and ``language_toolchain`` a language's, beyond Python)."""
    command: dict[str, Any] = {
        "runner": runner,
        "tests": candidate.tests,
        "pytest_args": list(PYTEST_ARGS),
        "pytest_plugins": candidate.pytest_plugins,
    }
    if language_toolchain is not None:
        command = {
            "runner": runner,
            "language": candidate.language,
            "request_type": candidate.request_type,
        }
        if candidate.request_type == "run_suite":
            command["tests"] = candidate.tests
        toolchain = f"{toolchain}:{language_toolchain}"
    if run_inputs(candidate) is not None:
        command["inputs"] = run_inputs(candidate)
    if expects(candidate) or candidate.test_patch is not None:
        command["grading"] = [candidate.test_patch, candidate.fail_to_pass, candidate.pass_to_pass]
        if candidate.test_ids != "pytest":  # keys of pytest's own names unchanged
            command["grading"].append(candidate.test_ids)
    return cache_key(aexec=aexec, code=code, environment=environment, command=command, toolchain=toolchain)


def _oracle(candidate: Candidate) -> dict[str, str]:
    """The oracle's part of a before-run's key (nothing without one: keys unchanged)."""
    return {} if candidate.test_patch is None else {"test_patch": candidate.test_patch}


def before_key(
    candidate: Candidate, *, aexec: str, repo_hash: str | None, environment: Mapping[str, Any], toolchain: str
) -> str:
    """A FAIL_TO_PASS before-run's: the candidate's tests on its unpatched repo (with
    the oracle ``test_patch`` applied, if any)."""
    return cache_key(
        aexec=aexec,
        role="before",
        code=artifact_version(repo_hash, None, None, None),
        environment=environment,
        tests=candidate.tests,
        toolchain=toolchain,
        **_oracle(candidate),
        plugins=candidate.pytest_plugins,
        **({"command": candidate.command} if candidate.command else {}),
    )


def unpatched_key(
    candidate: Candidate,
    runner: str,
    *,
    aexec: str,
    repo_hash: str | None,
    environment: Mapping[str, Any],
    toolchain: str,
) -> str:
    """An unpatched run's: the candidate's selection on its repo as it is (shared by the
    before-runs of patched candidates and the first run of an unpatched one)."""
    c = candidate
    return cache_key(
        aexec=aexec,
        role="unpatched",
        code=artifact_version(repo_hash, None, c.code, c.command, run_inputs(c)),
        environment=environment,
        tests=c.tests,
        runner=runner,
        toolchain=toolchain,
        **_oracle(c),
        plugins=c.pytest_plugins,
    )


def bytecode_key(
    *, aexec: str, repo_hash: str, python: str, toolchain: str, tests: tuple[str, ...] | None
) -> str:
    """A repo compiled for an interpreter, with the test modules ``tests`` select rewritten."""
    return cache_key(
        role="bytecode", aexec=aexec, repo=repo_hash, python=python, toolchain=toolchain, tests=tests
    )


def toolchain_key(python: str, *, aexec: str) -> str:
    """A probed interpreter's entry in the disk cache."""
    return cache_key(role="toolchain", python=python, aexec=aexec)


def sources_key(files: Iterable[tuple[str, int, int]]) -> str:
    """Editable sources as they are: SHA-256 of each file's (path, mtime, size), in order."""
    digest = hashlib.sha256()
    for path, mtime, size in files:
        digest.update(f"{path}\0{mtime}\0{size}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def toolchain_identity(fingerprint: str, sources: str) -> str:
    """What the cache keys take of an interpreter (their ``toolchain``): its
    distributions' fingerprint and, with editable installs, `sources_key` of them."""
    return f"{fingerprint}+{sources}" if sources else fingerprint


def lang_fingerprint(language: str, version: str, tools: Mapping[str, str], stamps: Any) -> str:
    """A language toolchain's fingerprint: its version, its tools' paths and their stamps."""
    blob = json.dumps([language, version, sorted(tools.items()), stamps])
    return hashlib.sha256(blob.encode()).hexdigest()


def server_key(
    python: str,
    fingerprint: str,
    mode: str,
    env: Mapping[str, str],
    thread: int,
    *,
    per_run: Collection[str],
) -> str:
    """A warm fork server's: its interpreter, mode, start-up environment (without the
    ``per_run`` variables, which each run sets) and the thread that started it."""
    static = sorted((k, v) for k, v in env.items() if k not in per_run)
    return json.dumps([python, fingerprint, mode, static, thread])


def submission_key(fields: Mapping[str, Any], repo_key: str | None, *, aexec: str) -> str:
    """A Ray submission's: a candidate's ``fields`` (``attrs.asdict``) but its ``id``, its
    repository by content (``repo_key``) instead of its path."""
    return cache_key(aexec=aexec, candidate={**fields, "id": None, "repo": repo_key})


# -- environments aexec builds (issue 30, ``aexec._environments``) ------------------------


def setup_key(files: Mapping[str, str | None]) -> str:
    """A repo's setup files by content: each name's SHA-256 (None: absent)."""
    return cache_key(files=dict(files))


def resolution_key(*, spec: Any, interpreter: str, setup_hash: str, index: Any) -> str:
    """What a declared environment resolves from (the spec, the interpreter, the repo's
    setup files, the package index): its answer is the lock."""
    return cache_key(role="env-resolution", spec=spec, interpreter=interpreter, setup=setup_hash, index=index)


def environment_key(
    *, interpreter: str, lock_hash: str, setup_hash: str, repo_at: str | None = None, system: Any = None
) -> str:
    """What is built: the interpreter, the resolved lock, the repo's setup files, where
    its editable install of the repo points (None: none), and the Debian packages,
    ``name=version``, unpacked into it. Two specs that resolve to one lock share one
    environment."""
    parts = {} if repo_at is None else {"repo_at": repo_at}
    parts |= {} if system is None else {"system": system}
    return cache_key(role="environment", interpreter=interpreter, lock=lock_hash, setup=setup_hash, **parts)


def system_key(*, packages: Any, host: Any) -> str:
    """What a set of Debian packages resolves from: the names and the host (its release,
    its architecture); its answer is the ``name=version`` list apt chose."""
    return cache_key(role="system-resolution", packages=packages, host=host)


def inplace_key(*, environment: str, requires: Any, sources: Mapping[str, str], argv: Any) -> str:
    """A base's C extensions built in place: the environment, the build requirements it
    lacked, the repo's compiled sources and build files by content, and the build's argv."""
    return cache_key(
        role="inplace", environment=environment, requires=requires, sources=dict(sources), argv=argv
    )
