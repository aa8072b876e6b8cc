"""A `Session`: what the candidates of one ``observe_many`` call share, and the `Job`
each of them becomes.

The session holds the call's admission slots, its dedup memos (observations,
before-runs, unpatched runs: each run once per key, `Memo`), the repo hashes and
compiled-bytecode of its repos, and the `Observer` it runs under (isolation,
interpreters, fork servers: what outlives a call).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import attrs

from .. import _runners as runners
from .. import _serde
from .._boundary.admission import Admission
from .._boundary.bytecode import compile_bytecode, prune, touch
from .._boundary.forkserver import ForkServer, top_level_names
from .._boundary.isolation import Isolation
from .._boundary.patch import PatchError, patch_paths
from .._boundary.scratch import import_roots
from .._boundary.supervise import Invocation, Supervisor
from .._boundary.trees import hash_tree
from .._environments.build import Built, default_root, ensure, exclude_newer_of
from .._environments.ft2font import rebuilt_note
from .._environments.inplace import InPlace, build_argv, ensure_inplace, touches_build
from .._environments.system import run_env
from .._log import get_logger
from .._options import Options
from .._raw import RawRun
from .._records import Candidate, Environment, ExecutionObservation
from .._stages.classify import Classification, Runner
from .._stages.judge import Outcome, Patches
from .._stages.keys import artifact_version, bytecode_key, observation_key, run_inputs
from .._stages.plan import SYSTEM_PATHS, view_readonly
from .._stages.policy import declare
from .cache import DiskCache, Inflight, Memo, in_thread
from .request import Checked
from .toolchain import LangToolchain, Toolchain, resolve_python
from .warm import Warm

log = get_logger(__name__)

#: Runs at once per core by default: a core's worth are busy, the rest may be waiting
#: (sleeping, blocked, at a deadline) without holding a core (see `Admission`).
WAITING_RUNS_PER_CORE = 4


@attrs.frozen
class Job:
    """One candidate on its way through the pipeline: everything its runs need."""

    #: Its position in the call's input: runs are admitted in this order.
    index: int
    candidate: Candidate
    classification: Classification
    runner: Runner
    tool: Toolchain
    env: Environment
    #: ``env`` as the cache key sees it.
    declared: Mapping[str, Any]
    repo_hash: str | None
    #: SHA-256 of what runs (`artifact_version`).
    version: str
    #: The behavioural cache key (spec §3.6).
    key: str
    #: A language beyond Python: its toolchain (``tool`` is then the driver's interpreter).
    lang: LangToolchain | None = None
    #: What the request's patches touch (read once, when the job is made).
    patches: Patches = attrs.field(factory=Patches)
    #: The repo's top-level modules (a pytest run's environment fault never names one).
    repo_modules: frozenset[str] = frozenset()
    #: The aexec version that observes it.
    aexec_version: str = ""
    #: The confirming re-run and the tamper check are on (off only for the §7.5 A/B).
    guarded: bool = True
    #: The base's C extensions built in place (a declared environment's ``inplace``).
    inplace: InPlace | None = None
    #: What the checkout's build writes that its runs need (a declared environment's
    #: ``Built.generated``: a setuptools-scm version file), laid into each run's copy.
    generated: tuple[tuple[str, str], ...] = ()


class Session:
    """What the candidates of one call share (see the module docstring)."""

    def __init__(
        self,
        warm: Warm,
        options: Options,
        scratch_base: str,
        isolation: Isolation,
        supervisor: Supervisor,
        *,
        limit: int,
        cpu_slots: int,
        selections: dict[str, tuple[str, ...] | None],
        declared: dict[tuple[Any, ...], tuple[Environment, Any]] | None = None,
        enforced: dict[tuple[tuple[str, ...], str], dict[str, str]] | None = None,
    ) -> None:
        self.warm = warm
        self.options = options
        #: Where this call's scratch roots are made.
        self.scratch_base = scratch_base
        self.version = warm.version
        self.isolation = isolation
        self.supervisor = supervisor
        dedup = "cache" not in self.options.ablate
        #: Removed only for the §7.5 A/B: the confirming re-run and the tamper check.
        self.guarded = "antigaming" not in self.options.ablate
        self.slots = Admission(cpu_slots, limit, isolation.cgroups)
        cache_dir = self.options.cache_dir if dedup else None
        self.cache = None if cache_dir is None else DiskCache(cache_dir)
        self.observations: Memo[ExecutionObservation] = Memo(
            disk=self.cache, encode=_serde.unstructure, decode=_serde.structure, dedup=dedup
        )
        #: A before-run's verdicts (`Outcome.verdicts`: a mapping on disk).
        self.befores: Memo[Outcome] = Memo(
            disk=self.cache, encode=lambda o: dict(o.verdicts or {}), decode=_verdicts, dedup=dedup
        )
        #: A before-run and the first run of an unpatched candidate on the same repo, tests
        #: and boundary are one execution (``aexec._pipeline.witness``).
        self.unpatched: Memo[Outcome] = Memo(dedup=dedup)
        #: A repo is hashed once per call, however many candidates share it.
        self.repo_hashes: Inflight[str] = Inflight()
        #: An interpreter is probed once per call (and once per change, with a cache).
        self.toolchains: Inflight[Toolchain] = Inflight()
        #: A fork server is started once per key per call.
        self.server_starts: Inflight[ForkServer | None] = Inflight()
        #: Repos whose pytest runs go cold for the rest of the call (`execute`).
        self.cold_repos: set[str | None] = set()
        #: A language's toolchain is probed once per call (and once per change).
        self.lang_toolchains: Inflight[LangToolchain] = Inflight()
        #: A declared environment is looked up (or built) once per call per repo and spec.
        self.environments: Inflight[Built] = Inflight()
        self.inplaces: Inflight[InPlace] = Inflight()
        self._bytecode: Inflight[str | None] = Inflight()
        #: Per repo, what the call's test runs select of it together (None: a whole suite).
        self.selections = selections
        self.runs = 0
        self._environments: dict[str, tuple[Environment, Any]] = {}
        #: Declared environments (and key forms) by inputs, the isolation's record by view.
        self._declared = declared if declared is not None else {}
        self._enforced_by_view = enforced if enforced is not None else {}
        self._max_cores = float(os.cpu_count() or 1)
        #: What finds an interpreter's Debian packages (`run_env`), read once per call.
        self._run_envs: dict[str, tuple[tuple[str, str], ...]] = {}

    def view_paths(self, tool: Toolchain, lang: LangToolchain | None) -> tuple[str, ...]:
        """What a run's view binds read-only beyond the system directories: the
        toolchain's prefixes and the paths `Options.readonly` declares."""
        return (*tool.paths, *(lang.paths if lang else ()), *self.options.readonly)

    def run_env(self, python: str) -> tuple[tuple[str, str], ...]:
        """`run_env` of ``python``, read once per call (an environment's record is
        written when it is built, before any run of its interpreter)."""
        found = self._run_envs.get(python)
        if found is None:
            found = self._run_envs[python] = tuple(run_env(python).items())
        return found

    def _enforced(self, tool: Toolchain, lang: LangToolchain | None) -> dict[str, str]:
        """The isolation's record, with what a view of ``tool`` (and ``lang``) binds: made
        once per view (every job of a call shares one toolchain, most often), not per job."""
        paths = self.view_paths(tool, lang)
        known = self._enforced_by_view.get((paths, tool.path))
        if known is None:
            known = self._enforced_by_view[(paths, tool.path)] = self._enforce(paths, tool.path)
        return known

    def _enforce(self, paths: tuple[str, ...], python: str) -> dict[str, str]:
        enforced = self.isolation.enforced
        if self.isolation.namespaces:
            bound, _ = view_readonly(paths, python)
            extra = [p for p in bound if p not in SYSTEM_PATHS]
            enforced = {
                **enforced,
                "filesystem": f"{enforced['filesystem']}; also read-only (toolchain, declared): {', '.join(extra) or 'none'}",
            }
        return enforced

    async def repo_hash(self, repo: str) -> str:
        found, _ = await self.repo_hashes.run(repo, lambda: in_thread(hash_tree, repo))
        return found

    async def job(self, index: int, checked: Checked) -> Job:
        """Probe, declare and key one candidate `validate` checked (no run yet); read what
        its patches touch."""
        candidate, classification, runner = checked.candidate, checked.classification, checked.runner
        built = await self.environment(candidate)
        python = checked.python if built is None else resolve_python(built.python)
        tool = await self.warm.toolchains.get(python, self.toolchains, self.cache)
        lang = None
        if candidate.language != "python":
            lang = await self.warm.lang_toolchains.get(candidate.language, self.lang_toolchains)
        name, named = (python, tool.version) if lang is None else (candidate.language, lang.version)
        p = candidate.policy
        # What `declare` is a function of (the policy typed: only an int is a valid ram_mib)
        declaring = (
            classification.mode,
            *((v, type(v)) for v in (p.timeout_s, p.ram_mib, p.cpu_cores, p.output_kib)),
            name,
            named,
            self.view_paths(tool, lang),
            tool.path,
            candidate.repo is not None,
            candidate.request_type,
            self._max_cores,
        )
        declared_once = self._declared.get(declaring)
        env = (
            declared_once[0]
            if declared_once is not None
            else declare(
                classification.mode,
                p,
                toolchain=name,
                toolchain_version=named,
                enforced=self._enforced(tool, lang),
                repo_view="copy" if candidate.repo is not None else "none",
                repo_ro=self.isolation.namespaces,
                max_cores=self._max_cores,
                request_type=candidate.request_type,
            )
        )
        patches, modules = Patches(), frozenset[str]()
        if candidate.patch is not None or candidate.test_patch is not None or runners.python_suite(runner):
            patches, modules = await in_thread(_read, candidate, runner)
        inplace = await self.inplace(candidate, built)
        if built is not None:
            env = attrs.evolve(env, environment_key=built.key, lock_hash=built.lock_hash)
        if inplace is not None:  # the patched run's: the candidate's and the oracle's files
            touched = [*patches.touched, *patches.oracle]
            rebuilt = touches_build(touched)
            force = rebuilt and "--force" in build_argv("python", touched)
            note = rebuilt_note(inplace.ft2font, inplace.ft2font_sources, touched if rebuilt else (), force)
            env = attrs.evolve(env, inplace_key=inplace.key, inplace_rebuilt=rebuilt, inplace_note=note)
        repo_hash = None if candidate.repo is None else await self.repo_hash(candidate.repo)
        version = artifact_version(
            repo_hash, candidate.patch, candidate.code, candidate.command, run_inputs(candidate)
        )
        if built is None and inplace is None:  # the environment is the declared one
            if declared_once is None:
                declared_once = self._declared[declaring] = self._distinct(env)
            env, declared = declared_once
        else:
            env, declared = self._distinct(env)
        key = observation_key(
            candidate,
            runner,
            aexec=self.version,
            code=version,
            environment=declared,
            toolchain=tool.identity,
            language_toolchain=None if lang is None else lang.fingerprint,
        )
        return Job(
            index,
            candidate,
            classification,
            runner,
            tool,
            env,
            declared,
            repo_hash,
            version,
            key,
            lang,
            patches=patches,
            repo_modules=modules,
            aexec_version=self.version,
            guarded=self.guarded,
            inplace=inplace,
            generated=() if built is None else built.generated,
        )

    def _distinct(self, env: Environment) -> tuple[Environment, dict[str, Any]]:
        """``env`` and its declared form, one record per distinct environment (each
        observation would hold its own: ~0.6 KiB, most of what 100,000 keep in memory)."""
        declared = _serde.unstructure_env(env)
        return self._environments.setdefault(json.dumps(declared, sort_keys=True), (env, declared))

    async def environment(self, candidate: Candidate) -> Built | None:
        """The candidate's declared environment, built on first use (None without one);
        raises `EnvBroken` when it cannot be had."""
        spec, repo = candidate.environment, candidate.repo
        if spec is None or repo is None:
            return None
        root = self.options.env_dir or default_root(self.options.cache_dir)
        key = json.dumps([repo, root, spec.as_json()])
        built, _ = await self.environments.run(key, lambda: in_thread(ensure, spec, repo, root))
        return built

    async def inplace(self, candidate: Candidate, built: Built | None) -> InPlace | None:
        """The base's C extensions built in place for ``built``, on first use (None unless
        the environment declares ``inplace``); raises `EnvBroken` ``build``."""
        spec, repo = candidate.environment, candidate.repo
        if built is None or spec is None or repo is None or not spec.inplace:
            return None
        root = self.options.env_dir or default_root(self.options.cache_dir)

        def make() -> InPlace:
            exclude = exclude_newer_of(spec, repo)
            return ensure_inplace(built, repo, root, exclude_newer=exclude, repo_version=spec.repo_version)

        got, _ = await self.inplaces.run(json.dumps([repo, root, built.key]), lambda: in_thread(make))
        return got

    async def server(self, job: Job) -> ForkServer | None:
        """The warm fork server for the job's runs, if one serves them (`Warm.server`)."""
        mode = "pytest" if job.runner == "pytest" else "bare"
        if mode == "pytest" and job.candidate.repo in self.cold_repos:
            return None
        autoload = job.candidate.pytest_plugins == "auto"
        return await self.warm.server(job.tool, mode, autoload, self.server_starts)

    async def execute(self, job: Job, invocation: Invocation) -> RawRun | None:
        """The supervisor's run of ``invocation``; None if its server forked it and it
        ended at once, to be run cold (`wire.GoColdRecord`: the modules the server
        imported ahead are not as the repo's pytest configuration has them imported,
        rewritten or not). The repo's later pytest runs in this call then go cold."""
        repo = job.candidate.repo
        if invocation.server is not None and job.runner == "pytest" and repo in self.cold_repos:
            invocation = attrs.evolve(invocation, server=None)  # prepared before it was known
        raw = await self.supervisor.execute(invocation)
        if invocation.server is None:
            return raw  # a cold run's report (the candidate's scribbles) decides nothing
        for record in raw.records:
            if record["kind"] == "go_cold":
                log.info("forkserver_cold", repo=repo, reason=record["reason"])
                self.cold_repos.add(repo)
                return None
        return raw

    async def bytecode(self, repo: str, tool: Toolchain) -> str | None:
        """``repo`` compiled for ``tool`` (`compile_bytecode`), made on first use, with the
        test modules all of the call's test runs of it select rewritten ahead."""
        if not self.options.bytecode:
            return None
        tests = self.selections.get(repo, ())
        key = bytecode_key(
            aexec=self.version,
            repo_hash=await self.repo_hash(repo),
            python=tool.path,
            toolchain=tool.fingerprint,
            tests=tests,
        )

        async def make() -> str | None:
            base = self.warm.bytecode_store(self.cache.directory if self.cache else None, self.scratch_base)
            out = os.path.join(base, key)
            if await in_thread(touch, out, base):
                return out
            if not await compile_bytecode(tool.path, repo, tests, out):
                return None
            await in_thread(prune, base)
            return out

        async def make_or_none() -> str | None:
            try:
                return await make()
            except OSError as e:  # an unusable store: each run compiles what it imports
                log.warning("bytecode_store_unusable", error=str(e))
                return None

        out, _ = await self._bytecode.run(key, make_or_none)
        return out


def _read(candidate: Candidate, runner: Runner) -> tuple[Patches, frozenset[str]]:
    """What the request's patches touch (`patch_paths`: ``git apply --numstat``) and, for a
    pytest run of a repo, the repo's top-level modules: one worker-thread hop per job."""
    touched: list[str] = []
    oracle, unreadable, oracle_unreadable = list[str](), None, None
    if candidate.test_patch is not None:
        try:
            oracle = patch_paths(candidate.test_patch)
        except PatchError as e:
            oracle_unreadable = str(e)
    if candidate.patch is not None and oracle_unreadable is None:
        try:
            touched = patch_paths(candidate.patch)
        except PatchError as e:
            unreadable = str(e)
    modules: frozenset[str] = frozenset()
    if runners.python_suite(runner) and candidate.repo is not None:
        modules = frozenset(top_level_names(import_roots(candidate.repo)))
    return Patches(tuple(touched), tuple(oracle), unreadable, oracle_unreadable), modules


def _verdicts(hit: Any) -> Outcome:
    if not isinstance(hit, dict):
        raise TypeError("a before-run entry is a mapping of node ids to verdicts")
    return Outcome(verdicts={str(k): v for k, v in hit.items()})
