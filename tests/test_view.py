"""The run's filesystem view holds only what the run needs (issue 27, goals 1 and 4).

Each test plants something on the host a candidate must not read — a newer commit in
the original repo's ``.git``, a world-readable "gold patch" elsewhere, a concurrent
run's scratch root — then runs a real hostile candidate, and checks what it found. The
work directory (the repos and TMPDIR) is put in each of the three places a harness
puts it: under ``/tmp``, under a world-readable host directory (as a ``/testbed`` or a
dataset folder is), and under a directory others cannot traverse (under ``/root``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import aexec
from aexec import Candidate, Options, observe, observe_many
from aexec._boundary.isolation import detect_isolation

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
#: Where a harness keeps its work: the host's /tmp, a world-readable directory, and a
#: directory others cannot traverse.
PLACES = {"tmp": "/tmp", "world": "/srv", "hidden": "/root"}
GIT = shutil.which("git")


@pytest.fixture(params=sorted(PLACES))
def workdir(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The test's work directory (repos, TMPDIR) in one of `PLACES`."""
    parent = PLACES[request.param]
    if not os.access(parent, os.W_OK):
        pytest.skip(f"{parent} is not writable here")
    d = Path(tempfile.mkdtemp(prefix="aexec-view-test-", dir=parent))
    d.chmod(0o700 if request.param == "hidden" else 0o755)
    tmp = d / "tmpdir"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def gold() -> Iterator[tuple[Path, str]]:
    """A world-readable "gold patch" planted on the host, outside any work directory."""
    marker = f"GOLD-{uuid.uuid4()}"
    d = Path(tempfile.mkdtemp(prefix="aexec-gold-", dir="/srv" if os.access("/srv", os.W_OK) else "/var/tmp"))
    d.chmod(0o755)
    path = d / "gold.patch"
    path.write_text(f"+fixed = True  # {marker}\n")
    path.chmod(0o644)
    try:
        yield path, marker
    finally:
        shutil.rmtree(d, ignore_errors=True)


def git(repo: Path, *args: str) -> None:
    assert GIT is not None
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": os.environ["PATH"], "HOME": str(repo)}  # fmt: skip
    subprocess.run([GIT, *args], cwd=repo, env=env, check=True, capture_output=True)


#: The attack: everything a candidate finds through the original repo's path, its
#: ``.git`` (a future commit's content and message), a planted gold file, and the
#: host's home directories. Prints one JSON object: what it found.
ATTACK = """
import glob, json, os, subprocess, zlib
repo, future, gold_path, gold = {repo!r}, {future!r}, {gold_path!r}, {gold!r}
found = {{}}
def look(what, text):
    if future in text or gold in text:
        found[what] = text[:200]
for path in [gold_path, os.path.join(repo, "a.py"), os.path.join(repo, ".git", "COMMIT_EDITMSG"),
             os.path.join(repo, ".git", "logs", "HEAD"), os.path.join(repo, ".git", "packed-refs")]:
    try:
        look(path, open(path, errors="replace").read())
    except OSError:
        pass
    if os.path.exists(path):
        found.setdefault("exists:" + path, "")
for obj in glob.glob(os.path.join(repo, ".git", "objects", "??", "*")):
    try:
        look(obj, zlib.decompress(open(obj, "rb").read()).decode(errors="replace"))
    except (OSError, zlib.error):
        pass
for where in (repo, os.getcwd()):
    for argv in (["git", "log", "--all", "-p"], ["git", "cat-file", "--batch-all-objects", "--batch"]):
        try:
            done = subprocess.run(argv, cwd=where, capture_output=True, text=True, errors="replace")
            look(" ".join(argv) + " in " + where, done.stdout)
        except OSError:
            pass
own = os.path.dirname(os.environ["HOME"]) + "/"  # this run's scratch root (under /root, say)
for home in ("/home", "/root"):
    for dirpath, dirnames, filenames in os.walk(home):
        if any(part in dirpath + "/" for part in ("/.pyenv/", "/.rustup/", "/.cargo/", own)):
            dirnames[:] = []
            continue
        for name in filenames:
            found.setdefault("home:" + os.path.join(dirpath, name), "")
print(json.dumps(found))
"""


def repo_with_a_future(workdir: Path) -> tuple[Path, str]:
    """A repo checked out at its base commit, whose ``.git`` holds a newer commit (the
    fix) on another branch: the future a candidate must not see."""
    future = f"FUTURE-{uuid.uuid4()}"
    repo = workdir / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.py").write_text("fixed = False\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "checkout", "-q", "-b", "fix")
    (repo / "a.py").write_text(f"fixed = True  # {future}\n")
    git(repo, "commit", "-q", "-am", f"the fix {future}")
    git(repo, "checkout", "-q", "main")
    return repo, future


