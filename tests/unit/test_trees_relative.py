"""`trees.relative_to` answers as ``os.path.relpath`` does for every path a walk of the
root yields, however the root is spelt: snapshots, tree hashes and source lists keep
their keys."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aexec._boundary import trees


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for rel in ("a.py", "sub/b.py", "sub/deep er/c d.txt", "ünï/ç.py", "sub/.hidden/x.py", "-dash.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    os.symlink("a.py", root / "link.py")
    os.mkdir(root / "empty")
    weird = os.fsencode(root) + b"/bad-\xff.py"  # a name that is not UTF-8 (surrogate escapes)
    with open(weird, "wb") as f:
        f.write(b"x")
    return root


@pytest.mark.parametrize("spelling", ["abs", "abs/", "abs/.", "abs//", "up/../root", ".", "rel", "rel/"])
def test_relative_to_is_relpath_for_every_walked_path(
    tree: Path, spelling: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree.parent)
    root = {
        "abs": str(tree),
        "abs/": f"{tree}/",
        "abs/.": f"{tree}/.",
        "abs//": f"{tree}//",
        "up/../root": f"{tree.parent}/sub-not-there/../root",
        ".": ".",
        "rel": "root",
        "rel/": "root/",
    }[spelling]
    if spelling == ".":
        monkeypatch.chdir(tree)
    if spelling == "up/../root":
        os.mkdir(tree.parent / "sub-not-there")
    paths = [path for path, _ in trees._scan(root, 1000)]
    assert len(paths) == 8
    relative = trees.relative_to(root)
    assert [relative(p) for p in paths] == [os.path.relpath(p, root) for p in paths]
    assert set(trees.snapshot(root)) == {os.path.relpath(p, root) for p in paths}
    assert sorted(trees.python_sources(root)[0]) == sorted(
        os.path.relpath(p, root) for p in trees.walk(root) if p.endswith(".py") and not os.path.islink(p)
    )


def test_a_path_outside_the_root_goes_through_relpath(tree: Path) -> None:
    relative = trees.relative_to(str(tree / "sub"))
    assert relative(str(tree / "a.py")) == os.path.join("..", "a.py")
    assert relative(str(tree / "subway" / "x")) == os.path.join("..", "subway", "x")
