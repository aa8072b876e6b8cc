"""The §7.1 / §7.2 metrics: verdict accuracy, failure-class P/R/F1, FAIL_TO_PASS /
PASS_TO_PASS agreement, and the confusion grid. Pure: no run, no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._records import ExecutionObservation
from .corpus import CLASSES, Corpus, Label
from .naive import Prediction

__all__ = ["SystemRun", "confusion", "metrics", "prediction", "score", "tagged"]


def metrics(labels: Sequence[Mapping[str, Any]], preds: Sequence[Prediction]) -> dict[str, Any]:
    """Verdict accuracy, per-class P/R/F1 over the classes present in the labels, their
    macro mean, and exact (verdict, class) accuracy. ``labels`` carry ``verdict`` and
    ``failure_class``."""
    n = len(labels)
    pairs = list(zip(labels, preds, strict=True))
    acc = sum(lab["verdict"] == p[0] for lab, p in pairs) / n
    per_class = {}
    for c in (c for c in CLASSES if any(lab["failure_class"] == c for lab in labels)):
        tp = sum(lab["failure_class"] == c and p[1] == c for lab, p in pairs)
        npred = sum(p[1] == c for p in preds)
        nlab = sum(lab["failure_class"] == c for lab in labels)
        prec = tp / npred if npred else 0.0
        rec = tp / nlab if nlab else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        per_class[c] = {
            "tp": tp,
            "predicted": npred,
            "labelled": nlab,
            "precision": prec,
            "recall": rec,
            "f1": f1,
        }
    macro = sum(v["f1"] for v in per_class.values()) / len(per_class) if per_class else 0.0
    class_acc = sum(lab["failure_class"] == p[1] for lab, p in pairs) / n
    return {"verdict_accuracy": acc, "macro_f1": macro, "class_accuracy": class_acc, "per_class": per_class}


def prediction(obs: ExecutionObservation) -> Prediction:
    return obs.verdict, None if obs.failure is None else obs.failure.failure_class


def tagged(obs: ExecutionObservation, which: str) -> tuple[str, ...]:
    return tuple(sorted(t.test for t in obs.test_results if getattr(t, which)))


@attrs.frozen
class SystemRun:
    """One system's answers on the corpus."""

    name: str
    predictions: tuple[Prediction, ...]
    #: Per case, the FAIL_TO_PASS / PASS_TO_PASS sets it reported (None: it cannot tell).
    f2p: tuple[tuple[str, ...] | None, ...]
    p2p: tuple[tuple[str, ...] | None, ...]
    wall_s: float
    note: str = ""


def score(corpus: Corpus, run: SystemRun) -> dict[str, Any]:
    labels = [{"verdict": c.label.verdict, "failure_class": c.label.failure_class} for c in corpus.cases]
    out = metrics(labels, run.predictions)
    for which in ("f2p", "p2p"):
        rows = [
            (getattr(c.label, which), got)
            for c, got in zip(corpus.cases, getattr(run, which), strict=True)
            if getattr(c.label, which) is not None
        ]
        exact = sum(got is not None and tuple(got) == lab for lab, got in rows)
        out[which] = {"exact": exact, "total": len(rows), "known": all(got is not None for _, got in rows)}
    out["wall_s"] = run.wall_s
    return out


def _category(p: Prediction | Label) -> str:
    verdict, cls = (p.verdict, p.failure_class) if isinstance(p, Label) else p
    return f"fail:{cls}" if verdict == "fail" else str(verdict)


def confusion(corpus: Corpus, run: SystemRun) -> tuple[list[str], list[list[int]]]:
    """Rows: labelled verdict/class; columns: predicted (same order)."""
    labels = [_category(c.label) for c in corpus.cases]
    preds = [_category(p) for p in run.predictions]
    order = [
        "pass",
        "empty_success",
        "tampered",
        *(f"fail:{c}" for c in CLASSES),
        "fail:None",
        "error",
        "None",
    ]
    cats = [c for c in order if c in labels or c in preds] + sorted(set(labels + preds) - set(order))
    index = {c: i for i, c in enumerate(cats)}
    grid = [[0] * len(cats) for _ in cats]
    for lab, pred in zip(labels, preds, strict=True):
        grid[index[lab]][index[pred]] += 1
    return cats, grid
