"""The candidate's syscall filter and its own IPC and UTS namespaces (issue 27, goals 2-3).

After bubblewrap's ``tests/test-seccomp.py``: a real run calls each syscall through
ctypes ``syscall()`` and reports the errno it got; each has the one it must get. Every
test runs on the cold path (a fresh driver) and the warm one (forked by the fork
server), and the hostile ones look at the host afterwards where there is a host side.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from aexec import Candidate, ExecutionObservation, Options, observe
from aexec._boundary.isolation import detect_isolation
from aexec._driver import seccomp

from .test_forkserver import served_pids

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """What the run does and how it is judged, not the event loop: one backend. (The
    supervisor's, fork server's and cancellation's tests run on both.)"""
    return "asyncio"


BOX = detect_isolation()
boxed = pytest.mark.skipif(not BOX.namespaces, reason="needs root and namespaces")
x86_64 = pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probe's numbers are x86-64's")

EPERM, ENOSYS = errno.EPERM, errno.ENOSYS
CLONE_NEWUSER, CLONE_FS = 0x10000000, 0x200
#: name: (x86-64 number, arguments, the errno it must get; 0: it must succeed). Arguments
#: are harmless if the call went through: a bad pointer or fd, a flag set the kernel
#: refuses (EINVAL), so that only the filter gives the errno named here.
PROBES: dict[str, tuple[int, tuple[int, ...], int]] = {
    "acct": (163, (0,), EPERM),
    "add_key": (248, (0, 0, 0, 0, 0), EPERM),
    "bpf": (321, (0, 0, 0), EPERM),
    "clock_adjtime": (305, (0, 0), EPERM),
    "clock_settime": (227, (0, 0), EPERM),
    "delete_module": (176, (0, 0), EPERM),
    "finit_module": (313, (-1, 0, 0), EPERM),
    "get_mempolicy": (239, (0, 0, 0, 0, 0), EPERM),
    "init_module": (175, (0, 0, 0), EPERM),
    "ioperm": (173, (0, 0, 0), EPERM),
    "iopl": (172, (0,), EPERM),
    "kcmp": (312, (0, 0, 0, 0, 0), EPERM),
    "kexec_file_load": (320, (-1, -1, 0, 0, 0), EPERM),
    "kexec_load": (246, (0, 0, 0, 0), EPERM),
    "keyctl JOIN_SESSION_KEYRING": (250, (1, 0), EPERM),
    "mbind": (237, (0, 0, 0, 0, 0, 0), EPERM),
    "mount": (165, (0, 0, 0, 0, 0), EPERM),
    "move_pages": (279, (0, 0, 0, 0, 0, 0), EPERM),
    "name_to_handle_at": (303, (-1, 0, 0, 0, 0), EPERM),
    "open_by_handle_at": (304, (-1, 0, 0), EPERM),
    "perf_event_open": (298, (0, 0, -1, -1, 0), EPERM),
    "pivot_root": (155, (0, 0), EPERM),
    "process_vm_readv": (310, (1, 0, 0, 0, 0, 0), EPERM),
    "process_vm_writev": (311, (1, 0, 0, 0, 0, 0), EPERM),
    "ptrace PTRACE_ATTACH": (101, (16, 1, 0, 0), EPERM),
    "quotactl": (179, (0, 0, 0, 0), EPERM),
    "reboot": (169, (0, 0, 0, 0), EPERM),
    "request_key": (249, (0, 0, 0, 0), EPERM),
    "set_mempolicy": (238, (0, 0, 0), EPERM),
    "setns": (308, (-1, 0), EPERM),
    "settimeofday": (164, (0, 0), EPERM),
    "swapon": (167, (0, 0), EPERM),
    "swapoff": (168, (0,), EPERM),
    "syslog SIZE_BUFFER": (103, (10, 0, 0), EPERM),
    "sysfs": (139, (3,), EPERM),
    "umount2": (166, (0, 0), EPERM),
    "unshare CLONE_NEWUSER": (272, (CLONE_NEWUSER,), EPERM),
    "userfaultfd UFFD_USER_MODE_ONLY": (323, (1,), EPERM),
    "vhangup": (153, (), EPERM),
    "io_uring_setup": (425, (1, 0), EPERM),
    "io_uring_enter": (426, (-1, 0, 0, 0, 0, 0), EPERM),
    "io_uring_register": (427, (-1, 0, 0, 0), EPERM),
    "open_tree": (428, (-1, 0, 0), EPERM),
    "move_mount": (429, (-1, 0, -1, 0, 0), EPERM),
    "fsopen": (430, (0, 0), EPERM),
    "fsmount": (432, (-1, 0, 0), EPERM),
    "fspick": (433, (-1, 0, 0), EPERM),
    "mount_setattr": (442, (-1, 0, 0, 0, 0), EPERM),
    "personality READ_IMPLIES_EXEC": (135, (0x0400000,), EPERM),
    "personality ADDR_NO_RANDOMIZE": (135, (0x0040000,), EPERM),
    # CLONE_NEWUSER with CLONE_FS is EINVAL to the kernel: only the filter says EPERM.
    "clone CLONE_NEWUSER": (56, (CLONE_NEWUSER | CLONE_FS | 17, 0, 0, 0, 0), EPERM),
    # A zero size is EINVAL to the kernel: only the filter says ENOSYS.
    "clone3": (435, (0, 0), ENOSYS),
    "x32 getpid": (39 | 0x40000000, (), EPERM),
    # Still allowed: the query and the default persona, and an ordinary call.
    "personality query": (135, (0xFFFFFFFF,), 0),
    "personality PER_LINUX": (135, (0,), 0),
    "getppid": (110, (), 0),
}

PROBE = """\
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
got = {}
for name, (nr, args, _) in PROBES.items():
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    got[name] = ctypes.get_errno() if rc == -1 else 0
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({"errnos": got, "seccomp": status["Seccomp"].strip()}))
"""


async def run(code: str, path: str) -> ExecutionObservation:
    """``code`` as a snippet on the ``path`` given: ``warm`` (the fork server) or ``cold``."""
    cand = Candidate("run_entry", "snippet", code=code)
    obs = await observe(cand, options=Options(forkserver=path == "warm"))
    if path == "warm":
        assert served_pids(), "no fork server served the run"
    return obs


def result(obs: ExecutionObservation) -> Any:
    assert obs.verdict == "empty_success", (obs.verdict, obs.stdout, obs.stderr)
    return json.loads(obs.stdout.strip().splitlines()[-1])


PATHS = pytest.mark.parametrize("path", ["cold", "warm"])


@boxed
@x86_64
@PATHS
async def test_every_probed_syscall_gets_its_errno(path: str) -> None:
    out = result(await run(f"PROBES = {PROBES!r}\n{PROBE}", path))
    assert out["seccomp"] == "2", "no seccomp filter in the candidate"
    wrong = {
        name: (os.strerror(got) if got else "ok", os.strerror(want) if want else "ok")
        for name, (_, _, want) in PROBES.items()
        if (got := out["errnos"][name]) != want
    }
    assert not wrong, f"(got, wanted): {wrong}"
    assert sum(want != 0 for _, _, want in PROBES.values()) >= 30


@boxed
@PATHS
async def test_the_filter_is_recorded_in_enforced(path: str) -> None:
    obs = await run("print(1)", path)
    assert BOX.seccomp is not None
    assert obs.environment.enforced["syscalls"].startswith("seccomp: deny-list v1, ")
    assert "ipc_namespace" in obs.environment.enforced["ipc"]
    assert "'aexec'" in obs.environment.enforced["hostname"]


# -- hostile: each was possible before the filter and the namespaces ----------------------

libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT, IPC_RMID = 0o1000, 0


def a_key() -> int:
    return int(uuid.uuid4().int % 0x7FFF0000) + 1


def msgget(key: int, flags: int) -> int:
    """The id of SysV message queue ``key`` on the host, or -errno."""
    qid = libc.msgget(ctypes.c_int(key), ctypes.c_int(flags))
    return int(qid) if qid >= 0 else -ctypes.get_errno()


MSGGET = """\
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
qid = libc.msgget(ctypes.c_int({key}), ctypes.c_int({flags}))
print(json.dumps(qid if qid >= 0 else -ctypes.get_errno()))
"""


@boxed
@PATHS
async def test_a_hosts_sysv_queue_is_invisible_inside(path: str) -> None:
    key = a_key()
    qid = msgget(key, IPC_CREAT | 0o666)
    assert qid >= 0
    try:
        seen = result(await run(MSGGET.format(key=key, flags=0), path))
    finally:
        libc.msgctl(qid, IPC_RMID, None)
    assert seen == -errno.ENOENT, "the host's message queue is visible in the run"


@boxed
@PATHS
async def test_a_runs_sysv_queue_does_not_outlive_it(path: str) -> None:
    key = a_key()
    made = result(await run(MSGGET.format(key=key, flags=IPC_CREAT | 0o666), path))
    assert made >= 0  # the run could make one, in its own namespace
    left = msgget(key, 0)
    if left >= 0:
        libc.msgctl(left, IPC_RMID, None)
    assert left == -errno.ENOENT, "the run's message queue outlived it, on the host"


@boxed
@PATHS
async def test_the_hostname_is_the_runs_own(path: str) -> None:
    code = "import socket, json\nprint(json.dumps(socket.gethostname()))"
    assert result(await run(code, path)) == "aexec"


UNSHARE_USER = """\
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.unshare(0x10000000)  # CLONE_NEWUSER; then, inside, a tmpfs would mount
print(json.dumps(rc if rc == 0 else -ctypes.get_errno()))
"""


@boxed
@PATHS
async def test_a_user_namespace_cannot_be_made(path: str) -> None:
    assert result(await run(UNSHARE_USER, path)) == -errno.EPERM


IO_URING = """\
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
fd = libc.syscall(ctypes.c_long({nr}), ctypes.c_long(4), params)
print(json.dumps(0 if fd >= 0 else -ctypes.get_errno()))
"""


@boxed
@x86_64
@PATHS
async def test_io_uring_cannot_be_set_up(path: str) -> None:
    assert result(await run(IO_URING.format(nr=425), path)) == -errno.EPERM


PTRACE_CHILD = """\
import ctypes, json, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
child = subprocess.Popen(["sleep", "30"])
try:
    rc = libc.ptrace(ctypes.c_long(16), ctypes.c_long(child.pid), None, None)  # PTRACE_ATTACH
    print(json.dumps(rc if rc == 0 else -ctypes.get_errno()))
finally:
    child.kill()
    child.wait()
"""


@boxed
@PATHS
async def test_an_execd_child_cannot_be_traced(path: str) -> None:
    assert result(await run(PTRACE_CHILD, path)) == -errno.EPERM


LEGIT = """\
import asyncio, json, subprocess, threading, sqlite3
out = []
t = threading.Thread(target=out.append, args=("thread",)); t.start(); t.join()
async def main():
    proc = await asyncio.create_subprocess_exec("sh", "-c", "echo spawned", stdout=subprocess.PIPE)
    return (await proc.communicate())[0].decode().strip()
out.append(asyncio.run(main()))
out.append(subprocess.run(["sh", "-c", "echo run"], capture_output=True, text=True).stdout.strip())
out.append(sqlite3.connect(":memory:").execute("select 'sqlite'").fetchone()[0])
print(json.dumps(out))
"""


@boxed
@PATHS
async def test_threads_subprocesses_and_sqlite_still_run_under_the_filter(path: str) -> None:
    assert result(await run(LEGIT, path)) == ["thread", "spawned", "run", "sqlite"]


# -- the program itself, on every architecture it knows (run here by a BPF interpreter) --

PART = vars(seccomp)  # the driver's module, imported here


def run_bpf(code: list[tuple[int, int, int, int]], nr: int, arch: int, arg0: int = 0) -> int:
    """Classic BPF as the kernel runs a seccomp filter (the opcodes the filter uses)."""
    data = {0: nr, 4: arch, 16: arg0 & 0xFFFFFFFF}
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == 0x06:
            return k
        if op == 0x20:
            acc, pc = data[k], pc + 1
        elif op == 0x05:
            pc += 1 + k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[op]
            pc += 1 + (jt if taken else jf)


HEADERS = {
    "x86_64": ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "__NR_"),
    "aarch64": ("/usr/include/asm-generic/unistd.h", "__NR(?:3264)?_"),
}


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_program_decides_every_syscall_number_as_its_table_says(machine: str) -> None:
    code, table, arch = PART["program"](machine), PART["TABLES"][machine], PART["AUDIT_ARCH"][machine]
    denied = {table[n] for n in PART["DENIED"] if n in table}
    allow, eperm, enosys, kill = 0x7FFF0000, 0x50000 | EPERM, 0x50000 | ENOSYS, 0x80000000
    for nr in range(1024):
        want = eperm if nr in denied else enosys if nr == table["clone3"] else allow
        if nr in (table["clone"], table["personality"]):
            continue
        assert run_bpf(code, nr, arch) == want, (machine, nr)
    assert run_bpf(code, table["getpid" if "getpid" in table else "clone"], 0x40000003) == kill  # i386
    assert run_bpf(code, 20, 0x40000028) == kill  # arm32
    for flags, want in [(0x11, allow), (0x3D0F00, allow), (CLONE_NEWUSER | 0x11, eperm), (0x08000000, eperm)]:
        assert run_bpf(code, table["clone"], arch, flags) == want, hex(flags)
    for persona in (0, 8, 0x20000, 0x20008, 0xFFFFFFFF, 0x400000, 0x40000, 1):
        want = allow if persona in PART["PERSONALITIES"] else eperm
        assert run_bpf(code, table["personality"], arch, persona) == want, hex(persona)
    if machine == "x86_64":
        assert run_bpf(code, 39 | 0x40000000, arch) == eperm  # x32's getpid


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_tables_numbers_are_the_kernel_headers(machine: str) -> None:
    path, prefix = HEADERS[machine]
    if not os.path.exists(path):
        pytest.skip(f"no {path} here")
    text = Path(path).read_text()
    for name, nr in PART["TABLES"][machine].items():
        found = re.findall(rf"^#define {prefix}{name}\s+(\d+)$", text, re.M)
        if found:  # headers older than the call do not name it
            assert int(found[0]) == nr, (machine, name)
        elif name != "open_tree_attr":
            pytest.fail(f"{name} is not in {path}")
