#!/usr/bin/env python3
"""What ``aexec serve`` costs per request, and a bounded load test (issue 31).

    python benchmarks/serve.py [--snippets N] [--jobs J] [--load N] [--clients C] [--json OUT]

Needs ``pip install -e '.[serve]'`` (and ``httpx``, a dependency of aexec). Starts
``aexec serve --no-cache --jobs J`` on a free loopback port with a private TMPDIR, then,
in one run, on the same ``N`` distinct snippets (Python, JavaScript, C++, Rust, Java:
passes, crashes, compile errors):

* **sequential latency** — each snippet alone, through the library (``aexec.observe``
  with one shared observer, the call the server makes) and then through the server
  (``POST /run_code``, SandboxFusion's API), in turn: p50/p99 of each, and the median of
  the per-snippet differences, the service's own cost per request (HTTP, JSON, the
  mapping);
* **throughput** — the same snippets with ``J`` concurrent clients through the server,
  against ``aexec observe CASES.jsonl --no-cache --jobs J`` (the command line, which
  includes its own start-up of about a second): requests/s;
* **load** — ``--load`` requests (default 2,000) from ``--clients`` concurrent clients
  (default 64), mixed languages, with timeouts and crashes; a ``429`` is retried after
  its ``Retry-After``. Every request must get exactly one answer, with the status its
  snippet calls for. After SIGTERM, nothing may be left: no process of the server's
  tree, no mount under its TMPDIR, no run cgroup of its pid, no scratch directory.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import aexec  # noqa: E402
from aexec._boundary.cgroups import own_cgroups  # noqa: E402
from aexec._serve import sandboxfusion  # noqa: E402

#: (SandboxFusion language, code template, the status it must get); ``{i}`` makes each distinct.
KINDS: dict[str, tuple[str, str, str]] = {
    "py_pass": ("python", "print({i} * 2)", "Success"),
    "py_crash": ("python", "raise ValueError({i})", "Failed"),
    "py_syntax": ("python", "print({i}", "Failed"),
    "js_pass": ("nodejs", "console.log({i} * 2)", "Success"),
    "cpp_pass": ("cpp", '#include <cstdio>\nint main() {{ printf("%d\\n", {i} * 2); }}', "Success"),
    "cpp_crash": ("cpp", "int main() {{ int *p = nullptr; *p = {i}; return *p; }}", "Failed"),
    "rust_pass": ("rust", 'fn main() {{ println!("{{}}", {i} * 2); }}', "Success"),
    "java_compile": (
        "java",
        "public class Main {{ public static void main(String[] a) {{ int x = {i} }} }}",
        "Failed",
    ),
    "py_timeout": ("python", "while True: x = {i}", "Failed"),
}
#: One cycle of the comparison set, and of the load (timeouts only in the load).
COMPARE = ["py_pass"] * 5 + ["py_crash", "py_syntax", "js_pass", "js_pass", "cpp_pass"] * 1 + ["rust_pass"]
LOAD = ["py_pass"] * 30 + ["py_crash"] * 6 + ["py_syntax"] * 3 + ["js_pass"] * 5 + ["py_timeout"] * 2
LOAD_RARE = ["cpp_pass", "cpp_crash", "rust_pass", "java_compile"]  # one each per 100


def snippet(kind: str, i: int) -> dict[str, Any]:
    language, code, _ = KINDS[kind]
    body: dict[str, Any] = {"code": code.format(i=i), "language": language, "run_timeout": 10}
    if kind == "py_timeout":
        body["run_timeout"] = 0.5
    return body


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def start(jobs: int, tmp: str, queue: int | None) -> tuple[subprocess.Popen[str], str]:
    argv = [sys.executable, "-m", "aexec", "serve", "--port", "0", "--no-cache", "--jobs", str(jobs)]
    argv += ["--grace", "5", *(["--queue", str(queue)] if queue is not None else [])]
    proc = subprocess.Popen(
        argv,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": tmp},
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if "listening on " not in line:
        raise SystemExit(f"serve did not start: {line}{proc.stderr.read()}")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
    return proc, line.split("listening on ", 1)[1].split()[0]


async def post(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[dict[str, Any], float, int]:
    """One answer (429s retried after Retry-After): the answer, seconds, retries."""
    t0 = time.perf_counter()
    retries = 0
    while True:
        r = await client.post("/run_code", json=body)
        if r.status_code == 429:
            retries += 1
            await anyio.sleep(float(r.headers.get("retry-after", "1")))
            continue
        r.raise_for_status()
        return r.json(), time.perf_counter() - t0, retries


async def through_server(url: str, bodies: list[dict[str, Any]], clients: int) -> dict[str, Any]:
    answers: list[Any] = [None] * len(bodies)
    latencies: list[float] = []
    retries = 0
    next_index = iter(range(len(bodies)))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def worker() -> None:
            nonlocal retries
            for i in next_index:
                answers[i], seconds, tried = await post(client, bodies[i])
                latencies.append(seconds)
                retries += tried

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(clients):
                tg.start_soon(worker)
        wall = time.perf_counter() - t0
    return {
        "answers": answers,
        "wall_s": round(wall, 2),
        "rps": round(len(bodies) / wall, 2),
        "p50_ms": round(pct(latencies, 0.5) * 1000, 1),
        "p99_ms": round(pct(latencies, 0.99) * 1000, 1),
        "retried_429": retries,
    }


async def sequential(url: str, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """Each snippet alone, through the library and through the server in turn (so both
    see the same machine, whatever else it is doing): p50/p99 of each."""
    library, server = [], []
    async with aexec.observer(aexec.Options()) as own, httpx.AsyncClient(base_url=url, timeout=600) as client:
        warm = {"code": "pass", "language": "python"}
        await aexec.observe(sandboxfusion.request(warm), observer=own)
        await post(client, warm)
        for body in bodies:
            t0 = time.perf_counter()
            await aexec.observe(sandboxfusion.request(body), observer=own)
            library.append(time.perf_counter() - t0)
            server.append((await post(client, body))[1])

    def summary(values: list[float]) -> dict[str, float]:
        return {"p50_ms": round(pct(values, 0.5) * 1000, 1), "p99_ms": round(pct(values, 0.99) * 1000, 1)}

    overhead = [s - lib for s, lib in zip(server, library, strict=True)]
    return {
        "library": summary(library),
        "server": summary(server),
        "overhead_p50_ms": round(pct(overhead, 0.5) * 1000, 1),
    }


def through_cli(bodies: list[dict[str, Any]], jobs: int, tmp: str) -> dict[str, Any]:
    cases = Path(tmp) / "cases.jsonl"
    with cases.open("w") as f:
        for body in bodies:
            f.write(json.dumps(sandboxfusion_to_contract(body)) + "\n")
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "aexec",
            "observe",
            str(cases),
            "-o",
            os.devnull,
            "--no-cache",
            "--jobs",
            str(jobs),
        ],
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 2), "rps": round(len(bodies) / wall, 2)}


def sandboxfusion_to_contract(body: dict[str, Any]) -> dict[str, Any]:
    c = sandboxfusion.request(body)
    return {
        "request_type": "run_entry",
        "artifact_shape": "snippet",
        "code": c.code,
        "language": c.language,
        "policy": {"timeout_s": c.policy.timeout_s},
    }


def leftovers(pid: int, tmp: str, tree: list[int]) -> dict[str, Any]:
    alive = []
    for p in tree:
        try:
            with open(f"/proc/{p}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(p)
        except OSError:
            continue
    with open("/proc/mounts") as f:
        mounts = [line.split()[1] for line in f if tmp in line]
    cgroups = own_cgroups()
    runs = [
        name
        for root in (cgroups.roots() if cgroups is not None else [])
        for name in os.listdir(root)
        if name.startswith(f"aexec-{pid}-")
    ]
    scratch = [n for n in os.listdir(tmp) if n.startswith("aexec")]
    return {"processes": alive, "mounts": mounts, "cgroups": runs, "scratch_dirs": scratch}


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--snippets", type=int, default=120)
    p.add_argument("--jobs", type=int, default=4 * (os.cpu_count() or 1))
    p.add_argument("--load", type=int, default=2000)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--queue", type=int, default=None, help="the server's --queue (default: its own)")
    p.add_argument("--load-only", action="store_true", help="only the load test")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    compare = [snippet(COMPARE[i % len(COMPARE)], i) for i in range(args.snippets)]
    cycle = LOAD * 2 + LOAD_RARE  # 100 requests
    kinds = [cycle[i % len(cycle)] for i in range(args.load)]
    load = [snippet(k, 100_000 + i) for i, k in enumerate(kinds)]
    report: dict[str, Any] = {"cores": os.cpu_count(), "jobs": args.jobs, "snippets": args.snippets}
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        if not args.load_only:
            report["cli_observe"] = through_cli(compare, args.jobs, tmp)
        scratch = os.path.join(tmp, "scratch")
        os.mkdir(scratch)
        proc, url = start(args.jobs, scratch, args.queue)
        try:
            if not args.load_only:
                report["sequential"] = anyio.run(sequential, url, compare)
                conc = anyio.run(through_server, url, compare, args.jobs)
                report["server_concurrent"] = {k: v for k, v in conc.items() if k != "answers"}
            result = anyio.run(through_server, url, load, args.clients)
            answers = result.pop("answers")
            wrong = [
                (kinds[i], a["status"] if a else None)
                for i, a in enumerate(answers)
                if a is None or a["status"] != KINDS[kinds[i]][2]
            ]
            statuses: dict[str, int] = {}
            for a in answers:
                statuses[a["status"]] = statuses.get(a["status"], 0) + 1
            result.update(
                requests=len(load), clients=args.clients, answered=sum(a is not None for a in answers)
            )
            result.update(by_status=statuses, unexpected=wrong[:10], unexpected_count=len(wrong))
            result["metrics"] = httpx.get(f"{url}/metrics").json()
            tree = descendants(proc.pid)
            result["tree_before_stop"] = len(tree)
            report["load"] = result
        finally:
            proc.send_signal(signal.SIGTERM)
            report["exit_status"] = proc.wait(60)
        report["leftovers"] = leftovers(proc.pid, scratch, tree)
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    clean = not any(report["leftovers"].values()) and report["exit_status"] == 0
    return 0 if clean and report["load"]["unexpected_count"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
