#!/usr/bin/env python3
"""What the syscall filter and the own IPC and UTS namespaces add to one run (issue 27).

    sudo python benchmarks/seccomp_cost.py [--batches 10] [--per-batch 50]

Measured where a run pays it, without the rest of a run's noise (``peers.py
--boundary-cost`` measures whole runs, whose spread on a shared 2-core machine is far
larger than these costs):

* **filter**: ``install()`` of the driver's part (``aexec/_driver/seccomp.py``, imported
  here as a module of the driver's package, so its program is built once) in a forked child after
  ``no_new_privs``, as a warm run's candidate pays it: median wall µs, beside a
  one-instruction filter (the kernel's fixed cost) and an empty call;
* **namespaces**: CPU (this process and its reaped children) per ``clone`` into the run's
  namespaces + exit, batches alternating between PID|NS|NET with a ``getpid`` and
  PID|NS|NET|IPC|UTS with the ``sethostname`` the init now makes.

Root only (new namespaces), x86-64 or arm64.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import signal
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parent.parent / "src"


def load(name: str) -> dict[str, Any]:
    """A module of the driver's (``aexec/_driver/NAME.py``), imported from this checkout."""
    import importlib

    sys.path.insert(0, str(SRC))
    return vars(importlib.import_module(f"aexec._driver.{name}"))


def in_child(fn: Any, n: int) -> list[float]:
    """Wall µs of ``fn()`` in n forked children, each after ``no_new_privs``."""
    libc = ctypes.CDLL(None, use_errno=True)
    out = []
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            libc.prctl(38, 1, 0, 0, 0)
            t = time.perf_counter_ns()
            fn()
            os.write(w, str(time.perf_counter_ns() - t).encode())
            os._exit(0)
        os.close(w)
        out.append(int(os.read(r, 64)) / 1e3)
        os.close(r)
        os.waitpid(pid, 0)
    return out


def cpu_s() -> float:
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def clone_batch(sys_clone: int, flags: int, name_host: bool, n: int) -> float:
    """CPU µs per clone into ``flags`` + the init's one call + exit + reap."""
    libc = ctypes.PyDLL(None, use_errno=True)
    sethostname, getpid = libc.sethostname, libc.getpid
    c = cpu_s()
    for _ in range(n):
        args = [ctypes.c_long(0)] * 4
        pid = libc.syscall(ctypes.c_long(sys_clone), ctypes.c_ulong(flags | signal.SIGCHLD), *args)
        if pid == 0:
            sethostname(b"aexec", 5) if name_host else getpid()
            os._exit(0)
        os.waitpid(pid, 0)
    return (cpu_s() - c) / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--per-batch", type=int, default=50)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("root only: the namespaces need it")
    n = args.batches * args.per_batch
    print(f"uptime: {os.getloadavg()}, {os.uname().machine}")
    seccomp = load("seccomp")
    libc = ctypes.CDLL(None, use_errno=True)
    one = ctypes.create_string_buffer(struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF0000))
    prog = seccomp["_Fprog"](1, ctypes.addressof(one))
    print(f"[filter] {len(seccomp['program'](os.uname().machine))} instructions; {n} forked children each")
    for label, fn in [
        ("empty call", lambda: None),
        ("1-instruction filter", lambda: libc.prctl(22, 2, ctypes.byref(prog), 0, 0)),
        ("install() (the run's filter)", seccomp["install"]),
    ]:
        xs = sorted(in_child(fn, n))
        print(f"  {label:30s} median {statistics.median(xs):7.1f} µs   p90 {xs[int(0.9 * n)]:7.1f} µs")
    kernel = load("kernel")
    old = kernel["CLONE_NEWNS"] | kernel["CLONE_NEWPID"] | kernel["CLONE_NEWNET"]
    rows: dict[str, list[float]] = {"PID|NS|NET, getpid": [], "PID|NS|NET|IPC|UTS, sethostname": []}
    for _ in range(args.batches):
        rows["PID|NS|NET, getpid"].append(clone_batch(kernel["SYS_CLONE"], old, False, args.per_batch))
        rows["PID|NS|NET|IPC|UTS, sethostname"].append(
            clone_batch(kernel["SYS_CLONE"], kernel["CLONE_RUN"], True, args.per_batch)
        )
    print(f"[namespaces] CPU per clone + exit, median of {args.batches} batches of {args.per_batch}")
    for label, xs in rows.items():
        print(f"  {label:36s} {statistics.median(xs):7.0f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
