"""What a pytest start imports, kept per interpreter and environment (the fork server's
``_driver/startup.py``): the fingerprint changes with what is installed, and an entry is
used only if it is whole, this uid's, of the same material and all names. (A server
served from an entry, with the same modules, is tests/test_startup_cache.py.)"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from aexec import Options
from aexec._driver import startup
from aexec._pipeline.warm import Warm

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp/a/home", "TMPDIR": "/tmp/a/tmp", "LANG": "C.UTF-8"}


def fingerprint(site: Path, env: dict[str, str] = ENV, tmp: Path | None = None) -> str:
    return startup.fingerprint(
        ["/nonexistent/lib.zip", str(site)], env, sys.executable, sys.version, str(tmp or site)
    )


def test_the_same_environment_has_the_same_fingerprint(tmp_path: Path) -> None:
    (tmp_path / "pytest-9.0.dist-info").mkdir()
    assert fingerprint(tmp_path) == fingerprint(tmp_path)
    # HOME and TMPDIR are the child's own (each server's placeholders differ): not counted
    other = dict(ENV, HOME="/elsewhere", TMPDIR="/elsewhere/tmp")
    assert fingerprint(tmp_path, other) == fingerprint(tmp_path)


def test_a_new_distribution_on_the_path_changes_the_fingerprint(tmp_path: Path) -> None:
    (tmp_path / "pytest-9.0.dist-info").mkdir()
    before = fingerprint(tmp_path)
    (tmp_path / "pytest_newplugin-1.0.dist-info").mkdir()
    assert fingerprint(tmp_path) != before


def test_an_upgraded_or_rewritten_distribution_changes_the_fingerprint(tmp_path: Path) -> None:
    dist = tmp_path / "plugin-1.0.dist-info"
    dist.mkdir()
    pth = tmp_path / "plugin.pth"
    pth.write_text("/a\n")
    before = fingerprint(tmp_path)
    dist.rename(tmp_path / "plugin-1.1.dist-info")
    upgraded = fingerprint(tmp_path)
    assert upgraded != before
    os.utime(pth, ns=(1, 1))  # the same name, rewritten
    assert fingerprint(tmp_path) != upgraded


def test_bytecode_written_by_the_first_start_keeps_the_fingerprint(tmp_path: Path) -> None:
    """A fresh venv (uv compiles no bytecode) gets a ``__pycache__`` at its first pytest
    start: the next server must find the entry that start kept, not learn again."""
    (tmp_path / "pytest-9.0.dist-info").mkdir()
    (tmp_path / "py.py").write_text("")
    before = fingerprint(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "py.cpython-311.pyc").write_bytes(b"")
    assert fingerprint(tmp_path) == before


def test_the_import_environment_and_the_config_above_the_child_change_it(tmp_path: Path) -> None:
    site, tmp = tmp_path / "site", tmp_path / "tmp"
    site.mkdir()
    tmp.mkdir()
    before = fingerprint(site, tmp=tmp)
    assert fingerprint(site, dict(ENV, PYTHONPATH="/x"), tmp=tmp) != before
    assert fingerprint(site, dict(ENV, PYTEST_ADDOPTS="-p foo"), tmp=tmp) != before
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p foo\n")  # above the child's dir
    assert fingerprint(site, tmp=tmp) != before


def test_an_entry_is_read_back_for_its_material_only(tmp_path: Path) -> None:
    names = ["pytest", "hypothesis", "hypothesis.extra"]
    startup.write(str(tmp_path / "startup"), "material-a", names, [])
    assert startup.read(str(tmp_path / "startup"), "material-a") == names
    assert startup.read(str(tmp_path / "startup"), "material-b") is None
    assert startup.read(str(tmp_path / "nothing"), "material-a") is None
    assert oct((tmp_path / "startup").stat().st_mode & 0o777) == oct(0o700)  # aexec's own
    assert not [p for p in (tmp_path / "startup").iterdir() if p.suffix != ".json"]  # no tmp left


def put(directory: Path, material: str, entry: object) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / startup.entry_name(material)
    path.write_text(entry if isinstance(entry, str) else json.dumps(entry))
    return path


@pytest.mark.parametrize(
    "entry",
    [
        '{"material": "m", "modules": ["pytest"',  # torn
        "[" * 100_000,
        ["pytest"],
        {"material": "m"},
        {"material": "m", "modules": "pytest"},
        {"material": "m", "modules": ["pytest", 3]},
        {"material": "m", "modules": ["pytest", None]},
        {"material": "m", "modules": [["os"]]},
        {"material": "other", "modules": ["pytest"], "files": []},  # another material's, at this name
        {"material": "m", "modules": ["pytest"]},  # no stamps: an entry of format 1
        {"material": "m", "modules": ["pytest"], "files": "x"},
        {"material": "m", "modules": ["pytest"], "files": [["/x", 1]]},
        {"material": "m", "modules": ["pytest"], "files": [["/x", "1", 2]]},
        {"material": "m", "modules": ["pytest"], "files": [[1, 1, 2]]},
    ],
)
def test_a_corrupt_or_foreign_entry_is_not_used(tmp_path: Path, entry: object) -> None:
    put(tmp_path, "m", entry)
    assert startup.read(str(tmp_path), "m") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_an_entry_of_another_uid_is_not_used(tmp_path: Path) -> None:
    path = put(tmp_path, "m", {"material": "m", "modules": ["pytest"], "files": []})
    assert startup.read(str(tmp_path), "m") == ["pytest"]
    os.chown(path, 4242, 4242)
    assert startup.read(str(tmp_path), "m") is None


def test_an_unwritable_directory_is_no_failure(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    startup.write(str(tmp_path / "file" / "startup"), "m", ["pytest"], [])  # cannot be made: nothing raised
    assert startup.read(str(tmp_path / "file" / "startup"), "m") is None


def test_the_oldest_entries_beyond_the_cap_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "KEEP", 2)
    for i, material in enumerate(["m1", "m2", "m3"]):
        startup.write(str(tmp_path), material, ["pytest"], [])
        os.utime(tmp_path / startup.entry_name(material), ns=(i * 10**9, i * 10**9))
    startup.write(str(tmp_path), "m4", ["pytest"], [])
    kept = {m for m in ["m1", "m2", "m3", "m4"] if startup.read(str(tmp_path), m) is not None}
    assert kept == {"m3", "m4"}


def test_a_kept_list_is_served_without_a_child(tmp_path: Path) -> None:
    """The unit guard refuses any process: a hit starts no pytest."""
    import tempfile

    material = startup.fingerprint(sys.path, os.environ, sys.executable, sys.version, tempfile.gettempdir())
    startup.write(str(tmp_path), material, ["json", "hypothesis"], [])
    assert startup.modules(str(tmp_path)) == (["json", "hypothesis"], "cached")


def test_the_servers_share_a_per_user_directory_not_the_observation_cache(tmp_path: Path) -> None:
    default = Warm(Options(cache_dir=str(tmp_path / "cache")), "0").startup_dir
    assert default == Warm(Options(), "0").startup_dir
    assert default.endswith(os.path.join("aexec", "startup")) and not default.startswith(str(tmp_path))
    assert Warm(Options(startup_dir="rel"), "0").startup_dir == os.path.abspath("rel")


def test_an_environment_of_undecodable_bytes_still_names_an_entry(tmp_path: Path) -> None:
    material = fingerprint(tmp_path, dict(ENV, LANG="C.\udcff"))  # os.environ's surrogateescape
    startup.write(str(tmp_path / "startup"), material, ["pytest"], [])
    assert startup.read(str(tmp_path / "startup"), material) == ["pytest"]


def test_an_entry_holds_only_while_the_files_behind_its_modules_are_unchanged(tmp_path: Path) -> None:
    """An editable plugin edited in place moves nothing of the material (its directory's
    names, the distributions' stamps): the files the learnt start imported decide."""
    plugin, later = tmp_path / "plugin.py", tmp_path / "later.py"
    plugin.write_text("import lazy_a\n")
    os.utime(plugin, ns=(10**18, 10**18))
    files = startup.stamps([str(plugin), str(later)])  # ``later``: not there when learnt
    assert files == [[str(plugin), 10**18, 14], [str(later), -1, -1]]
    where = str(tmp_path / "startup")
    startup.write(where, "m", ["plugin", "lazy_a"], files)
    assert startup.read(where, "m") == ["plugin", "lazy_a"]

    plugin.write_text("import lazy_bb\n")  # edited: another size
    assert startup.changed(files) == str(plugin) and startup.read(where, "m") is None
    plugin.write_text("import lazy_b\n")  # the same size, a later mtime
    assert startup.read(where, "m") is None
    os.utime(plugin, ns=(10**18, 10**18))  # as it was: the entry holds again
    assert startup.changed(files) is None and startup.read(where, "m") == ["plugin", "lazy_a"]
    later.write_text("")  # a file that was not there, now there
    assert startup.changed(files) == str(later) and startup.read(where, "m") is None
    later.unlink()
    plugin.unlink()  # gone
    assert startup.read(where, "m") is None


def test_the_files_behind_modules_are_their_files_each_once() -> None:
    import types

    mods = [
        types.SimpleNamespace(__file__="/site/a/__init__.py"),
        types.SimpleNamespace(),  # a namespace package, a built-in: no file
        types.SimpleNamespace(__file__=None),
        types.SimpleNamespace(__file__="/site/b.cpython-311-x86_64-linux-gnu.so"),
        types.SimpleNamespace(__file__="/site/a/__init__.py"),
        types.SimpleNamespace(__file__="rel/c.py"),  # a relative sys.path entry's
    ]
    assert startup.module_files(mods) == [
        "/site/a/__init__.py",
        "/site/b.cpython-311-x86_64-linux-gnu.so",
        os.path.join(os.getcwd(), "rel", "c.py"),
    ]
