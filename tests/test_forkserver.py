"""The warm fork server (issue 5): a run forked from it is a cold run, started sooner.

Each test compares real runs with the server (the default) against the same runs with
``Options(forkserver=False)`` (a fresh interpreter per run), or checks the host afterwards.
The hostile tests of ``test_isolation.py`` run through the server too, as every run does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from aexec import Candidate, Options, observe_many

from .conftest import MakeRepo
from .test_levers import comparable

pytestmark = pytest.mark.anyio

#: What a process can tell about how it was started.
INTROSPECT = """\
import json, os, sys
fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))
print(json.dumps({
    'fds': fds,
    'stdin': os.readlink('/proc/self/fd/0'),
    'session_leader_is_pid1': os.getsid(0) == 1,
    'cwd_is_work': os.path.basename(os.getcwd()) == 'work',
    'env': sorted(os.environ),
    'tmpdir': __import__('tempfile').gettempdir() == os.environ['TMPDIR'],
    'argv': [os.path.basename(a) for a in sys.argv],
    'hash': hash('aexec'),
    'path': [p for p in sys.path if 'work' in p],
    'flags': [sys.flags.no_user_site, sys.flags.hash_randomization, sys.flags.dont_write_bytecode],
    'encoding': [sys.stdout.encoding, sys.stdout.write_through, sys.stdin.encoding],
    'signals': [str(signal) for signal in __import__('signal').valid_signals()
                if __import__('signal').getsignal(signal) not in (None, __import__('signal').SIG_DFL)],
}, sort_keys=True))
"""


def served_pids() -> list[int]:
    """This process's children that are fork servers."""
    found = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            for pid in f.read().split():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as c:
                        if b"--serve" in c.read().split(b"\0"):
                            found.append(int(pid))
                except OSError:
                    continue
    return found


async def both(cands: list[Candidate]) -> tuple[list[Any], list[Any]]:
    warm = await observe_many(cands)
    cold = await observe_many(cands, options=Options(forkserver=False))
    return warm, cold


