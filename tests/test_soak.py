"""The soak test (issue 19, goal 5): 10,000 mixed requests through one ``observe_many``.

Deselected by default (minutes of work); run it with::

    python -m pytest -m soak tests/test_soak.py            # 10,000 requests
    AEXEC_SOAK_N=500 python -m pytest -m soak tests/test_soak.py

The requests mix snippets that pass, raise, do not compile, time out briefly, repeat an
earlier one (deduplicated), and some on which aexec itself fails (an injected supervisor
fault → their own ``error`` observation). Afterwards: one observation per request in
order, each with the expected verdict; the RSS of the aexec process (this one) grew by
a bounded amount past warm-up; and no file descriptors, mounts, cgroups, processes or
scratch roots are left.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from pathlib import Path

import anyio
import pytest

import aexec

from .conftest import scratch_roots

N = int(os.environ.get("AEXEC_SOAK_N", "10000"))
#: RSS may grow past warm-up by this much plus this much per request (the returned
#: observations themselves are kept, by design, until ``observe_many`` returns).
RSS_SLACK_MIB = 64.0
RSS_PER_REQUEST_KIB = 8.0

pytestmark = pytest.mark.soak


@pytest.fixture
def anyio_backend() -> str:
    """One backend (a soak is about time, not about the event loop): AEXEC_SOAK_BACKEND."""
    return os.environ.get("AEXEC_SOAK_BACKEND", "asyncio")


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def live_children() -> list[int]:
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == me and fields[0] != "Z":
                    found.append(int(name))
    return found


def mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(str(path))]


def own_cgroups() -> list[str]:
    prefix, found = f"aexec-{os.getpid()}-", []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        if root.count(os.sep) > 7:
            dirs[:] = []
        found += [os.path.join(root, d) for d in dirs if d.startswith(prefix)]
    return found


class FaultySupervisor:
    """The real supervisor, except that aexec "fails" on snippets carrying ``poison``."""

    def __init__(self, poison: str) -> None:
        self.poison = poison
        self._real = aexec.LocalSupervisor()

    async def execute(self, invocation: aexec.Invocation) -> aexec.RawRun:
        poisoned = False
        with contextlib.suppress(OSError, ValueError, KeyError):
            spec = json.loads(await anyio.Path(invocation.argv[-1]).read_text())
            poisoned = self.poison in await anyio.Path(spec["snippet"]).read_text()
        if poisoned:
            raise RuntimeError("injected supervisor fault")
        return await self._real.execute(invocation)


def mix(n: int, poison: str) -> tuple[list[aexec.Candidate], list[tuple[str, str | None]]]:
    """``n`` requests and the (verdict, failure class) each must get."""
    cands: list[aexec.Candidate] = []
    want: list[tuple[str, str | None]] = []
    for i in range(n):
        k = i % 50
        if k in (7, 33) and i >= 50:  # a repeat of an earlier request: deduplicated
            cands.append(cands[i - 50])
            want.append(want[i - 50])
        elif k == 11:
            cands.append(
                aexec.Candidate(
                    "run_entry",
                    "snippet",
                    id=i,
                    code=f"import time\ntime.sleep(30)  # {i}",
                    policy=aexec.Policy(timeout_s=0.3),
                )
            )
            want.append(("fail", "timeout"))
        elif k in (13, 37):
            cands.append(aexec.Candidate("run_entry", "snippet", id=i, code=f"print({poison!r}, {i})"))
            want.append(("error", None))
        elif k % 5 == 1:
            cands.append(aexec.Candidate("run_entry", "snippet", id=i, code=f"raise ValueError({i})"))
            want.append(("fail", "runtime"))
        elif k % 5 == 2:
            cands.append(aexec.Candidate("run_entry", "snippet", id=i, code=f"def f(:\n  {i}"))
            want.append(("fail", "syntax"))
        else:
            cands.append(aexec.Candidate("run_entry", "snippet", id=i, code=f"print({i})"))
            want.append(("empty_success", None))
    return cands, want


@pytest.mark.anyio
async def test_soak_mixed_requests_leave_nothing_behind(scratch_tmp: Path) -> None:
    poison = f"poison-{uuid.uuid4().hex}"
    cands, want = mix(N, poison)
    # Warm up (imports, the interpreter probe, thread pools) before the baselines.
    await aexec.observe_many(cands[:20], supervisor=FaultySupervisor(poison))
    await aexec.aclose()
    fds_before, children_before = fds(), live_children()
    rss_warm: list[float] = []
    seen = 0

    def on_observation(index: int, obs: aexec.ExecutionObservation) -> None:
        nonlocal seen
        seen += 1
        if seen == max(N // 10, 1):
            rss_warm.append(rss_mib())

    start = time.monotonic()
    got = await aexec.observe_many(cands, supervisor=FaultySupervisor(poison), on_observation=on_observation)
    wall = time.monotonic() - start
    rss_end = rss_mib()
    await aexec.aclose()

    assert len(got) == N and [o.id for o in got] == [c.id for c in cands]
    bad = [
        (o.id, (o.verdict, o.failure and o.failure.failure_class), w)
        for o, w in zip(got, want, strict=True)
        if (o.verdict, o.failure and o.failure.failure_class) != w
    ]
    assert bad == [], bad[:10]
    errors = [o for o in got if o.verdict == "error"]
    assert errors and all(o.error and "\n" not in o.error.strip() for o in errors)

    growth = rss_end - rss_warm[0]
    bound = RSS_SLACK_MIB + N * RSS_PER_REQUEST_KIB / 1024
    await anyio.sleep(0.5)  # let the last reaped processes go
    report = {
        "n": N,
        "wall_s": round(wall, 1),
        "per_s": round(N / wall, 1),
        "rss_warm_mib": round(rss_warm[0], 1),
        "rss_end_mib": round(rss_end, 1),
        "rss_growth_mib": round(growth, 1),
        "rss_bound_mib": round(bound, 1),
        "fds_leaked": sorted(fds() - fds_before),
        "children_left": sorted(set(live_children()) - set(children_before)),
        "mounts_left": mounts_under(scratch_tmp),
        "cgroups_left": own_cgroups(),
        "scratch_roots_left": scratch_roots(scratch_tmp),
    }
    print("soak:", json.dumps(report))
    assert growth < bound, report
    assert report["fds_leaked"] == [], report
    assert report["children_left"] == [], report
    assert report["mounts_left"] == [], report
    assert report["cgroups_left"] == [], report
    assert report["scratch_roots_left"] == [], report
