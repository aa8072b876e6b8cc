"""The boundary against hostile candidates (issue 4): every test checks the host.

Each test runs a real candidate that attacks one property, then looks at the host — the
file that must not exist, the listener that must hear nothing, the pid that must be
gone — rather than at what aexec says about itself. They need the full boundary (root,
namespaces, cgroups) and are skipped, loudly, where the machine cannot give it; the
fallback is tested by forcing it in a subprocess.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from aexec import Candidate, ExecutionObservation, Policy, observe, observe_many
from aexec._boundary.isolation import detect_isolation
from aexec._boundary.leftovers import sweep_scratch
from aexec._boundary.trees import hash_tree

from .conftest import MakeRepo, live_pids_with, scratch_roots

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """What the run does and how it is judged, not the event loop: one backend. (The
    supervisor's, fork server's and cancellation's tests run on both.)"""
    return "asyncio"


BOX = detect_isolation()
full_boundary = pytest.mark.skipif(
    not (BOX.namespaces and BOX.cgroups is not None), reason="needs root, namespaces and cgroups"
)
AEXEC = [sys.executable, "-m", "aexec"]
SLEEP = shutil.which("sleep") or "/bin/sleep"


def snippet(code: str, **policy: object) -> Candidate:
    return Candidate("run_entry", "snippet", code=code, policy=Policy(**policy))  # type: ignore[arg-type]


def hang_with_children(marker: str, how: str) -> str:
    """Start a process carrying ``marker`` that tries to outlive the run, then hang."""
    # /bin/sleep with the marker as its argv[0]: cheap enough for a swarm of 200.
    sleeper = f"[{marker!r}, '300'], executable={SLEEP!r}"
    starts = {
        "setsid": f"subprocess.Popen({sleeper}, start_new_session=True)",
        "double_fork": (
            "if os.fork() == 0:\n"
            "    if os.fork() == 0:\n"
            f"        os.execv({SLEEP!r}, [{marker!r}, '300'])\n"
            "    os._exit(0)\n"
            "os.wait()"
        ),
        "swarm": f"[subprocess.Popen({sleeper}, start_new_session=True) for _ in range(200)]",
    }
    return f"import os, subprocess, sys, time\n{starts[how]}\ntime.sleep(300)\n"


async def wait_for_pids(marker: str, at_least: int = 1, limit: float = 30.0) -> list[int]:
    with anyio.fail_after(limit):
        while len(found := live_pids_with(marker)) < at_least:
            await anyio.sleep(0.05)
    return found


def aexec_cgroups() -> list[str]:
    """Run cgroups this process made that still exist."""
    assert BOX.cgroups is not None
    mine = f"aexec-{os.getpid()}-"
    roots = set(BOX.cgroups.v1.values()) | ({BOX.cgroups.v2} if BOX.cgroups.v2 else set())
    return [os.path.join(r, n) for r in roots for n in os.listdir(r) if n.startswith(mine)]


def mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(str(path))]


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A host directory beside the tests: outside /tmp (covered inside by the scratch tmp)
    unless this checkout itself is under /tmp."""
    d = Path(tempfile.mkdtemp(prefix=".hostile-", dir=Path(__file__).parent))
    try:
        yield d
    finally:
        shutil.rmtree(d)


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A 0700 host directory surely outside /tmp, wherever this checkout lives."""
    if not os.access("/var/lib", os.W_OK):
        pytest.skip("/var/lib is not writable here")
    d = Path(tempfile.mkdtemp(prefix="aexec-test-", dir="/var/lib"))
    try:
        yield d
    finally:
        shutil.rmtree(d)


# 1. Network


@full_boundary
async def test_no_connection_even_to_the_hosts_loopback() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        f"for host in ('127.0.0.1', 'localhost', '::1'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=2)\n"
        "        print('connected', host)\n"
        "    except OSError as e:\n"
        "        print('refused', host, e.errno)\n"
    )
    obs = await observe(snippet(code))
    assert "connected" not in obs.stdout and obs.stdout.count("refused") == 3
    with pytest.raises(BlockingIOError):
        listener.accept()  # the host's listener heard nothing
    listener.close()
    assert obs.environment.enforced["network"].startswith("net_namespace")