async def test_a_forked_run_starts_as_a_fresh_interpreter_would(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    snippet = Candidate("run_entry", "snippet", code=INTROSPECT)
    (tmp_path / "test_it.py").write_text(
        f"def test_it():\n    exec(compile({INTROSPECT!r}, 'x', 'exec'), {{}})\n    assert False\n"
    )
    suite = Candidate("run_suite", "test_subset", repo=str(tmp_path), tests=["test_it.py"])
    warm, cold = await both([snippet, suite])
    assert '"fds": [0, 1, 2' in cold[0].stdout and "fds" in cold[1].stdout
    for w, c in zip(warm, cold, strict=True):
        assert comparable(w) == comparable(c)  # stdout (the introspection) included
    assert '"fds": [0, 1, 2' in warm[0].stdout  # nothing of the server leaks into the run


async def test_a_repo_shadowing_a_module_the_server_imported_runs_cold(
    make_repo: MakeRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytest imports iniconfig; a cold run finds the repo's first, so a warm one must too.
    repo = make_repo(
        {
            "iniconfig.py": "import sys\nprint('SHADOW', file=sys.stderr)\nfrom _iniconfig_gone import x\n",
            "test_a.py": "def test_a():\n    assert True\n",
        }
    )
    cand = Candidate("run_suite", "test_subset", repo=str(repo), tests=["test_a.py"])
    warm, cold = await both([cand])
    assert "SHADOW" in warm[0].stderr
    assert comparable(warm[0]) == comparable(cold[0])


def kill_servers() -> list[int]:
    """SIGKILL our servers and wait until they are dead (zombies, not yet reaped): a
    SIGKILLed interpreter may take a while to exit on a loaded machine, and the runs
    that follow must find it dead, not dying."""
    pids = served_pids()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)  # our own child, by the pid we started
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                        break
            except OSError:
                break
            time.sleep(0.005)
    return pids


async def test_a_dead_server_costs_no_observation_and_is_replaced() -> None:
    await observe_many([Candidate("run_entry", "snippet", code="pass")])
    killed = kill_servers()
    assert killed  # there was a server to kill
    cands = [Candidate("run_entry", "snippet", code=f"print({i})") for i in range(3)]
    got = await observe_many(cands, limit=1)
    assert [o.stdout for o in got] == ["0\n", "1\n", "2\n"]  # served by a new server
    assert {o.verdict for o in got} == {"empty_success"}
    assert served_pids() and not set(served_pids()) & set(killed)


async def test_a_run_whose_server_dies_under_it_is_an_error_not_a_verdict() -> None:
    async def kill_soon() -> None:
        await anyio.sleep(1.0)
        kill_servers()

    async with anyio.create_task_group() as tg:
        tg.start_soon(kill_soon)
        got = await observe_many([Candidate("run_entry", "snippet", code="import time; time.sleep(3)")])
    assert got[0].verdict == "error", got[0]


def test_servers_serve_later_calls_and_die_with_their_process(tmp_path: Path) -> None:
    script = (
        "import anyio, json, sys\n"
        "from aexec import Candidate, observe\n"
        f"sys.path.insert(0, {str(Path(__file__).parent.parent)!r})\n"
        "from tests.test_forkserver import served_pids\n"
        "async def main():\n"
        "    seen = []\n"
        "    for code in ('pass', 'import pytest', 'pass'):\n"
        "        await observe(Candidate('run_entry', 'snippet', code=code))\n"
        "        seen.append(served_pids())\n"
        "    print(json.dumps(seen))\n"
        "anyio.run(main)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert len(seen[0]) == 1 and seen[0] == seen[1] == seen[2]  # one server, for every call
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") for pid in seen[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(os.path.exists(f"/proc/{pid}") for pid in seen[0])


async def test_an_interpreter_without_pytest_gets_cold_runs_and_the_same_observation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its pytest-mode server cannot start: the run goes cold and fails as a cold run does.
    venv = tmp_path / "bare-venv"
    await anyio.run_process([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    cand = Candidate(
        "run_suite",
        "test_subset",
        repo=str(tmp_path),
        tests=["test_a.py"],
        python=str(venv / "bin" / "python"),
    )
    warm, cold = await both([cand])
    # no pytest to run the selection with: the environment's fault, not the candidate's
    assert warm[0].verdict == "error" and warm[0].flags.env_broken, warm[0]
    assert warm[0].env_fault.kind == "no_pytest" and "pytest" in (
        warm[0].failure.message if warm[0].failure else ""
    )
    assert comparable(warm[0]) == comparable(cold[0])


#: A run's environment as Python sees it, and as the C library hands it to a program it runs.
ENVIRON = """\
import json, os, subprocess
c = subprocess.run(['env', '-0'], capture_output=True, check=True).stdout.decode().split('\\0')
print(json.dumps({'python': dict(os.environ), 'c': dict(kv.split('=', 1) for kv in c if kv)}))
"""


async def test_each_forked_run_has_its_own_environment_and_only_it() -> None:
    # The server sets each run's environment before it forks it (only what differs from
    # the run before: HOME and TMPDIR): every run must still see exactly its own.
    cands = [Candidate("run_entry", "snippet", code=f"{ENVIRON}# run {i}\n") for i in range(4)]
    warm, cold = await both(cands)
    assert len(served_pids()) >= 1
    envs = [json.loads(o.stdout) for o in warm]
    for env in envs:
        assert env["python"] == env["c"]
        assert env["python"]["TMPDIR"].startswith(env["python"]["HOME"].rsplit("/", 1)[0])
    assert len({env["python"]["HOME"] for env in envs}) == len(cands)  # one per run
    for w, c in zip(envs, (json.loads(o.stdout) for o in cold), strict=True):
        assert list(w["python"]) == list(c["python"])  # the same names, in the same order
        assert {k: v for k, v in w["python"].items() if k not in ("HOME", "TMPDIR")} == {
            k: v for k, v in c["python"].items() if k not in ("HOME", "TMPDIR")
        }
