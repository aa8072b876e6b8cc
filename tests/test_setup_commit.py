"""SWE-bench reads an instance's ``environment.yml`` and ``requirements.txt`` at its
``environment_setup_commit``, not at its base commit (``swebench.harness.test_spec.python``:
``get_environment_yml``, ``get_requirements``): aexec reads them there too, from the
checkout's git, and from its work tree where its git lacks that commit (a checkout made
from an sdist), saying which in the instance's note.

Each repo here is a real git repo: its base commit lacks (or differs in) the file that a
later commit, the instance's setup commit, holds; the checkout is left at the base.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aexec._environments.commits import Files, check_out
from aexec._environments.spec import EnvSpec, from_json
from aexec._environments.swebench import Table, lookup
from aexec._errors import RequestError
from aexec._swebench import load_instances

from .conftest import built_or_skip

SYSTEM = f"{sys.version_info.major}.{sys.version_info.minor}"
YML = "ci/requirements/environment.yml"


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env
    ).stdout.strip()


def _repo(root: Path, base: dict[str, str], setup: dict[str, str]) -> tuple[Path, str, str]:
    """A git repo at its base commit (files ``base``) whose later commit (``setup``'s files
    written over it) is the setup commit: (repo, base, setup)."""
    root.mkdir()
    _git(root, "init", "-q")
    commits = []
    for files in (base, setup):
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", "c")
        commits.append(_git(root, "rev-parse", "HEAD"))
    _git(root, "checkout", "-q", commits[0])
    return root, commits[0], commits[1]


def _instances(tmp_path: Path, repo: Path, setup_commit: str) -> Path:
    row = {"instance_id": "pydata__xarray-3151", "repo": repo.name, "version": "0.12",
           "environment_setup_commit": setup_commit, "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}  # fmt: skip
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


def test_xarrays_environment_yml_is_read_at_the_setup_commit(tmp_path: Path) -> None:
    """xarray 0.12's base commits (2019-2020) have no ``ci/requirements/environment.yml``;
    its setup commit (2021) has: the instance's environment is read from that one."""
    pytest.importorskip("swebench")  # SWE-bench's table: the extra (.ci/run runs it)
    yml = "name: xarray-tests\ndependencies:\n  - toolz\n  - cdms2\n  - pip:\n    - numbagg\n"
    repo, _, setup = _repo(tmp_path / "xarray", {"setup.py": "\n"}, {YML: yml})
    assert not (repo / YML).exists()
    instance = load_instances(str(_instances(tmp_path, repo, setup)), specs="swebench")["pydata__xarray-3151"]
    assert instance.environment is not None and instance.environment.unsupported() is None
    assert instance.environment.packages[:2] == ("toolz", "numbagg")
    assert instance.environment.setup_commit is None  # no requirements file to read there
    assert f"{YML} read at environment_setup_commit {setup[:12]}" in str(instance.runner_reason)


def test_without_the_setup_commit_the_work_tree_is_read_and_said(tmp_path: Path) -> None:
    """A checkout whose git lacks the setup commit (made from an sdist): its work tree."""
    pytest.importorskip("swebench")  # SWE-bench's table: the extra (.ci/run runs it)
    repo, _, _ = _repo(tmp_path / "xarray", {"setup.py": "\n", YML: "dependencies: [toolz]\n"}, {"x": ""})
    absent = "0123456789abcdef0123456789abcdef01234567"
    instance = load_instances(str(_instances(tmp_path, repo, absent)), specs="swebench")[
        "pydata__xarray-3151"
    ]
    assert instance.environment is not None and instance.environment.packages[0] == "toolz"
    assert f"read from the checkout's work tree: its git lacks environment_setup_commit {absent[:12]}" in str(
        instance.runner_reason
    )
    bare, _, _ = _repo(tmp_path / "xarray2", {"setup.py": "\n"}, {"x": ""})  # nor in its work tree
    lacking = load_instances(str(_instances(tmp_path, bare, absent)), specs="swebench")
    env = lacking["pydata__xarray-3151"].environment
    assert env is not None and env.unsupported() == (
        "needs more than pip: conda: no environment.yml in the checkout"
        f" (nor in its git: no environment_setup_commit {absent[:12]}, a clone's history has it)"
    )


def test_requirements_are_built_as_the_setup_commit_has_them(tmp_path: Path) -> None:
    """``packages: requirements.txt``: the setup commit's file (and the file it includes,
    which the base lacks) is what the environment is built from; the base's pin is not."""
    repo, _, setup = _repo(
        tmp_path / "repo",
        {"requirements.txt": "six==1.15.0\n"},
        {"requirements.txt": "six==1.16.0\n-r more.txt\n", "more.txt": "toolz==0.12.0\n"},
    )
    table = Table({"o/r": {"1.0": {"python": SYSTEM, "packages": "requirements.txt", "install": ""}}})
    entry = lookup(table, "o/r", "1.0", files=Files.at(str(repo), setup))
    env = entry.environment
    assert env.requirements == ("requirements.txt",) and env.setup_commit == setup
    assert f"requirements.txt read at environment_setup_commit {setup[:12]}" in str(entry.note)
    built = built_or_skip(env, str(repo), str(tmp_path / "envs"))
    lock = (Path(built.path) / "aexec-lock.txt").read_text()
    assert "six==1.16.0" in lock and "toolz==0.12.0" in lock
    assert (repo / "requirements.txt").read_text() == "six==1.15.0\n"  # the checkout is left as it was


