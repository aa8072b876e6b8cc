"""``observe`` and ``observe_many``: the stages wired into one pipeline.

(a) classify → (b) declare the policy → (f) cache key → (c) execute → (d) parse
→ (e) normalize → (g) assemble, with the FAIL_TO_PASS before-run and the
confirming re-run of a passing suite.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
import attrs
import structlog

from . import _serde
from ._assemble import Head, Run, assemble, ran_tests, reconcile, refused, touches_oracle, unobserved
from ._cache import DiskCache, Inflight, cache_key
from ._classify import Classification, Runner, check
from ._errors import AexecError, RequestError
from ._execute import Admission, Caps, Invocation, Isolation, detect_isolation, execute
from ._forkserver import PER_RUN_ENV, ForkServer, ServerGone
from ._normalize import failures
from ._parse import SNIPPET_NAME, parse
from ._policy import declare, limits, with_scratch
from ._records import Candidate, Environment, ExecutionObservation
from ._types import TestVerdict
from ._workspace import (
    DRIVER,
    PYTEST_CONFIGS,
    SCRATCH_PREFIX,
    PatchError,
    Scratch,
    apply_patch,
    artifact_version,
    candidate_env,
    changed_state,
    compile_bytecode,
    hash_tree,
    import_roots,
    make_scratch,
    make_view,
    masks,
    patch_paths,
    pytest_config,
    remove_scratch,
    run_uid,
    seal_scratch,
    snapshot,
    sweep_stale_scratch,
    write_private,
)

#: Runs at once per core by default: a core's worth are busy, the rest may be waiting
#: (sleeping, blocked, at a deadline) without holding a core (see `Admission`).
WAITING_RUNS_PER_CORE = 4

#: Inside the boundary these are the scratch root's tmp, not the host's.
TMP_TARGETS = ("/tmp", "/var/tmp", "/dev/shm")


def _under(path: str, dirs: Iterable[str]) -> bool:
    return any(path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)


log = structlog.get_logger(__name__)

VERSION = "0.1.0"
#: How pytest is run for every candidate: no cache provider (nothing written into the
#: repo view), no colour; plugins are not auto-loaded (PYTEST_DISABLE_PLUGIN_AUTOLOAD).
PYTEST_ARGS = ("-p", "no:cacheprovider", "--color=no", "-q")

#: How long asking an interpreter for its version and packages may take.
PROBE_TIMEOUT_S = 60.0
_PROBE = (
    "import os, sys, json, platform, hashlib, importlib.metadata as m\n"
    "dists = sorted({f'{d.metadata[\"Name\"]}=={d.version}' for d in m.distributions()})\n"
    "pt = [d for d in dists if d.lower().startswith('pytest==')]\n"
    "print(json.dumps({'version': platform.python_implementation() + ' ' + platform.python_version()"
    " + ('; ' + pt[0].replace('==', ' ') if pt else '; no pytest'),"
    " 'fingerprint': hashlib.sha256('\\n'.join(dists).encode()).hexdigest(),"
    " 'paths': sorted({p for p in [*sys.path, sys.prefix, sys.base_prefix, sys.exec_prefix,"
    " os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))]"
    " if p and os.path.isdir(p)})}))\n"
)


@attrs.frozen
class _Toolchain:
    path: str
    version: str
    fingerprint: str
    #: What the interpreter reads: made reachable to the run's uid inside the boundary.
    paths: tuple[str, ...]
    #: `_stamp` of the interpreter and ``paths`` when probed: the answer holds while equal.
    stamp: list[list[int]]


_toolchains: dict[str, _Toolchain] = {}


def _stamp(paths: Iterable[str]) -> list[list[int]]:
    """What a probe's answer rests on: (mtime, size) of the interpreter and its import dirs.

    Installing or removing a distribution changes its site directory's mtime.
    """
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append([st.st_mtime_ns, st.st_size])
        except OSError:
            out.append([-1, -1])
    return out


async def _toolchain(python: str, session: _Session) -> _Toolchain:
    """The interpreter's version and installed distributions (part of the cache key).

    Probed once per call (``session.toolchains``) and, with a cache dir, once until the
    interpreter or one of its import dirs changes.
    """
    try:
        os.stat(python)
    except OSError as e:
        raise RequestError(f"python: {python!r} does not exist") from e
    disk_key = cache_key(role="toolchain", python=python, aexec=VERSION)

    async def probe() -> _Toolchain:
        known = _toolchains.get(python)
        if known is not None and known.stamp == _stamp([python, *known.paths]):
            return known
        if session.cache is not None:
            hit: Any = session.cache.get(disk_key)
            try:
                tool = _Toolchain(**{**hit, "paths": tuple(hit["paths"])})
            except (TypeError, KeyError):
                pass  # no entry, or a foreign one: probe afresh
            else:
                if tool.stamp == _stamp([python, *tool.paths]):
                    _toolchains[python] = tool
                    return tool
        tool = await _probe_toolchain(python)
        _toolchains[python] = tool
        if session.cache is not None:
            session.cache.put(disk_key, attrs.asdict(tool))
        return tool

    tool, _ = await session.toolchains.run(python, probe)
    return tool


async def _probe_toolchain(python: str) -> _Toolchain:
    with anyio.fail_after(PROBE_TIMEOUT_S):
        done = await anyio.run_process(
            [python, "-s", "-c", _PROBE],
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            check=False,
        )
    try:
        info = json.loads(done.stdout)
        paths = tuple(map(str, info["paths"]))
        return _Toolchain(
            python, str(info["version"]), str(info["fingerprint"]), paths, _stamp([python, *paths])
        )
    except (ValueError, KeyError, TypeError):
        msg = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no answer"]
        raise RequestError(f"python: {python!r} is not a usable interpreter ({msg[0]})") from None


def _resolve_python(python: str | None) -> str:
    if python is None:
        return sys.executable
    found = shutil.which(python) if os.sep not in python else python
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise RequestError(f"python: {python!r} is not an executable file")
    return os.path.abspath(found)


def validate(candidate: Candidate) -> tuple[Classification, Runner]:
    """Check a candidate before anything runs; raises `RequestError` naming the field."""
    classification, runner = check(candidate)
    _resolve_python(candidate.python)
    if candidate.repo is not None:
        if not os.path.isdir(candidate.repo):
            raise RequestError(f"repo: {candidate.repo!r} is not a directory")
        for i, sel in enumerate(candidate.tests or ()):
            path = sel.split("::", 1)[0]
            created = candidate.patch is not None and f"+++ b/{path}" in candidate.patch
            if not created and not os.path.exists(os.path.join(candidate.repo, path)):
                raise RequestError(f"tests[{i}]: {path!r} does not exist in repo {candidate.repo!r}")
    return classification, runner


#: Private A/B knob (spec §7.5), set only by ``aexec._ab`` around one ``observe_many``:
#: the mechanisms to remove — ``"antigaming"`` (no confirming re-run, no diff-scope
#: check) and ``"cache"`` (no disk cache, no in-process dedup). The public API never sets it.
_DISABLED: ContextVar[frozenset[str]] = ContextVar("aexec_disabled", default=frozenset())
_T = TypeVar("_T")
#: The input position of the candidate being observed: runs are admitted in this order.
_ORDER: ContextVar[int] = ContextVar("aexec_order", default=0)


class _NoDedup(Inflight[_T]):
    """The dedup ablated: every caller runs its own."""

    async def run(self, key: str, fn: Callable[[], Awaitable[_T]]) -> tuple[_T, bool]:
        return await fn(), False


class _Session:
    """What the candidates of one call share: process slots, caches, the boundary."""

    def __init__(self, limit: int, cache_dir: str | None, *, cpu_slots: int) -> None:
        self.disabled = _DISABLED.get()
        dedup = "cache" not in self.disabled
        self.isolation: Isolation = detect_isolation()
        self.slots = Admission(cpu_slots, limit, self.isolation.cgroups)
        self.cache = None if cache_dir is None or not dedup else DiskCache(cache_dir)
        self.observations: Inflight[ExecutionObservation] = Inflight() if dedup else _NoDedup()
        self.befores: Inflight[dict[str, TestVerdict]] = Inflight() if dedup else _NoDedup()
        #: A before-run and the first run of an unpatched candidate on the same repo, tests
        #: and boundary are one execution (`_unpatched_run`).
        self.unpatched: Inflight[tuple[Run, bool]] = Inflight() if dedup else _NoDedup()
        #: A repo is hashed once per call, however many candidates share it.
        self.repo_hashes: Inflight[str] = Inflight()
        #: An interpreter is probed once per call (and once per change, with a cache).
        self.toolchains: Inflight[_Toolchain] = Inflight()
        #: Warm fork servers (see `server`); none with AEXEC_NO_FORKSERVER=1, when every
        #: run starts a fresh interpreter.
        self.warm = os.environ.get("AEXEC_NO_FORKSERVER") != "1"
        self._starting: Inflight[ForkServer | None] = Inflight()  # one start per key per call
        #: A repo's modules are compiled once per call (once per repo and toolchain, with
        #: a cache dir); none with AEXEC_NO_BYTECODE=1, when every run compiles its own.
        self.compiled = os.environ.get("AEXEC_NO_BYTECODE") != "1"
        self._bytecode: Inflight[str | None] = Inflight()
        self.cache_dir = cache_dir if self.cache is not None else None
        #: Per repo, what the call's test runs select of it together (None: a whole suite).
        self.selections: dict[str, tuple[str, ...] | None] = {}
        self.runs = 0
        global _swept
        if not _swept:
            _swept = True
            sweep_stale_scratch()

    async def server(self, tool: _Toolchain, mode: str, env: Mapping[str, str]) -> ForkServer | None:
        """The warm server for runs like this one, started on first use; None if it cannot be.

        Servers outlive the call (one per interpreter, its distributions, mode, start-up
        environment and thread, for the life of this process), so that a harness calling
        `observe` once per candidate gets them too; one that died is started afresh. The
        thread is part of the key because a server dies with the thread that started it
        (PR_SET_PDEATHSIG).
        """
        if not self.warm:
            return None
        static = sorted((k, v) for k, v in env.items() if k not in PER_RUN_ENV)
        key = json.dumps([tool.path, tool.fingerprint, mode, static, threading.get_ident()])
        running = _servers.get(key)
        if running is not None and running.alive:
            return running

        async def start() -> ForkServer | None:
            try:
                server = await ForkServer.start(tool.path, DRIVER, mode, env)
            except ServerGone as e:
                log.warning("forkserver_unavailable", python=tool.path, mode=mode, error=str(e))
                return None
            stale = _servers.pop(key, None)
            _servers[key] = server
            if stale is not None:
                await stale.aclose()
            return server

        server, _ = await self._starting.run(key, start)
        return server if server is not None and server.alive else None

    async def bytecode(self, repo: str, tool: _Toolchain) -> str | None:
        """``repo`` compiled for ``tool`` (`compile_bytecode`), made on first use, with the
        test modules all of the call's test runs of it select rewritten ahead."""
        if not self.compiled:
            return None
        tests = self.selections.get(repo, ())
        repo_hash, _ = await self.repo_hashes.run(repo, lambda: anyio.to_thread.run_sync(hash_tree, repo))
        key = cache_key(
            role="bytecode",
            aexec=VERSION,
            repo=repo_hash,
            python=tool.path,
            toolchain=tool.fingerprint,
            tests=tests,
        )

        async def make() -> str | None:
            base = os.path.join(self.cache_dir, "bytecode") if self.cache_dir else _bytecode_base()
            out = os.path.join(base, key)
            if await anyio.to_thread.run_sync(_touch, out, base):
                return out
            if not await compile_bytecode(tool.path, repo, tests, out):
                return None
            await anyio.to_thread.run_sync(_prune_bytecode, base)
            return out

        out, _ = await self._bytecode.run(key, make)
        return out


