from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aexec
import aexec._cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def slack(seconds: float) -> float:
    """A wall-clock bound for a test of a deadline, a kill or a stall: ``seconds`` on an
    idle machine, stretched by how many runnable tasks share each core (the one-minute
    load average) on a loaded one (issue 39: CI machines are shared; at a load of 10-16 on
    2 cores a 2 s bound failed where the same test passed alone). The bound still catches
    what these tests are for: a hang, or an 18 s stall."""
    per_core = os.getloadavg()[0] / len(os.sched_getaffinity(0))
    return seconds * max(1.0, per_core)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the README's test line, which ``.ci/run`` runs): two workers per core.

    About half of a worker's time here is waiting, not computing: on deadlines and
    timeouts under test, sleeping candidates, builds fetching from the index. With one
    worker per core the suite used one of the two cores on average (693 s of CPU in 697 s
    of wall at ``-n 2``); on the same machine, a subset of 357 tests (bad input, observe,
    isolation, CLI) took 199 s at ``-n 2``, 180 s at ``-n 3`` and 153 s at ``-n 4``, with
    no timing test failing. An explicit ``-n N`` still wins."""
    return 2 * len(os.sched_getaffinity(0))


def once_per_session(
    factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Any]
) -> tuple[Path, Any]:
    """``make(directory)`` run once per test session, not once per xdist worker: the
    first worker to ask runs it (under a lock) and saves what it returns (JSON data);
    the others wait for it and read the same directory and data. For an expensive,
    read-only reference that a module fixture would otherwise make on every worker that
    runs one of its tests. A ``make`` that fails saves nothing (the next asker tries)."""
    base = factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    directory, saved = root / f"once-{name}", root / f"once-{name}.json"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not saved.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            saved.write_text(json.dumps(make(directory)))
        return directory, json.loads(saved.read_text())


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both backends, explicitly: a missing trio fails loudly instead of skipping."""
    return str(request.param)


@pytest.fixture
def scratch_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private TMPDIR, so a test can check that every scratch root was removed.

    The observers the test used are closed when it ends (their compiled repos, which
    outlive a call by design, live in the scratch base until then)."""
    d = tmp_path / "scratch-tmp"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    return d


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """A private copy of the shipped example repo."""
    dest = tmp_path / "shop"
    shutil.copytree(EXAMPLES / "shop", dest)
    return dest


MakeRepo = Callable[[dict[str, str]], Path]


@pytest.fixture
def make_repo(tmp_path: Path) -> MakeRepo:
    counter = iter(range(1000))

    def make(files: dict[str, str]) -> Path:
        root = tmp_path / f"repo{next(counter)}"
        for rel, text in files.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(textwrap.dedent(text))
        return root

    return make


def diff(path: str, old: str, new: str) -> str:
    """A git-style unified diff of one file."""
    import difflib

    a = old.splitlines(keepends=True) if old else []
    b = new.splitlines(keepends=True) if new else []
    src = f"a/{path}" if old else "/dev/null"
    dst = f"b/{path}" if new else "/dev/null"
    head = f"diff --git a/{path} b/{path}\n"
    if not old:
        head += "new file mode 100644\n"
    elif not new:
        head += "deleted file mode 100644\n"
    return head + "".join(difflib.unified_diff(a, b, src, dst))


def scratch_roots(base: Path) -> list[str]:
    """The scratch roots left under ``base``; an observer's compiled-bytecode store (which
    outlives a call by design, until the observer is closed) is not one."""
    return sorted(p.name for p in base.iterdir() if "-bytecode-" not in p.name)


class CountingSupervisor:
    """A `aexec.Supervisor` that counts the runs it is handed (and those a warm fork
    server starts) and runs them with the real one."""

    def __init__(self) -> None:
        self.runs = 0
        self.served = 0
        self._real = aexec.LocalSupervisor()

    async def execute(self, invocation: aexec.Invocation) -> aexec.RawRun:
        self.runs += 1
        self.served += invocation.server is not None
        return await self._real.execute(invocation)


class RefusingSupervisor:
    """A `aexec.Supervisor` for paths that must not run anything."""

    async def execute(self, invocation: aexec.Invocation) -> aexec.RawRun:
        raise AssertionError("the execute stage ran")


def live_pids_with(marker: str) -> list[int]:
    """Pids whose command line carries ``marker`` (to observe, never to kill)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    with open(f"/proc/{name}/stat") as s:
                        if s.read().rsplit(")", 1)[1].split()[0] != "Z":
                            found.append(int(name))
        except OSError:
            continue
    return found


def aexec_in_process(
    *args: str, cwd: Path | None = None, runs: bool = False
) -> subprocess.CompletedProcess[str]:
    """``aexec ARGS`` called in this process (``aexec._cli.main``): its exit status and
    both streams, as ``subprocess.run`` gives them for the real command, without the
    second or so an interpreter takes to start. For what is refused before anything runs:
    a run it starts fails the test (the real command's witnesses are in test_bad_input),
    unless ``runs`` (then its candidates run for real)."""

    async def ran(self: object, invocation: aexec.Invocation) -> aexec.RawRun:
        raise AssertionError(f"aexec {' '.join(args)} started a run: {invocation.argv}")

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        if not runs:
            mp.setattr(aexec.LocalSupervisor, "execute", ran)
        if cwd is not None:
            mp.chdir(cwd)
        try:
            code: object = aexec._cli.main(list(args))
        except SystemExit as e:
            code = e.code
            if isinstance(code, str):
                print(code, file=sys.stderr)
                code = 1
        finally:
            import structlog

            structlog.reset_defaults()  # main configures it for the process: not for the next test
    status = 0 if code is None else int(code)  # type: ignore[call-overload]
    return subprocess.CompletedProcess(["aexec", *args], status, out.getvalue(), err.getvalue())


def built_or_skip(env: Any, repo: str, root: str) -> Any:
    """``ensure(env, repo, root)``: the environment built, or the test skipped when PyPI
    cannot be reached (a machine without the index; never a failure of aexec's)."""
    from aexec._environments.build import ensure

    try:
        return ensure(env, repo, root)
    except Exception as e:
        if "pypi" in str(e).lower() or "connect" in str(e).lower():
            pytest.skip(f"PyPI cannot be reached: {e}")
        raise
