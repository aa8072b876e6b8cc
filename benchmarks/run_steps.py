#!/usr/bin/env python3
"""Issue 42: where a warm trivial run's CPU goes, step by step, and A/B rounds of the whole
tree's CPU per run against another checkout (Linux, root: the whole boundary on).

    python benchmarks/run_steps.py steps [N]              per-step CPU, this checkout
    python benchmarks/run_steps.py ab THIS_SRC OTHER_SRC [N] [ROUNDS]
    python benchmarks/run_steps.py serve-ab THIS_SRC OTHER_SRC [N] [ROUNDS]
    python benchmarks/run_steps.py call-ab THIS_SRC OTHER_SRC [N] [ROUNDS]
    python benchmarks/run_steps.py snapshot ROOT [ROUNDS]  a snapshot's walk, relpath against not

``steps``: N trivial snippets (``x = i``) through one ``observe_many``, default options.

* The library's side (this process): every step below is wrapped with
  ``time.thread_time`` (CPU of the thread it runs in; nested steps are indented and
  counted in their parent too). ``event loop, the rest`` is the main thread's CPU less
  what the steps on it took: asyncio, anyio, the supervisor, assembly.
* The boundary's side (the fork server, the run's init, the candidate): the server runs
  a copy of this checkout whose driver has each step wrapped with
  ``getrusage(RUSAGE_SELF)`` deltas (CPU and minor faults). The server's steps are
  appended to a file; the init's and the candidate's go to the run's stderr, where the
  observation brings them back. A step that forks is reported in the child too ("in the
  child": its CPU from the fork to the step's return); "whole process" is each
  process's CPU at its ``os._exit``.

``ab``: ROUNDS rounds of ``peers.py --boundary-worker "whole boundary" N`` (aexec, its
fork server and the runs: the process tree's CPU), ``THIS_SRC`` and ``OTHER_SRC``
alternating (``PYTHONPATH``); medians, and the paired difference per round. The load
average is printed before and after: the machine is shared. Keep both copies of the
source alike in where they lie: each is on the runs' sys.path, so in their view, and one
under /tmp (a tmp target) costs each run's init binds of its own (`view._place_late`).

``serve-ab``: the same rounds through ``aexec serve``'s ``/run_code`` (``peers.py``'s
``aexec-serve`` harness: verl's request shape, 64 clients, the server in cgroups of its
own): N trivial programs per round after 200 untimed, the server's whole tree's CPU and
its own process's per request. Each round of ``ab`` and ``serve-ab`` first measures the
isolated floor (`init_shapes.py floor`), and each side is also given against it.

``call-ab``: N ``aexec.observe`` calls of one trivial snippet each, one after another on
one observer (as a server's requests are calls), after 30 untimed: the calling
process's CPU and its loop thread's per call (the runs' processes are not in it).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MARK = "@@step"

#: Appended to the copy's ``_driver/main.py``: module attributes the driver calls through.
DRIVER_PROBE = r"""
# --- benchmarks/run_steps.py: per-step rusage (a benchmark's copy only) ---
import resource as _res

from . import kernel as _kernel, reporting as _reporting, view as _view, seccomp as _seccomp

_SERVER = os.getpid()
_ROLE = ["init"]
_PENDING = ["", False]  # lines a forked child holds until its fd 2 is the run's
_LOG = "@LOG@"  # the benchmark's file (the server's environment is the runs')
_real_exit = os._exit