#: Compiled repos kept in a cache dir's ``bytecode/`` (least recently used go first).
BYTECODE_KEPT = 64


def _touch(out: str, base: str) -> bool:
    """Whether ``out`` was compiled already (then marked recent, for pruning)."""
    os.makedirs(base, exist_ok=True)
    try:
        os.utime(out)
    except FileNotFoundError:
        return False
    return True


def _prune_bytecode(base: str) -> None:
    entries = []
    for name in os.listdir(base):
        with contextlib.suppress(OSError):
            entries.append((os.stat(os.path.join(base, name)).st_mtime_ns, name))
    for _, name in sorted(entries)[: max(0, len(entries) - BYTECODE_KEPT)]:
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)


_bytecode_dir: str | None = None


def _bytecode_base() -> str:
    """Where compiled repos live without a cache dir: this process's own, removed at exit
    (or, if it is killed, swept with its scratch roots by the next aexec)."""
    global _bytecode_dir
    if _bytecode_dir is None:
        _bytecode_dir = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-bytecode-")
        atexit.register(shutil.rmtree, _bytecode_dir, True)
    return _bytecode_dir


#: The fork servers of this process, by what they serve (see `_Session.server`).
_servers: dict[str, ForkServer] = {}


@atexit.register
def _stop_servers() -> None:
    for server in _servers.values():
        server.close()


