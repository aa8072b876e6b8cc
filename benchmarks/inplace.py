"""Issue 30 goal 3: repos that build C extensions in place, measured on real sdists.

    python benchmarks/inplace.py WORKDIR [markupsafe|astropy ...]

For each case: the sdist (``pip download``, into ``WORKDIR/sdists``) unpacked into a git
checkout; its declared environment (``inplace: true``) built cold (the dependencies,
then the extensions in place, timed apart) and again warm; then two candidates graded
through it: *gold*, a harmless patch of a ``.py`` file (no rebuild: the base's build,
carried into the copy, is imported), and *wrong*, a patch of a ``.c`` file that changes
what it computes (rebuilt in the candidate's copy under the boundary: its tests must
fail). They are graded SWE-bench's way on the tests that pass on the base
(``pass_to_pass``, from an unpatched run first): gold resolved, wrong not. Prints one JSON
line per case.

- markupsafe 2.0.1 (Python 3.9): ``_speedups.c``; the wrong patch escapes ``<`` as
  ``&Lt;`` (the tests run against both the native and the C module).
- astropy 5.1 (SWE-bench's spec for 5.1: Python 3.9 and its ``pip_packages``, which
  pin ``setuptools==68.0.0`` — what its ``pre_install`` edit pins for the build): the
  wrong patch doubles a normalized convolution (``convolution/src/convolve.c``).

``benchmarks/inplace_swebench.py`` grades scikit-learn and astropy the way a real
SWE-bench instance is graded: through ``aexec env build`` / ``aexec swebench`` with
``--specs swebench`` (the environment from SWE-bench's own spec table).
"""

from __future__ import annotations

import os
import time
from typing import Any

import anyio

from _sdists import checkout, diff, run_cases
from aexec import Candidate, ExecutionObservation, Policy, observe_many
from aexec._environments.build import ensure
from aexec._environments.inplace import ensure_inplace
from aexec._environments.spec import EnvSpec
from aexec._options import Options

ASTROPY_PACKAGES = (
    "attrs==23.1.0",
    "exceptiongroup==1.1.3",
    "execnet==2.0.2",
    "hypothesis==6.82.6",
    "iniconfig==2.0.0",
    "numpy==1.25.2",
    "packaging==23.1",
    "pluggy==1.3.0",
    "psutil==5.9.5",
    "pyerfa==2.0.0.3",
    "pytest-arraydiff==0.5.0",
    "pytest-astropy-header==0.2.2",
    "pytest-astropy==0.10.0",
    "pytest-cov==4.1.0",
    "pytest-doctestplus==1.0.0",
    "pytest-filter-subpackage==0.1.2",
    "pytest-mock==3.11.1",
    "pytest-openfiles==0.5.0",
    "pytest-remotedata==0.4.0",
    "pytest-xdist==3.3.1",
    "pytest==7.4.0",
    "PyYAML==6.0.1",
    "setuptools==68.0.0",
    "sortedcontainers==2.4.0",
    "tomli==2.0.1",
)

CASES: dict[str, dict[str, Any]] = {
    "markupsafe": {
        "sdist": "markupsafe==2.0.1",
        "env": EnvSpec("3.9", packages=("pytest==7.4.0",), install="none", inplace=True),
        "tests": ("tests/test_escape.py", "tests/test_markupsafe.py"),
        "gold": ("src/markupsafe/__init__.py", "__version__ = ", "# harmless\n__version__ = "),
        "wrong": ("src/markupsafe/_speedups.c", "*outp++ = 'l'; \\", "*outp++ = 'L'; \\"),
    },
    "astropy": {
        "sdist": "astropy==5.1",
        "env": EnvSpec("3.9", packages=tuple(ASTROPY_PACKAGES), install="none", inplace=True),
        "tests": ("astropy/convolution/tests/test_convolve.py",),
        "gold": ("astropy/convolution/convolve.py", "import numpy as np", "import numpy as np  # harmless"),
        "wrong": (
            "astropy/convolution/src/convolve.c",
            "result[result_index]  = top / bot;",
            "result[result_index]  = 2 * top / bot;",
        ),
    },
}


def patch(repo: str, path: str, old: str, new: str) -> str:
    with open(os.path.join(repo, path), encoding="utf-8") as f:
        before = f.read()
    assert old in before, (path, old)
    return diff(path, before, before.replace(old, new))


async def observe_one(cand: Candidate, root: str) -> list[ExecutionObservation]:
    return await observe_many([cand], options=Options(env_dir=root))


def measure(work: str, name: str) -> dict[str, Any]:
    case = CASES[name]
    repo = checkout(work, case["sdist"])
    root = os.path.join(work, "envs")
    spec: EnvSpec = case["env"]
    out: dict[str, Any] = {"case": name}
    t = time.monotonic()
    built = ensure(spec, repo, root)
    out["env_s"] = round(time.monotonic() - t, 2)
    out["env_cached"] = built.cached
    t = time.monotonic()
    inplace = ensure_inplace(built, repo, root)
    out["inplace_cold_s"] = round(time.monotonic() - t, 2)
    out["inplace_cached"] = inplace.cached
    out["artifacts"] = len(inplace.files)
    out["artifact_mib"] = round(
        sum(os.path.getsize(os.path.join(inplace.artifacts, p)) for p in inplace.files) / 2**20, 1
    )
    t = time.monotonic()
    ensure(spec, repo, root)
    ensure_inplace(built, repo, root)
    out["warm_s"] = round(time.monotonic() - t, 3)
    # The base's own run: the tests that pass on it are what gold and wrong are graded on
    # (PASS_TO_PASS; e.g. astropy 5.1's convolve_fft tests fail at base under numpy 1.25).
    base = Candidate(
        "run_suite",
        "test_subset",
        id="base",
        repo=repo,
        tests=case["tests"],
        environment=spec,
        policy=Policy(timeout_s=900.0),
    )
    t = time.monotonic()
    (obs,) = anyio.run(observe_one, base, root)
    passing = tuple(r.test for r in obs.test_results if r.verdict == "passed")
    out["base"] = {
        "seconds": round(time.monotonic() - t, 1),
        "passed": len(passing),
        "of": len(obs.test_results),
    }
    cands = [
        Candidate(
            "run_suite",
            "patch",
            id=role,
            repo=repo,
            patch=patch(repo, *case[role]),
            tests=case["tests"],
            pass_to_pass=passing,
            environment=spec,
            policy=Policy(timeout_s=900.0),
        )
        for role in ("gold", "wrong")
    ]
    for cand in cands:
        t = time.monotonic()
        (obs,) = anyio.run(observe_one, cand, root)
        counts: dict[str, int] = {}
        for r in obs.test_results:
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
        out[str(cand.id)] = {
            "verdict": obs.verdict,
            "resolved": obs.resolved,
            "tests_s": round(obs.duration, 1),
            "seconds": round(time.monotonic() - t, 1),
            "tests": counts,
            "failure": None if obs.failure is None else obs.failure.message[:200],
        }
    return out


def main() -> None:
    run_cases(__doc__, CASES, measure)


if __name__ == "__main__":
    main()
