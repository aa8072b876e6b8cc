#!/usr/bin/env python3
"""Issue 28, goal 7: what a trivial run's processes cost in each shape the boundary could
take, with no library and no boundary step beyond the namespaces (Linux, root, x86_64).

    python benchmarks/init_shapes.py [RUNS] [ROUNDS]      (defaults 300, 3)
    python benchmarks/init_shapes.py rate [SECONDS] [WORKERS] [ROUNDS]   (5, 2, 3)
    python benchmarks/init_shapes.py floor [RUNS]          (300: today's shape, one JSON line)

A warm interpreter (pytest imported, as a pytest-mode fork server has) makes RUNS runs of
``x = 1`` per shape, the shapes alternating within each round, and prints the CPU (its
own and its reaped children's, ``os.times``) and the wall time per run:

* ``namespaces + python init``: today's shape. ``clone`` into new PID, mount, network,
  IPC and UTS namespaces; the child, pid 1 and a fork of this interpreter, forks the
  candidate and reaps it.
* ``namespaces + compiled init``: pid 1 is a small static C program, started with
  ``posix_spawn`` (vfork + exec: no copy of this interpreter), which unshares the other
  four namespaces; the candidate is forked by the server into the PID namespace and
  enters the others with one ``setns`` on the init's pidfd. Its parent is outside its
  PID namespace, so its ``getppid()`` is 0. Needs ``cc``.
* ``no network namespace``: today's shape without it.
* ``bare fork``: the candidate forked by the server, nothing else (no namespace, no init).

``floor``: today's shape only, its CPU and wall per run as JSON: the isolated floor, for
a benchmark that measures against it in the same minutes (``run_steps.py``'s A/B rounds:
on this shared machine the same code's CPU per run drifts by a quarter within an hour).

``rate``: each shape's throughput on this machine, the ceiling of any harness that
makes its runs in that shape: WORKERS forks of this interpreter make runs one after
another for SECONDS, all at once, and the runs they made in all are counted (runs/s;
the kernel's work done for a run outside its processes, a network namespace's teardown
in a kernel worker among it, is in this figure and not in the CPU above).

What this leaves out, for every shape alike: the cgroups, the view, the uid, the syscall
filter, the rlimits, the pipes and the report (the init's and the candidate's other
steps), and the library (aexec's own process: 2–3 ms per run in 2026-12).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import pytest  # noqa: F401  (a warm heap like a pytest-mode server's)

NEWNS, NEWPID, NEWNET, NEWIPC, NEWUTS = 0x20000, 0x20000000, 0x40000000, 0x08000000, 0x04000000
RUN = NEWNS | NEWPID | NEWNET | NEWIPC | NEWUTS
SYS_CLONE = 56  # x86_64
INIT_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
    if (unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) != 0) return 125;
    if (write(3, "r", 1) != 1) return 125;
    close(3);
    for (;;) if (wait(NULL) < 0 && errno == ECHILD) pause();
}
"""
libc = ctypes.CDLL(None, use_errno=True)
SNIPPET = compile("x = 1", "<candidate>", "exec")
OWN_PID_NS = os.open("/proc/self/ns/pid", os.O_RDONLY)


def _check(rc: int, what: str) -> int:
    if rc < 0:
        raise OSError(ctypes.get_errno(), what)
    return rc


def _candidate() -> None:
    exec(SNIPPET, {})
    os._exit(0)


def _clone_init(flags: int) -> None:
    _check(libc.setns(OWN_PID_NS, NEWPID), "setns")  # the server's children in its own PID namespace
    pid = _check(
        libc.syscall(SYS_CLONE, ctypes.c_ulong(flags | signal.SIGCHLD), None, None, None, None), "clone"
    )
    if pid == 0:
        child = os.fork()
        if child == 0:
            _candidate()
        os.waitpid(child, 0)
        os._exit(0)
    os.waitpid(pid, 0)


def python_init() -> None:
    _clone_init(RUN)


def no_network_namespace() -> None:
    _clone_init(RUN & ~NEWNET)