_swept = False


def selection(tests: tuple[str, ...] | None) -> list[str]:
    """pytest's arguments for a selection: all of the suite, these selectors, or nothing."""
    if tests is None:
        return []
    return list(tests) if tests else ["--ignore-glob=*"]


def _modules(paths: Iterable[str], roots: list[str], work: str) -> list[str]:
    """Importable module names of the non-test Python files a patch touches."""
    out: list[str] = []
    for p in paths:
        base = os.path.basename(p)
        if (
            not p.endswith(".py")
            or base.startswith("test_")
            or base.endswith("_test.py")
            or base == "conftest.py"
        ):
            continue
        full = os.path.join(work, p)
        if not os.path.isfile(full):
            continue
        for root in sorted(roots, key=len, reverse=True):
            if full.startswith(root + os.sep):
                parts = os.path.relpath(full, root)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                if parts and all(x.isidentifier() for x in parts):
                    out.append(".".join(parts))
                break
    return list(dict.fromkeys(out))


async def _run_once(
    session: _Session,
    candidate: Candidate,
    runner: Runner,
    env: Environment,
    tool: _Toolchain,
    *,
    patch: str | None,
    touched: list[str],
) -> tuple[Run, bool] | PatchError:
    """One execution in a fresh scratch root: (the run, whether pytest config changed).

    A patch that does not apply is returned, not raised: nothing ran.
    """
    box = session.isolation.namespaces
    scratch: Scratch = await anyio.to_thread.run_sync(make_scratch, box)
    session.runs += 1
    run_name = f"{session.runs}-{os.path.basename(scratch.root)}"
    try:
        bytecode = None if candidate.repo is None else await session.bytecode(candidate.repo, tool)
        await anyio.to_thread.run_sync(make_view, scratch, candidate.repo, bytecode)
        config_changed = False
        if patch is not None:
            try:
                await apply_patch(scratch, patch)
            except PatchError as e:
                return e
            assert candidate.repo is not None
            config_changed = any(
                pytest_config(candidate.repo, n) != pytest_config(scratch.work, n) for n in PYTEST_CONFIGS
            )
        snippet = None
        if candidate.code is not None:
            snippet = write_private(scratch, SNIPPET_NAME, candidate.code)
        lim = limits(env)
        roots = import_roots(scratch.work) if candidate.repo is not None else [scratch.work]
        report = write_private(scratch, "report.jsonl", "")
        rlimits = {
            "RLIMIT_AS": lim.address_space_bytes,
            "RLIMIT_CPU": lim.cpu_seconds,
            "RLIMIT_FSIZE": lim.file_size_bytes,
            "RLIMIT_NOFILE": lim.open_files,
            "RLIMIT_CORE": 0,
        }
        run_env = candidate_env(scratch, tool.path)
        server = await session.server(tool, "pytest" if runner == "pytest" else "bare", run_env)
        if server is not None and not server.serves(roots):
            server = None  # the repo shadows a module the server has imported: go cold
        box_spec = None
        if box:
            uid = run_uid()
            rlimits["RLIMIT_NPROC"] = lim.processes  # the uid is the run's alone
            os.chown(report, uid, uid)
            await anyio.to_thread.run_sync(seal_scratch, scratch, uid, lim.disk_bytes)
            covered = [p for p in (scratch.root, *tool.paths) if _under(p, TMP_TARGETS)]
            needed = [p for p in (scratch.root, *tool.paths) if p not in covered]
            box_spec = {
                "supervisor_pids": [os.getpid(), *([server.pid] if server else [])],
                "uid": uid,
                "gid": uid,
                "scratch_root": scratch.root,
                "sibling_prefix": os.path.join(os.path.dirname(scratch.root), SCRATCH_PREFIX),
                "writable": [scratch.work, scratch.home, scratch.tmp, report],
                "tmp": scratch.tmp,
                "tmp_targets": list(TMP_TARGETS),
                "masks": masks(needed),
                # covered by the scratch tmp inside: bound back in place by the driver
                "keep": [p for p in covered if not _under(p, covered)],
            }
        cgroups = session.isolation.cgroups
        spec: dict[str, Any] = {
            "runner": runner,
            "report": report,
            "cwd": scratch.work,
            "sys_path": roots,
            "rlimits": rlimits,
            "box": box_spec,
            "cgroups": cgroups.procs_files(run_name) if cgroups is not None else [],
            "snippet": snippet,
            "argv": list(candidate.command or ()),
            "pytest_args": [*PYTEST_ARGS, f"--rootdir={scratch.work}", *selection(candidate.tests)],
            "import_modules": _modules(touched, roots, scratch.work),
        }
        spec_path = write_private(scratch, "spec.json", json.dumps(spec))
        before = snapshot(scratch.root)
        invocation = Invocation(
            argv=(tool.path, "-s", DRIVER, spec_path),
            cwd=scratch.work,
            env=run_env,
            timeout_s=env.timeout_s,
            report_path=report,
            run=run_name,
            caps=Caps(env.cpu_cap_cores, lim.tree_memory_bytes, lim.processes),
            server=server,
        )
        async with session.slots.slot(run_name, _ORDER.get()):
            raw = await execute(invocation, session.isolation)
        evidence = parse(raw, runner, cwd=scratch.work, snippet=snippet)
        if evidence.box_failed:
            raise AexecError(raw.stderr.strip().splitlines()[-1] if raw.stderr.strip() else "boundary failed")
        run = Run(
            evidence=evidence,
            stdout=raw.stdout,
            stderr=raw.stderr,
            cwd=scratch.work,
            scratch_root=scratch.root,
            changed_state=changed_state(before, scratch.root),
            cpu_s=raw.cpu_s,
            peak_ram_mib=raw.peak_ram_mib,
        )
        return run, config_changed
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(remove_scratch, scratch)


