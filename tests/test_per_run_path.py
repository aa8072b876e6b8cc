"""Issue 42: a run's own files, made and removed with fewer syscalls and less Python, on
real trees (root: real tmpfs scratch roots, real uids). Each cut is checked against the
computation it replaced, kept here as the reference: the snapshot's walk, the seal's
chown, the private files, the cgroup files' reads, the scratch root's removal (now in
the `Remover`'s thread), and what a call reads once (`Session.run_env`)."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from aexec._boundary import cgroups, trees
from aexec._boundary.scratch import make_scratch, remove_scratch, seal_scratch, write_private
from aexec._environments.system import PREFIX, STATE
from aexec._options import Options
from aexec._pipeline.remover import Remover
from aexec._stages.plan import Scratch
from aexec.testing import ScriptedSupervisor, scripted_observer

from .conftest import scratch_roots

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="tmpfs scratch roots and chown need root")


def reference_scan(root: str) -> list[tuple[str, int, int, int]]:
    """`trees._scan` before issue 42: an lstat of every entry, directories included."""
    out, stack = [], [root]
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                subdirs.append(entry.path)
            else:
                out.append((entry.path, st.st_mode, st.st_size, st.st_mtime_ns))
        stack.extend(reversed(subdirs))
    return out


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    for rel in ("a.py", "d/b.txt", "d/e/f/g.bin", ".aexec/spec.json", "work/.aexec/x", "z/.hidden"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(rel.encode() * 3)
    (root / "empty").mkdir()
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret").write_text("x")
    os.symlink(outside, root / "d" / "to-dir")  # a link to a directory: listed, not entered
    os.symlink("a.py", root / "link.py")
    os.symlink("/nonexistent", root / "dangling")
    os.mkfifo(root / "d" / "fifo")
    return root


def test_a_walk_sees_what_the_lstat_of_every_entry_saw(tree: Path) -> None:
    got = [(p, st.st_mode, st.st_size, st.st_mtime_ns) for p, st in trees._scan(str(tree), 1000)]
    assert got == reference_scan(str(tree))
    assert str(tree / "d" / "to-dir") in [p for p, *_ in got]
    assert not any("secret" in p for p, *_ in got)
    snap = trees.snapshot(str(tree))
    assert "work/.aexec/x" in snap and not any(k.startswith(".aexec/") for k in snap)


@root_only
def test_the_seal_hands_over_what_os_walk_did_and_nothing_through_a_link(tmp_path: Path) -> None:
    s = make_scratch(tmpfs=True, base=str(tmp_path))
    try:
        os.mkdir(s.work)
        for rel in ("a/b/c.txt", "a/d.txt", "top.txt"):
            path = Path(s.work, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rel)
        target = tmp_path / "host-dir"
        target.mkdir()
        (target / "kept").write_text("host's")
        os.symlink(target, Path(s.work, "a", "link"))
        Path(s.home, ".rc").write_text("x")
        uid = 1 << 21
        seal_scratch(s, uid, 1 << 20)
        owned = {}
        for top in (s.work, s.home, s.tmp):
            owned[top] = os.lstat(top).st_uid
            for dirpath, dirnames, filenames in os.walk(top):
                for name in dirnames + filenames:
                    owned[os.path.join(dirpath, name)] = os.lstat(os.path.join(dirpath, name)).st_uid
        assert set(owned.values()) == {uid} and len(owned) == 10
        assert os.lstat(target).st_uid == 0 and os.lstat(target / "kept").st_uid == 0
        assert os.lstat(s.private).st_uid == 0  # the private dir stays aexec's
    finally:
        remove_scratch(s)


@pytest.mark.parametrize("text", ["", "x = 1\n", "π = 'ünï'\r\n" * 3, "y" * (3 << 20)])
def test_a_private_file_is_what_open_w_wrote(tmp_path: Path, text: str) -> None:
    s = Scratch(str(tmp_path))
    os.mkdir(s.private)
    reference = tmp_path / "reference"
    with open(reference, "w", encoding="utf-8") as f:
        f.write(text)
    path = write_private(s, "snippet.py", text)
    assert Path(path).read_bytes() == reference.read_bytes()
    assert os.stat(path).st_mode == os.stat(reference).st_mode
    write_private(s, "snippet.py", "short")  # truncated, as "w" does
    assert Path(path).read_text() == "short"
    with pytest.raises(UnicodeEncodeError):
        write_private(s, "bad", "\ud800")


def test_a_cgroup_files_text_is_what_open_read(tmp_path: Path) -> None:
    for data in (b"", b"oom 0\noom_kill 3\n", b"x" * 200_000):
        (tmp_path / "f").write_bytes(data)
        with open(tmp_path / "f", encoding="ascii") as f:
            assert cgroups._read(str(tmp_path / "f")) == f.read()
    (tmp_path / "f").write_bytes(b"\xff")
    with pytest.raises(UnicodeDecodeError):
        cgroups._read(str(tmp_path / "f"))
    with pytest.raises(FileNotFoundError):
        cgroups._read(str(tmp_path / "gone"))


@root_only
def test_a_scratch_root_is_removed_tmpfs_or_not(tmp_path: Path) -> None:
    s = make_scratch(tmpfs=True, base=str(tmp_path))
    os.mkdir(s.work)
    Path(s.work, "f").write_text("x")
    remove_scratch(s)
    assert not os.path.exists(s.root)
    assert s.root not in Path("/proc/self/mountinfo").read_text()
    plain = make_scratch(tmpfs=False, base=str(tmp_path))  # a plain directory, not empty
    os.makedirs(os.path.join(plain.work, "a", "b"))
    Path(plain.work, "a", "b", "c").write_text("x")
    os.chmod(os.path.join(plain.work, "a"), 0o500)  # made unwritable by a candidate
    remove_scratch(plain)
    assert not os.path.exists(plain.root)


@root_only
@pytest.mark.anyio
async def test_the_remover_removes_every_root_handed_over_before_wait_returns(tmp_path: Path) -> None:
    remover = Remover()
    roots = [make_scratch(tmpfs=True, base=str(tmp_path)) for _ in range(6)]
    for s in roots:
        os.mkdir(s.work)
        Path(s.work, "out").write_text("x" * 1000)
    first = remover.put(roots[:3])
    second = remover.put(list(roots[3:]))
    assert second == first + 3 and roots[3:]  # the caller's list is emptied, not a copy's
    await remover.wait(second)
    assert scratch_roots(tmp_path) == []
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
    # a removal that fails is raised by the wait that covers it; the thread goes on
    broken = remover.put([Scratch("/nonexistent\0nul")])
    with pytest.raises(ValueError, match="null"):
        await remover.wait(broken)
    later = make_scratch(tmpfs=True, base=str(tmp_path))
    await remover.wait(remover.put([later]))
    assert not os.path.exists(later.root)
    thread = remover._thread
    assert thread is not None and thread.is_alive()
    await remover.close()
    assert not thread.is_alive()
    assert not [t for t in threading.enumerate() if t.name == "aexec-remover" and t is thread]
    await remover.wait(0)  # nothing handed over: no hop, no thread


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_what_finds_an_interpreters_system_packages_is_read_again_by_the_next_call(
    tmp_path: Path,
) -> None:
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / PREFIX).mkdir()
    python = str(env / "bin" / "python")
    (env / PREFIX / STATE).write_text(json.dumps({"env": {"PATH": ["/a"]}}))
    async with scripted_observer(ScriptedSupervisor()) as o:
        first = await o.session(Options(), {})
        assert first.run_env(python) == (("PATH", "/a"),)
        (env / PREFIX / STATE).write_text(json.dumps({"env": {"PATH": ["/b", "/c"]}}))
        assert first.run_env(python) == (("PATH", "/a"),)  # once per call
        second = await o.session(Options(), {})
        assert second.run_env(python) == (("PATH", f"/b{os.pathsep}/c"),)
