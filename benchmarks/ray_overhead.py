#!/usr/bin/env python3
"""What Ray adds per candidate on one machine: ``observe_many_ray`` vs ``observe_many``.

    python benchmarks/ray_overhead.py [--cases FILE] [--snippets N] [--cpus N] [--latency K]
                                      [--repeat R] [--cache] [--json OUT] [--dump DIR]

Needs ``pip install -e '.[ray]'``. Starts a local Ray (``--cpus`` CPUs, on 127.0.0.2,
started here and shut down at the end), then, in the same process and on the same
candidates, alternating local and Ray runs so both see the same machine:

* **latency** — ``K`` times one trivial snippet alone, each a distinct candidate:
  the median wall time of one call, locally and through Ray; the difference is the
  fixed cost Ray adds to one candidate (submit, schedule, a worker's own aexec session,
  the result back).
* **batch** — the requests of ``--cases`` (default ``examples/cases.jsonl``: suites,
  patches, timeouts, a memory cap) plus ``N`` distinct trivial snippets, ``R`` times
  each way, with no cache (``--cache``: a fresh cache dir per run, as the CLI has by
  default): median wall time, per-candidate time, the ratio, and whether every
  observation is identical minus timings, paths and ``cache_hit`` — and, with
  ``R`` ≥ 2, how many two local runs agree on (the candidates' own run-to-run
  nondeterminism: the floor for the Ray comparison).

Ray's own start-up (``ray.init``) and the first tasks' worker start-up are reported
separately (``startup_s``, ``warmup_s``) and kept out of both measurements.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import structlog

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import aexec  # noqa: E402
from aexec import Candidate, ExecutionObservation, observe_many, observe_many_ray  # noqa: E402
from throughput import read_candidates  # noqa: E402

PYTEST_TIME = re.compile(r"\bin \d+\.\d+s\b")
ADDRESS = re.compile(r"\b0?x[0-9a-f]{6,}\b")


def comparable(obs: ExecutionObservation) -> Any:
    """The observation minus timings, paths, measurements and ``cache_hit``."""
    root = obs.environment.fs_boundary.scratch_root
    data = aexec.unstructure(obs)
    for name in ("duration", "cwd", "cache_hit", "resource_usage"):
        data.pop(name)
    data["environment"]["fs_boundary"].pop("scratch_root")
    for f in [data["failure"], *data["failures"]]:
        if f is not None:
            f.pop("duration")
    text = json.dumps(data, sort_keys=True)
    if root:
        text = text.replace(root, "<scratch>")
    return json.loads(ADDRESS.sub("0x<addr>", PYTEST_TIME.sub("in <t>s", text)))


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """The paths at which two comparable observations differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [path]


def compare(left: list[ExecutionObservation], right: list[ExecutionObservation]) -> list[dict[str, Any]]:
    """Every candidate whose two observations differ, with where."""
    out = []
    for x, y in zip(left, right, strict=True):
        where = differences(comparable(x), comparable(y))
        if where:
            out.append({"id": x.id, "fields": where[:8]})
    return out


def snippets(n: int, tag: str) -> list[Candidate]:
    return [Candidate("run_entry", "snippet", id=f"{tag}{i}", code=f"print({i}) # {tag}") for i in range(n)]


async def timed(fn: Any, cands: list[Candidate], **kw: Any) -> tuple[float, list[ExecutionObservation]]:
    start = time.perf_counter()
    got = await fn(cands, **kw)
    return time.perf_counter() - start, got


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    out: dict[str, Any] = {"cpus": args.cpus, "machine_cpus": os.cpu_count()}
    start = time.perf_counter()
    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, _node_ip_address="127.0.0.2")
    out["startup_s"] = round(time.perf_counter() - start, 3)
    try:
        out["warmup_s"] = round((await timed(observe_many_ray, snippets(2 * args.cpus, "warm")))[0], 3)
        local_lat, ray_lat = [], []
        for k in range(args.latency):
            local_lat.append((await timed(observe_many, snippets(1, f"lat-local-{k}-")))[0])
            ray_lat.append((await timed(observe_many_ray, snippets(1, f"lat-ray-{k}-")))[0])
        if args.latency:
            lo, ra = statistics.median(local_lat), statistics.median(ray_lat)
            out["latency"] = {
                "runs": args.latency,
                "local_s": round(lo, 4),
                "ray_s": round(ra, 4),
                "added_s": round(ra - lo, 4),
                "ratio": round(ra / lo, 2),
            }
        cases = read_candidates(args.cases) + snippets(args.snippets, "batch")
        n = len(cases)
        local_walls, ray_walls, differ, locals_ = [], [], [], []
        for r in range(args.repeat):
            with tempfile.TemporaryDirectory() as lc, tempfile.TemporaryDirectory() as rc:
                lw, local = await timed(
                    observe_many, cases, limit=args.cpus, cache_dir=lc if args.cache else None
                )
                rw, remote = await timed(observe_many_ray, cases, cache_dir=rc if args.cache else None)
            local_walls.append(lw)
            ray_walls.append(rw)
            differ.append(compare(remote, local))
            locals_.append(local)
            if args.dump is not None:
                args.dump.mkdir(parents=True, exist_ok=True)
                for name, obs in (("local", local), ("ray", remote)):
                    text = "".join(aexec.dumps(o) + "\n" for o in obs)
                    (args.dump / f"{name}-{r}.jsonl").write_text(text)
        lw, rw = statistics.median(local_walls), statistics.median(ray_walls)
        out["batch"] = {
            "cases": str(args.cases),
            "fresh_cache_dir": args.cache,
            "candidates": n,
            "runs": args.repeat,
            "local_wall_s": round(lw, 3),
            "ray_wall_s": round(rw, 3),
            "local_per_candidate_s": round(lw / n, 4),
            "ray_per_candidate_s": round(rw / n, 4),
            "added_per_candidate_s": round((rw - lw) / n, 4),
            "ratio": round(rw / lw, 2),
            "identical_observations": n - max(map(len, differ)),
            "ray_vs_local_differences": differ[0],
        }
        if len(locals_) > 1:  # how much two local runs differ: the floor for the above
            again = compare(locals_[1], locals_[0])
            out["batch"]["local_vs_local_identical"] = n - len(again)
            out["batch"]["local_vs_local_differences"] = again
    finally:
        ray.shutdown()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=Path, default=HERE.parent / "examples" / "cases.jsonl")
    p.add_argument("--snippets", type=int, default=40, help="distinct trivial snippets added to the batch")
    p.add_argument(
        "--cpus", type=int, default=os.cpu_count() or 1, help="CPUs of the local Ray, and local limit"
    )
    p.add_argument("--latency", type=int, default=10, help="single-candidate calls each way")
    p.add_argument("--repeat", type=int, default=2, help="batch runs each way")
    p.add_argument("--json", type=Path, default=None, help="also write the result here")
    p.add_argument(
        "--cache",
        action="store_true",
        help="give each batch run a fresh cache dir (as the CLI does by default): Ray tasks on one node then share FAIL_TO_PASS before-runs",
    )
    p.add_argument("--dump", type=Path, default=None, help="write every run's observations here (JSONL)")
    args = p.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local Ray on loopback
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    result = anyio.run(bench, args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    b = result["batch"]
    ok = b["identical_observations"] == b["candidates"]
    if not ok:
        print(
            f"ray_overhead: only {b['identical_observations']}/{b['candidates']} identical", file=sys.stderr
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
