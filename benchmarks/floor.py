#!/usr/bin/env python3
"""The floor of figure 1: aexec's runs of the corpus, as fast as this machine allows.

    python benchmarks/floor.py CASES.jsonl [ID ...]      (one JSON object on stdout)

Before the clock starts, every run's tree is prepared the naive way (a copy of the repo,
``git apply``) and run once with a deadline of at most ``WARM_UP_S``, so that its
bytecode is written. Then, timed, the runs aexec makes: each case once, a confirming
re-run of each case named by an ``ID``, and a before-run of the unpatched repo for each
(repo, tests, policy) of a patched suite that no unpatched suite runs. Each run is a child
forked from a warm worker that has already imported pytest and its built-in plugins
(plugin auto-load off, as in aexec), running ``pytest.main`` or the snippet's ``exec``
itself: no interpreter start-up, no boundary, no repo view, no parsing; output is thrown
away. ``os.cpu_count()`` workers take the runs in input order (a before-run just before
its case, a re-run just after), under the naive runners' rlimits and deadlines. An
observer that makes these runs takes at least this long, so ``naive sequential / floor``
bounds the ratio goal 1 can reach on this corpus. ``run_s`` is the sum of the runs' own
times: ``run_s / cores`` is the floor in any order, packed perfectly.
"""

from __future__ import annotations

import functools
import json
import math
import multiprocessing
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
import compileall
import py_compile

import _pytest.config
import pytest

from aexec._ab.naive import case_timeout, naive_tree, rlimits
from throughput import PYTEST_TRIMMED

for _name in _pytest.config.default_plugins:
    try:
        __import__(f"_pytest.{_name}")
    except ImportError:
        pass

PYTEST_ARGS = PYTEST_TRIMMED[2:]  # without "-m pytest"
#: The untimed first pass cuts runs here: long enough for every run that does not hang.
WARM_UP_S = 2.0

#: A run: (case, its prepared tree, its scratch dir, git apply's exit status).
Run = tuple[dict[str, Any], Path, str, int]
RUNS: list[Run] = []


def run(request: dict[str, Any], work: Path, scratch: str) -> NoReturn:
    """In the forked child: the case itself, then exit with its status."""
    rt, shape = request["request_type"], request["artifact_shape"]
    if shape == "command":
        os.execvp(request["command"][0], request["command"])
    sys.path[0] = str(work)  # as `python -m pytest` and `python -c` have the cwd
    if rt == "run_suite":
        os._exit(int(pytest.main([*PYTEST_ARGS, *request.get("tests", [])])))
    if rt == "build_check":
        if "code" not in request:
            os._exit(0 if compileall.compile_dir(".", quiet=1) else 1)
        path = Path(scratch) / "candidate.py"
        path.write_text(request["code"])
        try:
            py_compile.compile(str(path), doraise=True)
        except py_compile.PyCompileError:
            os._exit(1)
        os._exit(0)
    try:
        exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as e:
        os._exit(e.code if isinstance(e.code, int) else 1)
    except BaseException:
        os._exit(1)
    os._exit(0)


def limit(request: dict[str, Any]) -> None:
    """The naive runner's rlimits (`aexec._ab.naive.rlimits`, as the driver sets them)."""
    for name, value in rlimits(timeout_s=case_timeout(request)).items():
        which = getattr(resource, f"RLIMIT_{name.upper()}")
        resource.setrlimit(which, (value, value))


def one(i: int, cap: float) -> tuple[int | str, float]:
    """Run ``i`` with a deadline of at most ``cap`` seconds: its exit status (or
    ``"timeout"``) and how long it took."""
    request, work, scratch, applied = RUNS[i]
    if applied != 0:  # the patch did not apply: nothing to run
        return applied, 0.0
    t0 = time.monotonic()
    deadline = t0 + min(cap, case_timeout(request))
    pid = os.fork()
    if pid == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.setsid()
        os.chdir(work)
        limit(request)
        run(request, work, scratch)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), time.monotonic() - t0
        if time.monotonic() >= deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - t0
        time.sleep(0.005)


def prepare(request: dict[str, Any], base: Path, root: Path) -> Run:
    """A run of ``request`` in a tree of its own under ``root``, as the naive runner makes it."""
    scratch = tempfile.mkdtemp(dir=root)
    repo = base / request["repo"] if "repo" in request else None
    work, applied, _ = naive_tree(repo, request.get("patch"), scratch)
    return request, work, scratch, applied


def pool_map(indices: list[int], cap: float = math.inf) -> list[tuple[int | str, float]]:
    with multiprocessing.get_context("fork").Pool(os.cpu_count()) as pool:
        return list(pool.imap(functools.partial(one, cap=cap), indices, chunksize=1))


def suite_key(c: dict[str, Any]) -> str:
    return json.dumps([c["repo"], c.get("tests"), c.get("policy")], sort_keys=True)


def main() -> None:
    cases_path = Path(sys.argv[1]).resolve()
    base = cases_path.parent
    cases = [json.loads(ln) for ln in cases_path.read_text().splitlines() if ln.strip()]
    with tempfile.TemporaryDirectory(prefix="aexec-floor-") as td:
        root = Path(td)
        RUNS.extend(prepare(c, base, root) for c in cases)
        # The before-runs: one unpatched tree per patched suite no unpatched suite covers.
        suites = [c for c in cases if c["request_type"] == "run_suite"]
        unpatched = {suite_key(c) for c in suites if not c.get("patch")}
        before: dict[str, int] = {}
        for c in suites:
            if c.get("patch") and suite_key(c) not in unpatched and suite_key(c) not in before:
                before[suite_key(c)] = len(RUNS)
                RUNS.append(prepare({k: v for k, v in c.items() if k != "patch"}, base, root))
        # Untimed, each run once with a deadline of at most WARM_UP_S: bytecode written.
        pool_map(list(range(len(RUNS))), WARM_UP_S)
        reruns = set(sys.argv[2:])
        order: list[int] = []
        first: list[int] = []
        for i, c in enumerate(cases):
            if c["request_type"] == "run_suite" and c.get("patch") and suite_key(c) in before:
                order.append(before.pop(suite_key(c)))
            first.append(len(order))
            order.append(i)
            if c["id"] in reruns:
                order.append(i)
        t0 = time.perf_counter()
        outcomes = pool_map(order)
        wall = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "wall_s": wall,
                "runs": len(order),
                "run_s": sum(t for _, t in outcomes),
                "outcomes": [outcomes[k][0] for k in first],
            }
        )
    )


if __name__ == "__main__":
    main()
