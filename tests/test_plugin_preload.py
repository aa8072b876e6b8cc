"""The fork server imports the interpreter's pytest plugins ahead under every pytest
whose assertion-rewriting hook can import them as a run's pytest marks them (5.4 and
later), and a warm run's pytest then finds them as a cold run imports them: rewritten,
with no "already imported" warning (an error under ``filterwarnings = error``), with
what they computed from the cwd at import being the run's (hypothesis's example
database), and observes the same.

Before pytest 9.1 a ``Config`` has no ini values until it reads its files, the hook's
constructor failed on that, and the server preloaded no plugin: every warm run under
pytest 8.4 to 9.0 paid its plugins' imports (with hypothesis, ~1.5 s of CPU a run).
Before 8.4 ``_mark_plugins_for_rewrite`` takes no ``disable_autoload`` argument, and
the server called it with one: no plugin either. One real venv per pytest (9.0, 8.3,
and 5.4 on Python 3.8, the oldest that preloads): hypothesis and a plugin whose module
asserts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from aexec import Candidate

from .conftest import MakeRepo
from .test_environments import _venv, plain_pytest, plugin_distribution, verdicts
from .test_forkserver import both
from .test_levers import comparable
from .test_startup_cache import start

#: A plugin whose fixture asserts in the plugin's own module: rewritten (as pytest
#: rewrites the modules of its plugins' distributions), a failure there shows its values.
PLUGIN = """\
import pytest


def check(value):
    assert value == 1


@pytest.fixture
def probe():
    return check
"""


@pytest.fixture
def anyio_backend() -> str:
    """These tests are about pytest inside the run, not the supervisor: one backend."""
    return "asyncio"


#: pytest -> the interpreter its venv is made from: this one, or pyenv's (pytest 5.4
#: runs on Python 3.8 at the latest).
PYTHONS = {
    "9.0.3": sys.executable,
    "8.3.3": sys.executable,
    "5.4.3": "/root/.pyenv/versions/3.8.18/bin/python",
}


@pytest.fixture(scope="module", params=list(PYTHONS))
def versioned_python(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv with that pytest, hypothesis and the plugin (installed as an installer
    lays one out)."""
    version = request.param
    if not os.access(PYTHONS[version], os.X_OK):
        pytest.skip(f"no {PYTHONS[version]} for pytest {version}")
    where = tmp_path_factory.mktemp("venv") / f"pytest{version}"
    python = _venv(where, f"pytest=={version}", "hypothesis", interpreter=PYTHONS[version])
    [site] = (Path(python).parent.parent / "lib").glob("python*/site-packages")
    (site / "aexec_probe_plugin.py").write_text(PLUGIN)
    plugin_distribution(site, "aexec_probe_plugin", "aexec_probe_plugin.py")
    return python


@pytest.mark.slow
def test_the_server_imports_the_plugins(versioned_python: str, tmp_path: Path) -> None:
    how, modules = start(tmp_path / "startup", versioned_python)
    assert {"aexec_probe_plugin", "hypothesis"} <= modules, sorted(modules)
    assert how == "computed"  # and what a pytest start imports after it


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_warm_run_finds_the_plugins_as_a_cold_run_does(
    versioned_python: str, make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo = make_repo(
        {
            "pyproject.toml": """
                [tool.pytest.ini_options]
                filterwarnings = ["error"]
            """,
            "tests/test_probe.py": """
                def test_plugin_fails(probe):
                    probe(2)

                def test_plugin_passes(probe):
                    probe(1)
            """,
            # hypothesis's example database is in the run's cwd, as cold (not in the
            # server's, "/": unusable, and its warning an error here)
            "tests/test_hypothesis.py": """
                from hypothesis import given, settings, strategies as st

                @settings(max_examples=5)
                @given(st.integers())
                def test_identity(x):
                    assert x + 0 == x
            """,
        }
    )
    cand = Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests"], python=versioned_python)
    [warm], [cold] = await both([cand])
    assert comparable(warm) == comparable(cold)
    assert verdicts(warm) == plain_pytest(versioned_python, repo, ["tests"], tmp_path)
    assert warm.verdict == "fail" and not warm.flags.env_broken, (warm.stdout[-2000:], warm.stderr[-2000:])
    assert "already imported" not in warm.stdout + warm.stderr
    # the plugin's assertion was rewritten, as a cold run rewrites it
    assert warm.failure is not None and "assert 2 == 1" in warm.failure.message, warm.failure
