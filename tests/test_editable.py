"""An interpreter with editable installs: its sources live outside its install, where an
edit changes them without installing anything (`Toolchain.editable`).

- The run reaches them: a setuptools editable install of a flat-layout project imports
  through a finder that maps the package to its project directory, which no ``sys.path``
  entry names; the view binds it as it binds the toolchain's other directories.
- The observation cache rests on them as they are this call (`Toolchain.sources`): an
  edited source is observed again, an unchanged one is served from the cache.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from aexec import Candidate, Observer, Options

from .test_environments import _venv, pip_install
from .test_forkserver_stale import editable_plugin, outcome

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    """About what the run can import and the cache keys, not the supervisor: one backend."""
    return "asyncio"


CODE = "import flatpkg\nprint(flatpkg.X + 1)\n"


def flat_editable(tmp_path: Path) -> str:
    """A venv with a flat-layout project installed editable by setuptools (a finder
    mapping ``flatpkg`` to the project's directory); its python, which runs `CODE`."""
    project = tmp_path / "flatproj"
    (project / "flatpkg").mkdir(parents=True)
    (project / "flatpkg" / "__init__.py").write_text("X = 41\n")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "flatpkg"\nversion = "1.0"\n[tool.setuptools]\npackages = ["flatpkg"]\n'
    )
    python = _venv(tmp_path / "venv")
    pip_install(python, "-e", str(project))
    [finder] = (tmp_path / "venv").glob("lib/python*/site-packages/__editable___flatpkg_*_finder.py")
    assert str(project / "flatpkg") in finder.read_text()  # imported through the finder's map
    plain = subprocess.run([python, "-c", CODE], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert plain.stdout == "42\n"
    return python


async def test_a_flat_layout_editable_install_is_importable_in_the_run(tmp_path: Path) -> None:
    python = flat_editable(tmp_path)
    cand = Candidate("run_entry", "snippet", code=CODE, python=python)
    for options in (Options(), Options(forkserver=False)):
        async with Observer(options) as observer:
            [obs] = await observer.observe_many([cand])
        assert (obs.verdict, obs.stdout) == ("empty_success", "42\n"), (obs.verdict, obs.stderr)


async def test_an_edited_editable_source_is_observed_again_not_served_from_the_cache(tmp_path: Path) -> None:
    python, src = editable_plugin(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_plugin.py").write_text("def test_answer(answer):\n    assert answer == 42\n")
    cand = Candidate("run_suite", "test_subset", repo=str(repo), tests=["test_plugin.py"], python=python)
    cache = str(tmp_path / "cache")

    async def observe() -> tuple[bool, tuple[str, dict[str, str]]]:
        async with Observer(Options(cache_dir=cache, startup_dir=str(tmp_path / "startup"))) as observer:
            [obs] = await observer.observe_many([cand])
        return obs.cache_hit, outcome(obs)

    passed = ("pass", {"test_plugin.py::test_answer": "passed"})
    assert await observe() == (False, passed)
    assert await observe() == (True, passed)  # unchanged: the cache answers
    # a module the plugin imports, edited in place: nothing installed, nothing in
    # site-packages moved
    (src / "aexec_stale_helper.py").write_text("VALUE = 4100\n")
    assert await observe() == (False, ("fail", {"test_plugin.py::test_answer": "failed"}))
    (src / "aexec_stale_helper.py").write_text("VALUE = 42\n")
    assert (await observe())[1] == passed  # its own sources again, observed afresh
