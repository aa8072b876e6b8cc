"""`sources_stamp`: what an interpreter's editable sources are this call (the cache keys
rest on it: `Toolchain.identity`). The end-to-end case is tests/test_editable.py."""

from __future__ import annotations

import os
from pathlib import Path

from aexec._pipeline.toolchain import Toolchain, sources_stamp


def test_an_edit_an_addition_or_a_removal_moves_it(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    mod = tmp_path / "pkg" / "mod.py"
    mod.write_text("VALUE = 42\n")
    first = sources_stamp([str(tmp_path)])
    assert sources_stamp([str(tmp_path)]) == first
    mod.write_text("VALUE = 41\n")  # the same size: the mtime tells
    os.utime(mod, ns=(1, 1))
    edited = sources_stamp([str(tmp_path)])
    assert edited != first
    (tmp_path / "pkg" / "new.py").write_text("")
    added = sources_stamp([str(tmp_path)])
    assert added not in (first, edited)
    (tmp_path / "pkg" / "new.py").unlink()
    assert sources_stamp([str(tmp_path)]) == edited


def test_caches_a_vcs_and_a_venv_inside_do_not_count(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text("")
    before = sources_stamp([str(tmp_path)])
    for d in ("__pycache__", ".git", ".venv"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "x").write_text("written by a run, a commit, an install")
    (tmp_path / ".venv" / "pyvenv.cfg").write_text("")
    assert sources_stamp([str(tmp_path)]) == before


def test_the_cache_keys_rest_on_the_sources_only_where_there_are_some() -> None:
    tool = Toolchain("/usr/bin/python3", "CPython 3.11", "dists", (), ())
    assert tool.identity == "dists"
    edited = Toolchain("/usr/bin/python3", "CPython 3.11", "dists", (), (), editable=("/src",), sources="s1")
    assert edited.identity != tool.identity
    assert (
        Toolchain("/usr/bin/python3", "CPython 3.11", "dists", (), (), ("/src",), "s2").identity
        != edited.identity
    )
