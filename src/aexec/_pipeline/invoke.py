"""What the supervisor is handed for one run laid out in a scratch root: the facts the
pure `plan` needs, the driver's instructions and report in the private dir, and the
`Invocation`. Shared by a fresh run (``aexec._pipeline.run``) and a command of a
workspace (``aexec._pipeline.workspace``), which differ only in how the root is laid out.
"""

from __future__ import annotations

import json
import os

from .._boundary import DRIVER
from .._boundary.cgroups import Caps
from .._boundary.forkserver import ForkServer
from .._boundary.scratch import import_roots, write_private
from .._boundary.supervise import Invocation
from .._stages.plan import BoxFacts, Plan, RunFacts, Scratch, plan
from .session import Job, Session


def invocation(
    session: Session,
    job: Job,
    scratch: Scratch,
    server: ForkServer | None,
    name: str,
    uid: int | None,
    *,
    snippet: str | None,
    stdin: str | None,
    touched_sources: tuple[str, ...],
    cwd: str | None = None,
    command_env: dict[str, str] | None = None,
    canary_args: tuple[str, ...] = (),
    canary_file: str | None = None,
) -> tuple[Invocation, RunFacts, Plan]:
    """The run ``name`` of ``job`` in ``scratch`` (laid out; sealed by the caller), with
    its instructions and an empty report written. ``cwd`` (under ``work``) and
    ``command_env`` are a workspace command's: where it starts, what it adds to its
    environment (never the driver's own). ``canary_args`` and ``canary_file``: a graded
    run's canary (`aexec._pipeline.canary`)."""
    c, tool, env, lang = job.candidate, job.tool, job.env, job.lang
    roots = tuple(import_roots(scratch.work)) if c.repo is not None else (scratch.work,)
    if server is not None and not server.serves(roots):
        server = None  # the repo shadows a module the server has imported: go cold
    cgroups = session.isolation.cgroups
    box_facts = None
    if uid is not None:
        box_facts = BoxFacts(
            uid=uid,
            supervisor_pids=(os.getpid(), *([server.pid] if server else [])),
            seccomp=session.isolation.seccomp is not None,
            etc=session.warm.etc_dir(),
            repo=None if c.repo is None else os.path.realpath(c.repo),
        )
    facts = RunFacts(
        runner=job.runner,
        scratch=scratch,
        python=tool.path,
        toolchain_paths=session.view_paths(tool, lang),
        import_roots=roots,
        snippet=snippet,
        argv=tuple(c.command or ()),
        tests=c.tests,
        touched_sources=touched_sources,
        cgroup_procs=tuple(cgroups.procs_files(name)) if cgroups is not None else (),
        box=box_facts,
        memory_cgroup=cgroups is not None and cgroups.memory,
        language=c.language,
        request_type=c.request_type,
        lang_tools=() if lang is None else lang.tools,
        autoload=c.pytest_plugins == "auto",
        stdin_file=stdin,
        system=session.run_env(tool.path),
        canary=canary_args,
        canary_file=canary_file,
    )
    the_plan = plan(facts, env)
    lim = the_plan.limits
    report = write_private(scratch, "report.jsonl", "")
    if uid is not None:
        os.chown(report, uid, uid)
    instructions = the_plan.instructions.copy()
    if cwd is not None:
        instructions["cwd"] = cwd
    if command_env:
        instructions["command_env"] = command_env
    spec_path = write_private(scratch, "spec.json", json.dumps(instructions))
    inv = Invocation(
        argv=(tool.path, "-s", DRIVER, spec_path),
        cwd=scratch.work,
        env=the_plan.env_dict,
        timeout_s=env.timeout_s,
        report_path=report,
        run=name,
        caps=Caps(env.cpu_cap_cores, lim.tree_memory_bytes, lim.processes),
        server=server,
        isolation=session.isolation,
        stream_cap=env.stdout_cap_kib * 1024,
    )
    return inv, facts, the_plan
