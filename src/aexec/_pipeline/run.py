"""One execution of a job in a fresh scratch root: lay out, plan, supervise, parse.

The shell around the pure `plan`: it makes the scratch root and the view (with the
repo's compiled bytecode and the patch), gathers what only I/O can tell, writes the
plan's instructions to the wire, hands the run to the session's `Supervisor` when
admission lets it start, and parses what came back. Every filesystem walk runs in a
worker thread; the scratch root is removed, shielded, whatever happens (by the caller,
right after the observation is delivered, when it sets `DEFERRED_CLEANUP`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import anyio

from .. import _languages as langs
from .._boundary import DRIVER
from .._boundary.cgroups import Caps
from .._boundary.patch import PatchError, apply_patch
from .._boundary.scratch import (
    import_roots,
    make_scratch,
    make_view,
    remove_scratch,
    run_uid,
    seal_scratch,
    write_private,
)
from .._boundary.supervise import Invocation
from .._boundary.trees import (
    PYTEST_CONFIGS,
    describe_changes,
    list_changes,
    pytest_config,
    read_regular,
    snapshot,
    without,
)
from .._errors import AexecError
from .._stages.assemble import Run
from .._stages.parse import SNIPPET_NAME, parse, parse_language
from .._stages.plan import BoxFacts, Plan, RunFacts, Scratch, candidate_env, plan
from .._stages.policy import limits
from .cache import in_thread
from .session import Job, Session


class OracleError(Exception):
    """The request's ``test_patch`` does not apply to its repo: an error of the instance,
    never the candidate's (the oracle's files are reset before it is applied, so a
    candidate's patch cannot make it fail)."""


def _reset(repo: str, work: str, paths: list[str]) -> None:
    """Put ``paths`` of the view back as they are in ``repo`` (absent if absent there)."""
    for rel in paths:
        src, dst = os.path.join(repo, rel), os.path.join(work, rel)
        if os.path.isdir(dst) and not os.path.islink(dst):
            shutil.rmtree(dst)
        elif os.path.lexists(dst):
            os.unlink(dst)
        if os.path.lexists(src) and not os.path.isdir(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)


def _config_changed(repo: str, work: str, language: str = "python", touched: list[str] | None = None) -> bool:
    """Did the patch change the runner's configuration: pytest's, or for a language's
    suite the test part (`aexec._languages.Suite.oracle_text`) of a file it touched?"""
    if language == "python":
        return any(pytest_config(repo, n) != pytest_config(work, n) for n in PYTEST_CONFIGS)
    suite = langs.language(language).runner()

    def text(path: str) -> str | None:
        data = read_regular(path)
        return None if data is None else data.decode("utf-8", "replace")

    return any(
        suite.oracle_text(p, text(os.path.join(repo, p))) != suite.oracle_text(p, text(os.path.join(work, p)))
        for p in touched or ()
    )


def _empty_scratch(tmpfs: bool, base: str) -> Scratch:
    """A fresh scratch root with an empty ``work`` dir (no repo to copy)."""
    scratch = make_scratch(tmpfs, base)
    try:
        make_view(scratch, None)
    except BaseException:
        remove_scratch(scratch)
        raise
    return scratch


def _existing(work: str, paths: list[str]) -> tuple[str, ...]:
    return tuple(p for p in paths if p.endswith(".py") and os.path.isfile(os.path.join(work, p)))


def _write_sources(scratch: Scratch, job: Job) -> dict[str, str]:
    """A language's source file and support files, written into the run's ``work`` dir."""
    c = job.candidate
    files = langs.language(c.language).files(c.request_type, c.code)  # run_suite: aexec's own only
    for name, text in files.items():
        with open(os.path.join(scratch.work, name), "w", encoding="utf-8") as f:
            f.write(text)
    return files


def own_files(job: Job, written: dict[str, str]) -> tuple[str, ...]:
    """Paths (relative to the scratch root) that are aexec's, never a change of the run."""
    if job.candidate.language == "python":
        return ()
    lang = langs.language(job.candidate.language)
    if job.candidate.request_type == "run_suite":
        own = (*written, langs.OWN_PREFIX + "*")
        return (*(f"work/{n}" for n in own), *(f"home/{n}" for n in lang.runner().own_files))
    names = [*written, *lang.own_files, langs.OWN_PREFIX + "*"]
    return tuple(f"work/{n}" for n in names)