@full_boundary
@pytest.mark.skipif(GIT is None, reason="needs git")
@pytest.mark.parametrize("forkserver", [True, False], ids=["warm", "cold"])
async def test_a_command_finds_neither_the_original_repo_its_future_nor_a_gold_file(
    workdir: Path, gold: tuple[Path, str], forkserver: bool
) -> None:
    repo, future = repo_with_a_future(workdir)
    gold_path, marker = gold
    code = ATTACK.format(repo=str(repo), future=future, gold_path=str(gold_path), gold=marker)
    # The attack works on the host: it finds the future and the gold file there.
    done = await anyio.run_process([sys.executable, "-c", code], cwd=repo)
    on_host = json.loads(done.stdout)
    assert any(future in v for v in on_host.values()) and str(gold_path) in on_host, on_host
    obs = await observe(
        Candidate("run_entry", "command", repo=str(repo), command=["python3", "-c", code]),
        options=Options(forkserver=forkserver),
    )
    assert obs.verdict == "empty_success", (obs.failure, obs.stderr)
    assert json.loads(obs.stdout) == {}


@full_boundary
@pytest.mark.skipif(GIT is None, reason="needs git")
async def test_a_test_file_in_a_suite_finds_neither_the_original_repo_its_future_nor_a_gold_file(
    workdir: Path, gold: tuple[Path, str]
) -> None:
    repo, future = repo_with_a_future(workdir)
    gold_path, marker = gold
    code = ATTACK.format(repo=str(repo), future=future, gold_path=str(gold_path), gold=marker)
    test = "import json, subprocess, sys\n\ndef test_nothing_is_found():\n"
    test += f"    out = subprocess.run([sys.executable, '-c', {code!r}], capture_output=True, text=True)\n"
    test += "    assert out.returncode == 0, out.stderr\n    assert json.loads(out.stdout) == {}\n"
    (repo / "test_attack.py").write_text(test)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the candidate's test")
    # An observer of its own: its bytecode store (under this TMPDIR) leaves with it.
    async with aexec.observer() as own:
        suite = Candidate("run_suite", "test_subset", repo=str(repo), tests=["test_attack.py"])
        obs = await observe(suite, observer=own)
    assert obs.verdict == "pass", (obs.failure, obs.stdout[-2000:])


@full_boundary
async def test_a_concurrent_runs_scratch_root_is_out_of_reach(workdir: Path) -> None:
    # The owner's snippet itself is the secret: its .aexec/snippet.py holds the marker.
    marker = f"SECRET-{uuid.uuid4()}"
    base = os.environ["TMPDIR"]
    owner = f"import time; open('secret.txt', 'w').write({marker!r}); time.sleep(4)\n"
    reader = textwrap.dedent(f"""
        import glob, os, time
        found, roots = set(), set()
        here = os.path.dirname(os.getcwd())
        for _ in range(60):
            lines = [line.split()[4] for line in open('/proc/self/mountinfo')]
            for root in [*glob.glob({base!r} + '/aexec-*'), *glob.glob('/tmp/aexec-*'),
                         *(os.path.dirname(p) for p in lines), *lines]:
                if root.rstrip('/') == here or not os.path.basename(root).startswith('aexec-'):
                    continue
                roots.add(root)
                for rel in ('.aexec/snippet.py', 'work/secret.txt'):
                    for path in (os.path.join(root, rel), '/proc/1/root' + os.path.join(root, rel)):
                        try:
                            text = open(path).read()
                        except OSError:
                            continue
                        if {marker!r} in text:
                            found.add(path)
            time.sleep(0.05)
        print(sorted(found))
    """)
    seen: set[str] = set()
    concurrent = 0

    async def watch() -> None:
        nonlocal concurrent
        while True:  # both scratch roots on the host at once: the owner was there to read
            roots = [n for n in os.listdir(base) if n.startswith("aexec-")
                     and "-bytecode-" not in n]  # fmt: skip
            seen.update(roots)
            concurrent = max(concurrent, len(roots))
            await anyio.sleep(0.05)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        snippets = [Candidate("run_entry", "snippet", code=c) for c in (owner, reader)]
        _, got = await observe_many(snippets)
        tg.cancel_scope.cancel()
    assert concurrent >= 2, seen
    assert got.verdict == "empty_success", (got.failure, got.stderr)
    assert got.stdout.strip() == "[]", got.stdout


