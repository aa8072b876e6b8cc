"""Sessions (issue 41): a workspace that lives across commands, each command under the
whole boundary, real processes on both anyio backends."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

import aexec
from aexec import Policy

from .conftest import scratch_roots

pytestmark = pytest.mark.anyio

F2P = ["tests/test_cart.py::test_total_with_discount", "tests/test_cart.py::test_cart_total"]
P2P = ["tests/test_cart.py::test_total_without_discount", "tests/test_cart.py::test_negative_price_rejected"]


def _uids_alive(uid: int) -> list[int]:
    """Host pids whose real uid is ``uid``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            found.append(int(pid))
                        break
        except OSError:
            continue
    return found


async def test_commands_build_a_file_run_it_and_see_their_earlier_writes(scratch_tmp: Path) -> None:
    async with aexec.session() as s:
        made = await s.exec(["sh", "-c", "mkdir -p pkg && printf 'print(6 * 7)\\n' > pkg/m.py"])
        assert made.exit_code == 0, made.stderr
        assert [c.path for c in made.changes] == ["work/pkg/m.py"]
        ran = await s.exec(["python3", "pkg/m.py"])
        assert ran.stdout == "42\n" and ran.exit_code == 0
        assert ran.changes == ()  # it wrote nothing
        await s.write_file("data.txt", "from the host\n")
        both = await s.exec(
            ["sh", "-c", "cat; echo $GREETING; pwd; cat ../data.txt"],
            input="in\n",
            cwd="pkg",
            env={"GREETING": "hi"},
        )
        assert both.stdout == f"in\nhi\n{s.path}/pkg\nfrom the host\n", both.stderr
        assert await s.read_file("pkg/m.py") == b"print(6 * 7)\n"
        edit = await s.exec(["sh", "-c", "echo 'print(1)' >> pkg/m.py"])
        (change,) = edit.changes
        assert (
            change.change == "modified" and change.diff is None
        )  # its earlier text is the session's, not the repo's
        await s.write_file(
            "test_env.py", "import os\n\ndef test_env():\n    assert os.environ['GREETING'] == 'hi'\n"
        )
        tests = await s.exec(
            ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_env.py"], env={"GREETING": "hi"}
        )
        assert tests.exit_code == 0 and "1 passed" in tests.stdout, tests.stdout
        failed = await s.exec(["sh", "-c", "echo oops >&2; exit 3"])
        assert failed.exit_code == 3 and "oops" in failed.stderr
    assert scratch_roots(scratch_tmp) == []


async def test_a_forked_sleeper_and_a_daemon_do_not_survive_their_command(scratch_tmp: Path) -> None:
    daemon = (
        "import os, time\n"
        "if os.fork(): os._exit(0)\n"
        "os.setsid()\n"
        "if os.fork(): os._exit(0)\n"
        "time.sleep(3)\n"
        "open('survived', 'w').write('yes')\n"
    )
    async with aexec.session() as s:
        start = anyio.current_time()
        obs = await s.exec(["sh", "-c", 'sleep 300 & python3 -c "$0"; id -u', daemon], timeout=60)
        assert anyio.current_time() - start < 30  # not the sleeper's 300 s, nor the timeout
        uid = int(obs.stdout.split()[-1])
        assert uid != os.getuid()
        assert _uids_alive(uid) == []  # neither the sleeper nor the daemon is left
        await anyio.sleep(4)  # past the daemon's write, had it lived
        check = await s.exec(["sh", "-c", "test -e survived && echo alive || echo gone"])
        assert check.stdout == "gone\n"


async def test_a_command_past_its_timeout_is_killed(scratch_tmp: Path) -> None:
    async with aexec.session(policy=Policy(timeout_s=60)) as s:
        obs = await s.exec(["sleep", "30"], timeout=1)
        assert obs.timed_out and obs.exit_code != 0
        assert (await s.exec(["true"])).exit_code == 0  # the workspace goes on


async def test_a_cancelled_command_leaves_nothing_running(scratch_tmp: Path) -> None:
    async with aexec.session() as s:
        uid = int((await s.exec(["id", "-u"])).stdout)
        with anyio.move_on_after(3) as scope:
            await s.exec(["sh", "-c", "sleep 300 & sleep 300"])
        assert scope.cancelled_caught
        assert _uids_alive(uid) == []
        assert (await s.exec(["true"])).exit_code == 0