def baseline(job: Job, written: dict[str, str], touched: list[str]) -> Callable[[str], bytes | None]:
    """What a path held before the run, where it is known without having kept it: the
    sources aexec wrote, and the repo's files the patch did not touch."""
    repo = job.candidate.repo

    def before(rel: str) -> bytes | None:
        if not rel.startswith("work/"):
            return None
        inner = rel[len("work/") :]
        if inner in written:
            return written[inner].encode()
        if repo is not None and inner not in touched:
            return read_regular(os.path.join(repo, inner))
        return None

    return before


def _changes(
    root: str,
    before: dict[str, tuple[int, int]],
    own: tuple[str, ...],
    known: Callable[[str], bytes | None],
) -> tuple[str, tuple[Any, ...], int]:
    """What the run changed under ``root`` since ``before``, aexec's ``own`` files aside."""
    before, after = without(before, own), without(snapshot(root), own)
    listed, omitted = list_changes(root, before, after, known)
    return describe_changes(before, after), listed, omitted


#: Set (to a list) by a caller that delivers the observation first and removes the
#: scratch roots after (`Observer.observe_checked`, issue 20): `run_once` then leaves
#: its root in the list instead of removing it on the observation's path. Unset, it
#: removes its root itself, as before.
DEFERRED_CLEANUP: ContextVar[list[Scratch] | None] = ContextVar("aexec_deferred_cleanup", default=None)


