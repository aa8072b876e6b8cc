"""Debian packages inside an environment (issue 43): fetched from Debian's archive,
unpacked into the environment's own prefix, found by its runs, never installed on the
host, never seen by another environment's runs.

Real apt, a real package the host lacks (``tree``), real uv builds, real runs. Skipped,
saying why, where the host has ``tree`` or Debian's archive cannot be reached.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from aexec import Candidate, observe_many
from aexec._environments import system
from aexec._environments.build import ensure
from aexec._environments.spec import EnvBroken, EnvSpec
from aexec._options import Options
from aexec._stages.plan import Scratch, candidate_env

from .conftest import MakeRepo

pytestmark = pytest.mark.anyio

SYSTEM = f"{sys.version_info.major}.{sys.version_info.minor}"
AS_OF = "2025-01-01T00:00:00Z"
TEST = """\
import subprocess

def test_tree():
    out = subprocess.run(["tree", "--version"], capture_output=True, text=True).stdout
    assert out.startswith("tree v"), out
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _on_host(package: str) -> bool:
    return subprocess.run(["dpkg", "-s", package], capture_output=True, check=False).returncode == 0


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The environments' root, with ``tree`` resolved and fetched (or the test skipped)."""
    if shutil.which("apt-get") is None:
        pytest.skip("no apt-get on this machine")
    if shutil.which("tree") or _on_host("tree"):
        pytest.skip("the host has tree: nothing would tell the environment's from the host's")
    envs = tmp_path / "envs"
    try:
        system.install(system.resolve(["tree"], str(envs)), str(tmp_path / "probe"), str(envs))
    except EnvBroken as e:
        pytest.skip(f"Debian's archive cannot be reached: {e.message}")
    return envs


async def test_a_debian_package_is_used_by_its_environments_runs_alone(
    root: Path, make_repo: MakeRepo
) -> None:
    repo = make_repo({"test_t.py": TEST})
    with_tree = EnvSpec(SYSTEM, exclude_newer=AS_OF, install="none", apt=("tree",))
    plain = EnvSpec(SYSTEM, exclude_newer=AS_OF, install="none")
    cands = [
        Candidate("run_suite", "test_subset", id=i, repo=str(repo), tests=("test_t.py",), environment=e)
        for i, e in (("tree", with_tree), ("plain", plain))
    ]
    got = await observe_many(cands, options=Options(env_dir=str(root)))
    assert got[0].verdict == "pass", got[0].error or got[0].stdout[-800:]
    assert got[1].verdict == "fail", got[1].stdout[-800:]  # another environment: no tree
    assert "FileNotFoundError" in (got[1].failure.message if got[1].failure else "")
    assert not _on_host("tree") and shutil.which("tree") is None  # the host's dpkg: unchanged
    built = ensure(with_tree, str(repo), str(root))
    assert got[0].environment.environment_key == built.key != got[1].environment.environment_key
    unpacked = Path(built.path) / "system"
    assert (unpacked / "usr" / "bin" / "tree").is_file()
    state = json.loads((unpacked / system.STATE).read_text())
    assert [p.split("=")[0] for p in state["packages"]] == ["tree"] and state["bytes"] > 0
    assert system.run_env(built.python)["PATH"] == str(unpacked / "usr" / "bin")
    ls = await anyio.run_process([sys.executable, "-m", "aexec", "env", "ls", "--env-dir", str(root)])
    listed = ls.stdout.decode()
    assert re.search(r"Debian packages, \d+\.\d MiB: tree=\S+\n", listed), listed  # `aexec env ls`


def test_the_runs_variables_point_into_the_prefix() -> None:
    env = candidate_env(
        Scratch("/s"),
        "/e/bin/python",
        system={"PATH": "/e/system/usr/bin", "LD_LIBRARY_PATH": "/e/system/usr/lib", "XDG_DATA_DIRS": "/e/s"},
    )
    assert env["PATH"].split(":")[:3] == ["/e/bin", "/e/system/usr/bin", "/usr/local/bin"]
    assert env["LD_LIBRARY_PATH"] == "/e/system/usr/lib"
    assert env["XDG_DATA_DIRS"] == "/e/s:/usr/local/share:/usr/share"
    assert "LD_LIBRARY_PATH" not in candidate_env(Scratch("/s"), "/e/bin/python")


def test_a_debian_name_is_never_an_option() -> None:
    from aexec._errors import RequestError

    with pytest.raises(RequestError, match="Debian package"):
        EnvSpec(SYSTEM, apt=("-oDir=/",))
