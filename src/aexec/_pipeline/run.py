"""One execution of a job in a fresh scratch root, in three phases (`run`):

1. **prepare** (`prepare`, one worker-thread hop): the scratch root and the view (with
   the repo's compiled bytecode), the patch and the oracle ``test_patch``, the sources,
   the pure `plan`, the wire's instructions, the seal, the snapshot before the run;
2. **supervise**: the session's `Supervisor` runs it when admission lets it start;
3. **collect** (`collect`, one worker-thread hop): parse the evidence, diff the scratch
   root, read what the repo defines of what the run found missing.

A small Python job without a repo is prepared, and collected when what its run left is
small, on the loop's thread instead (`aexec._pipeline.small`).

What the run needs warm (its fork server, the repo's bytecode) is awaited first. A
refused patch comes back as data (`Outcome.refused`, ``oracle_refused``), and so does the
scratch root (`Done.scratch`): the caller removes it once the observation is delivered.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from .. import _languages as langs
from .. import _runners as runners
from .._boundary.forkserver import ForkServer
from .._boundary.patch import PatchError, apply_patch
from .._boundary.scratch import (
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
    read_inside,
    read_regular,
    snapshot,
    texts_naming,
    without,
    write_inside,
)
from .._errors import AexecError
from .._inputs import decode_files
from .._raw import RawRun
from .._stages import canary as canaries
from .._stages.assemble import Run
from .._stages.envfault import defined_in, wanted
from .._stages.judge import Outcome
from .._stages.parse import SNIPPET_NAME, parse, parse_language
from .._stages.plan import Scratch
from .._types import MAX_FETCH_BYTES, MAX_FETCH_TOTAL_BYTES
from . import invoke
from .cache import in_thread
from .canary import canary_args, place
from .rebuild import Rebuild, carry_base, plan_rebuild, rebuild
from .session import Job, Session
from .small import small_job, small_result


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


@attrs.frozen
class Done:
    """One execution, as data: what the judge reads, and the scratch root it left (the
    caller removes it, `remove_scratches`)."""

    outcome: Outcome
    scratch: Scratch


@attrs.frozen
class Prepared:
    """A scratch root laid out for one run (`prepare`); ``invocation`` is None when a
    patch did not apply (``refusal`` says which): then nothing runs."""

    scratch: Scratch
    refusal: Outcome | None = None
    invocation: Invocation | None = None
    config_changed: bool = False
    snippet: str | None = None
    #: What the patch touched (nothing without it).
    touched: list[str] = attrs.field(factory=list)
    written: dict[str, str] = attrs.field(factory=dict)
    before: dict[str, tuple[int, int]] = attrs.field(factory=dict)
    #: The in-place build to run first (a patch touched a compiled source).
    rebuild: Rebuild | None = None
    canary: canaries.Canary | None = None


async def run(session: Session, job: Job, *, patched: bool) -> Done:
    """One execution of ``job`` in a fresh scratch root, with the candidate's patch when
    ``patched`` (and the request's ``test_patch`` after it, on the oracle's files as the
    repo has them). Two worker-thread hops: prepare, collect."""
    repo = job.candidate.repo
    server = await session.server(job)
    # A language's suite has no Python to compile ahead.
    bytecode = None if repo is None or job.lang is not None else await session.bytecode(repo, job.tool)
    session.runs += 1
    small, args = small_job(job), (session, job, patched, server, bytecode, session.runs)
    with anyio.CancelScope(shield=True):  # a root once made is handed back or removed
        prep = prepare(*args) if small else await anyio.to_thread.run_sync(prepare, *args)
    if prep.invocation is None:
        assert prep.refusal is not None
        return Done(prep.refusal, prep.scratch)
    try:
        if prep.rebuild is not None:
            failed, tests, before = await rebuild(session, job, prep.rebuild, prep.scratch, prep.invocation)
            if failed is not None or before is None:
                return Done(failed or Outcome(), prep.scratch)
            prep = attrs.evolve(prep, invocation=tests, before=before)
        assert prep.invocation is not None
        async with session.slots.slot(prep.invocation.run, job.index):
            raw = await session.execute(job, prep.invocation)
        if raw is None:
            outcome = None
        elif small and small_result(job, prep.scratch.root, raw):
            outcome = collect(job, prep, raw)
        else:
            outcome = await in_thread(collect, job, prep, raw)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(remove_scratch, prep.scratch)
        raise
    if outcome is None:  # a warm run that could not run as a cold one: run cold, afresh
        await remove_scratches([prep.scratch])
        return await run(session, job, patched=patched)
    return Done(outcome, prep.scratch)


def prepare(
    session: Session, job: Job, patched: bool, server: ForkServer | None, bytecode: str | None, number: int
) -> Prepared:
    """Phase 1 (blocking, one worker thread): lay the run out; see the module docstring.
    The scratch root is removed here if laying out fails."""
    scratch = make_scratch(session.isolation.namespaces, session.scratch_base)
    try:
        return _lay_out(session, job, scratch, patched, server, bytecode, number)
    except BaseException:
        remove_scratch(scratch)
        raise


def _lay_out(
    session: Session,
    job: Job,
    scratch: Scratch,
    patched: bool,
    server: ForkServer | None,
    bytecode: str | None,
    number: int,
) -> Prepared:
    c, env, lang = job.candidate, job.env, job.lang
    make_view(scratch, c.repo, bytecode)
    carry_base(job, scratch.work)
    touched = list(job.patches.touched) if patched else []
    oracle = list(job.patches.oracle)
    config_changed = False
    if patched:
        assert c.repo is not None and c.patch is not None
        try:
            apply_patch(scratch, c.patch)
        except PatchError as e:
            return Prepared(scratch, refusal=Outcome(refused=str(e)))
        config_changed = _config_changed(c.repo, scratch.work, c.language, touched)
    if c.test_patch is not None:
        assert c.repo is not None
        if patched and oracle:
            _reset(c.repo, scratch.work, [p for p in oracle if p in touched])
        try:
            apply_patch(scratch, c.test_patch)
        except PatchError as e:
            return Prepared(scratch, refusal=Outcome(oracle_refused=str(e)))
    for rel, data in decode_files(c.files or ()).items():  # the sources, written next, win
        write_inside(scratch.work, rel, data)
    stdin = None if c.stdin is None else write_private(scratch, "stdin", c.stdin)
    snippet = None
    sources: dict[str, str] = {}
    if lang is not None:
        sources = _write_sources(scratch, job)
    elif c.code is not None:
        snippet = write_private(scratch, SNIPPET_NAME, c.code)
    canary = place(job, scratch.work)
    uid = run_uid() if session.isolation.namespaces else None
    name = f"{number}-{os.path.basename(scratch.root)}"
    invocation, facts, the_plan = invoke.invocation(
        session,
        job,
        scratch,
        server,
        name,
        uid,
        snippet=snippet,
        stdin=stdin,
        touched_sources=_existing(scratch.work, [*touched, *oracle]),
        canary_args=canary_args(scratch.work, canary),
        canary_file=None if canary is None else canary.path,
    )
    lim = the_plan.limits
    if uid is not None:
        seal_scratch(scratch, uid, lim.disk_bytes)
    built = plan_rebuild(session, job, facts, env, touched, oracle, uid, lim.disk_bytes)
    before = snapshot(scratch.root)
    return Prepared(
        scratch, None, invocation, config_changed, snippet, touched, sources, before, built, canary
    )


def _fetch(work: str, paths: tuple[str, ...]) -> dict[str, str | None]:
    """``fetch_files`` after the run: each path's content, base64; None if it is absent,
    not a regular file, reached through a link, or over its cap (or the total's)."""
    out: dict[str, str | None] = {}
    room = MAX_FETCH_TOTAL_BYTES
    for rel in paths:
        data = read_inside(work, rel, min(MAX_FETCH_BYTES, room))
        room -= 0 if data is None else len(data)
        out[rel] = None if data is None else base64.b64encode(data).decode("ascii")
    return out


def collect(job: Job, prep: Prepared, raw: RawRun) -> Outcome:
    """Phase 3 (blocking, one worker thread): the run's evidence and what it changed."""
    c, scratch, env = job.candidate, prep.scratch, job.env
    if job.lang is not None:
        evidence = parse_language(
            raw,
            c.language,
            cwd=scratch.work,
            timeout_s=env.timeout_s,
            request_type=c.request_type,
            tests=c.tests if c.tests is None or prep.canary is None else (*c.tests, *prep.canary.ids()),
        )
    else:
        evidence = parse(raw, job.runner, cwd=scratch.work, snippet=prep.snippet)
    evidence, canary = canaries.split(evidence, prep.canary)
    if evidence.box_failed:
        raise AexecError(raw.stderr.strip().splitlines()[-1] if raw.stderr.strip() else "boundary failed")
    summary, changes, omitted = _changes(
        scratch.root, prep.before, own_files(job, prep.written), baseline(job, prep.written, prep.touched)
    )
    defines: frozenset[tuple[str, str]] = frozenset()
    if runners.python_suite(job.runner) and c.repo is not None:
        defines = frozenset(repo_defines(c.repo, wanted(evidence)))
    run = Run(
        evidence=evidence,
        stdout=canaries.scrub(raw.stdout, prep.canary),
        stderr=canaries.scrub(raw.stderr, prep.canary),
        cwd=scratch.work,
        scratch_root=scratch.root,
        changed_state=summary,
        cpu_s=raw.cpu_s,
        peak_ram_mib=raw.peak_ram_mib,
        changes=changes,
        changes_omitted=omitted,
        files_out=None if c.fetch_files is None else _fetch(scratch.work, c.fetch_files),
        canary=canary,
    )
    return Outcome(run, prep.config_changed, defines=defines)


def repo_defines(repo: str, want: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which of ``want`` (fixtures and markers pytest found missing) a file of the
    unpatched repo defines."""
    found: set[tuple[str, str]] = set()
    for path, text in texts_naming(repo, {name for _, name in want}):
        found |= defined_in(path, text, want)
    return found


def _remove_all(scratches: list[Scratch]) -> None:
    for scratch in scratches:
        remove_scratch(scratch)


async def remove_scratches(scratches: list[Scratch]) -> None:
    """Remove the scratch roots runs left in ``scratches`` (shielded, one thread hop)."""
    if scratches:
        todo = list(scratches)
        scratches.clear()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_remove_all, todo)
