#!/usr/bin/env python3
"""Fidelity report: aexec's observations vs. constructed labels vs. two naive baselines.

    python benchmarks/fidelity.py [--corpus DIR] [--aexec CMD] [--check]

* builds the corpus (benchmarks/build_corpus.py) if ``DIR/cases.jsonl`` is missing;
* runs ``aexec observe DIR/cases.jsonl -o DIR/obs.jsonl --no-cache --jobs 2``;
* runs two naive baselines on the same cases, in this script:
  A: exit code only (pass iff exit 0; ``timeout`` on a timeout, else ``runtime``);
  B: exit code + the last exception-like name in the raw stdout+stderr text;
* prints verdict accuracy, failure-class macro-F1 and (aexec only) FAIL_TO_PASS
  exactness, the per-case aexec disagreements, and writes ``DIR/fidelity.json``.

The baselines run every candidate under the same 512 MiB address-space cap that aexec
declares (RLIMIT_AS, set by ``prlimit`` or a tiny exec launcher: ``aexec._ab.naive``), so that ``bytearray(1 << 33)`` raises
MemoryError for them too instead of really allocating 8 GiB; nothing else is isolated.
``--check`` exits 1 unless aexec reaches verdict accuracy >= 0.97 and macro-F1 >= 0.97,
strictly beats both baselines on both, and every labelled f2p set is exact.
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

# The naive runner, the baselines and the metrics are the §7 harness's own (``aexec ab``
# uses the same code), so the two reports cannot drift apart.
from aexec._ab.metrics import metrics
from aexec._ab.naive import baseline_a, baseline_b, naive_run

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = HERE / ".work"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# aexec
# --------------------------------------------------------------------------------------


def aexec_prediction(obs: dict | None) -> tuple[str | None, str | None]:
    if obs is None:
        return None, None
    flags = obs.get("flags") or {}
    failure = obs.get("failure")
    if obs.get("verdict"):
        verdict = obs["verdict"]
    elif flags.get("tampered"):
        verdict = "tampered"
    elif failure is not None:
        verdict = "fail"
    elif flags.get("empty_success"):
        verdict = "empty_success"
    else:
        verdict = "pass"
    cls = failure.get("failure_class") if isinstance(failure, dict) else None
    return verdict, cls


def aexec_f2p(obs: dict | None) -> list[str] | None:
    if obs is None:
        return None
    return sorted(t.get("test") for t in obs.get("test_results") or [] if t.get("f2p"))


def run_aexec(cmd: list[str], cases_path: Path, obs_path: Path) -> dict:
    argv = [*cmd, "observe", str(cases_path), "-o", str(obs_path), "--no-cache", "--jobs", "2"]
    log("$ " + shlex.join(argv))
    if obs_path.exists():
        obs_path.unlink()
    t0 = time.monotonic()
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        rc, err = r.returncode, r.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        rc, err = None, f"{type(e).__name__}: {e}"
    dur = time.monotonic() - t0
    obs: list[dict] = []
    if obs_path.exists():
        for ln in obs_path.read_text().splitlines():
            if ln.strip():
                try:
                    obs.append(json.loads(ln))
                except json.JSONDecodeError:
                    obs.append({"_unparseable": ln[:200]})
    return {"rc": rc, "stderr": err[-2000:], "duration": dur, "observations": obs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument(
        "--aexec",
        default=str(Path(sys.executable).parent / "aexec"),
        help="command that runs aexec (split with shlex)",
    )
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--jobs", type=int, default=2, help="threads for the baselines")
    args = ap.parse_args(argv)
    t_start = time.monotonic()
    corpus = args.corpus.resolve()
    cases_path = corpus / "cases.jsonl"
    if not cases_path.exists():
        subprocess.run([sys.executable, str(HERE / "build_corpus.py"), "--out", str(corpus)], check=True)
    cases = [json.loads(ln) for ln in cases_path.read_text().splitlines() if ln.strip()]
    labels = [c["label"] for c in cases]

    # aexec first, alone, so the baselines do not compete with it for the two cores
    ax = run_aexec(shlex.split(args.aexec), cases_path, corpus / "obs.jsonl")
    observations: list[dict | None] = list(ax["observations"])
    if len(observations) != len(cases):
        log(
            f"WARNING: aexec wrote {len(observations)} observations for {len(cases)} cases "
            f"(rc={ax['rc']}); stderr tail:\n{ax['stderr'][-800:]}"
        )
    observations = (observations + [None] * len(cases))[: len(cases)]
    order_ok = all(o is not None and o.get("id") == c["id"] for o, c in zip(observations, cases, strict=True))
    if not order_ok:  # fall back to matching by id, but report it
        by_id = {o.get("id"): o for o in observations if o}
        observations = [by_id.get(c["id"]) for c in cases]
    log(
        f"aexec: rc={ax['rc']} in {ax['duration']:.1f}s, {len(ax['observations'])} "
        f"observations, order {'ok' if order_ok else 'NOT in input order / ids differ'}"
    )

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.jobs) as ex:
        naive = list(ex.map(lambda c: naive_run(c, corpus), cases))
    naive_dur = time.monotonic() - t0
    log(f"baselines: {len(cases)} naive runs in {naive_dur:.1f}s")

    preds = {
        "aexec": [aexec_prediction(o) for o in observations],
        "baseline_A_exitcode": [baseline_a(r) for r in naive],
        "baseline_B_exc_regex": [baseline_b(r) for r in naive],
    }
    results = {name: metrics(labels, p) for name, p in preds.items()}

    f2p_cases = [(i, c) for i, c in enumerate(cases) if c["label"].get("f2p") is not None]
    f2p_rows = []
    for i, c in f2p_cases:
        got = aexec_f2p(observations[i])
        f2p_rows.append(
            {
                "id": c["id"],
                "label": sorted(c["label"]["f2p"]),
                "aexec": got,
                "exact": got == sorted(c["label"]["f2p"]),
            }
        )
    f2p_exact = sum(r["exact"] for r in f2p_rows)

    # ---- table
    print()
    print(f"aexec fidelity on {len(cases)} cases ({cases_path})")
    print(f"{'system':<24}{'verdict acc':>12}{'class macro-F1':>16}{'class acc':>11}")
    for name, m in results.items():
        print(f"{name:<24}{m['verdict_accuracy']:>12.3f}{m['macro_f1']:>16.3f}{m['class_accuracy']:>11.3f}")
    print(f"aexec f2p exact: {f2p_exact}/{len(f2p_rows)}")
    print()
    print("per-class F1 " + " ".join(f"{c:>10}" for c in results["aexec"]["per_class"]))
    for name, m in results.items():
        print(f"{name[:12]:<13}" + " ".join(f"{v['f1']:>10.2f}" for v in m["per_class"].values()))
    labelled = {c: v["labelled"] for c, v in results["aexec"]["per_class"].items()}
    print(f"{'(labelled n)':<13}" + " ".join(f"{n:>10}" for n in labelled.values()))

    # ---- disagreements
    disagreements = []
    for i, c in enumerate(cases):
        lab = c["label"]
        pv, pc = preds["aexec"][i]
        obs = observations[i]
        f2p_bad = any(r["id"] == c["id"] and not r["exact"] for r in f2p_rows)
        if pv == lab["verdict"] and pc == lab["failure_class"] and not f2p_bad:
            continue
        msg = ""
        if obs is None:
            msg = "<no observation>"
        else:
            fail = obs.get("failure") or {}
            msg = (
                (fail.get("message") if isinstance(fail, dict) else "")
                or obs.get("stderr")
                or obs.get("exception")
                or ""
            )
        row = {
            "id": c["id"],
            "label": [lab["verdict"], lab["failure_class"]],
            "aexec": [pv, pc],
            "message": msg[:200],
        }
        if f2p_bad:
            row["f2p"] = next(r for r in f2p_rows if r["id"] == c["id"])
        disagreements.append(row)
    print()
    print(f"aexec disagreements: {len(disagreements)}")
    for d in disagreements:
        print(f"  {d['id']}: label={d['label'][0]}/{d['label'][1]} aexec={d['aexec'][0]}/{d['aexec'][1]}")
        if "f2p" in d:
            print(f"      f2p label={d['f2p']['label']} aexec={d['f2p']['aexec']}")
        print("      " + d["message"].replace("\n", "\\n"))

    total = time.monotonic() - t_start
    report = {
        "cases": len(cases),
        "corpus": str(cases_path),
        "aexec": {
            "command": args.aexec,
            "rc": ax["rc"],
            "duration_s": ax["duration"],
            "observations": len(ax["observations"]),
            "in_order": order_ok,
            "stderr_tail": ax["stderr"][-1000:],
        },
        "metrics": results,
        "f2p": {"exact": f2p_exact, "total": len(f2p_rows), "rows": f2p_rows},
        "disagreements": disagreements,
        "per_case": [
            {
                "id": c["id"],
                "label": c["label"],
                **{name: list(p[i]) for name, p in preds.items()},
                "naive_rc": naive[i]["rc"],
                "naive_timed_out": naive[i]["timed_out"],
            }
            for i, c in enumerate(cases)
        ],
        "baseline_duration_s": naive_dur,
        "total_duration_s": total,
    }
    (corpus / "fidelity.json").write_text(json.dumps(report, indent=1))
    print(
        f"\nwrote {corpus / 'fidelity.json'}; fidelity.py took {total:.1f}s "
        f"(aexec {ax['duration']:.1f}s, baselines {naive_dur:.1f}s)"
    )

    if args.check:
        a = results["aexec"]
        others = [results["baseline_A_exitcode"], results["baseline_B_exc_regex"]]
        ok = (
            a["verdict_accuracy"] >= 0.97
            and a["macro_f1"] >= 0.97
            and all(a["verdict_accuracy"] > o["verdict_accuracy"] for o in others)
            and all(a["macro_f1"] > o["macro_f1"] for o in others)
            and f2p_exact == len(f2p_rows)
        )
        print(f"--check: {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
