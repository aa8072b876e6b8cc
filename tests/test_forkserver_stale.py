"""A warm fork server runs the code it imported when it started: it serves a call only
while every file behind its modules is as it was then (`ForkServer.changed`), and what
it learnt a pytest start imports is used only while those modules' files are unchanged
(``_driver/startup.py``).

The case: a pytest plugin installed editable (its sources outside site-packages, on
``sys.path`` through a ``.pth``: neither the interpreter's distributions nor its import
directories' stamps move when a source is edited in place), edited between two calls of
one long-lived `Observer`, as a harness calling ``observe`` again and again, or
``aexec serve``, would see it. Each call's verdicts must be a cold run's of the same
files. (The entries' checks, pure: tests/unit/test_startup.py.)"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import aexec
from aexec import Candidate, ExecutionObservation, Observer, Options

from .test_environments import _venv, plugin_distribution

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

#: The plugin, first as installed. Its fixture's value comes from a module it imports,
#: and its configure hook imports another (what a pytest start imports, learnt).
PLUGIN = """\
import pytest

import aexec_stale_helper

USES = "aexec_stale_lazy_a"


def pytest_configure(config):
    import aexec_stale_lazy_a  # noqa: F401


@pytest.fixture
def answer():
    return aexec_stale_helper.VALUE
"""
#: Then edited: the same answer from other code, and another module imported at configure.
PLUGIN_EDITED = """\
import pytest

import aexec_stale_helper

USES = "aexec_stale_lazy_b"


def pytest_configure(config):
    import aexec_stale_lazy_b  # noqa: F401


@pytest.fixture
def answer():
    return 42 if aexec_stale_helper.VALUE == 4100 else 0
"""
TESTS = """\
import sys

import aexec_stale_plugin


def test_answer(answer):
    assert answer == 42


def test_only_the_plugins_own_start_up_imports():
    other = {"aexec_stale_lazy_a", "aexec_stale_lazy_b"} - {aexec_stale_plugin.USES}
    assert aexec_stale_plugin.USES in sys.modules and not other & set(sys.modules)
"""

ANSWER_AND_IMPORTS = [
    "test_plugin.py::test_answer",
    "test_plugin.py::test_only_the_plugins_own_start_up_imports",
]


@pytest.fixture
def anyio_backend() -> str:
    """About what the server imported, not the supervisor: one backend."""
    return "asyncio"


def editable_plugin(tmp_path: Path) -> tuple[str, Path]:
    """A venv with pytest and the plugin installed editable (a ``.pth`` naming its
    source directory, a ``dist-info`` with its ``pytest11`` entry point), as ``pip
    install -e`` lays out a hatchling or flit project; its python and source directory."""
    python = _venv(tmp_path / "venv", "pytest")
    src = tmp_path / "plugin-src"
    src.mkdir()
    (src / "aexec_stale_plugin.py").write_text(PLUGIN)
    (src / "aexec_stale_helper.py").write_text("VALUE = 42\n")
    (src / "aexec_stale_lazy_a.py").write_text("")
    (src / "aexec_stale_lazy_b.py").write_text("")
    [site] = (tmp_path / "venv" / "lib").glob("python*/site-packages")
    (site / "_aexec_stale_plugin.pth").write_text(f"{src}\n")
    plugin_distribution(site, "aexec_stale_plugin", "_aexec_stale_plugin.pth")
    return python, src


def outcome(obs: ExecutionObservation) -> tuple[str, dict[str, str]]:
    return obs.verdict, {t.test: t.verdict for t in obs.test_results}


async def test_an_edited_editable_plugin_is_run_as_a_cold_run_runs_it(tmp_path: Path) -> None:
    python, src = editable_plugin(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_plugin.py").write_text(TESTS)
    cand = Candidate("run_suite", "test_subset", repo=str(repo), tests=["test_plugin.py"], python=python)
    options = Options(startup_dir=str(tmp_path / "startup"))

    async def cold() -> tuple[str, dict[str, str]]:
        async with Observer(Options(forkserver=False)) as once:
            [obs] = await once.observe_many([cand])
        return outcome(obs)

    async with Observer(options) as observer:

        async def warm() -> tuple[str, dict[str, str]]:
            [obs] = await observer.observe_many([cand])
            return outcome(obs)

        first = await warm()
        assert first == ("pass", dict.fromkeys(ANSWER_AND_IMPORTS, "passed")), first
        [server] = observer.warm._servers.values()

        # a module the plugin imports, edited in place (a longer file: a cold run's
        # interpreter must not find its old bytecode valid either)
        (src / "aexec_stale_helper.py").write_text("VALUE = 4100\n")
        edited = await cold()
        assert edited == ("fail", {**first[1], "test_plugin.py::test_answer": "failed"}), edited
        assert await warm() == edited  # not the server's old helper
        [again] = observer.warm._servers.values()
        assert again is not server and not server.alive

        # the plugin itself, which now imports another module when pytest configures
        (src / "aexec_stale_plugin.py").write_text(PLUGIN_EDITED)
        rewritten = await cold()
        assert rewritten == first
        assert await warm() == rewritten  # neither the old plugin nor its start-up imports
        [last] = observer.warm._servers.values()
        assert last is not again and last.startup == "computed"  # learnt again, not the old list


class StartedSupervisor(aexec.LocalSupervisor):
    """The real supervisor, telling when a served run of a test that sleeps begins."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeping = anyio.Event()

    async def execute(self, invocation: aexec.Invocation) -> aexec.RawRun:
        spec = Path(invocation.argv[-1])  # python -s DRIVER SPEC
        if invocation.server is not None and "test_sleep" in spec.read_text():
            self.sleeping.set()
        return await super().execute(invocation)


async def test_a_retired_server_ends_the_runs_another_call_began_on_it(tmp_path: Path) -> None:
    python, src = editable_plugin(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_plugin.py").write_text(TESTS)
    (repo / "test_sleep.py").write_text("import time\n\ndef test_sleep():\n    time.sleep(3)\n")
    fast = Candidate("run_suite", "test_subset", repo=str(repo), tests=["test_plugin.py"], python=python)
    slow = Candidate("run_suite", "test_subset", repo=str(repo), tests=["test_sleep.py"], python=python)
    supervisor = StartedSupervisor()
    got: list[ExecutionObservation] = []
    async with Observer(Options(startup_dir=str(tmp_path / "startup")), supervisor=supervisor) as observer:
        assert outcome((await observer.observe_many([fast]))[0])[0] == "pass"
        [server] = observer.warm._servers.values()

        async def sleeper() -> None:
            got.extend(await observer.observe_many([slow]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper)
            await supervisor.sleeping.wait()  # forked by the server, sleeping
            (src / "aexec_stale_helper.py").write_text("VALUE = 4100\n")
            edited = outcome((await observer.observe_many([fast]))[0])
            assert edited[1]["test_plugin.py::test_answer"] == "failed", edited
            assert not server.alive and not server.exited  # retired, its run still going
        assert outcome(got[0]) == ("pass", {"test_sleep.py::test_sleep": "passed"}), got[0]
        for _ in range(100):  # then it exits, and is reaped by the next call
            if server.exited:
                break
            await anyio.sleep(0.05)
        assert server.exited