async def _observe_one(
    session: _Session, candidate: Candidate, classification: Classification, runner: Runner
) -> ExecutionObservation:
    blog = log.bind(candidate=candidate.id)
    python = _resolve_python(candidate.python)
    tool = await _toolchain(python, session)
    env = declare(
        classification.mode,
        candidate.policy,
        toolchain=python,
        toolchain_version=tool.version,
        enforced=session.isolation.enforced,
        repo_view="copy" if candidate.repo is not None else "none",
        repo_ro=session.isolation.namespaces,
        max_cores=float(os.cpu_count() or 1),
    )
    blog.debug("classified", mode=classification.mode, runner=runner, probe_gated=classification.probe_gated)
    repo_hash = None
    if candidate.repo is not None:
        repo = candidate.repo
        repo_hash, _ = await session.repo_hashes.run(repo, lambda: anyio.to_thread.run_sync(hash_tree, repo))
    version = artifact_version(repo_hash, candidate.patch, candidate.code, candidate.command)
    declared = _serde.unstructure_env(env)
    command = {"runner": runner, "tests": candidate.tests, "pytest_args": list(PYTEST_ARGS)}
    key = cache_key(
        aexec=VERSION, code=version, environment=declared, command=command, toolchain=tool.fingerprint
    )
    blog.debug("policy", timeout_s=env.timeout_s, ram_mib=env.ram_cap_mib, cache_key=key[:12])
    if session.cache is not None:
        hit = session.cache.get(key)
        if hit is not None:
            try:
                obs = _serde.structure(hit)
            except Exception as e:  # a stale or foreign entry: observe afresh
                blog.warning("cache_entry_invalid", error=str(e))
            else:
                blog.info("cache_hit", cache_key=key[:12])
                return attrs.evolve(obs, id=candidate.id, cache_hit=True)

    async def witness() -> ExecutionObservation:
        obs = await _witness(
            session, candidate, classification, runner, env, python, tool, repo_hash, version, key, declared
        )
        if session.cache is not None:
            session.cache.put(key, _serde.unstructure(obs))
        return obs

    obs, shared = await session.observations.run(key, witness)
    return attrs.evolve(obs, id=candidate.id, cache_hit=True) if shared else obs