@full_boundary
async def test_the_runs_own_loopback_is_up_and_reaches_only_the_run() -> None:
    """A suite's local server works inside, as under plain pytest (and Docker's
    ``--network none``); nothing beyond the namespace's own loopback is reachable."""
    code = (
        "import socket\n"
        "server = socket.create_server(('127.0.0.1', 0))\n"
        "client = socket.create_connection(server.getsockname(), timeout=2)\n"
        "peer, _ = server.accept()\n"
        "client.sendall(b'ping')\n"
        "print(peer.recv(4).decode())\n"
        "try:\n"
        "    socket.create_connection(('192.0.2.1', 80), timeout=2)\n"
        "except OSError as e:\n"
        "    print('unreachable', e.errno)\n"
    )
    obs = await observe(snippet(code))
    assert obs.stdout.split() == ["ping", "unreachable", str(errno.ENETUNREACH)], (obs.stdout, obs.stderr)


# 2. Filesystem


@full_boundary
async def test_writes_outside_the_scratch_root_fail_and_the_repo_is_untouched(host_dir: Path) -> None:
    outside = host_dir / "outside"
    outside.mkdir()
    host_home = Path(os.path.expanduser("~")) / f"aexec-hostile-{uuid.uuid4()}"
    repo = host_dir / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "escape").symlink_to(outside)  # a path to the host, inside the repo
    original = hash_tree(str(repo))
    targets = [
        host_dir / "new-file",
        host_home,
        repo / "written-into-the-original",
        repo / "pkg" / "__init__.py",
    ]
    attack = (
        "import os\n"
        "results = []\n"
        f"for path in {[str(t) for t in targets]!r} + ['escape/through-the-symlink']:\n"
        "    try:\n"
        "        with open(path, 'a') as f:\n"
        "            f.write('pwned')\n"
        "        results.append('wrote ' + path)\n"
        "    except OSError as e:\n"
        "        results.append(f'denied {e.errno}')\n"
        "print(results)\n"
        "open('inside-the-view', 'w').write('fine')\n"
    )
    obs = await observe(Candidate("run_entry", "snippet", repo=str(repo), code=attack))
    assert "wrote" not in obs.stdout, obs.stdout
    assert obs.stdout.count("denied") == 5
    assert not (host_dir / "new-file").exists() and not host_home.exists()
    assert list(outside.iterdir()) == []
    assert hash_tree(str(repo)) == original
    assert "inside-the-view" in obs.changed_state  # the scratch view itself is writable
    assert obs.environment.fs_boundary.repo_ro


@full_boundary
async def test_every_mount_but_the_scratch_dirs_is_read_only_and_nosuid() -> None:
    # The whole view is made read-only at once (mount_setattr, AT_RECURSIVE) where the
    # kernel has it: no mount of it may be left out, /proc and /dev/pts included. Only
    # the scratch root's own mounts and the scratch tmp over each tmp target stay writable.
    code = (
        "import json, os\n"
        "root = os.path.dirname(os.getcwd())\n"
        "rows = [line.split() for line in open('/proc/self/mountinfo')]\n"
        "print(json.dumps([root, [[r[4], r[5].split(',')] for r in rows]]))\n"
    )
    obs = await observe(snippet(code))
    root, rows = json.loads(obs.stdout)
    assert len(rows) > 3
    top = {point: opts for point, opts in rows}  # a covering mount is listed after what it covers
    for point, opts in rows:
        assert "nosuid" in opts, (point, opts)
        if point in ("/tmp", "/var/tmp", "/dev/shm") or point == root or point.startswith(root + "/"):
            assert "rw" in top[point], (point, top[point])
        else:
            assert "ro" in opts, (point, opts)


@full_boundary
async def test_hosts_tmp_is_the_scratch_tmp_inside(tmp_path: Path) -> None:
    name = f"aexec-hostile-{uuid.uuid4()}"
    obs = await observe(snippet(f"open('/tmp/{name}', 'w').write('x'); print(open('/tmp/{name}').read())"))
    assert obs.stdout.strip() == "x"
    assert not (Path("/tmp") / name).exists()
    assert f"tmp/{name}" in obs.changed_state


