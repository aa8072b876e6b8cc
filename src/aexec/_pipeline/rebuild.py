"""A run of a repo that builds C extensions in place (``aexec._environments.inplace``):
the base's artifacts carried into the run's copy, and the in-place build run again there,
under the run's boundary and deadline, when a patch touches a compiled source.

`lay_out` is called in the run's prepare hop (after the view is made: `carry`; after
the patches: `plan_rebuild`); `rebuild` runs the build before the tests, in the same
scratch root, as a ``command`` run of its own (its own report, the run's uid, cgroup caps
and view, with the build requirements' overlay bound read-only). A build that fails is
the candidate's (``Outcome.build_failed``: class ``compile``), or the instance's when only
its ``test_patch`` touched a compiled source. The tests get what is left of the deadline.
"""

from __future__ import annotations

import json
import os
import time

import attrs

from .._boundary import DRIVER
from .._boundary.cgroups import Caps
from .._boundary.scratch import seal_scratch, write_private
from .._boundary.supervise import Invocation
from .._boundary.trees import snapshot
from .._environments.inplace import build_argv, carry, tail, touches_build
from .._raw import RawRun
from .._records import Environment
from .._stages.judge import Outcome
from .._stages.plan import RunFacts, Scratch, plan
from .cache import in_thread
from .session import Job, Session


@attrs.frozen
class Rebuild:
    """The in-place build a run needs before its tests."""

    invocation: Invocation
    #: Only the request's ``test_patch`` touched a compiled source (not the candidate).
    oracle_only: bool
    #: The run's uid (None without the kernel boundary) and disk cap: the root is sealed
    #: again after the build, with room for the tests.
    uid: int | None
    disk_bytes: int


def carry_base(job: Job, work: str) -> None:
    """Lay the base's artifacts into the run's copy: the modules its build writes (where the
    checkout lacks them), and its in-place build's."""
    for rel, text in job.generated:
        path = os.path.join(work, rel)
        if not os.path.lexists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
    if job.inplace is not None:
        carry(job.inplace, work)


def plan_rebuild(
    session: Session,
    job: Job,
    facts: RunFacts,
    env: Environment,
    touched: list[str],
    oracle: list[str],
    uid: int | None,
    disk_bytes: int,
) -> Rebuild | None:
    """The build to run first, when the run's patches touch a compiled source or a build
    file (None otherwise). Writes its instructions into the scratch root's private dir."""
    if job.inplace is None or not touches_build([*touched, *oracle]):
        return None
    name = os.path.basename(facts.scratch.root) + "-build"
    cgroups = session.isolation.cgroups
    build_facts = attrs.evolve(
        facts,
        runner="command",
        argv=tuple(build_argv(facts.python, [*touched, *oracle])),
        tests=None,
        snippet=None,
        stdin_file=None,
        touched_sources=(),
        toolchain_paths=(*facts.toolchain_paths, job.inplace.overlay),
        import_roots=(facts.scratch.work, job.inplace.overlay),
        cgroup_procs=tuple(cgroups.procs_files(name)) if cgroups is not None else (),
    )
    the_plan = plan(build_facts, env)
    report = write_private(facts.scratch, "build-report.jsonl", "")
    if uid is not None:
        os.chown(report, uid, uid)
    spec = write_private(facts.scratch, "build-spec.json", json.dumps(the_plan.instructions))
    lim = the_plan.limits
    invocation = Invocation(
        argv=(facts.python, "-s", DRIVER, spec),
        cwd=facts.scratch.work,
        env={**the_plan.env_dict, **job.inplace.build_env()},
        timeout_s=env.timeout_s,
        report_path=report,
        run=name,
        caps=Caps(env.cpu_cap_cores, lim.tree_memory_bytes, lim.processes),
        server=None,
        isolation=session.isolation,
    )
    oracle_only = not touches_build(touched)
    return Rebuild(invocation, oracle_only, uid, disk_bytes)


def _failed(raw: RawRun) -> str | None:
    """Why the build failed (its output's tail), or None if it built."""
    if raw.exit_code == 0 and not raw.timed_out:
        return None
    how = "timed out" if raw.timed_out else f"exit {raw.exit_code}"
    return f"the in-place build failed ({how}); its tail:\n{tail(raw.stdout + raw.stderr)}"


def _after(scratch: Scratch, rebuild: Rebuild) -> dict[str, tuple[int, int]]:
    if rebuild.uid is not None:
        seal_scratch(scratch, rebuild.uid, rebuild.disk_bytes)
    return snapshot(scratch.root)


async def rebuild(
    session: Session, job: Job, rebuild: Rebuild, scratch: Scratch, tests: Invocation
) -> tuple[Outcome | None, Invocation, dict[str, tuple[int, int]] | None]:
    """Run the build in the run's copy: (the outcome if it failed, the tests' invocation
    with what is left of the deadline, the snapshot the run's changes are taken from)."""
    start = time.monotonic()
    async with session.slots.slot(rebuild.invocation.run, job.index):
        raw = await session.supervisor.execute(rebuild.invocation)
    why = _failed(raw)
    if why is not None:
        out = Outcome(oracle_refused=f"it breaks the in-place build: {why}") if rebuild.oracle_only else None
        return out or Outcome(build_failed=why), tests, None
    left = max(1.0, tests.timeout_s - (time.monotonic() - start))
    before = await in_thread(_after, scratch, rebuild)
    return None, attrs.evolve(tests, timeout_s=left), before
