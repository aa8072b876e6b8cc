"""One execution of a job in a fresh scratch root: lay out, plan, supervise, parse.

The shell around the pure `plan`: it makes the scratch root and the view (with the
repo's compiled bytecode and the patch), gathers what only I/O can tell, writes the
plan's instructions to the wire, hands the run to the session's `Supervisor` when
admission lets it start, and parses what came back. Every filesystem walk runs in a
worker thread; the scratch root is removed, shielded, whatever happens.
"""

from __future__ import annotations

import json
import os

import anyio

from .._boundary import DRIVER
from .._boundary.cgroups import Caps
from .._boundary.patch import PatchError, apply_patch
from .._boundary.scratch import (
    SCRATCH_PREFIX,
    import_roots,
    make_scratch,
    make_view,
    masks,
    remove_scratch,
    run_uid,
    seal_scratch,
    write_private,
)
from .._boundary.supervise import Invocation
from .._boundary.trees import PYTEST_CONFIGS, describe_changes, pytest_config, snapshot
from .._errors import AexecError
from .._stages.assemble import Run
from .._stages.parse import SNIPPET_NAME, parse
from .._stages.plan import BoxFacts, RunFacts, candidate_env, needed_paths, plan
from .._stages.policy import limits
from .cache import in_thread
from .session import Job, Session


def _config_changed(repo: str, work: str) -> bool:
    return any(pytest_config(repo, n) != pytest_config(work, n) for n in PYTEST_CONFIGS)


def _existing(work: str, paths: list[str]) -> tuple[str, ...]:
    return tuple(p for p in paths if p.endswith(".py") and os.path.isfile(os.path.join(work, p)))


async def run_once(
    session: Session, job: Job, *, patch: str | None, touched: list[str]
) -> tuple[Run, bool] | PatchError:
    """One execution in a fresh scratch root: (the run, whether pytest config changed).

    A patch that does not apply is returned, not raised: nothing ran.
    """
    candidate, tool, env = job.candidate, job.tool, job.env
    box = session.isolation.namespaces
    scratch = await in_thread(make_scratch, box, session.scratch_base)
    session.runs += 1
    run_name = f"{session.runs}-{os.path.basename(scratch.root)}"
    try:
        bytecode = None if candidate.repo is None else await session.bytecode(candidate.repo, tool)
        await in_thread(make_view, scratch, candidate.repo, bytecode)
        config_changed = False
        if patch is not None:
            try:
                await apply_patch(scratch, patch)
            except PatchError as e:
                return e
            assert candidate.repo is not None
            config_changed = await in_thread(_config_changed, candidate.repo, scratch.work)
        snippet = None
        if candidate.code is not None:
            snippet = write_private(scratch, SNIPPET_NAME, candidate.code)
        roots = tuple(import_roots(scratch.work)) if candidate.repo is not None else (scratch.work,)
        mode = "pytest" if job.runner == "pytest" else "bare"
        autoload = candidate.pytest_plugins == "auto"
        server_env = candidate_env(scratch, tool.path, autoload=autoload)
        server = await session.observer.server(session, tool, mode, server_env)
        if server is not None and not server.serves(roots):
            server = None  # the repo shadows a module the server has imported: go cold
        box_facts = None
        if box:
            box_facts = BoxFacts(
                uid=run_uid(),
                supervisor_pids=(os.getpid(), *([server.pid] if server else [])),
                sibling_prefix=os.path.join(os.path.dirname(scratch.root), SCRATCH_PREFIX),
                masks=await in_thread(masks, needed_paths(scratch, tool.paths)),
            )
        cgroups = session.isolation.cgroups
        facts = RunFacts(
            runner=job.runner,
            scratch=scratch,
            python=tool.path,
            toolchain_paths=tool.paths,
            import_roots=roots,
            snippet=snippet,
            argv=tuple(candidate.command or ()),
            tests=candidate.tests,
            touched_sources=await in_thread(_existing, scratch.work, touched),
            cgroup_procs=tuple(cgroups.procs_files(run_name)) if cgroups is not None else (),
            box=box_facts,
            autoload=autoload,
        )
        the_plan = plan(facts, env)
        report = write_private(scratch, "report.jsonl", "")
        if box_facts is not None:
            os.chown(report, box_facts.uid, box_facts.uid)
            await in_thread(seal_scratch, scratch, box_facts.uid, limits(env).disk_bytes)
        spec_path = write_private(scratch, "spec.json", json.dumps(the_plan.instructions))
        before = await in_thread(snapshot, scratch.root)
        lim = limits(env)
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
        evidence = parse(raw, job.runner, cwd=scratch.work, snippet=snippet)
        if evidence.box_failed:
            raise AexecError(raw.stderr.strip().splitlines()[-1] if raw.stderr.strip() else "boundary failed")
        after = await in_thread(snapshot, scratch.root)
        run = Run(
            evidence=evidence,
            stdout=raw.stdout,
            stderr=raw.stderr,
            cwd=scratch.work,
            scratch_root=scratch.root,
            changed_state=describe_changes(before, after),
            cpu_s=raw.cpu_s,
            peak_ram_mib=raw.peak_ram_mib,
        )
        return run, config_changed
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(remove_scratch, scratch)