@full_boundary
async def test_patch_escaping_the_repo_is_refused_before_anything_runs(
    make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo = make_repo({"a.py": "x = 1\n"})
    victim = tmp_path / "victim.py"
    for path in ["../victim.py", str(victim)]:
        patch = f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+pwned = True\n"
        patch += "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
        obs = await observe(Candidate("build_check", "patch", repo=str(repo), patch=patch))
        assert obs.verdict == "fail" and obs.failure is not None
        assert obs.failure.failure_class == "compile" and "patch" in obs.failure.message
    assert not victim.exists()
    assert (repo / "a.py").read_text() == "x = 1\n"  # never partly applied


# 3. Process tree


@full_boundary
@pytest.mark.parametrize("how", ["setsid", "double_fork", "swarm"])
async def test_nothing_outlives_a_timeout(how: str) -> None:
    marker = f"aexec-test-{uuid.uuid4()}"
    seen: list[int] = []

    async def watch() -> None:
        seen.extend(await wait_for_pids(marker, at_least=200 if how == "swarm" else 1))

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        obs = await observe(snippet(hang_with_children(marker, how), timeout_s=6))
    assert obs.failure is not None and obs.failure.failure_class == "timeout"
    assert seen, "the escapees never ran, so the test proves nothing"
    assert live_pids_with(marker) == []
    assert aexec_cgroups() == []


@full_boundary
async def test_nothing_outlives_a_normal_exit() -> None:
    marker = f"aexec-test-{uuid.uuid4()}"
    code = hang_with_children(marker, "setsid").replace("time.sleep(300)\n", "time.sleep(0.5)\n")
    obs = await observe(snippet(code))
    assert obs.verdict == "empty_success", obs.stderr
    assert live_pids_with(marker) == []


@full_boundary
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])  # cancellation: both
async def test_nothing_outlives_cancellation(scratch_tmp: Path) -> None:
    marker = f"aexec-test-{uuid.uuid4()}"
    alive: list[int] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def cancel_when_running() -> None:
                alive.extend(await wait_for_pids(marker))
                scope.cancel()

            tg.start_soon(cancel_when_running)
            await observe(snippet(hang_with_children(marker, "double_fork")))
    assert scope.cancelled_caught and alive
    assert live_pids_with(marker) == []
    assert scratch_roots(scratch_tmp) == [] and mounts_under(scratch_tmp) == []


# 4. The supervisor is out of reach


@full_boundary
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])  # cancellation: both
async def test_killing_the_parent_or_everything_visible_hurts_no_one_else() -> None:
    hostile = [
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
        "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
        "import os, signal\nfor pid in range(1, 5000):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError:\n        pass\n",
    ]
    bystander = "import time\ntime.sleep(2)\nprint('still here')\n"
    results = await observe_many([snippet(c) for c in hostile] + [snippet(bystander)] * 2, limit=5)
    assert [r.stdout.strip() for r in results[3:]] == ["still here", "still here"]
    assert all(r.verdict != "error" for r in results)
    os.kill(os.getpid(), 0)  # and this process, the supervisor, is alive to assert it


# 5. Environment


async def test_the_candidate_sees_only_the_declared_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AEXEC_TEST_SECRET_TOKEN", "hunter2")
    code = "import json, os, sys\nprint(json.dumps({'env': dict(os.environ), 'stdin': sys.stdin.read()}))\n"
    obs = await observe(snippet(code))
    seen = json.loads(obs.stdout)
    assert "hunter2" not in obs.stdout
    assert seen["stdin"] == ""
    assert seen["env"]["PYTHONHASHSEED"] == "0"
    assert seen["env"]["HOME"].startswith(obs.environment.fs_boundary.scratch_root)
    assert set(seen["env"]) <= {
        "PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "NO_COLOR", "MALLOC_ARENA_MAX",
        "USER", "LOGNAME",
    }  # fmt: skip


# 6. Caps that bite


