"""The five real SWE-bench Verified instances of ``../shared/swebench-dev`` (issue 39), built
and graded as a new user would: the dataset rows, no ``python``, ``--specs swebench``.

    python benchmarks/swebench_dev.py WORKDIR [SHARED_DIR]

``SHARED_DIR`` defaults to ``<repo root>/../shared/swebench-dev``. The checkouts are
unpacked into ``WORKDIR/checkouts``; the instances file is the rows with ``repo`` the
checkout's path (``repo_name`` the dataset's ``repo``). With a fresh environments root
(``WORKDIR/envs``, as ``AEXEC_ENV_DIR``): ``aexec env build --specs swebench`` cold,
then warm; then ``aexec swebench --specs swebench --no-cache`` of three prediction
files: *gold* (the row's ``patch``), *noop* (a comment added to the gold patch's first
file: run, and must not resolve) and *empty* (``""``: not run, never resolved).
Prints one JSON object: the times and, per prediction set, what each instance got.
"""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path
from typing import Any

from _sdists import aexec, help_asked

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "swebench-dev"


def _noop(checkout: Path, patch: str) -> str:
    """A diff adding a comment at the end of the first ``.py`` file the gold patch touches."""
    path = next(line[6:] for line in patch.splitlines() if line.startswith("+++ b/") and line.endswith(".py"))
    lines = (checkout / path).read_text().splitlines()
    n = len(lines)
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
        f"@@ -{n},1 +{n},2 @@\n {lines[-1]}\n+# aexec: a no-op\n"
    )


def prepare(work: Path, shared: Path) -> tuple[Path, list[dict[str, Any]]]:
    checkouts = work / "checkouts"
    rows = [json.loads(line) for line in (shared / "instances.jsonl").read_text().splitlines()]
    for row in rows:
        if not (checkouts / row["instance_id"]).is_dir():
            with tarfile.open(shared / f"{row['instance_id']}.tar.xz") as tar:
                tar.extractall(checkouts, filter="tar")
    instances = [
        {**row, "repo": str(checkouts / row["instance_id"]), "repo_name": row["repo"]} for row in rows
    ]
    path = work / "instances.json"
    path.write_text(json.dumps(instances, indent=1))
    for name in ("gold", "noop", "empty"):
        preds = []
        for row in rows:
            patch = {
                "gold": row["patch"],
                "noop": _noop(checkouts / row["instance_id"], row["patch"]),
                "empty": "",
            }[name]
            preds.append(
                {"instance_id": row["instance_id"], "model_name_or_path": name, "model_patch": patch}
            )
        (work / f"preds-{name}.json").write_text(json.dumps(preds, indent=1))
    return path, rows


def main() -> None:
    if help_asked(__doc__, sys.argv[1:]) or len(sys.argv) < 2:
        print((__doc__ or "").strip())
        return
    work = Path(sys.argv[1]).resolve()
    shared = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else SHARED
    work.mkdir(parents=True, exist_ok=True)
    ipath, rows = prepare(work, shared)
    print(json.dumps(measure(work, ipath, rows), indent=1))


def measure(work: Path, ipath: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Build the instances' environments cold then warm (``WORK/envs``), then grade
    ``WORK/preds-{gold,noop,empty}.json``: the times and what each instance got."""
    root = str(work / "envs")
    out: dict[str, Any] = {}
    for phase in ("cold", "warm"):
        seconds, done = aexec("env", "build", str(ipath), "--specs", "swebench", "--jobs", "1", root=root)
        (work / f"build-{phase}.log").write_text(done.stderr)
        out[f"build_{phase}_s"] = round(seconds, 1)
        out[f"build_{phase}"] = [ln for ln in done.stderr.splitlines() if ln.startswith("aexec env:")]
    for name in ("gold", "noop", "empty"):
        report = work / f"report-{name}.json"
        argv = ["swebench", str(work / f"preds-{name}.json"), str(ipath), "-o", str(report)]
        seconds, done = aexec(*argv, "--specs", "swebench", "--no-cache", "--jobs", "2", root=root)
        (work / f"grade-{name}.log").write_text(done.stderr)
        got: dict[str, Any] = {"seconds": round(seconds, 1), "rc": done.returncode}
        if done.returncode == 0:
            data = json.loads(report.read_text())
            got["resolved"] = sorted(data["resolved_ids"])
            for row in rows:
                d = data["instances"].get(row["instance_id"], {})
                got[row["instance_id"]] = {
                    "resolved": d.get("resolved"),
                    "verdict": d.get("verdict"),
                    "failed": {k: v.get("failure") for k, v in (d.get("tests_status") or {}).items()},
                    "unmatched": d.get("expected_unmatched"),
                    "error": (d.get("error") or "")[:400] or None,
                }
        else:
            got["stderr"] = done.stderr[-800:]
        out[name] = got
    return out


if __name__ == "__main__":
    main()
