#!/usr/bin/env python3
"""verl's reward path against ``aexec serve``: every score what SandboxFusion gives (issue 40).

    python benchmarks/serve_verl.py [--scenario mix|storm|over|all] [--copies N] [--json OUT]

Needs ``pip install -e '.[serve]'`` (``httpx`` is a dependency of aexec). A client that
behaves as verl's ``check_correctness`` does (``verl/utils/reward_score/sandbox_fusion``;
its behaviour restated here, none of its code): one ``POST /run_code`` per test case with
``compile_timeout = run_timeout = 10``, ``memory_limit_MB = 1024``, ``files: {}``,
``fetch_files: []``; a read timeout of ``compile_timeout + run_timeout + 10`` s; up to 3
attempts, retrying a ``504`` only (after 1 s, then 2 s); at most 64 requests at once (its
``max_concurrent``). It reads what verl reads (``status``, ``compile_result``,
``run_result.status``, ``return_code``, ``stdout``) and scores as verl does: True/False
(the stdout, right-stripped of newlines, against the expected output), -1 (an API or
sandbox error, a timed-out or refused request), -2 (a runtime error), -3 (a time limit),
-4 (a compile error).

Each case says the score SandboxFusion gives it. Scenarios, each on a fresh
``aexec serve --port 0 --no-cache`` on loopback:

* ``mix`` (default ``--jobs``): right answers (short, and 110 KB of output, past aexec's
  64 KiB default), wrong answers, runtime errors, a Python syntax error, a C++ compile
  error, an infinite loop, a memory hog, bash; ``--copies`` of each, every copy distinct;
* ``storm`` (default ``--jobs``): 40 infinite loops and 40 right answers at once;
* ``over`` (``--jobs 2 --queue 2``): 104 right answers, 100 over what the server holds.

Exit status 1 when any score differs from SandboxFusion's.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import httpx

from aexec.testing import ServeProcess

#: verl's settings: its defaults and its trainer config's ``sandbox_fusion`` block.
TIMEOUT_S = 10
MEMORY_MB = 1024
MAX_CONCURRENT = 64
API_SLACK_S = 10
ATTEMPTS = 3


@attrs.frozen
class Case:
    name: str
    language: str
    code: str
    stdin: str
    expected: str
    #: The score SandboxFusion gives it (verl's reading).
    score: bool | int


BIG = 110_000
CASES = (
    Case("py_right", "python", "a, b = map(int, input().split())\nprint(a + b)", "3 4", "7", True),
    Case("py_big", "python", f"print('x' * {BIG})", "", "x" * BIG, True),
    Case("py_wrong", "python", "a, b = map(int, input().split())\nprint(a - b)", "3 4", "7", False),
    Case("py_runtime", "python", "raise ValueError('boom')", "", "7", -2),
    Case("py_syntax", "python", "print(1", "", "1", -2),
    Case("py_loop", "python", "while True:\n    pass", "", "7", -3),
    Case("py_memory", "python", "x = [0] * (1 << 30)\nprint(len(x))", "", str(1 << 30), -2),
    Case(
        "cpp_right",
        "cpp",
        "#include <iostream>\nint main() { int a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }",
        "3 4",
        "7",
        True,
    ),
    Case("cpp_compile", "cpp", "int main() { return x; }", "", "7", -4),
    Case("bash_right", "bash", "read a b\necho $((a + b))", "3 4", "7", True),
    Case("bash_wrong", "bash", "read a b\necho $((a * b))", "3 4", "7", False),
)
BY_NAME = {c.name: c for c in CASES}


def distinct(case: Case, tag: str) -> Case:
    """The same program, made distinct by a comment (no two requests share a run)."""
    comment = {"python": "#", "bash": "#", "cpp": "//"}[case.language]
    return attrs.evolve(case, code=f"{case.code}\n{comment} {tag}\n")


@attrs.frozen
class Scored:
    case: Case
    score: bool | int
    attempts: int
    http: tuple[int | str, ...]
    seconds: float


def call(
    client: httpx.Client, url: str, case: Case
) -> tuple[dict[str, Any] | None, int, tuple[int | str, ...]]:
    """One test case as verl sends it: the answer (None: verl's API error), the attempts,
    the HTTP status of each."""
    payload = {
        "compile_timeout": TIMEOUT_S,
        "run_timeout": TIMEOUT_S,
        "code": case.code,
        "stdin": case.stdin,
        "memory_limit_MB": MEMORY_MB,
        "language": case.language,
        "files": {},
        "fetch_files": [],
    }
    seen: list[int | str] = []
    for attempt in range(ATTEMPTS):
        try:
            r = client.post(
                f"{url}/run_code",
                content=json.dumps(payload),
                headers={"Content-Type": "application/json", "Accept": "application/json"},
                timeout=TIMEOUT_S + TIMEOUT_S + API_SLACK_S,
            )
        except httpx.HTTPError as e:
            seen.append(type(e).__name__)
            return None, attempt + 1, tuple(seen)
        seen.append(r.status_code)
        if r.status_code == 504:
            if attempt < ATTEMPTS - 1:
                time.sleep(attempt + 1)
            continue
        if r.status_code >= 400:
            return None, attempt + 1, tuple(seen)
        return r.json(), attempt + 1, tuple(seen)
    return None, ATTEMPTS, tuple(seen)


def score(answer: dict[str, Any] | None, expected: str) -> bool | int:
    """verl's score of one answer, from the fields verl reads."""
    if not answer:
        return -1
    status = answer.get("status")
    compiled, run = answer.get("compile_result"), answer.get("run_result")
    if status == "Failed":
        if compiled and (
            compiled.get("status") in ("Error", "TimeLimitExceeded")
            or (compiled.get("status") == "Finished" and compiled.get("return_code") != 0)
        ):
            return -4
        if not run:
            return -1
        if run.get("status") == "TimeLimitExceeded":
            return -3
        if run.get("status") == "Error" or (run.get("status") == "Finished" and run.get("return_code") != 0):
            return -2
        return -1
    if status == "Success":
        if not run or run.get("status") != "Finished":
            return -1
        return str(run.get("stdout") or "").rstrip("\n") == expected.rstrip("\n")
    return -1


def drive(url: str, cases: list[Case], concurrency: int = MAX_CONCURRENT) -> list[Scored]:
    """Every case at verl's concurrency; each scored as verl scores it."""
    gate = threading.Semaphore(concurrency)

    def one(case: Case) -> Scored:
        with gate, httpx.Client() as client:
            start = time.perf_counter()
            answer, attempts, http = call(client, url, case)
            return Scored(case, score(answer, case.expected), attempts, http, time.perf_counter() - start)

    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        return list(pool.map(one, cases))


def scenario(name: str, copies: int) -> tuple[list[str], list[Case]]:
    """The server's flags and the cases of a scenario."""
    if name == "mix":
        return [], [distinct(c, f"{c.name}-{i}") for i in range(copies) for c in CASES]
    if name == "storm":
        loops = [distinct(BY_NAME["py_loop"], f"loop-{i}") for i in range(40)]
        right = [distinct(BY_NAME["py_right"], f"right-{i}") for i in range(40)]
        return [], [c for pair in zip(loops, right, strict=True) for c in pair]
    if name == "over":
        return ["--jobs", "2", "--queue", "2"], [
            distinct(BY_NAME["py_right"], f"over-{i}") for i in range(104)
        ]
    raise ValueError(name)


def report(name: str, results: list[Scored], wall: float, metrics: dict[str, Any]) -> dict[str, Any]:
    wrong = [r for r in results if r.score != r.case.score]
    http = Counter(h for r in results for h in r.http)
    by_case: dict[str, Counter[str]] = {}
    for r in results:
        by_case.setdefault(r.case.name, Counter())[str(r.score)] += 1
    print(
        f"{name}: {len(results)} requests in {wall:.1f} s; {len(results) - len(wrong)} scored as SandboxFusion"
        f" scores them; HTTP {dict(sorted(http.items(), key=str))};"
        f" retried {sum(r.attempts > 1 for r in results)}; slowest {max(r.seconds for r in results):.1f} s"
    )
    for case, scores in sorted(by_case.items()):
        print(f"  {case:12} expected {BY_NAME[case].score!s:5}  got {dict(scores)}")
    for r in wrong[:10]:
        print(
            f"  WRONG {r.case.name}: {r.score} (expected {r.case.score}), attempts {r.attempts}, http {r.http}"
        )
    return {
        "scenario": name,
        "requests": len(results),
        "right": len(results) - len(wrong),
        "wall_s": round(wall, 1),
        "http": {str(k): v for k, v in http.items()},
        "retried": sum(r.attempts > 1 for r in results),
        "slowest_s": round(max(r.seconds for r in results), 1),
        "by_case": {k: dict(v) for k, v in by_case.items()},
        "server": metrics,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", choices=["mix", "storm", "over", "all"], default="all")
    p.add_argument("--copies", type=int, default=8, help="distinct copies of each case in `mix` (default 8)")
    p.add_argument(
        "--jobs", type=int, default=None, help="the server's --jobs for mix and storm (default: its own)"
    )
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()
    out = []
    for name in ("mix", "storm", "over") if args.scenario == "all" else (args.scenario,):
        flags, cases = scenario(name, args.copies)
        if args.jobs is not None and name != "over":
            flags = ["--jobs", str(args.jobs)]
        with ServeProcess(*flags) as server:
            start = time.perf_counter()
            results = drive(server.url, cases)
            out.append(report(name, results, time.perf_counter() - start, server.metrics()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if all(o["right"] == o["requests"] for o in out) else 1


if __name__ == "__main__":
    sys.exit(main())
