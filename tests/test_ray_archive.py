"""The repository archives of ``aexec._ray``: no Ray needed, so these run by default."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from aexec._boundary.trees import hash_tree
from aexec._scaleout.archive import node_repo, pack_repo

from .conftest import MakeRepo


def odd_tree(make_repo: MakeRepo) -> Path:
    root = make_repo({"run.sh": "#!/bin/sh\necho hi\n", "pkg/mod.py": "X = 1\n", "data/a.txt": "a\n"})
    (root / "run.sh").chmod(0o755)
    (root / "empty").mkdir()
    (root / "link").symlink_to("data/a.txt")
    os.link(root / "data" / "a.txt", root / "data" / "hard.txt")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    return root


def test_an_unpacked_archive_is_the_tree_a_view_holds(make_repo: MakeRepo, tmp_path: Path) -> None:
    repo = odd_tree(make_repo)
    key, data = pack_repo(str(repo))
    fetched: list[int] = []

    def fetch() -> bytes:
        fetched.append(1)
        return data

    dest, unpacked = node_repo(key, fetch, str(tmp_path / "node"))
    assert unpacked and fetched == [1] and os.path.basename(dest) == key
    assert hash_tree(dest) == hash_tree(str(repo))
    out = Path(dest)
    assert os.access(out / "run.sh", os.X_OK) and not os.access(out / "data" / "a.txt", os.X_OK)
    assert os.readlink(out / "link") == "data/a.txt" and (out / "empty").is_dir()
    assert (out / "data" / "hard.txt").read_text() == "a\n"
    assert not (out / ".git").exists() and not (out / "pkg" / "__pycache__").exists()
    # Unpacked once: later calls neither fetch nor unpack.
    assert node_repo(key, fetch, str(tmp_path / "node")) == (dest, False) and fetched == [1]


def test_the_key_is_the_content_not_the_path_or_the_mtime(make_repo: MakeRepo) -> None:
    files = {"a.py": "A = 1\n", "sub/b.py": "B = 2\n"}
    one, two = make_repo(files), make_repo(files)
    os.utime(two / "a.py", (1, 1))
    assert pack_repo(str(one))[0] == pack_repo(str(two))[0]
    (two / "a.py").chmod(0o755)
    assert pack_repo(str(one))[0] != pack_repo(str(two))[0]
    (one / "sub" / "b.py").write_text("B = 3\n")
    assert pack_repo(str(one))[0] != pack_repo(str(make_repo(files)))[0]


def test_concurrent_tasks_on_one_node_unpack_once(make_repo: MakeRepo, tmp_path: Path) -> None:
    key, data = pack_repo(str(make_repo({"a.py": "A = 1\n"})))
    gate = threading.Barrier(4)
    results: list[tuple[str, bool]] = []

    def task() -> None:
        gate.wait()
        results.append(node_repo(key, lambda: data, str(tmp_path / "node")))

    threads = [threading.Thread(target=task) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(u for _, u in results) == [False, False, False, True]
    assert {p.name for p in (tmp_path / "node").iterdir() if not p.name.startswith(".")} == {key}
