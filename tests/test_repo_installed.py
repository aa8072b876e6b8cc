"""Issue 39, defect 5: the repo under test is installed for every process of the run.

SWE-bench's image installs the repo (``pip install -e .``), so a test that starts
``python -m pylint`` from another directory, or with a ``PYTHONPATH`` of its own, imports
the checkout. An environment aexec builds (``install: deps``) does the same for the
candidate's copy: a ``.pth`` names the one path where every run's view holds it
(``wire.REPO_VIEW``), warm and cold; the original repo stays out of the view.
Real uv builds, real runs (the tiny index of ``test_built_envs``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aexec import Candidate, observe_many
from aexec._driver.wire import REPO_VIEW
from aexec._environments.build import REPO_AT, REPO_FINDER, REPO_PTH, ensure
from aexec._options import Options
from aexec._stages.keys import environment_key

from .conftest import MakeRepo, diff
from .test_built_envs import index, spec

__all__ = ["index"]  # a fixture of test_built_envs, used here

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


MAIN = "import pkg\nprint(pkg.NAME, pkg.__file__)\n"
TESTS = """\
    import os
    import subprocess
    import sys

    ORIGINAL = {original!r}


    def run(argv, tmp_path, env):
        done = subprocess.run(argv, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()


    def test_python_m_from_another_directory_without_pythonpath(tmp_path):
        env = {{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}}
        name, where = run([sys.executable, "-m", "pkg"], tmp_path, env)
        assert name == "fixed"  # the candidate's patched copy, not the base
        assert not where.startswith(ORIGINAL) and not os.path.exists(ORIGINAL)


    def test_the_copy_wins_over_a_release_the_environment_holds(tmp_path):
        # The environment holds a release providing `proj` (as pytest's holds a pytest):
        # the candidate's copy is what a process imports, as after pip install -e.
        env = {{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}}
        code = "import proj; print(proj.f(), proj.__file__)"
        name, where = run([sys.executable, "-c", code], tmp_path, env)
        assert name == "copy" and "site-packages" not in where


    def test_import_with_a_pythonpath_of_its_own(tmp_path):
        env = dict(os.environ, PYTHONPATH=str(tmp_path))
        code = "import pkg; print(pkg.NAME, pkg.__file__)"
        name, _ = run([sys.executable, "-c", code], tmp_path, env)
        assert name == "fixed"
"""
INIT = "NAME = 'base'\n"
#: With `aexec_shadow`, a release that provides the module `proj` (the index's wheel).
ENV = spec(packages=("aexec_shadow",))


def repo_files(original: Path) -> dict[str, str]:
    return {
        "pyproject.toml": '[project]\nname = "pkg"\nversion = "0"\n',
        "pkg/__init__.py": INIT,
        "pkg/__main__.py": MAIN,
        "proj/__init__.py": "def f():\n    return 'copy'\n",
        "tests/test_sub.py": TESTS.format(original=str(original)),
    }


async def test_a_tests_subprocess_imports_the_candidates_copy_warm_and_cold(
    index: object, make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo = make_repo(repo_files(tmp_path / "repo0"))
    assert repo == tmp_path / "repo0"
    root = tmp_path / "envs"
    patch = diff("pkg/__init__.py", INIT, "NAME = 'fixed'\n")
    cand = Candidate(
        "run_suite", "patch", repo=str(repo), patch=patch, tests=("tests/test_sub.py",), environment=ENV
    )
    for options in (Options(env_dir=str(root)), Options(env_dir=str(root), forkserver=False)):
        (obs,) = await observe_many([cand], options=options)
        assert obs.verdict == "pass", (obs.error, obs.stdout[-3000:])
        assert [t.verdict for t in obs.test_results] == ["passed"] * 3
    built = ensure(ENV, str(repo), str(root))
    sites = list(Path(built.path).glob(f"lib/python*/site-packages/{REPO_PTH}"))
    assert [p.read_text() for p in sites] == [f"import {REPO_FINDER}\n"]
    assert not os.path.exists(REPO_VIEW)  # on the host, the .pth's path is no path: ignored
    # Without namespaces there is no view, so no fixed path: as before, a subprocess finds
    # the repo only from its cwd or a PYTHONPATH naming it (docs/environments.md).
    (obs,) = await observe_many([cand], options=Options(env_dir=str(root), namespaces=False))
    assert [t.verdict for t in obs.test_results] == ["failed"] * 3
    assert "No module named pkg" in str(obs.failure and obs.failure.message), obs.failure


def test_the_editable_install_is_part_of_the_environments_key() -> None:
    key = {"interpreter": "/usr/bin/python3.11 3.11.2", "lock_hash": "l", "setup_hash": "s"}
    assert environment_key(**key) != environment_key(**key, repo_at=REPO_AT)
    assert environment_key(**key, repo_at=None) == environment_key(**key)
