"""A pytest fork server imports the interpreter's plugins, and what they import when
pytest configures, through pytest's assertion-rewriting hook as a default configuration
has it (``python_files = test_*.py *_test.py``, ``--assert=rewrite``). A repo configured
otherwise has its cold runs import them otherwise: under ``python_files = *.py`` every
module imported after pytest's hook is rewritten (a site-packages helper a plugin
imports at configure too), under ``--assert=plain`` none (not the plugins' own modules
either). A warm run cannot un-import them: it ends as soon as pytest has read the
configuration, and the run is made cold, as are the repo's later runs in the call
(`aexec._driver.rewriting.unlike_cold`). Each observation must be the cold one: the same
messages, stdout and verdicts as pytest's own run.

Nor does a warm run import the plugins: what their import marks for rewriting
(``register_assert_rewrite``) marked the server's hook, and a module so marked that
only a test imports was not rewritten warm. The run's own hook gets those marks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aexec import Candidate, ExecutionObservation, Observer, Options

from .conftest import CountingSupervisor, MakeRepo
from .test_environments import _venv, plain_pytest, plugin_distribution, verdicts
from .test_levers import comparable
from .test_plugin_preload import PYTHONS

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

#: The plugin (its module rewritten, as pytest rewrites its plugins' distributions): a
#: fixture whose check asserts here, and a configure hook importing a helper module of
#: site-packages that no distribution of a plugin holds (rewritten only if
#: ``python_files`` matches its file). It also has another module rewritten
#: (``register_assert_rewrite``), which only a test imports.
PLUGIN = """\
import pytest

pytest.register_assert_rewrite("aexec_rw_lazy")


def pytest_configure(config):
    import aexec_rw_helper  # noqa: F401


def check(value):
    assert value == 2


@pytest.fixture
def plugin_check():
    return check
"""
HELPER = "def check(value):\n    assert value == 2\n"
TESTS = """\
import aexec_rw_helper


def test_helper():
    aexec_rw_helper.check(1)


def test_plugin(plugin_check):
    plugin_check(1)


def test_passes(plugin_check):
    plugin_check(2)


def test_lazy():
    import aexec_rw_lazy

    aexec_rw_lazy.check(1)
"""
VERDICTS = {"test_helper": "failed", "test_plugin": "failed", "test_passes": "passed", "test_lazy": "failed"}


@pytest.fixture
def anyio_backend() -> str:
    """About what the server imported, not the supervisor: one backend."""
    return "asyncio"


@pytest.fixture(scope="module", params=list(PYTHONS))
def python(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv with that pytest, the plugin (a ``pytest11`` entry point) and its helper:
    the oldest pytest whose server preloads plugins (5.4, on Python 3.8) to the newest."""
    version = request.param
    if not os.access(PYTHONS[version], os.X_OK):
        pytest.skip(f"no {PYTHONS[version]} for pytest {version}")
    where = tmp_path_factory.mktemp("venv") / f"pytest{version}"
    python = _venv(where, f"pytest=={version}", interpreter=PYTHONS[version])
    [site] = (where / "lib").glob("python*/site-packages")
    (site / "aexec_rw_plugin.py").write_text(PLUGIN)
    (site / "aexec_rw_helper.py").write_text(HELPER)
    (site / "aexec_rw_lazy.py").write_text(HELPER)
    plugin_distribution(site, "aexec_rw_plugin", "aexec_rw_plugin.py")
    return python


async def observed(
    cands: list[Candidate], tmp_path: Path
) -> tuple[list[ExecutionObservation], list[ExecutionObservation], CountingSupervisor]:
    """The candidates observed warm (the default), counted, and cold."""
    counting = CountingSupervisor()
    async with Observer(Options(startup_dir=str(tmp_path / "startup"), limit=1), supervisor=counting) as warm:
        got = await warm.observe_many(cands)
        assert warm.warm._servers, "no fork server started"
    async with Observer(Options(forkserver=False)) as cold:
        want = await cold.observe_many(cands)
    return got, want, counting


def messages(obs: ExecutionObservation) -> dict[str, str]:
    """Each failure's message (``NODEID: TYPE: MESSAGE``), by its test's name."""
    return {f.message.split(": ", 1)[0].split("::")[-1]: f.message for f in obs.failures}


def summary(obs: ExecutionObservation) -> dict[str, str]:
    return {t.test.split("::")[-1]: t.verdict for t in obs.test_results}


@pytest.mark.parametrize(
    ("config", "helper", "plugin"),
    [
        # every module a plugin imports is a test file: rewritten, cold
        ("python_files = *.py", "AssertionError: assert 1 == 2", "AssertionError: assert 1 == 2"),
        # nothing is rewritten, cold: not the plugin's own module either
        ("addopts = --assert=plain", "AssertionError", "AssertionError"),
    ],
    ids=["python_files", "assert_plain"],
)
async def test_a_repo_whose_pytest_imports_the_plugins_otherwise_is_run_cold(
    python: str, make_repo: MakeRepo, tmp_path: Path, config: str, helper: str, plugin: str
) -> None:
    repo = make_repo({"pytest.ini": f"[pytest]\n{config}\n", "test_x.py": TESTS})
    cands = [
        Candidate("run_suite", "test_subset", repo=str(repo), tests=["test_x.py"], python=python),
        # the repo's next run in the call goes cold from the start
        Candidate(
            "run_suite", "test_subset", repo=str(repo), tests=["test_x.py::test_plugin"], python=python
        ),
    ]
    [warm, again], [cold, cold_again], counting = await observed(cands, tmp_path)
    prefix = "test_x.py::"
    assert messages(cold) == {
        "test_helper": f"{prefix}test_helper: {helper}",
        "test_plugin": f"{prefix}test_plugin: {plugin}",
        "test_lazy": f"{prefix}test_lazy: {plugin}",  # marked as the plugin is
    }, cold.failures
    assert verdicts(cold) == plain_pytest(python, repo, ["test_x.py"], tmp_path)  # pytest's own
    assert summary(cold) == VERDICTS
    assert messages(warm) == messages(cold), (warm.failures, warm.stdout[-2000:])
    assert summary(warm) == summary(cold)
    assert comparable(warm) == comparable(cold)  # stdout too, but for times and addresses
    assert comparable(again) == comparable(cold_again)
    # the first run forked, ended at once and made again cold; the second cold at once
    assert (counting.runs, counting.served) == (3, 1)


async def test_a_repo_configured_as_the_server_is_run_warm(
    python: str, make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo = make_repo({"pytest.ini": "[pytest]\naddopts = -ra\n", "test_x.py": TESTS})
    cand = Candidate("run_suite", "test_subset", repo=str(repo), tests=["test_x.py"], python=python)
    [warm], [cold], counting = await observed([cand], tmp_path)
    assert (counting.runs, counting.served) == (1, 1)  # forked, and not made again
    assert messages(warm) == {
        "test_helper": "test_x.py::test_helper: AssertionError",  # not a test file here
        "test_plugin": "test_x.py::test_plugin: AssertionError: assert 1 == 2",
        # marked by the plugin's import, in the server: this run's pytest marks it too
        "test_lazy": "test_x.py::test_lazy: AssertionError: assert 1 == 2",
    }, warm.failures
    assert comparable(warm) == comparable(cold)
