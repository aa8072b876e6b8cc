"""The user's environment is the referee (issue 18): per-test verdicts equal to those of a
plain ``python -m pytest`` in the declared interpreter, with its plugins loaded and the
repo's configuration honoured; an environment that cannot run the selection is not the
candidate's fault; the cache key follows what changes pytest's behaviour.

The interpreters are real venvs made here, with real plugins installed from the package
index (once per test session; the project's own environment is not changed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from aexec import Candidate, ExecutionObservation, observe
from aexec._environments.build import uv_binary
from aexec._errors import RequestError
from aexec._serde import candidate as read_request
from aexec._stages.classify import pytest_command, route

from .conftest import MakeRepo, diff

PLUGINS = [
    "pytest",
    "pytest-cov",
    "pytest-asyncio",
    "anyio",
    "pytest-mock",
    "hypothesis",
    "pytest-timeout",
    "pytest-xdist",
    "pytest-rerunfailures",
]


@pytest.fixture
def anyio_backend() -> str:
    """These tests are about pytest inside the run, not the supervisor: one backend."""
    return "asyncio"


def _venv(where: Path, *packages: str, interpreter: str = sys.executable) -> str:
    # No pip of its own (ensurepip costs seconds a venv): uv installs into it.
    subprocess.run([interpreter, "-m", "venv", "--without-pip", str(where)], check=True)
    python = str(where / "bin" / "python")
    if packages:
        pip_install(python, *packages)
    return python


def plugin_distribution(site: Path, module: str, *files: str) -> None:
    """A pytest plugin's distribution in ``site`` as an installer lays it out: named after
    ``module`` (underscores as dashes), version 1.0, its ``pytest11`` entry point that
    module, and a RECORD of ``files`` (paths in ``site``: what it installed) and its own."""
    dist = site / f"{module}-1.0.dist-info"
    dist.mkdir()
    name = module.replace("_", "-")
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[pytest11]\n{name} = {module}\n")
    own = (f"{dist.name}/{f}" for f in ("METADATA", "entry_points.txt", "RECORD"))
    (dist / "RECORD").write_text("".join(f"{path},,\n" for path in (*files, *own)))


def pip_install(python: str, *packages: str) -> None:
    """``packages`` installed into ``python``'s venv by uv (the one aexec's environments
    use): the same install as pip's, in a second where pip takes ten."""
    subprocess.run(
        [uv_binary(), "pip", "install", "-q", "--python", python, *packages],
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="session")
def plugin_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv with pytest and the plugins real repos' configurations need."""
    return _venv(tmp_path_factory.mktemp("venv") / "plugins", *PLUGINS)


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv with pytest alone."""
    return _venv(tmp_path_factory.mktemp("venv") / "bare", "pytest")


def _address(nodeid: str) -> tuple[str, str]:
    """A node id as junit XML names it (pytest's ``mangle_test_address``)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = names[0].replace("/", ".").removesuffix(".py")
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def plain_pytest(python: str, repo: Path, args: list[str], tmp: Path) -> dict[tuple[str, str], str]:
    """Per-test verdicts of a plain ``python -m pytest ARGS`` on a copy of ``repo``, read
    from its junit XML (a collector pytest could not collect is one ``error`` testcase
    there, as it is one ``errored`` entry of aexec's ``test_results``)."""
    copy = tmp / f"plain-{repo.name}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(repo, copy)
    xml = tmp / f"{repo.name}.xml"
    env = {"PATH": f"{os.path.dirname(python)}:/usr/bin:/bin", "HOME": str(tmp), "LANG": "C.UTF-8"}
    subprocess.run(
        [python, "-m", "pytest", f"--junitxml={xml}", *args], cwd=copy, env=env, capture_output=True
    )
    out: dict[tuple[str, str], str] = {}
    for case in ET.parse(xml).iter("testcase"):
        tags = {child.tag for child in case}
        verdict = (
            "errored"
            if "error" in tags
            else "failed"
            if "failure" in tags
            else "skipped"
            if "skipped" in tags
            else "passed"
        )
        out[(case.get("classname", ""), case.get("name", ""))] = verdict
    return out


def verdicts(obs: ExecutionObservation) -> dict[tuple[str, str], str]:
    return {_address(t.test): t.verdict for t in obs.test_results}


async def _agrees(python: str, repo: Path, tests: list[str], tmp: Path, **kw: object) -> ExecutionObservation:
    obs = await observe(
        Candidate("run_suite", "test_subset", repo=str(repo), tests=tests, python=python, **kw)  # type: ignore[arg-type]
    )
    assert obs.test_results, (obs.verdict, obs.failure, obs.stdout[-2000:], obs.stderr[-2000:])
    assert verdicts(obs) == plain_pytest(python, repo, tests, tmp), obs.stdout[-2000:]
    return obs


LIB = "def double(x):\n    return 2 * x\n"

COV_REPO = {
    "pyproject.toml": """
        [tool.pytest.ini_options]
        addopts = "--cov=lib --cov-branch --cov-report=term"
        testpaths = ["tests"]
    """,
    "lib.py": LIB,
    "tests/test_lib.py": """
        from lib import double

        def test_two():
            assert double(2) == 4

        def test_three():
            assert double(3) == 6
    """,
}


@pytest.mark.slow
@pytest.mark.anyio
async def test_addopts_that_need_pytest_cov_run_as_plain_pytest_runs_them(
    plugin_python: str, make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo = make_repo(COV_REPO)
    obs = await _agrees(plugin_python, repo, ["tests/test_lib.py"], tmp_path)
    assert obs.verdict == "pass" and not obs.flags.env_broken
    assert "TOTAL" in obs.stdout  # pytest-cov's report: the plugin ran
    assert "already imported" not in obs.stdout + obs.stderr  # warm plugins look cold


@pytest.mark.slow
@pytest.mark.anyio
async def test_opting_out_of_plugins_is_the_environments_fault_not_the_candidates(
    plugin_python: str, make_repo: MakeRepo
) -> None:
    repo = make_repo(COV_REPO)
    for patch in (None, diff("lib.py", LIB, "def double(x):\n    return x + x\n")):
        obs = await observe(
            Candidate(
                "run_suite",
                "test_subset",
                repo=str(repo),
                tests=["tests/test_lib.py"],
                python=plugin_python,
                pytest_plugins="none",
                patch=patch,
            )
        )
        assert obs.verdict == "error" and obs.flags.env_broken, (obs.verdict, obs.stderr)
        assert obs.env_fault is not None and obs.env_fault.kind == "usage"
        assert "--cov" in obs.env_fault.message and obs.env_fault.pristine_exit_code == 4
        assert obs.error is not None and obs.error.startswith("environment: ")


@pytest.mark.slow
@pytest.mark.anyio
async def test_asyncio_mode_auto_anyio_marks_and_mocker(
    plugin_python: str, make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo = make_repo(
        {
            "pyproject.toml": """
                [tool.pytest.ini_options]
                asyncio_mode = "auto"
                asyncio_default_fixture_loop_scope = "function"
            """,
            "lib.py": LIB,
            "tests/test_auto.py": """
                import asyncio

                async def test_sleeps():
                    await asyncio.sleep(0)

                async def test_fails_after_a_sleep():
                    await asyncio.sleep(0)
                    assert 1 == 2
            """,
            "tests/test_anyio_marked.py": """
                import anyio
                import pytest

                @pytest.fixture
                def anyio_backend():
                    return "asyncio"

                @pytest.mark.anyio
                async def test_checkpoint():
                    await anyio.sleep(0)
            """,
            "tests/test_mocker.py": """
                import lib

                def test_patched(mocker):
                    mocker.patch.object(lib, "double", return_value=7)
                    assert lib.double(1) == 7

                def test_spy(mocker):
                    spy = mocker.spy(lib, "double")
                    lib.double(2)
                    spy.assert_called_once_with(2)
            """,
        }
    )
    obs = await _agrees(plugin_python, repo, ["tests"], tmp_path)
    assert obs.verdict == "fail" and obs.failure is not None
    assert obs.failure.failure_class == "assertion"
    assert sum(t.verdict == "passed" for t in obs.test_results) == 4


@pytest.mark.slow
@pytest.mark.anyio
async def test_xdist_timeout_and_hypothesis_from_addopts(
    plugin_python: str, make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo = make_repo(
        {
            "setup.cfg": """
                [tool:pytest]
                addopts = -n 2 --timeout=60 -p no:randomly
                pythonpath = src
            """,
            "src/pkg/__init__.py": LIB,
            "tests/test_props.py": """
                from hypothesis import given, settings, strategies as st
                from pkg import double

                @settings(max_examples=20, database=None)
                @given(st.integers())
                def test_double_is_even(n):
                    assert double(n) % 2 == 0

                def test_wrong():
                    assert double(1) == 3

                def test_raises():
                    raise ValueError("boom")
            """,
        }
    )
    obs = await _agrees(plugin_python, repo, ["tests/test_props.py"], tmp_path)
    assert obs.verdict == "fail"
    # the workers' exceptions are relayed from their reports, classified as in one process
    found = {f.message.split(": ", 1)[0]: (f.failure_class, f.message) for f in obs.failures}
    assert found["tests/test_props.py::test_raises"] == (
        "runtime",
        "tests/test_props.py::test_raises: ValueError: boom",
    ), found
    assert found["tests/test_props.py::test_wrong"][0] == "assertion"
    assert obs.failure is not None and obs.failure.failure_class == "assertion"


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_test_that_passes_when_rerun_passes_as_plain_pytest_says(
    plugin_python: str, make_repo: MakeRepo, tmp_path: Path
) -> None:
    """pytest-rerunfailures: a failed attempt that is retried is not the test's verdict
    (nor its failure); a test that fails every attempt still fails with its exception."""
    repo = make_repo(
        {
            "tests/test_flaky.py": """
                from pathlib import Path
                import pytest

                @pytest.mark.flaky(reruns=2)
                def test_second_try(tmp_path_factory):
                    count = Path(__file__).with_name("attempts")
                    n = int(count.read_text()) if count.exists() else 0
                    count.write_text(str(n + 1))
                    assert n >= 1

                @pytest.mark.flaky(reruns=1)
                def test_never():
                    raise ValueError("every time")
            """,
        }
    )
    obs = await _agrees(plugin_python, repo, ["tests/test_flaky.py"], tmp_path)
    assert {t.test.rsplit("::", 1)[1]: t.verdict for t in obs.test_results} == {
        "test_second_try": "passed",
        "test_never": "failed",
    }
    assert [f.message for f in obs.failures] == ["tests/test_flaky.py::test_never: ValueError: every time"]


@pytest.fixture(scope="session")
def pytest83_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv with a pytest older than 8.4 (whose assertion-rewriting hook cannot be made
    before a configuration is read) and a plugin, as real projects pin them."""
    return _venv(tmp_path_factory.mktemp("venv") / "pytest83", "pytest==8.3.3", "pytest-asyncio==0.23.8")


@pytest.mark.slow
@pytest.mark.anyio
async def test_cache_options_in_addopts_and_warnings_as_errors_under_an_older_pytest(
    pytest83_python: str, make_repo: MakeRepo, tmp_path: Path
) -> None:
    """Seen in the equivalence corpus (async-lru, aiosignal, httpcore): ``--cache-clear``
    in addopts (the cache provider's option: it must stay loaded), and under pytest < 8.4
    a plugin the warm server imported made the run's pytest warn "Module already imported
    so cannot be rewritten", an error under ``filterwarnings = error``."""
    repo = make_repo(
        {
            "setup.cfg": """
                [tool:pytest]
                addopts = --cache-clear
                asyncio_mode = auto
                filterwarnings = error
            """,
            "lib.py": LIB,
            "tests/test_lib.py": """
                from lib import double

                async def test_two():
                    assert double(2) == 4

                def test_three():
                    assert double(3) == 7
            """,
        }
    )
    obs = await _agrees(pytest83_python, repo, ["tests/test_lib.py"], tmp_path)
    assert obs.verdict == "fail" and not obs.flags.env_broken
    assert obs.failure is not None and obs.failure.failure_class == "assertion"


MISSING = {
    "lib.py": LIB,
    "tests/test_lib.py": """
        import aexec_not_installed_anywhere
        from lib import double

        def test_two():
            assert double(2) == 4
    """,
    "tests/test_other.py": """
        from lib import double

        def test_three():
            assert double(3) == 6
    """,
}


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_module_the_interpreter_lacks_is_env_broken_pristine_and_patched(
    bare_python: str, make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo = make_repo(MISSING)
    plain = plain_pytest(bare_python, repo, ["tests"], tmp_path)
    assert plain == {("", "tests.test_lib"): "errored"}  # no test runs in plain pytest either
    fix = diff("lib.py", LIB, "def double(x):\n    return x + x\n")
    for patch in (None, fix):
        obs = await observe(
            Candidate(
                "run_suite", "test_subset", repo=str(repo), tests=["tests"], python=bare_python, patch=patch
            )
        )
        assert obs.verdict == "error" and obs.flags.env_broken, (obs.verdict, obs.failure)
        assert obs.env_fault is not None and obs.env_fault.kind == "missing_module"
        assert "aexec_not_installed_anywhere" in obs.env_fault.message
        assert (
            obs.env_fault.pristine_failures
            and obs.env_fault.pristine_failures[0].failure_class == "dependency"
        )
        assert obs.failure is not None and obs.failure.failure_class == "dependency"  # the run's own evidence
        assert verdicts(obs) == plain  # the module, errored, and no test that ran


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_conftest_importing_what_the_interpreter_lacks_is_a_missing_module(
    bare_python: str, make_repo: MakeRepo
) -> None:
    """pytest stops at the conftest with status 4, not a usage error of the request: the
    exception read from its report makes the kind ``missing_module``."""
    repo = make_repo(
        {
            "lib.py": LIB,
            "tests/conftest.py": "import aexec_not_installed_anywhere\n",
            "tests/test_lib.py": MISSING["tests/test_other.py"],
        }
    )
    obs = await observe(
        Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests"], python=bare_python)
    )
    assert obs.verdict == "error" and obs.flags.env_broken, (obs.verdict, obs.failure)
    assert obs.env_fault is not None and obs.env_fault.kind == "missing_module", obs.env_fault
    assert obs.failure is not None and obs.failure.failure_class == "dependency"
    assert obs.failure.location == "tests/conftest.py:1"
    # a conftest of the repo's own that does not even parse: pytest refuses to start,
    # on the unpatched repo as on the candidate's, as before its exception was read
    broken = make_repo({**MISSING, "tests/conftest.py": "x = (\n"})
    obs = await observe(
        Candidate(
            "run_suite", "test_subset", repo=str(broken), tests=["tests/test_other.py"], python=bare_python
        )
    )
    assert obs.flags.env_broken and obs.env_fault is not None and obs.env_fault.kind == "usage", obs.env_fault
    assert obs.failure is not None and obs.failure.failure_class == "syntax"


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_candidate_that_breaks_collection_itself_is_charged(
    bare_python: str, make_repo: MakeRepo
) -> None:
    repo = make_repo({k: v for k, v in MISSING.items() if k != "tests/test_lib.py"})
    # the patch imports what the interpreter lacks: the pristine repo runs, so it is the candidate's
    breaks = diff("lib.py", LIB, "import aexec_not_installed_anywhere\n" + LIB)
    # a test the patch adds imports a module the interpreter lacks: the patch touched it
    adds = diff("tests/test_new.py", "", "import aexec_not_installed_anywhere\n\ndef test_x():\n    pass\n")
    for patch in (breaks, adds):
        obs = await observe(
            Candidate(
                "run_suite", "test_subset", repo=str(repo), tests=["tests"], python=bare_python, patch=patch
            )
        )
        assert not obs.flags.env_broken and obs.env_fault is None
        assert obs.verdict in ("fail", "tampered")
        assert obs.failure is not None and obs.failure.failure_class == "dependency"
    # a module of the repo's own that the tests cannot import is the code's fault, not the environment's
    own = make_repo(
        {"lib.py": LIB, "tests/test_lib.py": "from lib.sub import double\n\ndef test_x():\n    pass\n"}
    )
    obs = await observe(
        Candidate("run_suite", "test_subset", repo=str(own), tests=["tests"], python=bare_python)
    )
    assert obs.verdict == "fail" and not obs.flags.env_broken


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_command_that_runs_pytest_gets_per_test_verdicts(
    plugin_python: str, make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo = make_repo(
        {
            **COV_REPO,
            "tests/test_more.py": """
                import pytest

                def test_fails():
                    assert 1 == 2

                @pytest.mark.skip
                def test_skipped():
                    pass
            """,
        }
    )
    expected = plain_pytest(plugin_python, repo, ["tests"], tmp_path)
    suite = await observe(
        Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests"], python=plugin_python)
    )
    assert verdicts(suite) == expected
    for argv in (
        ["python", "-m", "pytest", "tests"],
        ["pytest", "tests"],
        [plugin_python, "-m", "pytest", "tests"],
    ):
        obs = await observe(
            Candidate("run_entry", "command", repo=str(repo), command=argv, python=plugin_python)
        )
        assert verdicts(obs) == expected, argv
        assert obs.verdict == "fail" and obs.failure is not None and obs.failure.failure_class == "assertion"
    only = await observe(
        Candidate(
            "run_entry",
            "command",
            repo=str(repo),
            command=["pytest", "tests", "-k", "two"],
            python=plugin_python,
        )
    )
    assert [t.test for t in only.test_results] == ["tests/test_lib.py::test_two"]
    assert only.verdict == "pass"


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_cache_key_follows_plugins_config_and_the_opt_out(
    tmp_path: Path, make_repo: MakeRepo
) -> None:
    python = _venv(tmp_path / "venv", "pytest")
    repo = make_repo({"lib.py": LIB, "tests/test_lib.py": "def test_x():\n    pass\n"})

    async def key(**kw: object) -> str:
        obs = await observe(
            Candidate("run_suite", "test_subset", repo=str(repo), tests=["tests"], python=python, **kw)  # type: ignore[arg-type]
        )
        assert obs.verdict == "pass", obs.stderr
        return obs.cache_key

    first = await key()
    assert await key() == first
    assert await key(pytest_plugins="none") != first
    pip_install(python, "pytest-timeout")
    with_plugin = await key()
    assert with_plugin != first
    (repo / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-ra"\n')
    assert await key() != with_plugin
    (repo / "tox.ini").write_text("[pytest]\nmarkers = slow\n")
    assert await key() not in (first, with_plugin)


def test_which_commands_run_pytest() -> None:
    assert pytest_command(["pytest", "tests", "-x"]) == ["tests", "-x"]
    assert pytest_command(["py.test"]) == []
    assert pytest_command(["python", "-m", "pytest", "-q"]) == ["-q"]
    assert pytest_command(["python3.11", "-m", "pytest"]) == []
    assert pytest_command(["/v/bin/python", "-m", "pytest", "t"], "/v/bin/python") == ["t"]
    assert pytest_command(["/other/python", "-m", "pytest"], "/v/bin/python") is None
    assert pytest_command(["python", "-X", "dev", "-m", "pytest"]) is None
    assert pytest_command(["python", "-m", "pytest_cov"]) is None
    assert pytest_command(["make", "test"]) is None
    _, runner = route(Candidate("run_entry", "command", repo="/r", command=["pytest"]))
    assert runner == "pytest"
    _, runner = route(Candidate("run_entry", "command", command=["python", "-c", "1"]))
    assert runner == "command"


def test_the_opt_out_field_is_read_and_checked() -> None:
    base = {"request_type": "run_suite", "artifact_shape": "test_subset", "repo": "/r"}
    assert read_request(base)[0].pytest_plugins == "auto"
    assert read_request({**base, "pytest_plugins": "none"})[0].pytest_plugins == "none"
    with pytest.raises(RequestError, match="pytest_plugins"):
        read_request({**base, "pytest_plugins": "off"})
    with pytest.raises(RequestError, match="pytest_plugins"):
        read_request({**base, "pytest_plugins": False})
