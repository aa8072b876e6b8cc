"""What the isolation boundary costs per observation (issue 4; docs/isolation.md).

    python benchmarks/boundary.py [--runs 30]

Measures, in one run, the mean wall time of one observation through aexec with each
boundary configuration (full; without cgroups; without namespaces; neither) beside a
bare subprocess doing the same work: ``python -c pass`` for a trivial snippet, and the
same pytest command on a one-test repo whose test fails (so aexec runs it once; a
passing suite is re-run by design). Each aexec configuration is an `aexec.Options`
(``namespaces`` / ``cgroups`` off) and runs in its own process, because the boundary is
probed once per process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: configuration -> `aexec.Options` fields (the library reads no AEXEC_* variable).
CONFIGS: dict[str, dict[str, bool]] = {
    "full": {},
    "no cgroups": {"cgroups": False},
    "no namespaces": {"namespaces": False},
    "neither": {"namespaces": False, "cgroups": False},
}
TEST = "def test_fails():\n    assert 1 + 1 == 3\n"
PYTEST = ["-m", "pytest", "-p", "no:cacheprovider", "--color=no", "-q"]

WORKER = """
import json, sys, time, anyio
from aexec import Candidate, Options, observe

kind, repo, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
options = Options(**json.loads(sys.argv[4]))

def make(i):
    if kind == "snippet":
        return Candidate("run_entry", "snippet", code=f"pass  # {i}")
    return Candidate("run_suite", "test_subset", repo=repo, tests=["test_x.py"], id=i)

async def main():
    await observe(make(-1), options=options)  # warm: the boundary and toolchain probes, imports
    times = []
    for i in range(runs):
        start = time.perf_counter()
        obs = await observe(make(i), options=options)
        times.append(time.perf_counter() - start)
        assert obs.verdict in ("empty_success", "fail"), obs
    print(json.dumps(times))

anyio.run(main)
"""


def bare(argv: list[str], cwd: str, runs: int) -> list[float]:
    env = {"PATH": "/usr/bin:/bin", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return times[1:]


def through_aexec(kind: str, repo: str, runs: int, options: dict[str, bool]) -> list[float]:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, kind, repo, str(runs), json.dumps(options)],
        capture_output=True,
        text=True,
        check=True,
    )
    return [float(x) for x in json.loads(done.stdout.strip().splitlines()[-1])]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    repo = tempfile.mkdtemp(prefix="aexec-bench-repo-")
    Path(repo, "test_x.py").write_text(TEST)
    figures: dict[str, dict[str, float]] = {}
    try:
        base = {
            "snippet": bare([sys.executable, "-s", "-c", "pass"], repo, args.runs),
            "pytest": bare([sys.executable, "-s", *PYTEST, "test_x.py"], repo, args.runs),
        }
        print(f"{'':16}{'snippet ms':>12}{'overhead':>10}{'pytest ms':>12}{'overhead':>10}")
        row = {k: statistics.mean(v) * 1000 for k, v in base.items()}
        figures["bare subprocess"] = row
        print(f"{'bare subprocess':16}{row['snippet']:12.1f}{'':>10}{row['pytest']:12.1f}")
        for name, options in CONFIGS.items():
            got = {k: statistics.mean(through_aexec(k, repo, args.runs, options)) * 1000 for k in base}
            figures[f"aexec, {name}"] = got
            over = {k: got[k] - row[k] for k in base}
            print(
                f"{'aexec ' + name:16}{got['snippet']:12.1f}{over['snippet']:+9.1f} "
                f"{got['pytest']:12.1f}{over['pytest']:+9.1f} "
            )
    finally:
        shutil.rmtree(repo)
    load = os.getloadavg()[0]
    print(f"(mean of {args.runs} sequential runs each; load average {load:.2f} on {os.cpu_count()} cores)")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": args.runs, "load": load, "ms": figures}, indent=2))


if __name__ == "__main__":
    main()
