"""What a session costs (issue 41): open to first ``exec``, ``exec`` of ``true`` per
second, the open of a large repo's session, and of a Django session from a built environment.

    python benchmarks/sessions.py [REPO] [--django DIR [--opens N]]

``REPO``: a large checkout (default: none). ``--django``: a Django checkout, e.g. the
Django 4.2.16 sdist that ``tests/test_runners.py`` and ``benchmarks/runners_corpus.py``
unpack (``~/.cache/aexec-runners/Django-4.2.16``); its session declares an environment
(``EnvSpec(python=<this Python>)``: Django's own dependencies from its ``setup.cfg``),
built (or found built) by a first, untimed session that checks ``import django`` in it;
then ``N`` (default 20) sessions are opened from the cached environment, each timed from
the open to the end of its first ``exec`` of ``true``.

Prints one JSON object. Each figure is measured on this machine, under the full boundary
(run as root): a session's open is its scratch root, the copy of the repo and the
interpreter's check; an ``exec`` is a whole run (namespaces, seccomp, the sealed view,
its own cgroup killed at its end) in that workspace.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import anyio

import aexec
from aexec._environments.spec import EnvSpec


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


async def django(observer: aexec.Observer, repo: str, opens: int) -> dict[str, object]:
    """Open to first ``exec`` of a Django session whose environment is already built."""
    env = EnvSpec(python=f"{sys.version_info.major}.{sys.version_info.minor}")
    t0 = time.perf_counter()
    async with aexec.session(repo=repo, environment=env, observer=observer) as s:
        first = time.perf_counter() - t0
        obs = await s.exec(["python", "-c", "import django, asgiref, sqlparse; print(django.get_version())"])
        assert obs.exit_code == 0, obs.stderr[-2000:]
        version = obs.stdout.strip()
    firsts, opened = [], []
    for _ in range(opens):
        t0 = time.perf_counter()
        async with aexec.session(repo=repo, environment=env, observer=observer) as s:
            t1 = time.perf_counter()
            obs = await s.exec(["true"])
            assert obs.exit_code == 0, obs.stderr
            firsts.append(time.perf_counter() - t0)
            opened.append(t1 - t0)
    files = sum(len(names) for _, _, names in os.walk(repo))
    return {
        "repo": repo,
        "django": version,
        "files": files,
        "first_open_s": round(first, 3),  # builds the environment, or finds it built
        "p50": round(_pct(firsts, 50), 4),
        "p99": round(_pct(firsts, 99), 4),
        "open_p50": round(_pct(opened, 50), 4),
        "n": len(firsts),
    }


async def main(repo: str | None, django_repo: str | None, django_opens: int) -> None:
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
        if django_repo is not None:
            out["django_open_to_first_exec_s"] = await django(observer, django_repo, django_opens)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("repo", nargs="?")
    ap.add_argument("--django", help="a Django checkout (its environment: Django's dependencies)")
    ap.add_argument("--opens", type=int, default=20, help="Django sessions timed (default 20)")
    args = ap.parse_args()
    anyio.run(main, args.repo, args.django, args.opens)