def test_check_out_writes_the_commits_files_and_never_through_a_symlink(tmp_path: Path) -> None:
    repo, _, setup = _repo(
        tmp_path / "repo", {"r.txt": "a\n"}, {"r.txt": "-r sub/more.txt\n", "sub/more.txt": "b\n"}
    )
    copy, outside = tmp_path / "copy", tmp_path / "outside.txt"
    copy.mkdir()
    outside.write_text("kept\n")
    (copy / "r.txt").symlink_to(outside)
    check_out(str(repo), setup, ("r.txt", "absent.txt"), str(copy))
    assert (copy / "r.txt").read_text() == "-r sub/more.txt\n" and not (copy / "r.txt").is_symlink()
    assert (copy / "sub/more.txt").read_text() == "b\n"
    assert outside.read_text() == "kept\n" and not (copy / "absent.txt").exists()


def test_files_reads_the_work_tree_without_the_commit(tmp_path: Path) -> None:
    repo, base, setup = _repo(tmp_path / "repo", {"f": "base\n"}, {"f": "setup\n"})
    assert Files.at(str(repo), setup).read("f") == "setup\n"
    assert Files.at(str(repo), None).read("f") == "base\n"
    assert Files.at(str(repo), "f" * 40) == Files(str(repo), "f" * 40, None)
    assert Files.at(str(repo), "--output=x").commit is None  # never an option to git
    assert not Files.at(str(repo), base).exists("absent")


def test_setup_commit_is_a_hex_id_and_keys_only_the_specs_that_name_one() -> None:
    assert "setup_commit" not in EnvSpec("3.11").as_json()  # every other spec's key is unchanged
    assert from_json({"python": "3.11", "setup_commit": "abc1234"}).as_json()["setup_commit"] == "abc1234"
    for bad in ("HEAD", "abc", "--all", "a" * 41):
        with pytest.raises(RequestError, match="setup_commit"):
            EnvSpec("3.11", setup_commit=bad)


#: The SHA-256 of each setup commit's `ci/requirements/environment.yml` as pydata/xarray's
#: git has it (`git show C:ci/requirements/environment.yml | sha256sum` on a clone).
XARRAY_YML_SHA256 = {
    "1c198a191127c601d091213c4b3292a8bb3054e1": "3d37256ff3b4c0cc1092371deb7de12c2162883b591a9aecb790c591474befa5",
    "4f1e2d37b662079e830c9672400fabc19b44a376": "134c39723107ad2d88666e747d1be6f68c887270940b55e3bcae02cd78bb956d",
    "df7646182b17d829fe9b2199aebf649ddb2ed480": "134c39723107ad2d88666e747d1be6f68c887270940b55e3bcae02cd78bb956d",
    "8f42bfd3a5fd0b1a351b535be207ed4771b02c8b": "e34aaa8ff4b3cc9926718c5a875fc0856c2b0646409267a4bb4546b2f47b7c9f",
    "d7931f9014a26e712ff5f30c4082cf0261f045d3": "96467ea0a2a7f9e67f069b1d318a5746e1723d9b5ff79223b682415dfde8b41c",
    "50ea159bfd0872635ebf4281e741f3c87f0bef6b": "db0aafadda0e4e7fa2964b90e026ffd7ea64c48bd2e87855b84ae111ad3ab6b6",
    "087ebbb78668bdf5d2d41c3b2553e3f29ce75be1": "a1e50da7e893e135cc1cf9a25bae175cc259c3a51cf78aa7fcd2b3aca3436db1",
}


def test_a_checkout_without_history_reads_the_setup_commits_file_aexec_ships(tmp_path: Path) -> None:
    """The held-out checkouts may hold one commit of the base's tree: xarray 0.12's base
    (2019) has no environment.yml and the setup commit is not there. aexec's copy of that
    commit's file is read, and the note says so."""
    pytest.importorskip("swebench")  # SWE-bench's table: the extra (.ci/run runs it)
    from aexec._environments.setup_files import SHIPPED

    assert {c: hashlib.sha256(t.encode()).hexdigest() for (c, _), t in SHIPPED.items()} == XARRAY_YML_SHA256
    assert {p for _, p in SHIPPED} == {YML}
    repo, _, _ = _repo(tmp_path / "xarray", {"setup.py": "\n"}, {"x": ""})
    setup = "1c198a191127c601d091213c4b3292a8bb3054e1"  # every xarray 0.12 instance's
    instance = load_instances(str(_instances(tmp_path, repo, setup)), specs="swebench")["pydata__xarray-3151"]
    env = instance.environment
    assert env is not None and env.unsupported() is None, env
    assert {"numbagg", "toolz", "dask", "pint"} <= {
        p.split("=")[0].split("<")[0].split(">")[0] for p in env.packages
    }
    assert f"{YML} of environment_setup_commit {setup[:12]}, as SWE-bench reads it: aexec's copy" in str(
        instance.runner_reason
    )
