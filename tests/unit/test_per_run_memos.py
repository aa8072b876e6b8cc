"""Issue 42: what a trivial run used to compute afresh, and now computes once (or more
cheaply), answers as the per-run computation did: the view's read-only binds
(`view_readonly`, per toolchain), a scratch root's paths (`Scratch`), a call's declared
environments (`Session.job`, per what they are made of). Each is checked against the
computation it replaced, kept here as the reference."""

from __future__ import annotations

import itertools
import os
from typing import Any

import attrs
import pytest

import aexec
from aexec import Candidate, Policy
from aexec._stages import plan
from aexec._stages.plan import SYSTEM_PATHS, Scratch, inside, under, view_readonly
from aexec._stages.policy import declare
from aexec.testing import ScriptedSupervisor, scripted_observer, snippet_run


def reference_view_readonly(
    toolchain_paths: Any, python: str, *, repo: str | None = None, scratch_root: str | None = None
) -> tuple[list[str], list[str]]:
    """`view_readonly` as every run computed it before issue 42."""
    venv = os.path.dirname(os.path.dirname(python))
    wanted = list(SYSTEM_PATHS)
    for p in map(os.path.normpath, toolchain_paths):
        if p == os.sep or (scratch_root is not None and inside(scratch_root, p)):
            continue
        if repo is not None and (inside(repo, p) or (inside(p, repo) and not inside(p, venv))):
            continue
        wanted.append(p)
    unique = sorted(set(wanted))
    bound = [p for p in unique if not under(p, unique)]
    hidden = [repo] if repo is not None and under(repo, bound) else []
    return bound, hidden


SPELLINGS = ["/", "//", "/a", "/a/", "/a/b", "/a//b/c", "/ab", "/usr/lib", "/s", "/s/aexec-1-x", "a/b", "//s"]
PYTHONS = ["/a/b/bin/python", "/usr/bin/python3", "/s/aexec-1-x/v/bin/python"]
ROOTS = [None, "/s/aexec-1-x", "/s/aexec-1-x/", "/s//aexec-1-x", "/s", "/a/b", "//s/aexec-1-x", "s/x"]


def test_the_view_is_the_per_run_answer_for_every_scratch_root_and_spelling() -> None:
    """The answer kept per toolchain is the one without a scratch root; a scratch root a
    toolchain path holds (or is) gets its own, and that one is not kept for the next run."""
    plan._bound.cache_clear()
    checked = 0
    for n in (0, 1, 2, 3):
        for paths in itertools.combinations(SPELLINGS, n):
            for python, repo, root in itertools.product(PYTHONS, [None, "/a", "/a/b/r"], ROOTS):
                got = view_readonly(paths, python, repo=repo, scratch_root=root)
                assert got == reference_view_readonly(paths, python, repo=repo, scratch_root=root)
                checked += 1
    assert checked > 10_000
    # held, then not held: the second is not the first's answer
    held = view_readonly(["/s"], PYTHONS[0], scratch_root="/s/aexec-1-x")
    free = view_readonly(["/s"], PYTHONS[0], scratch_root="/t/aexec-1-x")
    assert "/s" not in held[0] and "/s" in free[0]
    assert plan._bound.cache_info().hits > 0  # and it is kept: the runs of a toolchain share it


def test_the_views_lists_are_the_callers_own() -> None:
    first, _ = view_readonly(["/opt/x"], PYTHONS[0])
    first.append("/mutated")
    again, _ = view_readonly(["/opt/x"], PYTHONS[0])
    assert "/mutated" not in again


def test_a_scratch_roots_paths_are_joined_once_and_as_before() -> None:
    for root in ("/tmp/aexec-1-x", "/tmp/aexec-1-x/", "rel", ""):
        s = Scratch(root)
        assert (s.work, s.private, s.home, s.tmp) == tuple(
            os.path.join(root, leaf) for leaf in ("work", ".aexec", "home", "tmp")
        )
        assert s.private_file("spec.json") == os.path.join(root, ".aexec", "spec.json")
    assert Scratch("/r") == Scratch("/r") and hash(Scratch("/r")) == hash(Scratch("/r"))
    assert repr(Scratch("/r")) == "Scratch(root='/r')"
    assert attrs.evolve(Scratch("/r"), root="/q").work == "/q/work"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_declared_environment_made_once_is_each_policys_own() -> None:
    """Candidates of one call whose policies differ, are equal, or are equal but typed
    apart (3 and 3.0), each get the environment `declare` makes of its own policy, and
    share a cache key exactly when they share it."""
    policies = [
        Policy(),
        Policy(timeout_s=3),
        Policy(timeout_s=3.0),
        Policy(timeout_s=4),
        Policy(ram_mib=1024),
        Policy(output_kib=128),
        Policy(cpu_cores=0.5),
        Policy(),
        Policy(timeout_s=3.0),
    ]
    cands = [
        Candidate("run_entry", "snippet", id=i, code="print(1)", policy=p) for i, p in enumerate(policies)
    ]
    async with scripted_observer(ScriptedSupervisor(then=snippet_run(stdout="1\n"))) as o:
        got = await aexec.observe_many(cands, observer=o)

    def declared(obs: Any) -> Any:
        env = obs.environment
        return attrs.evolve(env, fs_boundary=attrs.evolve(env.fs_boundary, scratch_root=""))

    for obs, policy in zip(got, policies, strict=True):
        env = obs.environment
        made = declare(
            obs.action,
            policy,
            toolchain=env.toolchain,
            toolchain_version=env.toolchain_version,
            enforced=env.enforced,
            repo_view="none",
            max_cores=float(os.cpu_count() or 1),
        )
        assert declared(obs) == made
    for a, b in itertools.combinations(got, 2):
        assert (a.cache_key == b.cache_key) == (declared(a) == declared(b))
    assert [x.environment.timeout_s for x in got[1:4]] == [3.0, 3.0, 4.0]
    assert len({x.cache_key for x in got}) == 6  # 3 and 3.0 are one environment, as before


@pytest.mark.anyio
async def test_calls_on_one_observer_share_its_declared_environments_as_one_call_does() -> None:
    """The observer keeps what its calls declared (a server's every request is a call):
    candidates observed one call each, in another order, get the records and keys one
    call gives them — 3 and 3.0 still one environment, every other policy its own."""
    policies = [
        Policy(),
        Policy(timeout_s=3),
        Policy(timeout_s=4),
        Policy(timeout_s=3.0),
        Policy(ram_mib=1024),
    ]
    cands = [
        Candidate("run_entry", "snippet", id=i, code="print(1)", policy=p) for i, p in enumerate(policies)
    ]
    async with scripted_observer(ScriptedSupervisor(then=snippet_run(stdout="1\n"))) as o:
        together = await aexec.observe_many(cands, observer=o)
    async with scripted_observer(ScriptedSupervisor(then=snippet_run(stdout="1\n"))) as o:
        alone = {c.id: (await aexec.observe_many([c], observer=o))[0] for c in reversed(cands)}
        again = (await aexec.observe_many([cands[3]], observer=o))[0]
        assert len(o._declared) == 5  # kept across the calls: 3 and 3.0 typed apart
    assert [alone[c.id].cache_key for c in cands] == [x.cache_key for x in together]
    assert [alone[c.id].environment.timeout_s for c in cands] == [x.environment.timeout_s for x in together]
    assert again.cache_key == alone[3].cache_key == alone[1].cache_key
    assert len({x.cache_key for x in alone.values()}) == 4