async def _before_run(
    session: _Session,
    candidate: Candidate,
    runner: Runner,
    env: Environment,
    python: str,
    tool: _Toolchain,
    repo_hash: str | None,
    declared: Mapping[str, Any],
) -> dict[str, TestVerdict]:
    """Per-test verdicts of the selection on the unpatched repo (cached, shared)."""
    key = cache_key(
        aexec=VERSION,
        role="before",
        code=artifact_version(repo_hash, None, None, None),
        environment=declared,
        tests=candidate.tests,
        toolchain=tool.fingerprint,
    )
    if session.cache is not None:
        hit = session.cache.get(key)
        if isinstance(hit, dict):
            return {str(k): v for k, v in hit.items()}

    async def run() -> dict[str, TestVerdict]:
        done = await _unpatched_run(session, candidate, runner, env, tool, repo_hash, declared)
        verdicts = {t.nodeid: t.verdict for t in done[0].evidence.tests}
        if session.cache is not None:
            session.cache.put(key, verdicts)
        return verdicts

    verdicts, _ = await session.befores.run(key, run)
    return verdicts


async def _unpatched_run(
    session: _Session,
    candidate: Candidate,
    runner: Runner,
    env: Environment,
    tool: _Toolchain,
    repo_hash: str | None,
    declared: Mapping[str, Any],
) -> tuple[Run, bool]:
    """The candidate's selection on its repo as it is, run once per call (§3.6): the
    before-run of every patched candidate and the first run of an unpatched one share it."""
    key = cache_key(
        aexec=VERSION,
        role="unpatched",
        code=artifact_version(repo_hash, None, candidate.code, candidate.command),
        environment=declared,
        tests=candidate.tests,
        runner=runner,
        toolchain=tool.fingerprint,
    )

    async def run() -> tuple[Run, bool]:
        done = await _run_once(session, candidate, runner, env, tool, patch=None, touched=[])
        assert not isinstance(done, PatchError)  # no patch, nothing to refuse
        return done

    done, _ = await session.unpatched.run(key, run)
    return done


