"""What a pytest start imports is learnt once per interpreter and environment, not once
per fork server: a second server of the same environment reads what the first learnt
(no ``--collect-only`` child: about 1.5 s of CPU per server), imports the same modules,
and serves the same observations. No run sees where it is kept.

(The fingerprint and the entries' checks, pure: tests/unit/test_startup.py.)"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from aexec import Candidate, Observer, Options
from aexec._boundary import DRIVER
from aexec._boundary.forkserver import ForkServer
from aexec._boundary.isolation import detect_isolation
from aexec._pipeline.warm import Warm
from aexec._stages.plan import Scratch, candidate_env

from .test_environments import plugin_distribution
from .test_levers import comparable


def start(startup_dir: Path, python: str = sys.executable, **extra_env: str) -> tuple[str, frozenset[str]]:
    """A pytest-mode server's start (of ``python``): how it knew the start-up imports,
    and its modules."""

    async def main() -> tuple[str, frozenset[str]]:
        placeholder = Scratch(os.path.join(tempfile.gettempdir(), "aexec-server"))
        env = {**candidate_env(placeholder, python), **extra_env}
        server = await ForkServer.start(python, DRIVER, "pytest", env, startup_dir=str(startup_dir))
        await server.aclose()
        return server.startup, server.modules

    return anyio.run(main)


def test_a_second_server_of_the_environment_reads_what_the_first_learnt(tmp_path: Path) -> None:
    first, modules = start(tmp_path / "startup")
    assert first == "computed"
    [entry] = (tmp_path / "startup").iterdir()
    again, same = start(tmp_path / "startup")
    assert again == "cached" and same == modules  # the same preloaded modules, no child
    # and what it imports is the entry's: a name put there is imported by the next server
    kept = json.loads(entry.read_text())
    assert "colorsys" not in modules
    entry.write_text(json.dumps({**kept, "modules": [*kept["modules"], "colorsys"]}))
    assert start(tmp_path / "startup") == ("cached", modules | {"colorsys"})
    # a corrupt entry is learnt again (and kept whole)
    entry.write_text('{"material": ')
    assert start(tmp_path / "startup") == ("computed", modules)
    assert json.loads(entry.read_text())["modules"] == kept["modules"]


def test_a_distribution_installed_since_is_learnt_again(tmp_path: Path) -> None:
    site = tmp_path / "site"  # a directory on the server's sys.path
    site.mkdir()
    assert start(tmp_path / "startup", PYTHONPATH=str(site))[0] == "computed"
    dist = site / "aexec_fake_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: aexec-fake-plugin\nVersion: 1.0\n")
    assert start(tmp_path / "startup", PYTHONPATH=str(site))[0] == "computed"  # not the stale entry
    assert len(list((tmp_path / "startup").iterdir())) == 2  # another key


def test_a_plugin_edited_in_place_is_learnt_again(tmp_path: Path) -> None:
    """An editable plugin's source, rewritten where it is, moves nothing of the material
    (the names in its directory, the distributions' stamps): the kept list would have the
    next server import what the plugin imported at configure before, and not what it
    imports now, where a cold run does the opposite."""
    site = tmp_path / "site"  # a directory on the server's sys.path, as an editable .pth adds
    site.mkdir()
    plugin = site / "aexec_edited_plugin.py"
    plugin.write_text("def pytest_configure(config):\n    import colorsys\n")
    plugin_distribution(site, "aexec_edited_plugin", "aexec_edited_plugin.py")
    how, modules = start(tmp_path / "startup", PYTHONPATH=str(site))
    assert how == "computed" and "colorsys" in modules and "sched" not in modules
    assert start(tmp_path / "startup", PYTHONPATH=str(site)) == ("cached", modules)
    plugin.write_text("def pytest_configure(config):\n    import sched\n")
    how, now = start(tmp_path / "startup", PYTHONPATH=str(site))
    assert how == "computed" and "sched" in now and "colorsys" not in now
    assert len(list((tmp_path / "startup").iterdir())) == 1  # the same entry, rewritten
    assert start(tmp_path / "startup", PYTHONPATH=str(site)) == ("cached", now)


def test_observers_share_what_their_servers_learnt_and_observe_alike(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_a.py").write_text(
        "import sys\n\ndef test_a():\n    assert 'pytest' in sys.modules\n\ndef test_b():\n    assert 0\n"
    )
    cand = Candidate("run_suite", "test_subset", repo=str(repo), tests=["test_a.py"])
    options = Options(startup_dir=str(tmp_path / "startup"))

    async def observe() -> tuple[list[str], Any]:
        async with Observer(options) as observer:
            [obs] = await observer.observe_many([cand])
            return [s.startup for s in observer.warm._servers.values()], obs

    first, learnt = anyio.run(observe)
    again, read = anyio.run(observe)
    assert first == ["computed"] and again == ["cached"]
    assert comparable(learnt) == comparable(read)
    assert learnt.verdict == "fail" and [f.location for f in learnt.failures] == ["test_a.py:7"]


@pytest.mark.skipif(not detect_isolation().namespaces, reason="needs namespaces (the view)")
def test_no_run_sees_where_the_start_up_imports_are_kept() -> None:
    where = Warm(Options(), "0").startup_dir
    os.makedirs(where, mode=0o700, exist_ok=True)  # as the first pytest server of this user makes it
    code = f"import os\nprint(os.path.exists({where!r}), os.path.exists({os.path.dirname(where)!r}))\n"

    async def main() -> Any:
        async with Observer() as observer:
            return await observer.observe_many([Candidate("run_entry", "snippet", code=code)])

    [obs] = anyio.run(main)
    assert obs.stdout == "False False\n", obs