@full_boundary
async def test_writing_eight_gigabytes_is_stopped_as_resource(tmp_path: Path) -> None:
    code = (
        "chunk = b'x' * (1 << 20)\n"
        "for n in range(64):\n"
        "    with open(f'big{n}', 'wb') as f:\n"
        "        for _ in range(128):\n"
        "            f.write(chunk)\n"
    )
    free_before = os.statvfs("/tmp").f_bavail
    # The scratch's files are memory too: a RAM cap above the disk cap lets the disk cap
    # be the one that stops the writes.
    obs = await observe(snippet(code, ram_mib=1024))
    assert obs.failure is not None and obs.failure.failure_class == "resource", obs.failure
    assert "No space left" in obs.failure.message or "too large" in obs.failure.message
    written = int(obs.changed_state.rsplit("(", 1)[1].split()[0])
    assert written <= (obs.environment.disk_cap_mib + 1) << 20
    assert os.statvfs("/tmp").f_bavail >= free_before - (64 << 20) // os.statvfs("/tmp").f_frsize


@full_boundary
async def test_cpu_is_capped_at_the_declared_core(tmp_path: Path) -> None:
    # Two busy processes for 2 s of wall time: 4 CPU-seconds on two free cores, about
    # 2 under a one-core quota. Load on the machine can only lower the figure.
    code = (
        "import os, resource, time\n"
        "pid = os.fork()\n"
        "end = time.monotonic() + 2.0\n"
        "while time.monotonic() < end:\n"
        "    pass\n"
        "if pid == 0:\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "used = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]\n"
        "print(sum(u.ru_utime + u.ru_stime for u in used))\n"
    )
    obs = await observe(snippet(code, cpu_cores=1))
    assert obs.verdict == "empty_success", obs.stderr
    assert float(obs.stdout) < 2.6
    assert "cgroup CPU quota" in obs.environment.enforced["cpu"]


@full_boundary
@pytest.mark.parametrize(
    ("code", "word"),
    [
        # the memory cgroup (the RAM cap: 512 MiB) kills it; no RLIMIT_AS to raise MemoryError
        ("x = bytearray(2 << 30)\n", "memory cap (cgroup OOM)"),
        ("fs = [open('/dev/null') for _ in range(5000)]\n", "Too many open files"),
        (
            "import os\nfor _ in range(2000):\n    if os.fork() == 0:\n        import time; time.sleep(60)\n",
            "",
        ),
    ],
    ids=["ram", "open_files", "processes"],
)
async def test_ram_open_files_and_process_caps_are_resource(code: str, word: str) -> None:
    obs = await observe(snippet(code, timeout_s=20))
    assert obs.failure is not None and obs.failure.failure_class == "resource", (
        obs.failure,
        obs.stderr[-500:],
    )
    assert word in obs.failure.message


# 7. Honest declaration, and the fallback


