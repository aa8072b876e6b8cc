"""``observe_many`` on real Ray clusters: the same observations, the same boundary.

Deselected by default (they start Ray, which is slow on two cores); run them with::

    python -m pytest -m ray tests/test_ray.py

Every cluster is started here — ``ray.init`` for one node, ``ray start`` subprocesses
for two — on loopback addresses (127.0.0.2, 127.0.0.3), and stopped by the pids started.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
import structlog.testing

import aexec
from aexec import Candidate, ExecutionObservation, observe_many, observe_many_ray
from aexec._scaleout.archive import pack_repo

from .conftest import MakeRepo, diff, live_pids_with

pytestmark = [pytest.mark.ray, pytest.mark.anyio]

#: Ray on loopback only: an address Ray does not rewrite to the host's interface.
HEAD_IP, SECOND_IP = "127.0.0.2", "127.0.0.3"
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
CART = "shop/cart.py"
TESTS = ["tests/test_cart.py"]
#: pytest's closing line carries the session's wall time: a timing, not behaviour.
PYTEST_TIME = re.compile(r"\bin \d+\.\d+s\b")
#: ``<Cart object at 0x7f…>`` (or pytest's cut ``…x7f…>``): differs between any two runs.
ADDRESS = re.compile(r"\b0?x[0-9a-f]{6,}\b")


# --- a small corpus from the shared fixtures --------------------------------------------


def corpus(shop: Path, make_repo: MakeRepo) -> list[Candidate]:
    """Passes, failures of several classes, tampering, a duplicate, two repos with
    the same content at two paths, and a repo whose modes, symlinks and empty
    directories a view must keep."""
    old = (shop / CART).read_text()
    fix = diff(CART, old, old.replace("round(subtotal - discount, 2)", "round(subtotal * (1 - discount), 2)"))
    test = (shop / TESTS[0]).read_text()
    tamper = diff(TESTS[0], test, test.replace("== 18.0", "== 19.9").replace("== 5.0", "== 9.5"))
    files = {
        "src/pkg/__init__.py": "",
        "src/pkg/mod.py": "VALUE = undefined_name\n",
        "tests/test_mod.py": "from pkg import mod\n\ndef test_value():\n    assert mod.VALUE\n",
    }
    broken, same = make_repo(files), make_repo(files)
    odd = make_repo({"run.sh": "#!/bin/sh\necho hi\n", "data/a.txt": "a\n"})
    (odd / "run.sh").chmod(0o755)
    (odd / "empty").mkdir()
    (odd / "link").symlink_to("data/a.txt")
    (odd / ".git").mkdir()
    (odd / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    look = (
        "import os\n"
        "print(sorted(os.listdir('.')), os.access('run.sh', os.X_OK), os.readlink('link'))\n"
        "print(os.path.isdir('empty'), open('link').read())\n"
    )

    def suite(ident: str, patch: str | None = None) -> Candidate:
        return Candidate("run_suite", "test_subset", id=ident, repo=str(shop), tests=TESTS, patch=patch)

    return [
        suite("fix", fix),
        suite("bug"),
        suite("tamper", tamper),
        suite("fix-again", fix),  # identical to "fix": observed once
        Candidate("run_suite", "test_subset", id="compile", repo=str(broken), tests=["tests/test_mod.py"]),
        Candidate("run_suite", "test_subset", id="compile-copy", repo=str(same)),
        Candidate("run_entry", "command", id="view", repo=str(odd), command=[sys.executable, "-c", look]),
        Candidate("run_entry", "snippet", id="type", code="len(5)"),
        Candidate("build_check", "snippet", id="syntax", code="x = ("),
        Candidate("run_entry", "snippet", id="print", code="print(sum(range(10)))"),
    ]


def comparable(obs: ExecutionObservation) -> dict[str, Any]:
    """An observation minus timings, paths and ``cache_hit``: the run's scratch root,
    pytest's session time and object addresses (``0x7f…``, different in any two runs)
    are replaced wherever they appear (stdout, tracebacks, messages)."""
    root = obs.environment.fs_boundary.scratch_root
    data = aexec.unstructure(obs)
    for name in ("duration", "cwd", "cache_hit", "resource_usage"):
        data.pop(name)
    data["environment"]["fs_boundary"].pop("scratch_root")
    for f in [data["failure"], *data["failures"]]:
        if f is not None:
            f.pop("duration")

    def scrub(value: Any) -> Any:
        if isinstance(value, str):
            value = value.replace(root, "<scratch>") if root else value
            return ADDRESS.sub("0x<addr>", PYTEST_TIME.sub("in <t>s", value))
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    out: dict[str, Any] = scrub(data)
    return out


# --- clusters --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for k, v in RAY_ENV.items():
            mp.setenv(k, v)
        yield


#: The one-node cluster of this module, while it is up: its repository cache directory.
_local: dict[str, Path] = {}


@pytest.fixture
def ray_local(ray_env: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-node Ray with 2 CPUs, started by this test run (once, shared by the tests
    that ask for it); returns a repository cache directory for the tests' ``node_cache``."""
    import ray

    if "cache" not in _local or not ray.is_initialized():
        ray.shutdown()
        cache = tmp_path_factory.mktemp("node-cache")
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            _node_ip_address=HEAD_IP,
        )
        _local["cache"] = cache
    return _local["cache"]


