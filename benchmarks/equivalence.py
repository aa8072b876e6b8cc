#!/usr/bin/env python3
"""Equivalence report: aexec's per-test verdicts vs. the environment's own pytest.

    python benchmarks/equivalence.py [--corpus DIR] [--aexec CMD] [--only NAME,...]
                                     [--check] [--out FILE.json]

Issue 18, goal 2. On the corpus of ``benchmarks/build_equivalence.py`` (built if
``DIR/cases.jsonl`` is missing):

* runs ``aexec observe DIR/cases.jsonl --no-cache --jobs 2`` (first, alone);
* runs the **referee** twice per case: plain ``python -m pytest <selection>
  --junitxml=...`` with the case's ``python`` (the project's venv) on a scratch copy of
  the repo with the patch applied; a test whose verdict differs between the two plain
  runs is ``nondeterministic``;
* compares per test: aexec's ``test_results`` against the junit verdicts (junit
  ``failure`` = failed, ``error`` = errored, ``skipped`` = skipped, none = passed), in
  junit's own (classname, name) space: aexec's node ids go through pytest's own
  mangling (``build_equivalence.junit_key``), a collection error is the junit testcase
  pytest writes for the module. A test on one side only is a difference;
* scores verdicts and failure classes against the labels by construction (checked by
  the build with the same referee), beside the two naive baselines of the §7 harness
  (A: exit code; B: exit code + last exception name), which are judged on the
  referee's own first run — the naive runner *is* plain pytest in the project's venv
  (``naive_run`` of the harness runs ``sys.executable``, not the request's
  ``python``, so it is not used here).

Prints a table per project, then every difference. ``--check`` exits 1 unless every
per-test verdict agrees (differences on tests flagged ``nondeterministic`` excepted)
and aexec observed every case. ``--out`` writes the whole comparison as JSON.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from build_equivalence import DEFAULT_OUT, RefereeRun, junit_key, referee, referee_args  # noqa: E402
from fidelity import aexec_prediction, run_aexec  # noqa: E402

# The naive baselines and the metrics are the §7 harness's own; they may move to
# aexec._ab.naive / aexec._ab.metrics (another branch), so import from either place.
try:  # pragma: no cover - depends on which branch is merged
    from aexec._ab.naive import baseline_a, baseline_b  # type: ignore[import-not-found]
except ImportError:
    from aexec._ab.harness import baseline_a, baseline_b
try:  # pragma: no cover
    from aexec._ab.metrics import metrics  # type: ignore[import-not-found]
except ImportError:
    from aexec._ab.harness import metrics


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def aexec_verdicts(obs: dict | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for t in (obs or {}).get("test_results") or []:
        c, n = junit_key(str(t.get("test", "")))
        out[f"{c}::{n}"] = str(t.get("verdict"))
    return out


def aexec_f2p(obs: dict | None) -> list[str]:
    keys = []
    for t in (obs or {}).get("test_results") or []:
        if t.get("f2p"):
            c, n = junit_key(str(t.get("test", "")))
            keys.append(f"{c}::{n}")
    return sorted(keys)


def compare_case(case: dict, obs: dict | None, r1: RefereeRun, r2: RefereeRun) -> dict:
    ref, mine = r1.verdicts, aexec_verdicts(obs)
    flaky = sorted(k for k in set(r1.verdicts) | set(r2.verdicts) if r1.verdicts.get(k) != r2.verdicts.get(k))
    diffs = []
    keys = sorted(set(ref) | set(mine))
    agree = 0
    for k in keys:
        a, b = mine.get(k, "absent"), ref.get(k, "absent")
        if a == b:
            agree += 1
        else:
            diffs.append(
                {
                    "test": k,
                    "aexec": a,
                    "pytest": b,
                    "pytest_2nd": r2.verdicts.get(k, "absent"),
                    "nondeterministic": k in flaky,
                    "pytest_message": r1.messages.get(k, ""),
                }
            )
    verdict, cls = aexec_prediction(obs)
    lab = case["label"]
    run = {"rc": r1.rc, "timed_out": r1.timed_out, "output": r1.output}
    failure = (obs or {}).get("failure") or {}
    return {
        "id": case["id"],
        "project": case["project"],
        "label": lab,
        "pytest_rc": [r1.rc, r2.rc],
        "aexec": {
            "verdict": verdict,
            "failure_class": cls,
            "message": (failure.get("message") or "")[:300] if isinstance(failure, dict) else "",
            "flags": {k: v for k, v in ((obs or {}).get("flags") or {}).items() if v},
        },
        "baseline_A": baseline_a(run),
        "baseline_B": baseline_b(run),
        "tests": len(keys),
        "agree": agree,
        "differences": diffs,
        "nondeterministic": flaky,
        "f2p": {"label": lab.get("f2p"), "aexec": aexec_f2p(obs)} if lab.get("f2p") is not None else None,
    }


def summarize(rows: list[dict]) -> dict:
    labels = [r["label"] for r in rows]
    ax = [(r["aexec"]["verdict"], r["aexec"]["failure_class"]) for r in rows]
    a = [tuple(r["baseline_A"]) for r in rows]
    b = [tuple(r["baseline_B"]) for r in rows]
    tests = sum(r["tests"] for r in rows)
    agree = sum(r["agree"] for r in rows)
    unexplained = sum(1 for r in rows for d in r["differences"] if not d["nondeterministic"])
    f2p = [r["f2p"] for r in rows if r["f2p"] is not None]
    return {
        "cases": len(rows),
        "tests": tests,
        "tests_agree": agree,
        "per_test_agreement": agree / tests if tests else 1.0,
        "cases_all_tests_agree": sum(1 for r in rows if not r["differences"]),
        "unexplained_differences": unexplained,
        "aexec": metrics(labels, ax),
        "baseline_A": metrics(labels, a),
        "baseline_B": metrics(labels, b),
        "f2p_exact": f"{sum(1 for f in f2p if f['label'] == f['aexec'])}/{len(f2p)}",
    }


def render(by_project: dict[str, dict], total: dict, rows: list[dict]) -> str:
    lines = []
    head = (
        f"{'project':<26}{'cases':>6}{'tests':>7}{'per-test':>10}{'cases=':>8}"
        f"{'verdict acc':>13}{'A':>7}{'B':>7}{'macroF1':>9}{'A':>7}{'B':>7}{'f2p':>6}"
    )
    lines.append(head)
    lines.append(" " * 26 + f"{'':>6}{'':>7}{'agree':>10}{'':>8}{'aexec':>13}{'':>7}{'':>7}{'aexec':>9}")
    for name, s in [*by_project.items(), ("TOTAL", total)]:
        lines.append(
            f"{name:<26}{s['cases']:>6}{s['tests']:>7}{s['per_test_agreement']:>10.3f}"
            f"{s['cases_all_tests_agree']:>5}/{s['cases']:<2}"
            f"{s['aexec']['verdict_accuracy']:>13.3f}{s['baseline_A']['verdict_accuracy']:>7.3f}"
            f"{s['baseline_B']['verdict_accuracy']:>7.3f}{s['aexec']['macro_f1']:>9.3f}"
            f"{s['baseline_A']['macro_f1']:>7.3f}{s['baseline_B']['macro_f1']:>7.3f}{s['f2p_exact']:>6}"
        )
    lines.append("")
    lines.append("cases where aexec's verdict differs from the label (plain-pytest-checked):")
    for r in rows:
        if (
            r["aexec"]["verdict"] != r["label"]["verdict"]
            or r["aexec"]["failure_class"] != r["label"]["failure_class"]
        ):
            lines.append(
                f"  {r['id']:<36} label {r['label']['verdict']}/{r['label']['failure_class']}  "
                f"aexec {r['aexec']['verdict']}/{r['aexec']['failure_class']}  pytest rc {r['pytest_rc'][0]}"
                f"  {r['aexec']['message'][:90]!r}"
            )
    lines.append("")
    lines.append("per-test differences (aexec vs plain pytest's junit):")
    for r in rows:
        if not r["differences"]:
            continue
        d = r["differences"]
        shown = ", ".join(
            f"{x['test']} aexec={x['aexec']} pytest={x['pytest']}"
            + (" [nondeterministic]" if x["nondeterministic"] else "")
            for x in d[:3]
        )
        more = f" (+{len(d) - 3} more)" if len(d) > 3 else ""
        lines.append(f"  {r['id']:<36} {len(d)}/{r['tests']}: {shown}{more}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--aexec", default=str(Path(sys.executable).parent / "aexec"), help="command (shlex-split)"
    )
    ap.add_argument("--cases", type=Path, default=None, help="a cases file (default: CORPUS/cases.jsonl)")
    ap.add_argument("--only", default="", help="comma-separated project keys (e.g. semver-3.0.2)")
    ap.add_argument("--jobs", type=int, default=2, help="threads for the referee runs")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    t_start = time.monotonic()
    corpus = args.corpus.resolve()
    cases_path = args.cases.resolve() if args.cases else corpus / "cases.jsonl"
    if not cases_path.exists():
        subprocess.run([sys.executable, str(HERE / "build_equivalence.py"), "--out", str(corpus)], check=True)
    cases = [json.loads(ln) for ln in cases_path.read_text().splitlines() if ln.strip()]
    only = {s for s in args.only.split(",") if s}
    if only:
        cases = [c for c in cases if c["project"] in only or c["project"].rsplit("-", 1)[0] in only]
        cases_path = corpus / "cases-selected.jsonl"
        cases_path.write_text("".join(json.dumps(c) + "\n" for c in cases))

    ax = run_aexec(shlex.split(args.aexec), cases_path, corpus / "obs.jsonl")
    observations: list[dict | None] = list(ax["observations"])
    if len(observations) != len(cases):
        log(
            f"aexec returned {len(observations)} observations for {len(cases)} cases (rc={ax['rc']}): {ax['stderr']}"
        )
        observations = (observations + [None] * len(cases))[: len(cases)]
    log(f"aexec observe: {ax['duration']:.1f}s, rc={ax['rc']}")

    t0 = time.monotonic()

    def two_runs(c: dict) -> tuple[RefereeRun, RefereeRun]:
        repo = corpus / c["repo"]
        return (
            referee(repo, c.get("patch"), referee_args(c), c["python"]),
            referee(repo, c.get("patch"), referee_args(c), c["python"]),
        )

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs = list(pool.map(two_runs, cases))
    ref_s = time.monotonic() - t0
    log(f"plain pytest (2 runs per case): {ref_s:.1f}s")

    rows = [compare_case(c, o, r1, r2) for c, o, (r1, r2) in zip(cases, observations, runs, strict=True)]
    by_project: dict[str, dict] = {}
    for key in dict.fromkeys(r["project"] for r in rows):
        by_project[key] = summarize([r for r in rows if r["project"] == key])
    total = summarize(rows)
    print(render(by_project, total, rows))
    missing = sum(1 for o in observations if o is None)
    print(
        f"\naexec observe {ax['duration']:.1f}s; plain pytest {ref_s:.1f}s (two runs per case); "
        f"total {time.monotonic() - t_start:.1f}s"
    )
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "aexec_cmd": args.aexec,
                    "aexec_rc": ax["rc"],
                    "aexec_seconds": ax["duration"],
                    "referee_seconds": ref_s,
                    "missing_observations": missing,
                    "total": total,
                    "projects": by_project,
                    "cases": rows,
                },
                indent=2,
            )
            + "\n"
        )
    if args.check:
        ok = total["unexplained_differences"] == 0 and missing == 0
        print(
            f"--check: {'PASS' if ok else 'FAIL'} ({total['unexplained_differences']} unexplained per-test differences, "
            f"{missing} missing observations)"
        )
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
