"""What a session costs (issue 41): open to first ``exec``, ``exec`` of ``true`` per
second, and the open of a large repo's session.

    python benchmarks/sessions.py [REPO]        # REPO: a large checkout (default: none)

Prints one JSON object. Each figure is measured on this machine, under the full boundary
(run as root): a session's open is its scratch root, the copy of the repo and the
interpreter's check; an ``exec`` is a whole run (namespaces, seccomp, the sealed view,
its own cgroup killed at its end) in that workspace.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import anyio

import aexec


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


async def main(repo: str | None) -> None:
    out: dict[str, object] = {}
    async with aexec.observer() as observer:
        async with aexec.session(observer=observer) as s:  # warm up: probe, fork server
            await s.exec(["true"])
        firsts, opens = [], []
        for _ in range(30):
            t0 = time.perf_counter()
            async with aexec.session(observer=observer) as s:
                t1 = time.perf_counter()
                obs = await s.exec(["true"])
                assert obs.exit_code == 0, obs.stderr
                firsts.append(time.perf_counter() - t0)
                opens.append(t1 - t0)
        out["open_to_first_exec_s"] = {
            "p50": round(_pct(firsts, 50), 4),
            "p99": round(_pct(firsts, 99), 4),
            "open_p50": round(_pct(opens, 50), 4),
            "n": len(firsts),
        }
        async with aexec.session(observer=observer) as s:
            n = 50
            t0 = time.perf_counter()
            for _ in range(n):
                await s.exec(["true"])
            out["exec_true_per_s_one_session"] = round(n / (time.perf_counter() - t0), 1)
        sessions, each = 4, 20

        async def one() -> None:
            async with aexec.session(observer=observer) as s:
                for _ in range(each):
                    await s.exec(["true"])

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(sessions):
                tg.start_soon(one)
        out["exec_true_per_s_4_sessions"] = round(sessions * each / (time.perf_counter() - t0), 1)
        if repo is not None:
            opened = []
            for _ in range(5):
                t0 = time.perf_counter()
                async with aexec.session(repo=repo, observer=observer) as s:
                    opened.append(time.perf_counter() - t0)
                    await s.exec(["true"])
            out["repo_open_s"] = {"repo": repo, "median": round(statistics.median(opened), 3), "n": 5}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else None)