@pytest.fixture(scope="module", autouse=True)
def _shutdown_ray_after_module() -> Iterator[None]:
    yield
    import ray

    ray.shutdown()
    _local.clear()


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@attrs.frozen
class Cluster:
    #: The nodes' repository cache (``node_cache``): one machine, so one directory
    #: that both nodes unpack into under its file lock.
    cache: Path
    #: The ``ray start --block`` process of each node, by its IP (its process group
    #: holds the node: raylet, workers, and on the head the GCS).
    procs: dict[str, subprocess.Popen[bytes]]


@contextlib.contextmanager
def ray_cluster(tmp: Path) -> Iterator[Cluster]:
    """A head and a second node, one CPU each, by ``ray start --block`` subprocesses.

    Stops exactly the processes it started: SIGTERM to each ``ray start`` (which stops
    its node), then SIGKILL to the process group it was started in, if anything is left.
    """
    import ray

    ray.shutdown()
    _local.clear()
    port = _free_port(HEAD_IP)
    ray_bin = str(Path(sys.executable).with_name("ray"))
    common = ["--num-cpus=1", "--disable-usage-stats", "--block"]
    commands = {
        HEAD_IP: ["--head", f"--port={port}", "--include-dashboard=false"],
        SECOND_IP: [f"--address={HEAD_IP}:{port}"],
    }
    cluster = Cluster(cache=tmp / "node-cache", procs={})
    try:
        for ip, args in commands.items():
            log = tmp / f"ray-{ip}.log"
            env = {**os.environ, **RAY_ENV}
            with open(log, "wb") as out:
                cluster.procs[ip] = subprocess.Popen(
                    [ray_bin, "start", *args, f"--node-ip-address={ip}", *common],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            deadline = time.monotonic() + 40
            while ip == HEAD_IP:
                try:
                    with socket.create_connection((HEAD_IP, port), timeout=1):
                        break
                except OSError:
                    assert time.monotonic() < deadline and cluster.procs[ip].poll() is None, log.read_text()
                    time.sleep(0.2)
        ray.init(address=f"{HEAD_IP}:{port}", _node_ip_address=HEAD_IP)
        deadline = time.monotonic() + 40
        while sum(n["Alive"] for n in ray.nodes()) < 2:
            assert time.monotonic() < deadline, "the second node did not join"
            time.sleep(0.2)
        yield cluster
    finally:
        ray.shutdown()
        for p in reversed(cluster.procs.values()):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in cluster.procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # the group this test started, nothing else


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        out.append(pid)
        try:
            with open(f"/proc/{pid}/stat") as s:
                pid = int(s.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return out


def _ray_worker_of(pid: int) -> int:
    """The Ray worker process (``ray::…``) a candidate process descends from."""
    for p in _ancestors(pid):
        with open(f"/proc/{p}/cmdline", "rb") as f:
            if f.read().startswith(b"ray::"):
                return p
    raise AssertionError("the candidate does not run under a Ray worker")


def sleeper(marker: str, seconds: float) -> str:
    """A snippet that starts a grandchild in a new session (``marker`` in its argv),
    then sleeps and prints ``done``."""
    return (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', {marker!r}], start_new_session=True)\n"
        f"time.sleep({seconds})\n"
        "print('done')\n"
    )


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two unstructured observations differ, as readable paths."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r:.300} != {b!r:.300}"]


def assert_same(remote: list[ExecutionObservation], local: list[ExecutionObservation]) -> None:
    assert len(remote) == len(local)
    for r, lo in zip(remote, local, strict=True):
        assert comparable(r) == comparable(lo), (r.id, _differences(comparable(r), comparable(lo)))


def _events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


# --- tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_ray_gives_the_local_observations(ray_local: Path, shop: Path, make_repo: MakeRepo) -> None:
    cands = corpus(shop, make_repo)
    local = await observe_many(cands)
    seen: dict[int, ExecutionObservation] = {}
    with structlog.testing.capture_logs() as logs:
        remote = await observe_many_ray(
            cands, max_in_flight=2, on_observation=seen.__setitem__, node_cache=str(ray_local)
        )
    assert [o.id for o in remote] == [c.id for c in cands]
    assert_same(remote, local)
    assert sorted(seen) == list(range(len(cands))) and [seen[i] for i in range(len(cands))] == remote
    by_id = {o.id: o for o in remote}
    assert by_id["fix"].verdict == "pass" and by_id["tamper"].verdict == "tampered"
    assert by_id["compile"].failure is not None and by_id["compile"].failure.failure_class == "compile"
    assert "True data/a.txt" in by_id["view"].stdout and ".git" not in by_id["view"].stdout
    # Identical candidates are submitted once; submission never exceeds the bound.
    submitted = _events(logs, "ray_submitted")
    assert len(submitted) == len(cands) - 1 and max(e["in_flight"] for e in submitted) <= 2
    assert by_id["fix-again"].cache_hit and not by_id["fix"].cache_hit
    # One archive per distinct tree, unpacked once on this node; none per candidate.
    keys = {pack_repo(str(p))[0] for p in {shop, *(Path(c.repo) for c in cands if c.repo)}}
    assert len(keys) == 3  # shop, the broken package (two paths, one content), the odd tree
    assert len(_events(logs, "ray_repo_put")) == 3
    assert {e["repo_key"] for e in _events(logs, "ray_observed") if e["unpacked"]} == keys
    assert sum(e["unpacked"] for e in _events(logs, "ray_observed")) == 3
    assert {p.name for p in ray_local.iterdir() if not p.name.startswith(".")} == keys
    # Run it again: the node already holds every repo.
    with structlog.testing.capture_logs() as logs:
        again = await observe_many_ray(cands[:2], node_cache=str(ray_local))
    assert not any(e["unpacked"] for e in _events(logs, "ray_observed"))
    assert_same(again, local[:2])


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_lost_worker_is_retried_and_the_observation_says_so(ray_local: Path) -> None:
    marker = f"aexec-ray-retry-{uuid.uuid4()}"
    code = sleeper(marker, 4)
    first_tree: list[int] = []
    killed: list[int] = []
    with structlog.testing.capture_logs() as logs:
        async with anyio.create_task_group() as tg:

            async def kill_the_worker() -> None:
                with anyio.fail_after(30):
                    while not first_tree:
                        await anyio.sleep(0.05)
                        first_tree.extend(live_pids_with(marker))
                killed.append(_ray_worker_of(first_tree[0]))
                os.kill(killed[0], signal.SIGKILL)

            tg.start_soon(kill_the_worker)
            (obs,) = await observe_many_ray([Candidate("run_entry", "snippet", id="r", code=code)])
    assert obs.flags.retried and obs.id == "r"
    assert obs.stdout == "done\n" and obs.verdict == "empty_success"
    (retry,) = _events(logs, "ray_retry")
    assert retry["error"].startswith("WorkerCrashedError")
    (done,) = _events(logs, "ray_observed")
    assert done["attempt"] == 2 and done["worker_pid"] != killed[0]
    # The boundary held when its supervisor died: the first attempt's tree is gone.
    assert not set(first_tree) & set(live_pids_with(marker))


async def test_cancelling_the_caller_kills_the_remote_candidates(ray_local: Path) -> None:
    marker = f"aexec-ray-cancel-{uuid.uuid4()}"
    code = sleeper(marker, 300)
    cands = [Candidate("run_entry", "snippet", id=i, code=code + f"# {i}\n") for i in range(3)]
    seen: list[int] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def cancel_when_running() -> None:
                with anyio.fail_after(30):
                    while len(live_pids_with(marker)) < 2:  # two CPUs: two run, one waits
                        await anyio.sleep(0.05)
                scope.cancel()

            tg.start_soon(cancel_when_running)
            await observe_many_ray(cands, on_observation=lambda i, o: seen.append(i))
    assert scope.cancelled_caught and seen == []
    assert live_pids_with(marker) == [], "a remote candidate outlived the cancelled call"
    await anyio.sleep(1)  # the third was still queued: cancelled, it never starts
    assert live_pids_with(marker) == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_two_nodes_on_loopback_same_observations_and_a_lost_node_is_retried(
    ray_env: None, tmp_path: Path, shop: Path, make_repo: MakeRepo
) -> None:
    cands = corpus(shop, make_repo)
    local = await observe_many(cands)
    marker = f"aexec-ray-node-{uuid.uuid4()}"
    lost_tree: list[int] = []
    with ray_cluster(tmp_path) as cluster:
        with structlog.testing.capture_logs() as logs:
            remote = await observe_many_ray(cands, node_cache=str(cluster.cache))
        assert_same(remote, local)
        observed = _events(logs, "ray_observed")
        nodes = {e["node"] for e in observed}
        assert len(nodes) == 2, "both nodes should have taken work"
        for node in nodes:
            unpacked = [e["repo_key"] for e in observed if e["node"] == node and e["unpacked"]]
            assert len(unpacked) == len(set(unpacked)), "a repo was unpacked twice on one node"
        held = {p.name for p in cluster.cache.iterdir() if not p.name.startswith(".")}
        assert held == {e["repo_key"] for e in observed if e["repo_key"]}
        assert len(held) == sum(e["unpacked"] for e in observed), "a repo was unpacked twice"

        # Lose the second node (every process of it) while it runs a candidate. Ray may
        # place both sleepers on the head, one after the other: then nothing was lost,
        # and the pair is tried again (at most three times).
        second = cluster.procs[SECOND_IP]
        for attempt in range(3):
            sleepers = [
                Candidate("run_entry", "snippet", id=f"s{i}", code=sleeper(marker, 3) + f"# {attempt} {i}\n")
                for i in range(2)
            ]
            with structlog.testing.capture_logs() as logs:
                async with anyio.create_task_group() as tg:

                    async def lose_the_second_node() -> None:
                        while not lost_tree:
                            await anyio.sleep(0.05)
                            lost_tree.extend(p for p in live_pids_with(marker) if second.pid in _ancestors(p))
                        os.killpg(second.pid, signal.SIGKILL)

                    tg.start_soon(lose_the_second_node)
                    with anyio.fail_after(60):
                        got = await observe_many_ray(sleepers)
                    tg.cancel_scope.cancel()  # done: the sleepers never ran on the second node
            if lost_tree:
                break
        assert lost_tree, "no sleeper ran on the second node in three tries"
    assert [o.id for o in got] == ["s0", "s1"] and [o.stdout for o in got] == ["done\n", "done\n"]
    assert sorted(o.flags.retried for o in got) == [False, True]
    assert len(_events(logs, "ray_retry")) == 1
    assert not set(lost_tree) & set(live_pids_with(marker))
