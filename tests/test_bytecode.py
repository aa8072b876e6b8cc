"""A repo's modules compiled once for all its runs (issue 5): faster, never different.

`compile_bytecode` runs the interpreter's compiler and pytest's assertion rewriter over a
pristine repo; `make_view` lays the result over each run's copy. These tests run the
real compiler, a real interpreter importing from the view and real pytest runs.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from aexec import Candidate, Options, observe_many
from aexec._boundary.bytecode import compile_bytecode, rewritten_sources
from aexec._boundary.scratch import make_view
from aexec._stages.plan import Scratch

from .conftest import MakeRepo, diff
from .test_levers import comparable

REPO = {
    "pkg/__init__.py": "",
    "pkg/calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from pkg.calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n",
    "tests/test_other.py": "def test_other():\n    assert True\n",
    "conftest.py": "",
    "warns.py": "PATTERN = '\\d'\n",  # an invalid escape: compiling it warns
    "broken.py": "def f(:\n",
}


def pyc(root: Path, rel: str) -> Path:
    return Path(importlib.util.cache_from_source(str(root / rel)))


def rewritten_pyc(root: Path, rel: str) -> Path:
    """Where pytest's assertion rewriter keeps its pyc of ``rel``."""
    from _pytest.assertion.rewrite import PYC_TAIL

    path = root / rel
    return path.parent / "__pycache__" / (path.name[:-3] + PYC_TAIL)


def test_the_selection_decides_what_is_rewritten_ahead() -> None:
    files = [
        "conftest.py",
        "a/conftest.py",
        "pkg/calc.py",
        "tests/test_a.py",
        "tests/b_test.py",
        "t/test_c.py",
    ]
    assert rewritten_sources(files, ["tests/test_a.py::T::test_x"]) == [
        "conftest.py",
        "a/conftest.py",
        "tests/test_a.py",
    ]
    assert rewritten_sources(files, ["tests"]) == [
        "conftest.py",
        "a/conftest.py",
        "tests/test_a.py",
        "tests/b_test.py",
    ]
    assert rewritten_sources(files, ["pkg/calc.py"]) == ["conftest.py", "a/conftest.py", "pkg/calc.py"]
    assert (
        rewritten_sources(files, None)
        == rewritten_sources(files, ["."])
        == ["conftest.py", "a/conftest.py", "tests/test_a.py", "tests/b_test.py", "t/test_c.py"]
    )
    assert rewritten_sources(files, ()) == ["conftest.py", "a/conftest.py"]


def test_compiled_once_with_the_runs_interpreter(make_repo: MakeRepo, tmp_path: Path) -> None:
    repo = make_repo(REPO)
    (repo / "link.py").symlink_to(repo / "pkg" / "calc.py")
    out = tmp_path / "bytecode"
    assert anyio.run(compile_bytecode, sys.executable, str(repo), ("tests/test_calc.py",), str(out))
    for rel in ("pkg/__init__.py", "pkg/calc.py", "conftest.py", "tests/test_calc.py"):
        header = pyc(out, rel).read_bytes()[:8]
        assert header[:4] == importlib.util.MAGIC_NUMBER and header[4:8] == b"\x03\x00\x00\x00", (
            rel
        )  # checked hash
    assert rewritten_pyc(out, "tests/test_calc.py").is_file()
    assert rewritten_pyc(out, "conftest.py").is_file()
    assert not rewritten_pyc(out, "tests/test_other.py").exists()  # not selected: rewritten by its run
    for rel in ("warns.py", "broken.py", "link.py"):  # a warning a run must see, an error, a symlink
        assert not pyc(out, rel).exists(), rel
    assert not (repo / "pkg" / "__pycache__").exists()  # the repo is only read


def _view(repo: Path, bytecode: Path, tmp_path: Path) -> Path:
    scratch = Scratch(str(tmp_path / "scratch"))
    os.makedirs(scratch.root)
    make_view(scratch, str(repo), str(bytecode))
    return Path(scratch.work)


def _pytest(view: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTEST_DEBUG": "1",  # pytest traces whether it found a rewritten pyc
    }
    argv = [
        sys.executable,
        "-v",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-s",
        "--tb=native",
        "tests/test_calc.py",
    ]
    return subprocess.run(argv, cwd=view, env=env, capture_output=True, text=True, check=False)


def test_a_view_runs_from_the_compiled_modules_and_never_from_stale_ones(
    make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo = make_repo(REPO)
    out = tmp_path / "bytecode"
    assert anyio.run(compile_bytecode, sys.executable, str(repo), ("tests/test_calc.py",), str(out))
    view = _view(repo, out, tmp_path)

    done = _pytest(view)
    assert "1 failed" in done.stdout
    assert f'File "{view}/tests/test_calc.py", line 5' in done.stdout  # the view's path, not out's
    assert f"found cached rewritten pyc for {view}/tests/test_calc.py" in done.stderr
    assert f"{pyc(view, 'pkg/calc.py')} matches {view}/pkg/calc.py" in done.stderr  # python -v

    # what a patch does: the sources change, the pycs stay, and are refused by their hash
    (view / "pkg" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (view / "tests" / "test_calc.py").write_text(
        REPO["tests/test_calc.py"] + "\n\ndef test_more():\n    assert 1\n"
    )
    done = _pytest(view)
    assert "2 passed" in done.stdout, done.stdout
    assert f"found cached rewritten pyc for {view}/tests/test_calc.py" not in done.stderr
    assert f"found cached rewritten pyc for {view}/conftest.py" in done.stderr  # unchanged: used
    assert f"{pyc(view, 'pkg/calc.py')} matches" not in done.stderr


@pytest.mark.anyio
async def test_observations_are_the_same_without_it(make_repo: MakeRepo, tmp_path: Path) -> None:
    repo = make_repo(REPO)
    fix = diff("pkg/calc.py", REPO["pkg/calc.py"], "def add(a, b):\n    return a + b\n")
    cands = [
        Candidate("run_suite", "test_subset", id="bug", repo=str(repo), tests=("tests/test_calc.py",)),
        Candidate("run_suite", "patch", id="fix", repo=str(repo), tests=("tests/test_calc.py",), patch=fix),
        Candidate("run_suite", "test_subset", id="all", repo=str(repo), tests=None),
    ]
    cache = tmp_path / "cache"
    with_it = await observe_many(cands, cache_dir=str(cache))
    assert len(os.listdir(cache / "bytecode")) == 1  # one repo, one call: compiled once
    without = await observe_many(cands, options=Options(bytecode=False), cache_dir=str(tmp_path / "c2"))
    assert not (tmp_path / "c2" / "bytecode").exists()  # nothing compiled ahead
    assert [o.verdict for o in with_it] == ["fail", "pass", "fail"]
    for a, b in zip(with_it, without, strict=True):
        assert comparable(a) == comparable(b), a.id