def _usage():
    r = _res.getrusage(_res.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_minflt


def _emit(label, cpu, faults):
    line = "%s %s %s %d %d\n" % (
        "@@step", "server" if os.getpid() == _SERVER else _ROLE[0], label, int(cpu * 1e6), faults
    )
    if os.getpid() == _SERVER:
        with open(_LOG, "a") as f:
            f.write(line)
    elif label.endswith("(child)") and not _PENDING[1]:  # before `become`: the server's fd 2
        _PENDING[0] += line
    else:
        _PENDING[1] = True
        try:
            os.write(2, (_PENDING[0] + line).encode())
        except OSError:
            pass
        _PENDING[0] = ""


def _wrap(mod, name, label=None, child_role=None):
    f = getattr(mod, name)
    label = label or name

    def wrapped(*a, **k):
        pid, (c0, f0) = os.getpid(), _usage()
        try:
            return f(*a, **k)
        finally:
            c1, f1 = _usage()
            if os.getpid() == pid:
                _emit(label, c1 - c0, f1 - f0)
            else:  # returned in a forked child: its usage since the fork
                if child_role:
                    _ROLE[0] = child_role
                _emit(label + "(child)", c1, f1)

    setattr(mod, name, wrapped)


def _exit(code):
    c, f = _usage()
    _emit("whole-process", c, f)
    _real_exit(code)


os._exit = _exit
for _mod, _name, _role in (
    (serve, "_recv_fds", None), (serve, "boxed", None), (serve, "set_environ", None),
    (serve, "become", None), (_kernel, "fork_init", "init"),
    (contain, "die_with_supervisor", None), (_kernel, "enter_cgroups", None),
    (_kernel, "name_host", None), (_view, "build_view", None),
    (contain, "fork_candidate", "candidate"), (_view, "release_host", None),
    (contain, "leave_drivers_path", None), (_kernel, "drop_privileges", None),
    (_seccomp, "install", None), (runners, "feed_stdin", None), (_reporting, "Report", None),
    (_kernel, "apply_limits", None), (contain, "import_first_uses", None),
    (contain, "handed_over", None), (os, "fork", "candidate"), (_kernel, "fork_again", "candidate"),
    (os, "wait4", None),
    (runners.RUNNERS, None, None),
):
    if _name is None:
        _f = _mod["snippet"]

        def _snippet(*a, _f=_f, **k):
            c0, f0 = _usage()
            try:
                return _f(*a, **k)
            finally:
                c1, f1 = _usage()
                _emit("runner(snippet)", c1 - c0, f1 - f0)

        _mod["snippet"] = _snippet
    else:
        _wrap(_mod, _name, child_role=_role)
_leave = leave


def leave(code, ours):
    c, f = _usage()
    _emit("before-leave", c, f)
    _leave(code, ours)
"""

#: Library steps: (module, attribute, label, parent label or None).
LIBRARY_STEPS = [
    ("aexec._pipeline.run", "prepare", "prepare (worker thread)", None),
    ("aexec._pipeline.run", "make_scratch", "scratch root made", "prepare (worker thread)"),
    ("aexec._pipeline.run", "make_view", "repo view / work dir", "prepare (worker thread)"),
    ("aexec._pipeline.run", "write_private", "snippet file written", "prepare (worker thread)"),
    ("aexec._pipeline.run", "place", "canary placed", "prepare (worker thread)"),
    ("aexec._pipeline.invoke", "invocation", "invocation (spec, plan)", "prepare (worker thread)"),
    ("aexec._pipeline.run", "seal_scratch", "scratch sealed (uid, quota)", "prepare (worker thread)"),
    ("aexec._pipeline.run", "snapshot", "snapshot before", "prepare (worker thread)"),
    ("aexec._pipeline.run", "collect", "collect (worker thread)", None),
    ("aexec._pipeline.run", "remove_scratch", "scratch removed (worker thread)", None),
    ("aexec._pipeline.remover", "remove_scratch", "scratch removed (remover thread)", None),
    ("aexec._boundary.cgroups", "Cgroups.create", "cgroups created", None),
    ("aexec._boundary.cgroups", "Cgroups.kill", "cgroups killed", None),
    ("aexec._boundary.cgroups", "Cgroups.try_remove", "cgroups removed", None),
    ("aexec._boundary.cgroups", "Cgroups.remove", "cgroups removed, waiting (thread)", None),
    ("aexec._boundary.cgroups", "Cgroups.oom_killed", "OOM check", None),
    ("aexec._boundary.cgroups", "Cgroups.cpu_demand_s", "admission's CPU reads", None),
    ("aexec._boundary.supervise", "_read_report", "report read", None),
]


def _wrap_library(spent: dict[str, float], threads: dict[str, bool]) -> None:
    import importlib
    import threading

    main = threading.main_thread()
    for module, attr, label, _ in LIBRARY_STEPS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError:  # a step of another checkout's
            continue
        owner: Any = mod
        name = attr
        if "." in attr:
            cls, name = attr.split(".")
            owner = getattr(mod, cls)
        f = getattr(owner, name)

        def wrapped(*a: Any, _f: Any = f, _label: str = label, **k: Any) -> Any:
            t0 = time.thread_time()
            try:
                return _f(*a, **k)
            finally:
                spent[_label] += time.thread_time() - t0
                threads[_label] = threading.current_thread() is main

        setattr(owner, name, wrapped)


def _copy_with_probe() -> Path:
    """A copy of this checkout's ``src`` whose driver reports its steps."""
    dest = Path(tempfile.mkdtemp(prefix="aexec-steps-"))
    shutil.copytree(ROOT / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__"))
    main = dest / "src" / "aexec" / "_driver" / "main.py"
    main.write_text(main.read_text() + DRIVER_PROBE.replace("@LOG@", str(dest / "server-steps.log")))
    return dest


def _worker(args: list[str], pythonpath: str) -> Any:
    """Run this interpreter on ``args`` with ``PYTHONPATH``; the JSON of its last line."""
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def steps(n: int) -> None:
    copy = _copy_with_probe()
    log = copy / "server-steps.log"
    got = _worker([__file__, "steps-worker", str(n)], str(copy / "src"))
    time.sleep(1)  # the server writes its last line as it exits, once the worker is gone
    rows: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for line in got.pop("lines") + (log.read_text().splitlines() if log.exists() else []):
        _, role, label, cpu, faults = line.split()
        rows[(role, label)].append((int(cpu), int(faults)))
    shutil.rmtree(copy, ignore_errors=True)
    print(f"load average {os.getloadavg()}; N = {n}; whole tree {got['cpu_ms']:.2f} ms CPU per run")
    print(f"library process {got['self_ms']:.2f} ms per run (main thread {got['main_ms']:.2f} ms)")
    print("\n| library step | thread | CPU per run (µs) |\n|---|---|---:|")
    for _, _, label, parent in LIBRARY_STEPS:
        if label in got["spent"]:
            where = "loop" if got["threads"][label] else "worker"
            name = ("  ↳ " if parent else "") + label
            print(f"| {name} | {where} | {1e6 * got['spent'][label] / n:.0f} |")
    print(f"| event loop, the rest | loop | {1e6 * got['loop_rest_s']:.0f} |")
    print(
        "\n| process | step | CPU per run, median (µs) | minor faults, median | runs |\n|---|---|---:|---:|---:|"
    )
    medians: dict[str, dict[str, float]] = defaultdict(dict)
    for (role, label), values in sorted(rows.items(), key=lambda kv: "sic".index(kv[0][0][0])):
        if role == "server" and len(values) > n:  # the warm-up's runs too: the last n
            values = values[-n:]
        if role == "server" and label == "whole-process":  # once, at its exit: per run served
            runs = len(rows[("server", "fork_init")]) or 1
            print(
                f"| server | whole process (its own CPU, per run served) | {values[0][0] / runs:.0f} "
                f"| {values[0][1] / runs:.0f} | {runs} |"
            )
            continue
        cpu = statistics.median(v[0] for v in values)
        medians[role][label] = cpu
        print(
            f"| {role} | {label} | {cpu:.0f} | {statistics.median(v[1] for v in values):.0f} | {len(values)} |"
        )
    for role in ("init", "candidate"):
        got_role = medians[role]
        whole = got_role.get("whole-process", 0.0)
        if role == "candidate" and "before-leave" in got_role:
            print(
                f"| candidate | leave (whole less before-leave) | {whole - got_role['before-leave']:.0f} | | |"
            )
            continue
        rest = whole - sum(v for k, v in got_role.items() if k != "whole-process")
        print(f"| {role} | the rest (whole less the steps above) | {rest:.0f} | | |")
    print(
        f"\nfork server and runs: {got['cpu_ms'] - got['self_ms']:.2f} ms per run; failures {got['failures']}"
    )


def _tree_cpu_s() -> float:
    """This process's CPU, its reaped children's, and its live children's (the fork
    server: its own and the runs it reaped), as ``peers.tree_cpu_s``."""
    total = sum(os.times()[:4])
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    return total


def steps_worker(n: int) -> None:
    import threading

    import anyio

    from aexec import Candidate, observe_many

    assert "aexec-steps-" in __import__("aexec").__file__, "PYTHONPATH did not take"
    spent: dict[str, float] = defaultdict(float)
    threads: dict[str, bool] = {}

    async def go() -> dict[str, Any]:
        await observe_many([Candidate("run_entry", "snippet", code="x = 0\n") for _ in range(2)])
        _wrap_library(spent, threads)
        cands = [Candidate("run_entry", "snippet", code=f"x = {i}\n") for i in range(n)]
        t0, m0, s0 = _tree_cpu_s(), time.thread_time(), time.process_time()
        obs = await observe_many(cands)
        t1, m1, s1 = _tree_cpu_s(), time.thread_time(), time.process_time()
        lines = [ln for o in obs for ln in o.stderr.splitlines() if ln.startswith(MARK)]
        on_loop = sum(v for k, v in spent.items() if threads.get(k) and "↳" not in k)
        assert threading.current_thread() is threading.main_thread()
        tree = t1 - t0
        return {
            "cpu_ms": 1000 * tree / n,
            "self_ms": 1000 * (s1 - s0) / n,
            "main_ms": 1000 * (m1 - m0) / n,
            "loop_rest_s": ((m1 - m0) - on_loop) / n,
            "spent": dict(spent),
            "threads": threads,
            "lines": lines,
            "failures": sum(o.failure is not None for o in obs),
        }

    print(json.dumps(anyio.run(go)))


def _floor_ms() -> float:
    """The isolated floor now (`init_shapes.py floor`): CPU per run, ms."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "init_shapes.py"), "floor", "300"],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["cpu_ms"])


Rows = dict[str, list[dict[str, float]]]


def _ratios(got: Rows, floors: list[float]) -> None:
    """Each side's whole tree against the floor measured in the same round."""
    print(
        f"the floor, per round: {', '.join(f'{f:.2f}' for f in floors)} ms (median {statistics.median(floors):.2f})"
    )
    for side, rows in got.items():
        ratios = [row["cpu_ms"] / floor for row, floor in zip(rows, floors, strict=True)]
        print(
            f"{side}: whole tree / the round's floor: median {statistics.median(ratios):.2f}x "
            f"({', '.join(f'{x:.2f}' for x in ratios)})"
        )


def _rounds(
    this: str,
    other: str,
    rounds: int,
    worker: list[str],
    line: Callable[[dict[str, float]], str],
    floor: bool,
) -> Rows:
    """``rounds`` rounds of ``worker`` under each side's ``PYTHONPATH``, the sides'
    order alternating (with ``floor``, the isolated floor first in each round)."""
    sides = {"this": this, "other": other}
    got: Rows = {k: [] for k in sides}
    floors: list[float] = []
    print(f"load average before {os.getloadavg()}")
    for r in range(rounds):
        if floor:
            floors.append(_floor_ms())
        for side in list(sides) if r % 2 == 0 else list(reversed(sides)):
            row = _worker(worker, sides[side])
            got[side].append(row)
            print(f"round {r + 1} {side}: {line(row)}", flush=True)
    print(f"load average after {os.getloadavg()}")
    if floor:
        _ratios(got, floors)
    return got


def _medians(got: Rows, columns: dict[str, Callable[[dict[str, float]], float]]) -> None:
    """Each side's median of each column, a line a side."""
    for side, rows in got.items():
        cells = ", ".join(
            f"{name} {statistics.median(f(r) for r in rows):.2f} ms" for name, f in columns.items()
        )
        print(f"{side}: {cells} (medians of {len(rows)})")


def _paired(got: Rows, key: str, what: str) -> None:
    diffs = [a[key] - b[key] for a, b in zip(got["this"], got["other"], strict=True)]
    print(
        f"paired difference this - other, {what}: median {statistics.median(diffs):+.2f} ms "
        f"({sum(d < 0 for d in diffs)} of {len(diffs)} below 0): {', '.join(f'{d:+.2f}' for d in diffs)}"
    )


def ab(this: str, other: str, n: int, rounds: int) -> None:
    got = _rounds(
        this,
        other,
        rounds,
        [str(ROOT / "benchmarks" / "peers.py"), "--boundary-worker", "whole boundary", str(n)],
        lambda row: (
            f"{row['cpu_ms']:.2f} ms CPU per run (server + runs {row['server_ms']:.2f}), "
            f"{row['rate']:.0f}/s, failures {row['failures']}"
        ),
        floor=True,
    )
    _medians(
        got,
        {
            "whole tree": lambda r: r["cpu_ms"],
            "aexec": lambda r: r["cpu_ms"] - r["server_ms"],
            "server + runs": lambda r: r["server_ms"],
        },
    )
    _paired(got, "cpu_ms", "whole tree")


def serve_worker(n: int) -> None:
    """N trivial programs through ``/run_code`` of a server this interpreter runs (its
    ``PYTHONPATH`` the side's), after 200 untimed; the JSON of what it cost."""
    import asyncio
    import contextlib

    import httpx

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _peers_more as serve
    from aexec.testing import ServeProcess
    from peers import trivial_items

    def own_cpu_s(pid: int) -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def go(server: ServeProcess, cpu: Any) -> dict[str, Any]:
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(httpx.AsyncClient(timeout=20)) for _ in range(serve.CLIENTS)
            ]
            await serve.drive(clients, server.url, trivial_items(200, "warm-up"))
            c0, s0, t0 = cpu.read(), own_cpu_s(server.proc.pid), time.monotonic()
            outcomes, _, _ = await serve.drive(clients, server.url, trivial_items(n))
            t1, c1, s1 = time.monotonic(), cpu.read(), own_cpu_s(server.proc.pid)
        kind = next(iter(c1))
        return {
            "cpu_ms": 1000 * (c1[kind] - c0[kind]) / n,
            "serve_ms": 1000 * (s1 - s0) / n,
            "rate": n / (t1 - t0),
            "wrong": sum(o != "pass" for o in outcomes),
        }

    cpu = serve.TreeCpu(f"run-steps-serve-{os.getpid()}")
    if not cpu.dirs:
        raise SystemExit("no CPU-accounting cgroup could be made (need root)")
    server = ServeProcess(preexec_fn=cpu.enter)
    assert __import__("aexec").__file__.startswith(os.environ["PYTHONPATH"]), "PYTHONPATH did not take"
    try:
        print(json.dumps(asyncio.run(go(server, cpu))))
    finally:
        server.stop(60)
        cpu.remove()


def call_worker(n: int) -> None:
    """N one-candidate ``observe`` calls in a row; the JSON of their CPU per call."""
    import anyio

    import aexec

    async def go() -> dict[str, float]:
        async with aexec.observer(aexec.Options()) as obs:
            for i in range(30):
                await aexec.observe(
                    aexec.Candidate("run_entry", "snippet", code=f"x = {i}  # warm-up\n"), observer=obs
                )
            t0, p0 = time.thread_time(), time.process_time()
            wrong = 0
            for i in range(n):
                o = await aexec.observe(
                    aexec.Candidate("run_entry", "snippet", code=f"x = {i}\n"), observer=obs
                )
                wrong += o.failure is not None
            t1, p1 = time.thread_time(), time.process_time()
        return {"process_ms": 1000 * (p1 - p0) / n, "loop_ms": 1000 * (t1 - t0) / n, "wrong": wrong}

    assert aexec.__file__.startswith(os.environ["PYTHONPATH"]), "PYTHONPATH did not take"
    print(json.dumps(anyio.run(go)))


def call_ab(this: str, other: str, n: int, rounds: int) -> None:
    got = _rounds(
        this,
        other,
        rounds,
        [__file__, "call-worker", str(n)],
        lambda row: (
            f"{row['process_ms']:.2f} ms CPU per call (loop thread {row['loop_ms']:.2f}), wrong {row['wrong']}"
        ),
        floor=False,
    )
    _medians(got, {"process": lambda r: r["process_ms"], "loop thread": lambda r: r["loop_ms"]})
    _paired(got, "process_ms", "process")
    _paired(got, "loop_ms", "loop thread")


def serve_ab(this: str, other: str, n: int, rounds: int) -> None:
    got = _rounds(
        this,
        other,
        rounds,
        [__file__, "serve-worker", str(n)],
        lambda row: (
            f"{row['cpu_ms']:.2f} ms CPU per request (serve process {row['serve_ms']:.2f}), "
            f"{row['rate']:.0f}/s, wrong {row['wrong']}"
        ),
        floor=True,
    )
    _medians(got, {"whole tree": lambda r: r["cpu_ms"], "serve process": lambda r: r["serve_ms"]})
    _paired(got, "cpu_ms", "whole tree")


def snapshot_cost(root: str, rounds: int) -> None:
    """`trees.snapshot` of ``root`` (a run's scratch root holds the repo's copy) against
    the same walk keyed with ``os.path.relpath`` (main's before issue 42), alternating:
    median CPU (this thread) of each."""
    from aexec._boundary import trees

    def with_relpath(root: str) -> dict[str, tuple[int, int]]:
        out = {}
        for path, st in trees._scan(root, trees.SNAPSHOT_CAP):
            rel = os.path.relpath(path, root)
            if not rel.startswith(".aexec" + os.sep):
                out[rel] = (st.st_size, st.st_mtime_ns)
        return out

    times: dict[str, list[float]] = {"relpath": [], "relative_to": []}
    for _ in range(rounds):
        for name, f in (("relpath", with_relpath), ("relative_to", trees.snapshot)):
            t0 = time.thread_time()
            got = f(root)
            times[name].append(time.thread_time() - t0)
        assert got == with_relpath(root)
    files = len(got)
    print(f"load average {os.getloadavg()}; {root}: {files} files, {rounds} rounds")
    for name, ts in times.items():
        print(f"{name}: {1000 * statistics.median(ts):.2f} ms CPU per snapshot (median)")


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    if cmd == "steps":
        steps(int(rest[0]) if rest else 500)
    elif cmd == "steps-worker":
        steps_worker(int(rest[0]))
    elif cmd == "snapshot":
        snapshot_cost(rest[0], int(rest[1]) if len(rest) > 1 else 20)
    elif cmd == "serve-worker":
        serve_worker(int(rest[0]))
    elif cmd == "call-worker":
        call_worker(int(rest[0]))
    elif cmd == "call-ab":
        call_ab(
            rest[0], rest[1], int(rest[2]) if len(rest) > 2 else 300, int(rest[3]) if len(rest) > 3 else 10
        )
    elif cmd == "serve-ab":
        serve_ab(
            rest[0], rest[1], int(rest[2]) if len(rest) > 2 else 1000, int(rest[3]) if len(rest) > 3 else 6
        )
    elif cmd == "ab":
        ab(rest[0], rest[1], int(rest[2]) if len(rest) > 2 else 400, int(rest[3]) if len(rest) > 3 else 6)
    else:
        raise SystemExit(__doc__)
