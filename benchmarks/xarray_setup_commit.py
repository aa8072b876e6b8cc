"""Real xarray instances graded with ``aexec swebench --specs swebench`` from checkouts
cloned with their history, as SWE-bench clones them: the environment is read at each
instance's ``environment_setup_commit`` (issue 43).

For each case: a clone of pydata/xarray (``XARRAY``: a git directory with the history,
e.g. the ``fetch`` mirror) at the instance's base commit; the gold patch and the
``test_patch`` are the non-test and the test diffs of the upstream fix commit; the
FAIL_TO_PASS ids are the dataset's. PASS_TO_PASS is made here as SWE-bench's validation
makes it: the tests of the test file that pass at the base with the ``test_patch``, run
in the built environment. Then three predictions are graded: gold, a no-op patch (a
comment) and the empty patch.

Run: ``python benchmarks/xarray_setup_commit.py XARRAY WORKDIR [ID ...]`` (``AEXEC_ENV_DIR``
defaults to ``WORKDIR/envs``: the first run builds the environments, cold).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _sdists import help_asked

#: id -> (version, base commit, fix commit, environment_setup_commit, test file, FAIL_TO_PASS)
CASES = {
    "pydata__xarray-3151": (
        "0.12",
        "86799b78ae271d9f68a2ad5eb6aa15916f0b19ab",
        "e5205347a5f6dcc60fee1baff00709b9e22baac5",
        "1c198a191127c601d091213c4b3292a8bb3054e1",
        "xarray/tests/test_combine.py",
        ["xarray/tests/test_combine.py::TestCombineAuto::test_combine_leaving_bystander_dimensions"],
    ),
    "pydata__xarray-4075": (
        "0.12",
        "19b088636eb7d3f65ab7a1046ac672e0689371d8",
        "f3ffab7ee4593c97e2ae63f22140d0a823a64b6d",
        "1c198a191127c601d091213c4b3292a8bb3054e1",
        "xarray/tests/test_weighted.py",
        [
            "xarray/tests/test_weighted.py::test_weighted_sum_of_weights_bool",
            "xarray/tests/test_weighted.py::test_weighted_mean_bool",
        ],
    ),
    "pydata__xarray-6599": (
        "2022.03",
        "6bb2b855498b5c68d7cca8cceb710365d58e6048",
        "fc282d5979473a31529f09204d4811cfd7e5cd63",
        "d7931f9014a26e712ff5f30c4082cf0261f045d3",
        "xarray/tests/test_computation.py",
        ["xarray/tests/test_computation.py::test_polyval[timedelta-False]"],
    ),
    "pydata__xarray-7233": (
        "2022.09",
        "51d37d1be95547059251076b3fadaa317750aab3",
        "e1936a98059ae29da2861f58a7aff4a56302aac1",
        "087ebbb78668bdf5d2d41c3b2553e3f29ce75be1",
        "xarray/tests/test_coarsen.py",
        ["xarray/tests/test_coarsen.py::TestCoarsenConstruct::test_coarsen_construct_keeps_all_coords"],
    ),
}
NOOP = "# no-op\n"


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def _aexec(work: Path, preds: Path, instances: Path, out: Path) -> float:
    start = time.monotonic()
    argv = [sys.executable, "-m", "aexec", "swebench", str(preds), str(instances), "-o", str(out)]
    argv += ["--specs", "swebench", "--no-cache", "--jobs", "1"]
    env = {**os.environ, "AEXEC_ENV_DIR": os.environ.get("AEXEC_ENV_DIR", str(work / "envs"))}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work)
    (out.parent / (out.name + ".log")).write_text(done.stderr)
    return time.monotonic() - start


def case(xarray: str, work: Path, ident: str) -> dict[str, object]:
    version, base, fix, setup, test_file, f2p = CASES[ident]
    repo = work / "co" / ident
    if not repo.exists():
        subprocess.run(["git", "clone", "-q", "--no-checkout", xarray, str(repo)], check=True)
        _git(str(repo), "checkout", "-q", base)
    gold = _git(xarray, "diff", base, fix, "--", "xarray/core", "xarray/coding", "xarray/backends")
    test_patch = _git(xarray, "diff", base, fix, "--", "xarray/tests")
    first = next(p for p in gold.split("diff --git a/")[1:]).split(" ")[0]
    noop = f"diff --git a/{first} b/{first}\n--- a/{first}\n+++ b/{first}\n@@ -1 +1,2 @@\n+{NOOP}"
    noop += " " + (repo / first).read_text().splitlines()[0] + "\n"
    row = {"instance_id": ident, "repo": f"co/{ident}", "version": version, "base_commit": base,
           "environment_setup_commit": setup, "test_patch": test_patch, "FAIL_TO_PASS": json.dumps(f2p),
           "PASS_TO_PASS": "[]"}  # fmt: skip
    out: dict[str, object] = {"id": ident}
    for name, patch in (("gold", gold), ("noop", noop), ("empty", "")):
        (work / f"pred-{name}-{ident}.jsonl").write_text(
            json.dumps({"instance_id": ident, "model_name_or_path": name, "model_patch": patch}) + "\n"
        )
    instances = work / f"instances-{ident}.jsonl"
    instances.write_text(json.dumps(row) + "\n")
    out["gold_f2p_only_s"] = _aexec(
        work, work / f"pred-gold-{ident}.jsonl", instances, work / f"f2p-{ident}.json"
    )
    report = json.loads((work / f"f2p-{ident}.json").read_text())["instances"][ident]
    python = report["environment"]["toolchain"]
    # PASS_TO_PASS as SWE-bench's validation makes it: what passes at the base with the test patch.
    scratch = work / "p2p" / ident
    if not scratch.exists():
        subprocess.run(
            ["git", "clone", "-q", "--no-checkout", "--shared", str(repo), str(scratch)], check=True
        )
        _git(str(scratch), "checkout", "-q", base)
        subprocess.run(["git", "-C", str(scratch), "apply"], input=test_patch, text=True, check=True)
    ran = subprocess.run(
        [python, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", test_file],
        capture_output=True, text=True, cwd=scratch,
    )  # fmt: skip
    p2p = [ln.split()[1] for ln in ran.stdout.splitlines() if ln.startswith("PASSED ")]
    row["PASS_TO_PASS"] = json.dumps([t for t in p2p if t not in f2p])
    instances.write_text(json.dumps(row) + "\n")
    out["p2p"] = len(json.loads(str(row["PASS_TO_PASS"])))
    for name in ("gold", "noop", "empty"):
        seconds = _aexec(work, work / f"pred-{name}-{ident}.jsonl", instances, work / f"{name}-{ident}.json")
        graded = json.loads((work / f"{name}-{ident}.json").read_text())
        detail = graded["instances"].get(ident, {})
        out[name] = {
            "resolved": ident in graded["resolved_ids"],
            "empty": ident in graded["empty_patch_ids"],
            "verdict": detail.get("verdict"),
            "tests_status": {
                k: {s: len(v) for s, v in d.items()} for k, d in detail.get("tests_status", {}).items()
            },
            "seconds": round(seconds, 1),
        }
    out["runner_reason"] = report.get("runner_reason")
    return out


def main() -> None:
    if help_asked(__doc__, sys.argv[1:]) or len(sys.argv) < 3:
        return
    xarray, work = sys.argv[1], Path(sys.argv[2]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    for ident in sys.argv[3:] or list(CASES):
        print(json.dumps(case(xarray, work, ident), indent=1))


if __name__ == "__main__":
    main()