@full_boundary
async def test_the_view_holds_the_system_the_toolchain_and_the_scratch_root_only(workdir: Path) -> None:
    code = "import json, os; print(json.dumps({d: sorted(os.listdir(d)) for d in ('/', '/dev', '/var')}))"
    obs = await observe(Candidate("run_entry", "snippet", code=code))
    assert obs.verdict == "empty_success", (obs.failure, obs.stderr)
    seen = json.loads(obs.stdout)
    top = str(workdir).split("/")[1]  # the way to this run's scratch root
    host_only = {"home", "srv", "opt", "mnt", "media", "boot", "run", "sys"} - {top}
    assert not host_only & set(seen["/"]), seen["/"]
    assert {"usr", "etc", "dev", "proc", "tmp"} <= set(seen["/"])
    assert set(seen["/dev"]) <= {"null", "zero", "full", "random", "urandom", "tty", "fd", "stdin",
                                 "stdout", "stderr", "ptmx", "pts", "shm"}  # fmt: skip
    assert seen["/var"] == ["tmp"]
    assert "filesystem" in obs.environment.enforced
    assert "own root" in obs.environment.enforced["filesystem"]


@full_boundary
async def test_a_path_the_options_declare_is_bound_read_only_and_only_then(gold: tuple[Path, str]) -> None:
    path, marker = gold
    path.chmod(0o666)  # writable by anyone: only the read-only bind stops the write
    code = f"import os; print(open({str(path)!r}).read().strip()); open({str(path)!r}, 'a')"
    declared = Options(readonly=(str(path.parent),))
    obs = await observe(Candidate("run_entry", "snippet", code=code), options=declared)
    assert marker in obs.stdout
    assert obs.failure is not None and "Read-only file system" in obs.failure.message
    assert str(path.parent) in obs.environment.enforced["filesystem"]
    assert Options.from_env({"AEXEC_READONLY_PATHS": f"{path.parent}:/x"}).readonly == (
        str(path.parent),
        "/x",
    )
    obs = await observe(Candidate("run_entry", "snippet", code=code))
    assert obs.failure is not None and "No such file or directory" in obs.failure.message


#: A run's probe of its view's root: the device of /, what a write to the read-only
#: part gets, the names it sees beside its own scratch root, and its open fds.
TEMPLATE_PROBE = """
import errno, json, os, time
time.sleep({wait})
own = os.path.dirname(os.getcwd())
base = os.path.dirname(own)
writes = {{}}
for path in ('/aexec-probe', '/dev/aexec-probe', '/etc/aexec-probe', '/proc/../aexec-probe',
             *([] if (base + '/').startswith('/tmp/') else [base + '/aexec-probe'])):  # else its own tmp
    try:
        os.mkdir(path)
        writes[path] = 'written'
    except OSError as e:
        writes[path] = errno.errorcode[e.errno]
fds = {{}}
for fd in os.listdir('/proc/self/fd'):
    try:
        fds[fd] = os.readlink('/proc/self/fd/' + fd)
    except OSError:
        pass
print(json.dumps({{'dev': os.stat('/').st_dev, 'own': own, 'beside': sorted(os.listdir(base)),
                   'top': sorted(os.listdir('/')), 'writes': writes, 'fds': fds}}))
time.sleep({hold})
"""


@full_boundary
async def test_warm_runs_clone_one_read_only_template_that_holds_no_run(workdir: Path) -> None:
    """A fork server assembles the read-only part of the view once and each run clones
    it: two concurrent runs of one server share its root (one tmpfs, read-only in
    both: no write lands in it), and neither sees the other's scratch root by name, in
    its scratch base or its root; the template's fd does not reach the candidate."""
    first = Candidate("run_entry", "snippet", code=TEMPLATE_PROBE.format(wait=0, hold=3))
    second = Candidate("run_entry", "snippet", code=TEMPLATE_PROBE.format(wait=1, hold=0))
    got = await observe_many([first, second])
    seen = []
    for obs in got:
        assert obs.verdict == "empty_success", (obs.failure, obs.stderr)
        seen.append(json.loads(obs.stdout))
    assert seen[0]["own"] != seen[1]["own"]
    assert seen[0]["dev"] == seen[1]["dev"], "each run assembled a root of its own"
    for probe in seen:
        assert set(probe["writes"].values()) == {"EROFS"}, probe["writes"]
        names = [n for n in probe["beside"] + probe["top"] if n.startswith("aexec-")]
        assert names == [os.path.basename(probe["own"])] * (names != []), (probe["own"], names)
        assert sorted(probe["fds"]) == ["0", "1", "2", "3"], probe["fds"]
        assert probe["fds"]["3"].endswith("/.aexec/report.jsonl")
