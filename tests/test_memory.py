"""The memory cap (issue 26, defect 1): the memory cgroup caps the run's tree; RLIMIT_AS
is the fallback where no memory cgroup holds. Issue 39: the cap is the declared
``ram_cap_mib`` (scratch files included), and a run at it is stopped at once, not left
to stall in reclaim or wait on a worker the OOM killer took.

Under an address-space cap every thread's 8 MiB stack reservation counts as if it were
used: 50 threads under 512 MiB failed with ``can't start new thread``, and runtimes that
reserve address space they never touch (a JVM, Go, jemalloc, OpenBLAS) hit the same
wall. These run the real thing: real threads, a real 4 GiB reservation, a real hog,
through the warm fork server and cold, and with the cgroups forced off.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aexec import Candidate, Options, Policy, observe, observe_many
from aexec._boundary.isolation import detect_isolation

from .conftest import MakeRepo

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """What the run does and how it is judged, not the event loop: one backend. (The
    supervisor's, fork server's and cancellation's tests run on both.)"""
    return "asyncio"


BOX = detect_isolation()
memory_cgroup = pytest.mark.skipif(
    BOX.cgroups is None or "memory" not in {*BOX.cgroups.v1, *BOX.cgroups.v2_controllers},
    reason="needs root and a memory cgroup",
)

THREADS = (
    "import threading\n"
    "gate = threading.Event()\n"
    "threads = [threading.Thread(target=gate.wait, daemon=True) for _ in range(200)]\n"
    "for t in threads:\n"
    "    t.start()\n"
    "gate.set()\n"
    "for t in threads:\n"
    "    t.join()\n"
    "print(len(threads))\n"
)
#: 4 GiB of address space reserved, never touched (what a JVM or Go runtime does).
#: (``mmap.PROT_NONE`` is new in Python 3.13; it is 0.)
RESERVE = (
    "import mmap\n"
    "m = mmap.mmap(-1, 4 << 30, flags=mmap.MAP_PRIVATE, prot=getattr(mmap, 'PROT_NONE', 0))\n"
    "print(len(m) >> 30)\n"
)
#: Memory really used, well past the default cap.
HOG = "keep = []\nwhile True:\n    keep.append(bytearray(64 << 20))\n"

SUITE = {
    "tests/test_threads.py": """\
        import threading


        def test_two_hundred_threads():
            gate = threading.Event()
            threads = [threading.Thread(target=gate.wait, daemon=True) for _ in range(200)]
            for t in threads:
                t.start()
            gate.set()
            for t in threads:
                t.join()
            assert len(threads) == 200
        """,
}


def snippet(code: str) -> Candidate:
    return Candidate("run_entry", "snippet", code=code)


WARM_AND_COLD = pytest.mark.parametrize("forkserver", [True, False], ids=["warm", "cold"])


@memory_cgroup
@WARM_AND_COLD
async def test_threads_and_reservations_pass_and_a_hog_is_resource(forkserver: bool) -> None:
    threads, reserve, hog = await observe_many(
        [snippet(THREADS), snippet(RESERVE), snippet(HOG)], options=Options(forkserver=forkserver)
    )
    assert threads.verdict == "empty_success" and threads.stdout == "200\n", threads.stderr[-800:]
    assert reserve.verdict == "empty_success" and reserve.stdout == "4\n", reserve.stderr[-800:]
    assert hog.failure is not None and hog.failure.failure_class == "resource", (
        hog.failure,
        hog.stderr[-500:],
    )
    assert "memory cap (cgroup OOM)" in hog.failure.message
    ram = threads.environment.enforced["ram"]
    assert ram.startswith("memory cgroup") and "RLIMIT_AS" not in ram.replace("no RLIMIT_AS", ""), ram


@memory_cgroup
@WARM_AND_COLD
async def test_a_suite_starting_200_threads_passes(make_repo: MakeRepo, forkserver: bool) -> None:
    repo = make_repo(SUITE)
    obs = await observe(
        Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests/test_threads.py"]),
        options=Options(forkserver=forkserver),
    )
    assert obs.verdict == "pass", (obs.failure, obs.stdout[-800:], obs.stderr[-800:])
    assert obs.environment.ram_cap_mib == 4096


async def test_without_cgroups_rlimit_as_caps_memory_and_says_so(make_repo: MakeRepo, tmp_path: Path) -> None:
    """The fallback: no cgroup holds, so RLIMIT_AS does, and the record says so. A hog
    is still `resource` (MemoryError), and a suite's larger default still fits 200
    threads' stacks."""
    opts = Options(cgroups=False)
    repo = make_repo(SUITE)
    hog, suite = await observe_many(
        [
            snippet(HOG),
            Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests/test_threads.py"]),
        ],
        options=opts,
    )
    assert hog.failure is not None and hog.failure.failure_class == "resource", (
        hog.failure,
        hog.stderr[-500:],
    )
    assert "MemoryError" in hog.failure.message
    assert hog.environment.enforced["ram"].startswith("RLIMIT_AS")
    assert suite.verdict == "pass", (suite.failure, suite.stdout[-800:], suite.stderr[-800:])


def touch(mib: int) -> str:
    """Code that holds ``mib`` MiB, every page written."""
    return f"b = b'x' * ({mib} << 20)\nassert len(b) == {mib} << 20\n"


CAP = 512


@memory_cgroup
@WARM_AND_COLD
@pytest.mark.parametrize("shape", ["snippet", "suite"])
async def test_the_declared_ram_cap_is_the_cap(make_repo: MakeRepo, forkserver: bool, shape: str) -> None:
    """Issue 39, defect 1: 64 MiB over ``ram_cap_mib`` is `resource` (the cgroup held
    RAM + disk caps: 900 MiB passed under a declared 512), 96 MiB under it passes."""
    policy = Policy(ram_mib=CAP, timeout_s=60)

    def candidate(mib: int) -> Candidate:
        if shape == "snippet":
            return Candidate("run_entry", "snippet", code=touch(mib), policy=policy)
        body = "".join(f"    {line}\n" for line in touch(mib).splitlines())
        repo = make_repo({"tests/test_touch.py": f"def test_touch():\n{body}"})
        return Candidate(
            "run_suite", "test_subset", repo=str(repo), tests=["tests/test_touch.py"], policy=policy
        )

    over, under = await observe_many(
        [candidate(CAP + 64), candidate(CAP - 96)], options=Options(forkserver=forkserver)
    )
    assert over.environment.ram_cap_mib == CAP
    assert over.failure is not None and over.failure.failure_class == "resource", (
        over.verdict,
        over.failure,
        over.stderr[-500:],
    )
    assert under.failure is None and under.verdict in ("pass", "empty_success"), (
        under.failure,
        under.stdout[-500:],
        under.stderr[-500:],
    )


@memory_cgroup
async def test_scratch_files_count_against_the_ram_cap() -> None:
    """The scratch is a tmpfs: its files are memory, held within ``ram_cap_mib`` (as
    Docker's ``--memory`` with ``--tmpfs``), and the record says so."""
    code = (
        "import os\n"
        "with open(os.path.join(os.environ['TMPDIR'], 'f'), 'wb') as f:\n"
        "    for _ in range(300):\n"
        "        f.write(b'x' * (1 << 20))\n"
    )
    written, both = await observe_many(
        [
            Candidate("run_entry", "snippet", code=code, policy=Policy(ram_mib=CAP)),
            Candidate("run_entry", "snippet", code=code + touch(300), policy=Policy(ram_mib=CAP)),
        ]
    )
    assert written.verdict == "empty_success", (written.failure, written.stderr[-500:])
    assert both.failure is not None and both.failure.failure_class == "resource", (
        both.failure,
        both.stderr[-500:],
    )
    assert "scratch tmpfs files included" in both.environment.enforced["ram"]
    assert "count against ram_cap_mib" in both.environment.enforced["disk"]


#: Issue 39, defect 2: each stalled ~18 s in reclaim before the OOM killer ran, so a
#: timeout under that was the verdict. The pool's worker is OOM-killed and the pool
#: waits for it forever: the tree was at its cap, and the run is over then, too.
HOGS = {
    "list": "x = [0] * (1 << 30)",
    "bytes": "b = b'x' * (2 << 30)",
    "blocks": "keep = []\nwhile True:\n    keep.append(b'x' * (1 << 20))\n",
    "pool": (
        "import multiprocessing\n"
        "def hog(_):\n"
        "    return len(b'x' * (2 << 30))\n"
        "if __name__ == '__main__':\n"
        "    with multiprocessing.get_context('fork').Pool(1) as pool:\n"
        "        print(pool.map(hog, [0]))\n"
    ),
}


@memory_cgroup
@WARM_AND_COLD
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_memory_hog_is_stopped_at_once(forkserver: bool) -> None:
    """Each hog is `resource` long before its 30 s deadline. (Unloaded, each takes about
    a second, most of it writing the memory; 10 s leaves a loaded machine room.)"""
    caps = {"list": 1024, "bytes": 512, "blocks": 512, "pool": 512}
    observed = await observe_many(
        [
            Candidate(
                "run_entry", "snippet", id=name, code=code, policy=Policy(ram_mib=caps[name], timeout_s=30)
            )
            for name, code in HOGS.items()
        ],
        options=Options(forkserver=forkserver),
    )
    for name, obs in zip(HOGS, observed, strict=True):
        assert obs.failure is not None and obs.failure.failure_class == "resource", (name, obs.failure)
        assert not obs.timed_out and obs.duration < 10, (name, obs.duration)
