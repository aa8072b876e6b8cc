"""The candidate's syscall filter: a classic-BPF seccomp deny-list, built here in Python
and loaded with ``prctl(PR_SET_SECCOMP)`` through ctypes (the driver is stdlib-only).

A module of the driver's package (see `aexec._driver`).
`install` runs in the candidate's process after ``no_new_privs`` and before any of its
code; the filter is inherited by every thread, fork and exec of the run.

What it denies (``EPERM``, so a program sees a refusal and degrades, never a kill):

* at least what Docker's default profile denies to a container without capabilities:
  kernel modules, kexec, reboot, swap, clocks, quotas, mounts and the new mount API,
  keyrings, bpf, perf events, ptrace and cross-process memory, NUMA policy, userfaultfd,
  file handles, setns and the obsolete calls (`DENIED`);
* ``io_uring_*`` (its operations bypass seccomp);
* new namespaces: ``unshare`` always, ``clone`` whose flags ask for any ``CLONE_NEW*``;
  ``clone3`` (whose flags sit in memory BPF cannot read) gets ``ENOSYS``, so libc falls
  back to ``clone``, where they are checked;
* ``personality`` but for the values Docker allows (no ``READ_IMPLIES_EXEC``).

A syscall made through another ABI than the machine's own (i386 or x32 on x86-64,
arm32 on arm64) has other numbers: the process is killed (i386, arm32) or refused (x32),
so nothing reaches the kernel unchecked. On a machine whose table is unknown,
`install` raises `BoxError` (the library then declares no filter and does not ask).

``python -s aexec/_driver/__main__.py --seccomp-probe`` installs the filter in itself,
checks that it holds, and prints `describe()` (`probe`): the library's probe
(`aexec._boundary.isolation`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from . import kernel

VERSION = 1
#: Docker's default profile, and io_uring, denied outright.
DENIED = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module",
    "delete_module", "fanotify_init", "finit_module", "fsconfig", "fsmount", "fsopen",
    "fspick", "get_kernel_syms", "get_mempolicy", "init_module", "io_uring_enter",
    "io_uring_register", "io_uring_setup", "ioperm", "iopl", "kcmp", "kexec_file_load",
    "kexec_load", "keyctl", "lookup_dcookie", "mbind", "mount", "mount_setattr",
    "move_mount", "move_pages", "name_to_handle_at", "nfsservctl", "open_by_handle_at",
    "open_tree", "open_tree_attr", "perf_event_open", "pivot_root", "process_vm_readv",
    "process_vm_writev", "ptrace", "query_module", "quotactl", "quotactl_fd", "reboot",
    "request_key", "set_mempolicy", "set_mempolicy_home_node", "setns", "settimeofday",
    "swapoff", "swapon", "syslog", "sysfs", "_sysctl", "umount2", "unshare", "uselib",
    "userfaultfd", "ustat", "vhangup",
)  # fmt: skip

#: The calls of `DENIED` that exist per architecture (``uname -m``), and the three the
#: filter checks by argument. Numbers from the kernel's ``unistd_64.h`` (x86-64) and
#: ``asm-generic/unistd.h`` (arm64); calls from 424 on share their number everywhere.
_COMMON = {
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "clone3": 435, "mount_setattr": 442, "quotactl_fd": 443,
    "set_mempolicy_home_node": 450, "open_tree_attr": 467,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
}  # fmt: skip
TABLES: dict[str, dict[str, int]] = {
    "x86_64": {  # {**a, ...}, not a | {...}: 3.6 runs this
        **_COMMON,
        "acct": 163, "add_key": 248, "bpf": 321, "clock_adjtime": 305, "clock_settime": 227,
        "create_module": 174, "delete_module": 176, "fanotify_init": 300, "finit_module": 313,
        "get_kernel_syms": 177, "get_mempolicy": 239, "init_module": 175, "ioperm": 173,
        "iopl": 172, "kcmp": 312, "kexec_file_load": 320, "kexec_load": 246, "keyctl": 250,
        "lookup_dcookie": 212, "mbind": 237, "mount": 165, "move_pages": 279,
        "name_to_handle_at": 303, "nfsservctl": 180, "open_by_handle_at": 304,
        "perf_event_open": 298, "pivot_root": 155, "process_vm_readv": 310,
        "process_vm_writev": 311, "ptrace": 101, "query_module": 178, "quotactl": 179,
        "reboot": 169, "request_key": 249, "set_mempolicy": 238, "setns": 308,
        "settimeofday": 164, "swapoff": 168, "swapon": 167, "syslog": 103, "sysfs": 139,
        "_sysctl": 156, "umount2": 166, "unshare": 272, "uselib": 134, "userfaultfd": 323,
        "ustat": 136, "vhangup": 153, "clone": 56, "personality": 135,
    },
    "aarch64": {
        **_COMMON,
        "acct": 89, "add_key": 217, "bpf": 280, "clock_adjtime": 266, "clock_settime": 112,
        "delete_module": 106, "fanotify_init": 262, "finit_module": 273, "get_mempolicy": 236,
        "init_module": 105, "kcmp": 272, "kexec_file_load": 294, "kexec_load": 104,
        "keyctl": 219, "lookup_dcookie": 18, "mbind": 235, "mount": 40, "move_pages": 239,
        "name_to_handle_at": 264, "nfsservctl": 42, "open_by_handle_at": 265,
        "perf_event_open": 241, "pivot_root": 41, "process_vm_readv": 270,
        "process_vm_writev": 271, "ptrace": 117, "quotactl": 60, "reboot": 142,
        "request_key": 218, "set_mempolicy": 237, "setns": 268, "settimeofday": 170,
        "swapoff": 225, "swapon": 224, "syslog": 116, "umount2": 39, "unshare": 97,
        "userfaultfd": 282, "vhangup": 58, "clone": 220, "personality": 92,
    },
}  # fmt: skip
#: seccomp_data.arch of each machine's native ABI.
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000
#: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (clone's low byte is
#: the exit signal, so CLONE_NEWTIME, 0x80, cannot be asked of clone).
CLONE_NEW_ANY = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
#: personality(2) values Docker's profile allows: PER_LINUX, UNAME26, PER_LINUX32,
#: UNAME26|PER_LINUX32, and the query 0xffffffff.
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)

_LD_W_ABS, _JA, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x05, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW, _RET_KILL = 0x7FFF0000, 0x80000000  # SECCOMP_RET_KILL_PROCESS
_RET_EPERM, _RET_ENOSYS = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data; arg0's low half (LE)
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


def describe(machine: str | None = None) -> str:
    """What `install` enforces on ``machine`` (this one by default), for ``enforced``."""
    table = TABLES[machine or os.uname().machine]
    denied = sum(name in table for name in DENIED) + 3  # + clone, clone3, personality
    return f"seccomp: deny-list v{VERSION}, {denied} calls"


def program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter for ``machine``: (code, jt, jf, k) per instruction.

    After the architecture check, the syscall number is looked up in a balanced tree of
    comparisons (a few per call, not one per denied call: cheaper to run, and cheaper
    for the kernel to prove constant when it loads the filter). Jumps go forward only,
    to the argument checks and the shared returns at the end."""
    table = TABLES[machine]
    # (opcode or label, jump if true, jump if false, k): jumps and JA's k by label
    body: list[tuple[int | str, int | str, int | str, int | str]] = [
        (_LD_W_ABS, 0, 0, _OFF_ARCH),
        (_JEQ_K, 0, "kill", AUDIT_ARCH[machine]),
        (_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if machine == "x86_64":
        body.append((_JGE_K, "eperm", 0, X32_SYSCALL_BIT))
    decided = {table[name]: "eperm" for name in DENIED if name in table}
    decided.update({table["clone3"]: "enosys", table["clone"]: "clone", table["personality"]: "personality"})

    def tree(calls: list[tuple[int, str]]) -> None:
        if len(calls) <= 6:
            body.extend((_JEQ_K, action, 0, nr) for nr, action in calls)
            body.append((_JA, 0, 0, "allow"))
            return
        mid, upper = len(calls) // 2, f"from {calls[len(calls) // 2][0]}"
        body.append((_JGE_K, upper, 0, calls[mid][0]))
        tree(calls[:mid])
        body.append((upper, 0, 0, 0))  # a label
        tree(calls[mid:])

    tree(sorted(decided.items()))
    body += [
        ("clone", 0, 0, 0),
        (_LD_W_ABS, 0, 0, _OFF_ARG0),
        (_JSET_K, "eperm", "allow", CLONE_NEW_ANY),
        ("personality", 0, 0, 0),
        (_LD_W_ABS, 0, 0, _OFF_ARG0),
        *[(_JEQ_K, "allow", 0, value) for value in PERSONALITIES],
        ("eperm", 0, 0, 0),
        (_RET_K, 0, 0, _RET_EPERM),
        ("allow", 0, 0, 0),
        (_RET_K, 0, 0, _RET_ALLOW),
        ("enosys", 0, 0, 0),
        (_RET_K, 0, 0, _RET_ENOSYS),
        ("kill", 0, 0, 0),
        (_RET_K, 0, 0, _RET_KILL),
    ]
    labels: dict[str, int] = {}
    code: list[tuple[int | str, int | str, int | str, int | str]] = []
    for ins in body:
        if isinstance(ins[0], str):
            labels[ins[0]] = len(code)
        else:
            code.append(ins)
    out = []
    for i, (op, jt, jf, k) in enumerate(code):
        jumps = [labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf)]
        assert all(0 <= j < 256 for j in jumps), "a seccomp jump out of range"
        k = labels[k] - i - 1 if isinstance(k, str) else k
        out.append((int(op), jumps[0], jumps[1], k))
    return out


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _compiled(machine: str) -> tuple[ctypes.Array[ctypes.c_char], _Fprog] | None:
    """The filter as the kernel reads it (struct sock_filter[] and its sock_fprog)."""
    if machine not in TABLES:
        return None
    code = program(machine)
    raw = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *ins) for ins in code))
    return raw, _Fprog(len(code), ctypes.addressof(raw))


