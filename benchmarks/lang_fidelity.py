#!/usr/bin/env python3
"""Fidelity per language (issue 21): aexec vs. constructed labels vs. two naive baselines.

    python benchmarks/lang_fidelity.py [--corpus DIR] [--languages c,rust,...] [--aexec CMD]
                                       [--jobs 2] [--fresh] [--check]

For each language (``c cpp rust java javascript sql``; corpus by
``benchmarks/build_lang_corpus.py``, built first if ``DIR/<lang>/cases.jsonl`` is missing):

* runs ``aexec observe DIR/<lang>/cases.jsonl --no-cache --jobs 2`` (fidelity.py's runner);
* the two naive baselines of ``fidelity.py`` (A: exit code only; B: exit code + the last
  exception-like name in the raw text) read the *plain toolchain's* run of the same case:
  the documented compile/run commands as bare subprocesses, native programs under the same
  512 MiB RLIMIT_AS, one deadline (``build_lang_corpus.plain_run``). The runs the build
  recorded to check the labels (``plain.jsonl``) are reused when their case digest matches;
  ``--fresh`` runs them again;
* prints, per language and pooled, verdict accuracy, failure-class macro-F1 (over the
  classes labelled in that language), exact (verdict, class) accuracy and "failed?"
  accuracy (pass and empty_success counted alike, which the baselines cannot tell apart),
  the aexec disagreements, and writes ``DIR/fidelity.json``. ``--markdown`` also prints the
  table as Markdown for docs/benchmarks.md.

``--check`` exits 1 unless, in every language, aexec reaches verdict accuracy >= 0.97 and
macro-F1 >= 0.97 and beats both baselines on both, and every label still holds against the
plain run. The Python corpus and its CI gate stay in ``fidelity.py``, unchanged.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import build_lang_corpus as blc  # noqa: E402
from fidelity import aexec_prediction, run_aexec  # noqa: E402

# The naive baselines and the metrics are aexec ab's own (the same code fidelity.py uses);
# they are moving from ``aexec._ab.harness`` to ``aexec._ab.naive`` / ``aexec._ab.metrics``.
try:
    from aexec._ab.naive import baseline_a, baseline_b  # type: ignore[import-not-found]
except ImportError:
    from aexec._ab.harness import baseline_a, baseline_b
try:
    from aexec._ab.metrics import metrics  # type: ignore[import-not-found]
except ImportError:
    from aexec._ab.harness import metrics

DEFAULT_CORPUS = blc.DEFAULT_OUT
SYSTEMS = ("aexec", "baseline_A_exitcode", "baseline_B_exc_regex")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def failed_acc(labels: list[dict], preds: list[tuple[str | None, str | None]]) -> float:
    ok = sum((lab["verdict"] == "fail") == (p[0] == "fail") for lab, p in zip(labels, preds, strict=True))
    return ok / len(labels)


def plain_runs(cases: list[dict], path: Path, fresh: bool, jobs: int, toolmap: dict[str, str]) -> list[dict]:
    have: dict[str, dict] = {}
    if path.exists() and not fresh:
        for ln in path.read_text().splitlines():
            if ln.strip():
                r = json.loads(ln)
                have[r["id"]] = r
    todo = [c for c in cases if have.get(c["id"], {}).get("digest") != c["digest"]]
    if todo:
        log(f"plain toolchain: running {len(todo)} of {len(cases)} cases")
        with ThreadPoolExecutor(max_workers=jobs) as ex:
            for c, r in zip(todo, ex.map(lambda c: blc.plain_run(c, toolmap), todo), strict=True):
                have[c["id"]] = {**r, "digest": c["digest"]}
    return [have[c["id"]] for c in cases]


def one_language(
    lang: str, corpus: Path, args: argparse.Namespace, toolmap: dict[str, str]
) -> dict[str, Any]:
    d = corpus / lang
    cases_path = d / "cases.jsonl"
    if not cases_path.exists():
        rc = blc.main(["--out", str(corpus), "--languages", lang, "--jobs", str(args.jobs)])
        if rc != 0:
            raise SystemExit(f"{lang}: build_lang_corpus.py found contradicted labels; fix the generator")
    cases = [json.loads(ln) for ln in cases_path.read_text().splitlines() if ln.strip()]
    labels = [c["label"] for c in cases]

    ax = run_aexec(shlex.split(args.aexec), cases_path, d / "obs.jsonl")  # alone, before the baselines
    by_id = {o.get("id"): o for o in ax["observations"] if isinstance(o, dict)}
    observations = [by_id.get(c["id"]) for c in cases]
    in_order = [o.get("id") for o in ax["observations"]] == [c["id"] for c in cases]
    log(f"{lang}: aexec rc={ax['rc']} in {ax['duration']:.1f}s, {len(ax['observations'])} observations")

    t0 = time.monotonic()
    naive = plain_runs(cases, d / "plain.jsonl", args.fresh, args.jobs, toolmap)
    naive_dur = time.monotonic() - t0
    label_bad = [(c["id"], why) for c, r in zip(cases, naive, strict=True) if (why := blc.label_holds(c, r))]

    preds = {
        "aexec": [aexec_prediction(o) for o in observations],
        "baseline_A_exitcode": [baseline_a(r) for r in naive],
        "baseline_B_exc_regex": [baseline_b(r) for r in naive],
    }
    results = {
        name: {**metrics(labels, p), "failed_accuracy": failed_acc(labels, p)} for name, p in preds.items()
    }
    loc_rows = []  # aexec's failure.location vs. the labelled file:line, where labelled
    for i, c in enumerate(cases):
        want = c["label"].get("location")
        if want is None or preds["aexec"][i][1] != c["label"]["failure_class"]:
            continue
        fail = (observations[i] or {}).get("failure")
        got = fail.get("location") if isinstance(fail, dict) else None
        loc_rows.append(
            {"id": c["id"], "label": want, "aexec": got, "exact": ":".join(str(got).split(":")[:2]) == want}
        )
    disagreements = []
    for i, c in enumerate(cases):
        pv, pc = preds["aexec"][i]
        if (pv, pc) == (c["label"]["verdict"], c["label"]["failure_class"]):
            continue
        obs = observations[i] or {}
        fail = obs.get("failure") if isinstance(obs.get("failure"), dict) else {}
        msg = (fail or {}).get("message") or obs.get("stderr") or ("<no observation>" if not obs else "")
        disagreements.append(
            {
                "id": c["id"],
                "label": [c["label"]["verdict"], c["label"]["failure_class"]],
                "aexec": [pv, pc],
                "location": (fail or {}).get("location"),
                "message": str(msg)[:240],
            }
        )
    return {
        "language": lang,
        "cases": len(cases),
        "labels": labels,
        "preds": preds,
        "metrics": results,
        "disagreements": disagreements,
        "label_contradicted": label_bad,
        "locations": {
            "exact": sum(r["exact"] for r in loc_rows),
            "labelled": len(loc_rows),
            "rows": loc_rows,
        },
        "aexec": {
            "rc": ax["rc"],
            "duration_s": ax["duration"],
            "in_order": in_order,
            "stderr_tail": ax["stderr"][-800:],
        },
        "baseline_duration_s": naive_dur,
        "per_case": [
            {
                "id": c["id"],
                "label": c["label"],
                **{n: list(p[i]) for n, p in preds.items()},
                "naive_rc": naive[i]["rc"],
            }
            for i, c in enumerate(cases)
        ],
    }


def table(rows: list[tuple[str, int, dict[str, Any]]], markdown: bool) -> str:
    out = []
    if markdown:
        out.append("| language | cases | system | verdict acc | class macro-F1 | class acc | failed? acc |")
        out.append("|---|---:|---|---:|---:|---:|---:|")
    else:
        out.append(
            f"{'language':<11}{'n':>4}  {'system':<22}{'verdict':>9}{'macroF1':>9}{'class':>8}{'failed?':>9}"
        )
    for lang, n, res in rows:
        for name in SYSTEMS:
            m = res[name]
            if markdown:
                sysname = f"**{name}**" if name == "aexec" else name
                out.append(
                    f"| {lang} | {n} | {sysname} | {m['verdict_accuracy']:.3f} | {m['macro_f1']:.3f} | "
                    f"{m['class_accuracy']:.3f} | {m['failed_accuracy']:.3f} |"
                )
            else:
                out.append(
                    f"{lang:<11}{n:>4}  {name:<22}{m['verdict_accuracy']:>9.3f}{m['macro_f1']:>9.3f}"
                    f"{m['class_accuracy']:>8.3f}{m['failed_accuracy']:>9.3f}"
                )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--languages", default=",".join(blc.LANGUAGES))
    ap.add_argument(
        "--aexec", default=str(Path(sys.executable).parent / "aexec"), help="command that runs aexec"
    )
    ap.add_argument("--jobs", type=int, default=2, help="threads for the plain runs")
    ap.add_argument("--fresh", action="store_true", help="re-run the plain toolchain, ignore plain.jsonl")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    langs = [x.strip() for x in args.languages.split(",") if x.strip()]
    for x in langs:
        if x not in blc.LANGUAGES:
            ap.error(f"--languages: unknown language {x!r} (one of {', '.join(blc.LANGUAGES)})")
    corpus = args.corpus.resolve()
    toolmap = blc.tools()
    t_start = time.monotonic()
    per = [one_language(lang, corpus, args, toolmap) for lang in langs]

    rows = [(r["language"], r["cases"], r["metrics"]) for r in per]
    all_labels = [lab for r in per for lab in r["labels"]]
    pooled = {}
    for name in SYSTEMS:
        p = [x for r in per for x in r["preds"][name]]
        pooled[name] = {**metrics(all_labels, p), "failed_accuracy": failed_acc(all_labels, p)}
    rows.append(("all", len(all_labels), pooled))

    print()
    print(f"aexec fidelity per language ({corpus})")
    print(table(rows, markdown=False))
    print()
    print("aexec per-class F1 (labelled n)")
    for r in per:
        pc = r["metrics"]["aexec"]["per_class"]
        print(
            f"  {r['language']:<11}"
            + "  ".join(f"{c} {v['f1']:.2f} ({v['labelled']})" for c, v in pc.items())
        )
    for r in per:
        print(f"\n{r['language']}: aexec disagreements: {len(r['disagreements'])}")
        for dis in r["disagreements"]:
            print(
                f"  {dis['id']}: label={'/'.join(map(str, dis['label']))} aexec={'/'.join(map(str, dis['aexec']))}"
            )
            print(f"      {dis['location'] or ''} {dis['message']}".replace("\n", "\\n"))
        lo = r["locations"]
        print(f"  aexec location exact: {lo['exact']}/{lo['labelled']} (labelled, class right)")
        for row in lo["rows"]:
            if not row["exact"]:
                print(f"    location {row['id']}: label={row['label']} aexec={row['aexec']}")
        for cid, why in r["label_contradicted"]:
            print(f"  LABEL CONTRADICTED by the plain toolchain: {cid}: {why}")
    if args.markdown:
        print()
        print(table(rows, markdown=True))
    total = time.monotonic() - t_start
    report = {
        "corpus": str(corpus),
        "command": args.aexec,
        "languages": {
            r["language"]: {k: v for k, v in r.items() if k not in ("labels", "preds")} for r in per
        },
        "pooled": pooled,
        "total_duration_s": total,
    }
    (corpus / "fidelity.json").write_text(json.dumps(report, indent=1))
    print(f"\nwrote {corpus / 'fidelity.json'}; lang_fidelity.py took {total:.1f}s")

    if args.check:
        fails = []
        for r in per:
            a = r["metrics"]["aexec"]
            others = [r["metrics"][n] for n in SYSTEMS[1:]]
            if a["verdict_accuracy"] < 0.97 or a["macro_f1"] < 0.97:
                fails.append(f"{r['language']}: below 0.97")
            if not all(
                a["verdict_accuracy"] > o["verdict_accuracy"] and a["macro_f1"] > o["macro_f1"]
                for o in others
            ):
                fails.append(f"{r['language']}: does not beat both baselines")
            if r["label_contradicted"]:
                fails.append(f"{r['language']}: {len(r['label_contradicted'])} labels contradicted")
        print("--check: " + ("PASS" if not fails else "FAIL: " + "; ".join(fails)))
        return 1 if fails else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