def run_cli(tmp_path: Path, rows: list[dict[str, object]], **env: str) -> tuple[list[dict[str, object]], str]:
    cases, out = tmp_path / "cases.jsonl", tmp_path / "obs.jsonl"
    cases.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = subprocess.run(
        [*AEXEC, "observe", str(cases), "-o", str(out), "--no-cache"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return [json.loads(line) for line in out.read_text().splitlines()], done.stderr


@full_boundary
def test_forced_fallback_records_the_weaker_boundary_and_warns_once(tmp_path: Path) -> None:
    marker = f"aexec-test-{uuid.uuid4()}"
    rows = [
        {"id": "net", "request_type": "run_entry", "artifact_shape": "snippet", "code": "print(1)"},
        {
            "id": "escape",
            "request_type": "run_entry",
            "artifact_shape": "snippet",
            "code": hang_with_children(marker, "setsid"),
            "policy": {"timeout_s": 3},
        },
    ]
    full, _ = run_cli(tmp_path, rows[:1])
    assert full[0]["environment"]["enforced"]["network"].startswith("net_namespace")  # type: ignore[index]
    weak, stderr = run_cli(tmp_path, rows, AEXEC_NO_NAMESPACES="1")
    enforced = weak[0]["environment"]["enforced"]  # type: ignore[index]
    assert enforced["network"] == "none"
    assert enforced["user"] == "aexec's own user"
    assert enforced["process_tree"].startswith("process_group + cgroup")
    assert weak[0]["environment"]["fs_boundary"]["repo_ro"] is False  # type: ignore[index]
    assert stderr.count("isolation_degraded") == 1
    # Without namespaces the cgroup still kills the setsid() escapee.
    assert live_pids_with(marker) == []
    bare, stderr = run_cli(tmp_path, rows[:1], AEXEC_NO_NAMESPACES="1", AEXEC_NO_CGROUPS="1")
    enforced = bare[0]["environment"]["enforced"]  # type: ignore[index]
    assert enforced["process_tree"] == "process_group"
    assert "cgroup" not in json.dumps(enforced)
    assert stderr.count("isolation_degraded") == 2


# 8. Nothing lost on interruption


@full_boundary
def test_sigkill_of_aexec_leaves_no_candidate_running(tmp_path: Path) -> None:
    marker = f"aexec-test-{uuid.uuid4()}"
    rows = [
        {
            "id": i,
            "request_type": "run_entry",
            "artifact_shape": "snippet",
            "code": hang_with_children(marker, how),
        }
        for i, how in enumerate(["setsid", "double_fork"])
    ]
    cases, out = tmp_path / "cases.jsonl", tmp_path / "obs.jsonl"
    cases.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.Popen([*AEXEC, "observe", str(cases), "-o", str(out), "--no-cache"])
    deadline = time.monotonic() + 60
    while len(live_pids_with(marker)) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, "the candidates never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5
    while live_pids_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_pids_with(marker) == []


# 9. Scratch hygiene


@full_boundary
async def test_scratch_roots_mounts_and_cgroups_are_gone_after_every_ending(scratch_tmp: Path) -> None:
    endings = [
        snippet("print('ok')"),
        snippet("import time; time.sleep(60)", timeout_s=1),
        snippet("import os; os.abort()"),
        snippet("open('f', 'w').write('x' * 1000)\nraise SystemExit(3)"),
    ]
    results: list[ExecutionObservation] = await observe_many(endings)
    roots = {r.environment.fs_boundary.scratch_root for r in results}
    assert all(root.startswith(str(scratch_tmp)) for root in roots)  # TMPDIR is honoured
    assert scratch_roots(scratch_tmp) == []
    assert mounts_under(scratch_tmp) == []
    assert aexec_cgroups() == []


@full_boundary
async def test_scratch_roots_are_removed_after_the_observation_is_delivered(scratch_tmp: Path) -> None:
    # Cleanup is off the observation's path (issue 20): the root still exists when
    # on_observation is called, and is gone when observe_many returns — also when
    # on_observation raises.
    existed: list[bool] = []

    def seen(i: int, obs: ExecutionObservation) -> None:
        existed.append(os.path.isdir(obs.environment.fs_boundary.scratch_root))

    await observe_many([snippet(f"print({i})") for i in range(4)], on_observation=seen)
    assert existed == [True] * 4
    assert scratch_roots(scratch_tmp) == [] and mounts_under(scratch_tmp) == []

    def boom(i: int, obs: ExecutionObservation) -> None:
        raise RuntimeError("a harness's callback failed")

    with pytest.raises(BaseExceptionGroup) as info:
        await observe_many([snippet("pass")], on_observation=boom)
    assert info.group_contains(RuntimeError, match="callback failed")
    assert scratch_roots(scratch_tmp) == [] and mounts_under(scratch_tmp) == []


@full_boundary
def test_stale_scratch_of_a_dead_aexec_is_swept(scratch_tmp: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs: the "aexec" that was SIGKILLed
    stale = scratch_tmp / f"aexec-{dead.pid}-left"
    stale.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "aexec", str(stale)], check=True)
    (stale / "work").mkdir()
    live = scratch_tmp / f"aexec-{os.getpid()}-running"
    live.mkdir()
    sweep_scratch(str(scratch_tmp))
    assert not stale.exists() and mounts_under(stale) == []
    assert live.exists()  # a live aexec's scratch is left alone
    live.rmdir()


@full_boundary
async def test_an_interpreter_under_the_hosts_tmp_still_runs(tmp_path: Path, shop: Path) -> None:
    # /tmp is the scratch tmp inside the boundary: a venv under the host's /tmp (a CI
    # checkout, say) must be bound back in place, read-only.
    venv = tmp_path / "venv"
    await anyio.run_process([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    site = next(venv.glob("lib/python*/site-packages"))
    ours = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "pytest").is_dir())
    (site / "host.pth").write_text(ours + "\n")
    python = str(venv / "bin" / "python")
    attack = "open(__import__('sys').executable + '-pwned', 'w')"
    obs, wrote = await observe_many(
        [
            Candidate(
                "run_suite", "test_subset", repo=str(shop), tests=["tests/test_cart.py"], python=python
            ),
            Candidate("run_entry", "snippet", code=attack, python=python),
        ]
    )
    assert obs.failure is not None and obs.failure.failure_class == "assertion", obs.failure
    assert wrote.failure is not None and "Read-only file system" in wrote.failure.message
    assert not Path(python + "-pwned").exists()


@full_boundary
async def test_many_concurrent_runs_do_not_trip_over_each_others_scratch() -> None:
    # Each namespace starts with a copy of the host's mounts, other runs' scratch
    # tmpfs included, which may vanish while the view is being built.
    results = await observe_many([snippet(f"print({i})") for i in range(40)], limit=8)
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(40)]
    assert {r.verdict for r in results} == {"empty_success"}