#: Built once, as the driver loads: a fork server's runs share it, and the arguments
#: of the call that loads it.
_MACHINE = os.uname().machine
_FILTER = _compiled(_MACHINE)
#: kernel's libc: its ``prctl``, which the candidate has just called (no_new_privs)
_libc = kernel._libc
_INSTALL = (
    None
    if _FILTER is None
    else (PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(_FILTER[1]), 0, 0)
)


def install() -> None:
    """Load the filter into this process (``no_new_privs`` must be set). `BoxError` if
    the machine is unknown or the kernel refuses it: the run must not go ahead."""
    if _INSTALL is None:
        raise kernel.BoxError(f"seccomp: no syscall table for the {_MACHINE} architecture")
    rc = _libc.prctl(*_INSTALL)
    if rc != 0:
        raise kernel.BoxError(f"seccomp: {os.strerror(ctypes.get_errno())}")


def probe() -> None:
    """Install the filter here, check it refuses unshare, print `describe()`."""
    if _libc.prctl(38, ctypes.c_ulong(1), 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise SystemExit("no_new_privs refused")
    install()
    if _libc.unshare(0x10000000) == 0 or ctypes.get_errno() != errno.EPERM:  # CLONE_NEWUSER
        raise SystemExit("the filter did not hold")
    print(describe())