async def _witness(
    session: _Session,
    candidate: Candidate,
    classification: Classification,
    runner: Runner,
    env: Environment,
    python: str,
    tool: _Toolchain,
    repo_hash: str | None,
    version: str,
    key: str,
    declared: Mapping[str, Any],
) -> ExecutionObservation:
    blog = log.bind(candidate=candidate.id)
    head = Head(candidate.id, classification, version, key, VERSION)
    touched: list[str] = []
    before: dict[str, TestVerdict] | None = None
    try:
        if candidate.patch is not None:
            touched = await anyio.to_thread.run_sync(patch_paths, candidate.patch)
    except PatchError as e:
        return refused(head, environment=env, message=f"patch refused: {e}")
    async with anyio.create_task_group() as tg:
        if runner == "pytest" and candidate.patch is not None:

            async def get_before() -> None:
                nonlocal before
                before = await _before_run(session, candidate, runner, env, python, tool, repo_hash, declared)

            tg.start_soon(get_before)
        done: tuple[Run, bool] | PatchError
        if runner == "pytest" and candidate.patch is None:
            done = await _unpatched_run(session, candidate, runner, env, tool, repo_hash, declared)
        else:
            done = await _run_once(
                session, candidate, runner, env, tool, patch=candidate.patch, touched=touched
            )
        if isinstance(done, PatchError):
            tg.cancel_scope.cancel()  # no before-run is needed for a patch that cannot land
    if isinstance(done, PatchError):
        blog.info("patch_refused", error=str(done))
        return refused(head, environment=env, message=f"patch does not apply: {done}")
    run, config_changed = done
    blog.info(
        "executed",
        exit_code=run.evidence.exit_code,
        timed_out=run.evidence.timed_out,
        duration=round(run.evidence.duration, 3),
    )
    reverified: bool | None = None
    guarded = "antigaming" not in session.disabled
    passed = not failures(run.evidence, env.timeout_s) and ran_tests(run.evidence.tests)
    if guarded and runner == "pytest" and passed:
        redo = await _run_once(session, candidate, runner, env, tool, patch=candidate.patch, touched=touched)
        if isinstance(redo, PatchError):  # it applied a moment ago: the host changed under us
            raise redo
        again = redo[0]
        merged, agreed = reconcile(run.evidence, again.evidence)
        reverified = agreed
        if not agreed:
            blog.warning("nondeterministic", cache_key=key[:12])
            run = attrs.evolve(again, evidence=merged)
    tampered = guarded and candidate.patch is not None
    tampered = tampered and touches_oracle(touched, candidate.tests, config_changed)
    obs = assemble(
        head,
        environment=with_scratch(env, run.scratch_root),
        run=run,
        before=before,
        reverified=reverified,
        tampered=tampered,
    )
    blog.info(
        "observed", verdict=obs.verdict, failure_class=obs.failure.failure_class if obs.failure else None
    )
    return obs


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for e in error.exceptions for leaf in _leaves(e)]
    return [error]