@full_boundary
async def test_a_run_cannot_read_a_sibling_runs_scratch(
    outside_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Scratch roots outside /tmp (a TMPDIR elsewhere): the view is a new root holding
    # this run's scratch root alone, so the others are not there, not even by name.
    outside_tmp.chmod(0o755)  # traversable, so the siblings' names are visible to a run
    base = outside_tmp / "scratch"
    base.mkdir()
    monkeypatch.setenv("TMPDIR", str(base))
    monkeypatch.setattr(tempfile, "tempdir", None)
    owner = snippet("import time; open('secret.txt', 'w').write('s3cret'); time.sleep(4)")
    reader = snippet(
        "import os, time\n"
        "root = os.path.dirname(os.getcwd()); base = os.path.dirname(root)\n"
        "seen, read = set(), []\n"
        "for _ in range(60):\n"
        "    for name in os.listdir(base):\n"
        "        sib = os.path.join(base, name)\n"
        "        if name.startswith('aexec-') and sib != root:\n"
        "            seen.add(name)\n"
        "            try: read.append(open(os.path.join(sib, 'work', 'secret.txt')).read())\n"
        "            except OSError: pass\n"
        "    time.sleep(0.05)\n"
        "print(len(seen), sorted(set(read)))\n"
    )
    _, got = await observe_many([owner, reader])
    seen, read = got.stdout.split(" ", 1)
    assert int(seen) == 0, got.stdout  # the view holds no other run's root, not even its name
    assert read.strip() == "[]", got.stdout


@full_boundary
async def test_a_run_under_tmp_cannot_read_a_sibling_it_finds_in_mountinfo(scratch_tmp: Path) -> None:
    # Under /tmp: the view's mountinfo is the new root's, which lists no other run's
    # scratch root (nor does /proc/1/root lead to the host's).
    owner = snippet("import time; open('secret.txt', 'w').write('s3cret'); time.sleep(4)")
    reader = snippet(
        "import os, time\n"
        "root = os.path.dirname(os.getcwd())\n"
        "seen, read = set(), []\n"
        "for _ in range(60):\n"
        "    for line in open('/proc/self/mountinfo'):\n"
        "        point = line.split()[4]\n"
        "        if os.path.basename(point).startswith('aexec-') and point != root:\n"
        "            seen.add(point)\n"
        "            for path in (os.path.join(point, 'work', 'secret.txt'), '/proc/1/root' + point + '/work/secret.txt'):\n"
        "                try: read.append(open(path).read())\n"
        "                except OSError: pass\n"
        "    time.sleep(0.05)\n"
        "print(len(seen), sorted(set(read)))\n"
    )
    _, got = await observe_many([owner, reader])
    seen, read = got.stdout.split(" ", 1)
    assert int(seen) == 0, got.stdout  # the view's mountinfo lists no other run's root
    assert read.strip() == "[]", got.stdout


@full_boundary
async def test_a_scratch_base_others_cannot_traverse_still_works(
    outside_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # outside_tmp is 0700 (mkdtemp) and not under /tmp: the run's uid reaches its
    # scratch root through the new root's own directories on the way to it.
    assert outside_tmp.stat().st_mode & 0o001 == 0
    monkeypatch.setenv("TMPDIR", str(outside_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    obs = await observe(snippet("import os; print(sorted(os.listdir('..')))"))
    assert obs.verdict == "empty_success", obs.failure
    assert obs.stdout.strip() == "['.aexec', 'home', 'tmp', 'work']"
