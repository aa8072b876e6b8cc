"""What confining a build costs (issue 30, goal 6): a cold build (empty cache: uv fetches
from PyPI), a new environment over a warm uv cache, and a cache hit, each ``--runs`` times.

    python benchmarks/env_confine_cost.py [--runs 3]

Run it with ``PYTHONPATH`` at another checkout's ``src`` to measure that one.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from aexec._environments.build import ensure
from aexec._environments.spec import EnvSpec

SETUP = "from setuptools import setup\nsetup(name='proj', version='0', install_requires=['six'])\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    base = Path(tempfile.mkdtemp(prefix="aexec-confine-bench-"))
    repo = base / "repo"
    repo.mkdir()
    (repo / "setup.py").write_text(SETUP)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    times: dict[str, list[float]] = {"cold": [], "new env, warm uv cache": [], "cache hit": []}
    for i in range(runs):
        root = base / f"envs{i}"
        spec = EnvSpec("3.11", exclude_newer="2025-01-01T00:00:00Z")
        start = time.monotonic()
        built = ensure(spec, str(repo), str(root))
        times["cold"].append(time.monotonic() - start)
        for part in ("envs", "resolved"):
            shutil.rmtree(root / part)
        start = time.monotonic()
        ensure(spec, str(repo), str(root))
        times["new env, warm uv cache"].append(time.monotonic() - start)
        start = time.monotonic()
        assert ensure(spec, str(repo), str(root)).key == built.key
        times["cache hit"].append(time.monotonic() - start)
    for name, values in times.items():
        print(f"{name:24} median {statistics.median(values):7.3f} s  all {[round(v, 3) for v in values]}")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