def _unobserved(
    candidate: Candidate, classification: Classification, error: BaseException
) -> ExecutionObservation:
    message = "; ".join(f"{type(e).__name__}: {e}" for e in _leaves(error))
    return unobserved(
        ident=candidate.id, classification=classification, message=message, aexec_version=VERSION
    )


async def observe(candidate: Candidate, *, cache_dir: str | None = None) -> ExecutionObservation:
    """Run one candidate under its declared boundary and return its observation.

    Raises `RequestError` (before anything runs) when the candidate is malformed; a
    candidate that fails is an observation, not an exception.

    **Cancellation:** cancelling the call kills every process of the run (the whole
    tree, in its PID namespace) and removes its scratch roots, in shielded scopes,
    then re-raises the cancellation. Nothing of the run outlives the call.
    """
    return (await observe_many([candidate], cache_dir=cache_dir))[0]


def _selections(candidates: Iterable[Candidate]) -> dict[str, tuple[str, ...] | None]:
    """Per repo, the union of the candidates' test selections (None if one runs it all)."""
    union: dict[str, set[str] | None] = {}
    for c in candidates:
        if c.repo is None:
            continue
        have = union.setdefault(c.repo, set())
        if c.tests is None:
            union[c.repo] = None
        elif have is not None:
            have.update(c.tests)
    return {repo: None if tests is None else tuple(sorted(tests)) for repo, tests in union.items()}