async def test_each_command_is_held_to_the_policy_caps(scratch_tmp: Path) -> None:
    # The memory cgroup holds RAM and the workspace's tmpfs together: 64 MiB + the 512 MiB disk cap.
    async with aexec.session(policy=Policy(ram_mib=64)) as s:
        obs = await s.exec(["python3", "-c", "b = bytearray(1200 << 20); print('allocated')"])
        assert obs.exit_code != 0 and "allocated" not in obs.stdout
        assert (await s.exec(["python3", "-c", "b = bytearray(8 << 20); print('ok')"])).stdout == "ok\n"


async def test_a_write_or_read_outside_the_workspace_is_refused(scratch_tmp: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret")
    async with aexec.session() as s:
        for path in ("../escape", "a/../../escape", str(outside / "secret"), "/etc/passwd"):
            with pytest.raises(PermissionError):
                await s.write_file(path, "x")
            with pytest.raises(PermissionError):
                await s.read_file(path)
        # Links made inside the workspace, by a command, pointing out of it.
        made = await s.exec(["sh", "-c", f"ln -s {outside} dir && ln -s {outside}/secret file"])
        assert made.exit_code == 0, made.stderr
        for path in ("dir/secret", "dir/new", "file"):
            with pytest.raises(PermissionError):
                await s.write_file(path, "overwritten")
        for path in ("dir/secret", "file"):
            with pytest.raises(PermissionError):
                await s.read_file(path)
        with pytest.raises(NotADirectoryError):
            await s.exec(["true"], cwd="dir")
        with pytest.raises(FileNotFoundError):
            await s.read_file("absent")
        assert (await s.exec(["mkdir", "sub"])).exit_code == 0
        with pytest.raises(IsADirectoryError):
            await s.read_file("sub")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == "host secret"


async def test_two_sessions_run_at_once_and_cannot_see_each_other(scratch_tmp: Path) -> None:
    async with aexec.session() as a, aexec.session() as b:
        await a.write_file("secret", "a's")
        assert (await b.exec(["cat", f"{a.path}/secret"])).exit_code != 0
        assert (await b.exec(["ls", a.path])).exit_code != 0
        outs: dict[str, str] = {}

        async def one(name: str, s: aexec.Workspace) -> None:
            outs[name] = (await s.exec(["sh", "-c", "sleep 1; ls"])).stdout

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "a", a)
            tg.start_soon(one, "b", b)
        assert outs == {"a": "secret\n", "b": ""}


async def test_grade_sees_through_a_tampered_workspace_and_passes_an_honest_one(shop: Path) -> None:
    async with aexec.session(repo=str(shop)) as s:
        edit = await s.exec(["sed", "-i", "s/== 18.0/== 19.9/; s/== 5.0/== 9.5/", "tests/test_cart.py"])
        assert edit.exit_code == 0, edit.stderr
        own = await s.exec(["python3", "-m", "pytest", "-q", "tests"])
        assert own.exit_code == 0  # inside its own workspace the gamed suite is green
        graded = await s.grade(fail_to_pass=F2P, pass_to_pass=P2P)
        assert graded.flags.tampered and graded.verdict == "tampered"
    async with aexec.session(repo=str(shop)) as s:
        cart = (await s.read_file("shop/cart.py")).decode()
        await s.write_file("shop/cart.py", cart.replace("subtotal - discount", "subtotal * (1 - discount)"))
        patch = await s.diff()
        assert patch.startswith("diff --git a/shop/cart.py b/shop/cart.py")
        graded = await s.grade(fail_to_pass=F2P, pass_to_pass=P2P)
        assert graded.verdict == "pass" and graded.resolved, (graded.verdict, graded.failure)
    # The patch applies to the repo as `git apply` reads it; the repo itself is untouched.
    await anyio.run_process(["git", "apply", "--check", "-p1", "-"], input=patch.encode(), cwd=shop)
    assert "subtotal - discount" in (shop / "shop/cart.py").read_text()
