"""What a plugin missing from the interpreter leaves behind is the environment's fault
(issue 26, defect 3), and nothing of aexec's own reaches the candidate's warning filters
(defect 5): real pytest in real venvs, made by ``tests/test_environments.py``'s fixtures
(``bare_python``: pytest alone; ``plugin_python``: with pytest-mock, anyio and others).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aexec import Candidate, ExecutionObservation, observe

from .conftest import MakeRepo, diff
from .test_environments import LIB, bare_python, plain_pytest, plugin_python, verdicts

__all__ = ["bare_python", "plugin_python"]  # the venv fixtures, shared with test_environments

FIX = diff("lib.py", LIB, "def double(x):\n    return x + x\n")

MOCKER = {
    "lib.py": LIB,
    "tests/test_mocker.py": """
        import lib

        def test_patched(mocker):
            mocker.patch.object(lib, "double", return_value=7)
            assert lib.double(1) == 7

        def test_plain():
            assert lib.double(2) == 4
    """,
}

ANYIO_STRICT = {
    "pyproject.toml": """
        [tool.pytest.ini_options]
        addopts = "--strict-markers"
    """,
    "lib.py": LIB,
    "tests/test_async.py": """
        import asyncio

        import pytest
        import lib

        @pytest.fixture
        def anyio_backend():
            return "asyncio"

        @pytest.mark.anyio
        async def test_sleeps():
            await asyncio.sleep(0)
            assert lib.double(2) == 4
    """,
}


@pytest.fixture
def anyio_backend() -> str:
    """These tests are about pytest inside the run, not the supervisor: one backend."""
    return "asyncio"


async def _suite(
    repo: Path, python: str, patch: str | None = None, tests: str = "tests"
) -> ExecutionObservation:
    return await observe(
        Candidate("run_suite", "test_subset", repo=str(repo), tests=[tests], python=python, patch=patch)
    )


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_fixture_of_a_plugin_the_interpreter_lacks_is_env_broken(
    bare_python: str, plugin_python: str, make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo = make_repo(MOCKER)
    plain = plain_pytest(bare_python, repo, ["tests"], tmp_path)
    assert set(plain.values()) == {"errored", "passed"}  # plain pytest: mocker not found
    for patch in (None, FIX):
        obs = await _suite(repo, bare_python, patch)
        assert obs.verdict == "error" and obs.flags.env_broken, (obs.verdict, obs.failure)
        assert obs.env_fault is not None and obs.env_fault.kind == "missing_fixture", obs.env_fault
        assert "'mocker'" in obs.env_fault.message and obs.env_fault.pristine_exit_code == 1
        assert obs.error is not None and obs.error.startswith("environment: ")
        assert verdicts(obs) == plain  # the run's own per-test evidence stays
    # with the plugin installed, the same suite is the candidate's to pass
    obs = await _suite(repo, plugin_python, FIX)
    assert obs.verdict == "pass" and not obs.flags.env_broken
    await _fixtures_not_the_environments(bare_python, make_repo)


async def _fixtures_not_the_environments(bare_python: str, make_repo: MakeRepo) -> None:
    """A fixture the repo defines or the candidate breaks is not the environment's."""
    helpers = "import pytest\n\n@pytest.fixture\ndef db():\n    return {}\n"
    uses_db = "from helpers import db\n\ndef test_db(db):\n    assert db == {}\n"
    repo = make_repo({"lib.py": LIB, "helpers.py": helpers, "tests/test_db.py": uses_db})
    # the patch renames the repo's fixture: the unpatched repo runs
    renamed = diff(
        "helpers.py", helpers, helpers.replace("@pytest.fixture", "@pytest.fixture(name='database')")
    )
    # the patch makes the repo's fixture request one that exists nowhere (a typo)
    typo = diff("helpers.py", helpers, helpers.replace("def db():", "def db(tmp_pth):"))
    for patch in (renamed, typo):
        obs = await _suite(repo, bare_python, patch)
        assert obs.verdict == "fail" and not obs.flags.env_broken, (obs.verdict, obs.env_fault)
    # a test the patch adds requests a fixture no one defines: the patch's
    adds = diff("tests/test_new.py", "", "def test_new(mockr):\n    pass\n")
    obs = await _suite(repo, bare_python, adds)
    assert obs.verdict in ("fail", "tampered") and not obs.flags.env_broken, obs.verdict
    # a fixture the repo defines where the test cannot see it fails the unpatched repo
    # too, but it is the repo's, not a missing plugin's
    hidden = make_repo(
        {
            "lib.py": LIB,
            "tests/a/conftest.py": "import pytest\n\n@pytest.fixture(name='mocker')\ndef _m():\n    return 1\n",
            "tests/a/test_a.py": "def test_a(mocker):\n    assert mocker == 1\n",
            "tests/b/test_b.py": "def test_b(mocker):\n    pass\n",
        }
    )
    obs = await _suite(hidden, bare_python, FIX, tests="tests/b")
    assert obs.verdict == "fail" and not obs.flags.env_broken, (obs.verdict, obs.env_fault)
    # a failure of the candidate's beside the missing plugin's fixture is charged
    broken = diff("lib.py", LIB, "def double(x):\n    return 3 * x\n")
    obs = await _suite(make_repo(MOCKER), bare_python, broken)
    assert obs.verdict == "fail" and not obs.flags.env_broken, (obs.verdict, obs.env_fault)


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_marker_of_a_plugin_the_interpreter_lacks_is_env_broken_under_strict_markers(
    bare_python: str, plugin_python: str, make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo = make_repo(ANYIO_STRICT)
    plain = plain_pytest(bare_python, repo, ["tests"], tmp_path)
    assert plain == {("", "tests.test_async"): "errored"}  # a collection error, nothing ran
    for patch in (None, FIX):
        obs = await _suite(repo, bare_python, patch)
        assert obs.verdict == "error" and obs.flags.env_broken, (obs.verdict, obs.failure)
        assert obs.env_fault is not None and obs.env_fault.kind == "unknown_marker", obs.env_fault
        assert "'anyio'" in obs.env_fault.message
        assert obs.failure is not None  # the run's own evidence, as before
        assert verdicts(obs) == plain
    obs = await _suite(repo, plugin_python, FIX)
    assert obs.verdict == "pass" and not obs.flags.env_broken
    await _markers_not_the_environments(bare_python, make_repo)


async def _markers_not_the_environments(bare_python: str, make_repo: MakeRepo) -> None:
    """A marker the repo registers or the candidate misspells is not the environment's."""
    slow = "import pytest\n\n@pytest.mark.slow\ndef test_b():\n    pass\n"
    # registered, but by a conftest the selection does not load: the repo's own fault
    registered = make_repo(
        {
            "pytest.ini": "[pytest]\naddopts = --strict-markers\n",
            "lib.py": LIB,
            "tests/a/conftest.py": (
                "def pytest_configure(config):\n    config.addinivalue_line('markers', 'slow: a slow test')\n"
            ),
            "tests/a/test_a.py": "def test_a():\n    pass\n",
            "tests/b/test_b.py": slow,
        }
    )
    obs = await _suite(registered, bare_python, FIX, tests="tests/b")
    assert obs.verdict == "fail" and not obs.flags.env_broken, (obs.verdict, obs.env_fault)
    # registered in a pytest configuration file pytest does not read (pytest.ini wins)
    in_cfg = make_repo(
        {
            "pytest.ini": "[pytest]\naddopts = --strict-markers\n",
            "setup.cfg": "[tool:pytest]\nmarkers =\n    slow: a slow test\n",
            "lib.py": LIB,
            "tests/test_b.py": slow,
        }
    )
    obs = await _suite(in_cfg, bare_python, FIX)
    assert obs.verdict == "fail" and not obs.flags.env_broken, (obs.verdict, obs.env_fault)
    # a patch whose module marks with a name no one registers: the unpatched repo runs
    repo = make_repo(
        {
            "pytest.ini": "[pytest]\naddopts = --strict-markers\n",
            "lib.py": LIB,
            "tests/test_lib.py": "from lib import double\n\ndef test_two():\n    assert double(2) == 4\n",
        }
    )
    marks = diff("lib.py", LIB, "import pytest\n\nslow = pytest.mark.slwo\n" + LIB)
    obs = await _suite(repo, bare_python, marks)
    assert obs.verdict == "fail" and not obs.flags.env_broken, (obs.verdict, obs.env_fault)


ASYNCIO_MODE = {
    "lib.py": LIB,
    "tests/test_lib.py": "from lib import double\n\ndef test_two():\n    assert double(2) == 4\n",
}

#: Every way a suite turns warnings into errors: pytest's ini option, its ``-W``, and a
#: conftest that does it for the whole process (as some repos do at import).
WARNINGS_AS_ERRORS = {
    "filterwarnings": "[pytest]\nfilterwarnings =\n    error\n",
    "-W error": "[pytest]\naddopts = -W error\n",
}
GLOBAL_ERROR = "import warnings\n\nwarnings.simplefilter('error')\n"


def _aexecs(obs: ExecutionObservation) -> list[str]:
    """Lines of the run's output that speak of aexec's own objects."""
    texts = [obs.stdout, obs.stderr, obs.error or ""]
    if obs.env_fault is not None:
        texts += [obs.env_fault.message, obs.env_fault.pristine_stderr]
    return [ln for t in texts for ln in t.splitlines() if ".aexec" in ln or "ResourceWarning" in ln]


@pytest.mark.slow
@pytest.mark.anyio
async def test_aexecs_report_file_never_reaches_the_candidates_warning_filters(
    bare_python: str, make_repo: MakeRepo
) -> None:
    """Under warnings as errors, a healthy suite passes with nothing of aexec's in its
    output, and an environment's fault (an option of a plugin the interpreter lacks,
    pytest exit 3) is told by pytest's own error, not by aexec's unclosed report file."""
    for name, ini in WARNINGS_AS_ERRORS.items():
        healthy = make_repo({**ASYNCIO_MODE, "pytest.ini": ini, "tests/conftest.py": GLOBAL_ERROR})
        for patch in (None, FIX):
            obs = await _suite(healthy, bare_python, patch)
            assert obs.verdict == "pass" and not obs.flags.env_broken, (name, obs.verdict, obs.stderr)
            assert _aexecs(obs) == [], (name, _aexecs(obs))
        ini = ini.replace("[pytest]\n", "[pytest]\nasyncio_mode = auto\n")
        faulty = make_repo({**ASYNCIO_MODE, "pytest.ini": ini})
        for patch in (None, FIX):
            obs = await _suite(faulty, bare_python, patch)
            assert obs.verdict == "error" and obs.flags.env_broken, (name, obs.verdict, obs.failure)
            assert obs.env_fault is not None and obs.env_fault.kind == "internal", obs.env_fault
            assert "Unknown config option: asyncio_mode" in obs.env_fault.message, obs.env_fault.message
            assert _aexecs(obs) == [], (name, _aexecs(obs))