class Executor(Protocol):
    """Somewhere else to run ``observe_many`` (e.g. `aexec.RayExecutor`), same records out."""

    async def observe_many(
        self,
        candidates: Iterable[Candidate],
        *,
        limit: int | None = None,
        cache_dir: str | None = None,
        on_observation: Callable[[int, ExecutionObservation], None] | None = None,
    ) -> list[ExecutionObservation]: ...


async def observe_many(
    candidates: Iterable[Candidate],
    *,
    limit: int | None = None,
    cache_dir: str | None = None,
    on_observation: Callable[[int, ExecutionObservation], None] | None = None,
    executor: Executor | None = None,
) -> list[ExecutionObservation]:
    """Observe many candidates concurrently; the results are in input order.

    At most ``limit`` runs are under way at once (default: 4 per core), and of those at
    most one per core while busy: a run that sleeps or waits gives its core to the next
    (`aexec._execute.Admission`). An explicit ``limit`` below the core count caps both.
    Identical candidates (same code, environment and command) run once and share the
    observation, as do the FAIL_TO_PASS before-runs of candidates on one repo. With
    ``cache_dir``, observations persist across calls. ``on_observation(index, obs)`` is
    called as each one is assembled. Every candidate is checked before anything runs; a
    malformed one raises `RequestError` naming its index. An error inside aexec while
    observing one candidate yields an observation with ``verdict == "error"`` for it and
    leaves the others untouched.

    **Cancellation:** cancelling the call kills every running candidate's process tree
    and removes every scratch root, in shielded scopes, then re-raises; observations
    already passed to ``on_observation`` stay valid.

    With an ``executor`` the candidates are observed there instead (each by this same
    local pipeline, wherever it runs).

    Runs are forked from warm interpreters (``aexec._forkserver``) that outlive the call
    and serve later ones; ``AEXEC_NO_FORKSERVER=1`` starts each run cold instead. A
    repo's modules are compiled once for all its runs (``docs/index.md``);
    ``AEXEC_NO_BYTECODE=1`` has each run compile its own.
    """
    if executor is not None:
        return await executor.observe_many(
            candidates, limit=limit, cache_dir=cache_dir, on_observation=on_observation
        )
    items = list(candidates)
    checked = []
    for i, c in enumerate(items):
        try:
            checked.append(validate(c))
        except RequestError as e:
            raise RequestError(f"candidate {i} ({c.id!r}): {e}") from None
    cores = os.cpu_count() or 1
    slots = limit if limit is not None else WAITING_RUNS_PER_CORE * cores
    if slots < 1:
        raise RequestError(f"limit must be >= 1, got {slots}")
    session = _Session(slots, cache_dir, cpu_slots=cores)
    session.selections = _selections(
        c for c, (_, runner) in zip(items, checked, strict=True) if runner == "pytest"
    )
    results: list[ExecutionObservation | None] = [None] * len(items)
    send, receive = anyio.create_memory_object_stream[int](max_buffer_size=len(items) or 1)
    for i in range(len(items)):
        send.send_nowait(i)
    send.close()

    async def worker() -> None:
        async for i in receive:
            classification, runner = checked[i]
            _ORDER.set(i)
            try:
                obs = await _observe_one(session, items[i], classification, runner)
            except Exception as e:
                log.exception("observation_failed", candidate=items[i].id)
                obs = _unobserved(items[i], classification, e)
            results[i] = obs
            if on_observation is not None:
                on_observation(i, obs)

    with receive:
        async with anyio.create_task_group() as tg:
            for _ in range(min(len(items), 4 * slots + 4)):
                tg.start_soon(worker)
    return [r for r in results if r is not None]