def compiled_init(init: str) -> Callable[[], None]:
    def run() -> None:
        _check(libc.setns(OWN_PID_NS, NEWPID), "setns")
        _check(libc.unshare(NEWPID), "unshare")
        r, w = os.pipe()
        pid = os.posix_spawn(init, [init], {}, file_actions=[(os.POSIX_SPAWN_DUP2, w, 3)])
        os.close(w)
        ready = os.read(r, 1)
        os.close(r)
        if ready != b"r":
            raise RuntimeError("the compiled init did not start")
        pidfd = os.pidfd_open(pid)
        child = os.fork()
        if child == 0:
            if libc.setns(pidfd, NEWNS | NEWNET | NEWIPC | NEWUTS) != 0:
                os._exit(126)
            _candidate()
        os.close(pidfd)
        _, status = os.waitpid(child, 0)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        if status != 0:
            raise RuntimeError(f"the candidate failed to enter the namespaces ({status})")

    return run


def bare_fork() -> None:
    child = os.fork()
    if child == 0:
        _candidate()
    os.waitpid(child, 0)


def measure(run: Callable[[], None], n: int) -> tuple[float, float]:
    """CPU and wall per run, in ms."""
    t0, w0 = os.times(), time.perf_counter()
    for _ in range(n):
        run()
    t1, w1 = os.times(), time.perf_counter()
    cpu = sum(b - a for a, b in zip(t0[:4], t1[:4], strict=True))
    return cpu / n * 1000, (w1 - w0) / n * 1000


def rate(run: Callable[[], None], seconds: float, workers: int) -> float:
    """Runs per second made by ``workers`` forks of this process running ``run`` in a
    loop, all for the same ``seconds``."""
    _check(libc.setns(OWN_PID_NS, NEWPID), "setns")  # a shape may have left another for children
    r, w = os.pipe()
    start = time.monotonic() + 0.2  # every worker forked before any begins
    pids = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            made = 0
            try:
                time.sleep(max(0.0, start - time.monotonic()))
                while time.monotonic() < start + seconds:
                    run()
                    made += 1
            finally:
                os.write(w, b"%d\n" % made)
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        made = [int(line) for line in f]
    if len(made) != workers:
        raise RuntimeError(f"{workers - len(made)} of {workers} workers reported nothing")
    return sum(made) / seconds


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "floor":
        n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
        measure(python_init, 20)  # its first runs, untimed
        cpu, wall = measure(python_init, n)
        print(json.dumps({"cpu_ms": cpu, "wall_ms": wall}))
        return
    mode_rate = len(sys.argv) > 1 and sys.argv[1] == "rate"
    args = sys.argv[2:] if mode_rate else sys.argv[1:]
    if mode_rate:
        seconds = float(args[0]) if args else 5.0
        workers = int(args[1]) if len(args) > 1 else 2
        rounds = int(args[2]) if len(args) > 2 else 3
    else:
        n = int(args[0]) if args else 300
        rounds = int(args[1]) if len(args) > 1 else 3
    shapes: dict[str, Callable[[], None]] = {"namespaces + python init": python_init}
    tmp = tempfile.mkdtemp(prefix="aexec-init-shapes-")
    try:
        cc = shutil.which("cc")
        if cc is not None:
            with open(os.path.join(tmp, "init.c"), "w") as f:
                f.write(INIT_C)
            init = os.path.join(tmp, "init")
            subprocess.run([cc, "-O2", "-static", "-o", init, f.name], check=True)
            shapes["namespaces + compiled init"] = compiled_init(init)
        else:
            print("no cc: the compiled init is not measured", file=sys.stderr)
        shapes["no network namespace"] = no_network_namespace
        shapes["bare fork"] = bare_fork
        for r in range(rounds):
            for name, run in shapes.items():
                if mode_rate:
                    for _ in range(20):  # the shape's first runs, untimed
                        run()
                    made = rate(run, seconds, workers)
                    print(f"round {r} {name:28} {made:6.0f} runs/s ({workers} workers)", flush=True)
                    continue
                cpu, wall = measure(run, n)
                print(f"round {r} {name:28} {cpu:5.2f} ms CPU {wall:5.2f} ms wall per run", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