async def run_once(
    session: Session, job: Job, *, patch: str | None, touched: list[str], oracle: list[str] | None = None
) -> tuple[Run, bool] | PatchError:
    """One execution in a fresh scratch root: (the run, whether pytest config changed).

    A patch that does not apply is returned, not raised: nothing ran. The request's
    ``test_patch`` (touching ``oracle``) is applied after ``patch``, on the oracle's
    files as the repo has them; if it does not apply, `OracleError` is raised.
    """
    candidate, tool, env = job.candidate, job.tool, job.env
    box = session.isolation.namespaces
    if candidate.repo is None:  # nothing to copy: the root and its empty view at once
        scratch = await in_thread(_empty_scratch, box, session.scratch_base)
    else:
        scratch = await in_thread(make_scratch, box, session.scratch_base)
    session.runs += 1
    run_name = f"{session.runs}-{os.path.basename(scratch.root)}"
    try:
        if candidate.repo is not None:
            # A language's suite has no Python to compile ahead.
            bytecode = None
            if job.lang is None:
                bytecode = await session.bytecode(candidate.repo, tool)
            await in_thread(make_view, scratch, candidate.repo, bytecode)
        config_changed = False
        if patch is not None:
            try:
                await apply_patch(scratch, patch)
            except PatchError as e:
                return e
            assert candidate.repo is not None
            config_changed = await in_thread(
                _config_changed, candidate.repo, scratch.work, candidate.language, touched
            )
        if candidate.test_patch is not None:
            assert candidate.repo is not None
            if patch is not None and oracle:
                await in_thread(_reset, candidate.repo, scratch.work, [p for p in oracle if p in touched])
            try:
                await apply_patch(scratch, candidate.test_patch)
            except PatchError as e:
                raise OracleError(str(e)) from None
        snippet = None
        written: dict[str, str] = {}
        lang = job.lang
        if lang is not None:
            written = await in_thread(_write_sources, scratch, job)
        elif candidate.code is not None:
            snippet = write_private(scratch, SNIPPET_NAME, candidate.code)
        toolchain_paths = session.view_paths(tool, lang)
        roots = tuple(import_roots(scratch.work)) if candidate.repo is not None else (scratch.work,)
        mode = "pytest" if job.runner == "pytest" else "bare"
        autoload = candidate.pytest_plugins == "auto"
        server_env = candidate_env(scratch, tool.path, autoload=autoload)
        server = await session.observer.server(session, tool, mode, server_env)
        if server is not None and not server.serves(roots):
            server = None  # the repo shadows a module the server has imported: go cold
        uid = run_uid() if box else None
        cgroups = session.isolation.cgroups
        lim = limits(env)

        def lay_out() -> tuple[Plan, str, dict[str, tuple[int, int]]]:
            """The plan and the files the driver reads, and the scratch root as it is
            before the run: one worker-thread hop (each costs the loop a wake-up)."""
            box_facts = None
            if uid is not None:
                box_facts = BoxFacts(
                    uid=uid,
                    supervisor_pids=(os.getpid(), *([server.pid] if server else [])),
                    seccomp=session.isolation.seccomp is not None,
                    etc=session.observer.etc_dir(),
                    repo=None if candidate.repo is None else os.path.realpath(candidate.repo),
                )
            facts = RunFacts(
                runner=job.runner,
                scratch=scratch,
                python=tool.path,
                toolchain_paths=toolchain_paths,
                import_roots=roots,
                snippet=snippet,
                argv=tuple(candidate.command or ()),
                tests=candidate.tests,
                touched_sources=_existing(scratch.work, [*touched, *(oracle or ())]),
                cgroup_procs=tuple(cgroups.procs_files(run_name)) if cgroups is not None else (),
                box=box_facts,
                memory_cgroup=cgroups is not None and cgroups.memory,
                language=candidate.language,
                request_type=candidate.request_type,
                lang_tools=() if lang is None else lang.tools,
                autoload=autoload,
            )
            the_plan = plan(facts, env)
            report = write_private(scratch, "report.jsonl", "")
            if uid is not None:
                os.chown(report, uid, uid)
                seal_scratch(scratch, uid, lim.disk_bytes)
            spec_path = write_private(scratch, "spec.json", json.dumps(the_plan.instructions))
            return the_plan, spec_path, snapshot(scratch.root)

        the_plan, spec_path, before = await in_thread(lay_out)
        report = os.path.join(scratch.private, "report.jsonl")
        invocation = Invocation(
            argv=(tool.path, "-s", DRIVER, spec_path),
            cwd=scratch.work,
            env=the_plan.env_dict,
            timeout_s=env.timeout_s,
            report_path=report,
            run=run_name,
            caps=Caps(env.cpu_cap_cores, lim.tree_memory_bytes, lim.processes),
            server=server,
            isolation=session.isolation,
        )
        async with session.slots.slot(run_name, job.index):
            raw = await session.supervisor.execute(invocation)
        if lang is not None:
            evidence = parse_language(
                raw,
                candidate.language,
                cwd=scratch.work,
                timeout_s=env.timeout_s,
                request_type=candidate.request_type,
                tests=candidate.tests,
            )
        else:
            evidence = parse(raw, job.runner, cwd=scratch.work, snippet=snippet)
        if evidence.box_failed:
            raise AexecError(raw.stderr.strip().splitlines()[-1] if raw.stderr.strip() else "boundary failed")
        summary, changes, omitted = await in_thread(
            _changes, scratch.root, before, own_files(job, written), baseline(job, written, touched)
        )
        run = Run(
            evidence=evidence,
            stdout=raw.stdout,
            stderr=raw.stderr,
            cwd=scratch.work,
            scratch_root=scratch.root,
            changed_state=summary,
            cpu_s=raw.cpu_s,
            peak_ram_mib=raw.peak_ram_mib,
            changes=changes,
            changes_omitted=omitted,
        )
        return run, config_changed
    finally:
        deferred = DEFERRED_CLEANUP.get()
        if deferred is not None:
            deferred.append(scratch)  # removed by the caller once the observation is out
        else:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(remove_scratch, scratch)


def _remove_all(scratches: list[Scratch]) -> None:
    for scratch in scratches:
        remove_scratch(scratch)


async def remove_deferred(scratches: list[Scratch]) -> None:
    """Remove the scratch roots `run_once` left in ``scratches`` (shielded, one thread hop)."""
    if scratches:
        todo = list(scratches)
        scratches.clear()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_remove_all, todo)
