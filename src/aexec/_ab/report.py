"""The `aexec ab` report: its records, the §7.5 keep/delete rule, the §7.4 decision table
and §7.5 ablation table as text, ``ab.json``, and the confusion-matrix pictures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from .corpus import Corpus

__all__ = [
    "NOISE",
    "AbReport",
    "Ablation",
    "ablation_verdict",
    "compare",
    "render",
    "report_json",
    "write_confusion_png",
]

#: §7.5: a removal whose Δ stays within this (absolute, on 0..1 metrics) is noise.
NOISE: Final = 0.05


@attrs.frozen
class Ablation:
    mechanism: str
    how: str
    scores: dict[str, Any] | None
    deltas: dict[str, float]
    verdict: str
    notes: tuple[str, ...] = ()


@attrs.frozen
class AbReport:
    corpus: Corpus
    systems: dict[str, dict[str, Any]]
    decision: str
    wins: bool
    ablations: tuple[Ablation, ...]
    pictures: tuple[str, ...]
    notes: tuple[str, ...]
    per_case: tuple[dict[str, Any], ...]


def _honest(s: Mapping[str, Any]) -> dict[str, float]:
    out = {"verdict_accuracy": float(s["verdict_accuracy"]), "macro_f1": float(s["macro_f1"])}
    for which in ("f2p", "p2p"):
        if s[which]["total"]:
            out[f"{which}_exact"] = s[which]["exact"] / s[which]["total"]
    return out


def ablation_verdict(deltas: Mapping[str, float]) -> str:
    """§7.5: KEEP iff removing the mechanism degrades an honest metric beyond noise;
    DELETE when every Δ is 0 or within noise, or when the removal *improves* one beyond
    noise (a demonstrated harm)."""
    if any(d < -NOISE for d in deltas.values()):
        return "KEEP"
    if any(d > NOISE for d in deltas.values()):
        return "DELETE (harm: removing it improves the metrics)"
    if all(d == 0 for d in deltas.values()):
        return "DELETE (Δ = 0)"
    return f"DELETE (|Δ| ≤ {NOISE:.0%})"


def compare(
    mechanism: str, how: str, base: Mapping[str, Any], got: Mapping[str, Any], notes: Sequence[str] = ()
) -> Ablation:
    hb, hg = _honest(base), _honest(got)
    deltas = {k: hg[k] - hb[k] for k in hb}
    notes = (
        *notes,
        f"wall {base['wall_s']:.1f}s → {got['wall_s']:.1f}s (Δ {got['wall_s'] - base['wall_s']:+.1f}s; cost, not an honest metric of §7.5)",
    )
    return Ablation(mechanism, how, dict(got), deltas, ablation_verdict(deltas), tuple(notes))


def write_confusion_png(path: str, title: str, cats: Sequence[str], grid: Sequence[Sequence[int]]) -> bool:
    """One confusion matrix as a PNG (matplotlib, Agg); False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    n = len(cats)
    fig, ax = plt.subplots(figsize=(1.0 + 0.6 * n, 1.0 + 0.55 * n), dpi=100)
    try:
        ax.imshow(grid, cmap="Blues")
        ax.set_xticks(range(n), labels=list(cats), rotation=60, ha="right", fontsize=8)
        ax.set_yticks(range(n), labels=list(cats), fontsize=8)
        ax.set_xlabel("predicted")
        ax.set_ylabel("labelled")
        ax.set_title(title, fontsize=9)
        top = max((v for row in grid for v in row), default=0)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if v:
                    ax.text(
                        j,
                        i,
                        str(v),
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="white" if v > top / 2 else "black",
                    )
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return True


def _frac(s: Mapping[str, Any], which: str) -> str:
    t = s[which]
    if not t["total"]:
        return "no labels"
    return f"{t['exact']}/{t['total']}" if t["known"] else "— (cannot tell)"


def render(report: AbReport) -> str:
    """The §7.4 decision table and the §7.5 ablation table, as text."""
    c = report.corpus
    out = [
        f"aexec ab: {len(c.cases)} cases from {c.path} (labels: {c.labels_from})",
        "",
        "§7.4 decision table",
    ]
    out.append(
        f"{'system':<22}{'verdict acc':>12}{'macro-F1':>10}{'class acc':>11}{'f2p exact':>16}{'p2p exact':>16}{'wall s':>9}"
    )
    for name, s in report.systems.items():
        out.append(
            f"{name:<22}{s['verdict_accuracy']:>12.3f}{s['macro_f1']:>10.3f}{s['class_accuracy']:>11.3f}"
            f"{_frac(s, 'f2p'):>16}{_frac(s, 'p2p'):>16}{s['wall_s']:>9.1f}"
        )
    out += ["", "failure classes: precision / recall / F1 (n labelled)"]
    names = list(report.systems)
    out.append(f"{'class':<12}{'n':>4}  " + "".join(f"{n[:20]:>22}" for n in names))
    first = report.systems[names[0]]["per_class"]
    for cls, v in first.items():
        cells = []
        for n in names:
            pc = report.systems[n]["per_class"][cls]
            cells.append(f"{pc['precision']:.2f}/{pc['recall']:.2f}/{pc['f1']:.2f}")
        out.append(f"{cls:<12}{v['labelled']:>4}  " + "".join(f"{x:>22}" for x in cells))
    out.append(
        f"{'macro F1':<12}{'':>4}  " + "".join(f"{report.systems[n]['macro_f1']:>22.3f}" for n in names)
    )
    out += ["", f"decision: {report.decision}"]
    out += [f"note: {n}" for n in report.notes]
    if report.ablations:
        out += [
            "",
            f"§7.5 ablations (Δ = without − with; KEEP iff an honest metric drops by more than {NOISE:.2f};"
            " DELETE iff Δ = 0 or |Δ| ≤ 0.05)",
        ]
        out.append(f"{'mechanism':<15}{'Δ verdict acc':>14}{'Δ macro-F1':>12}{'Δ f2p exact':>13}  verdict")
        for ab in report.ablations:
            d = ab.deltas
            if "selection_success" in d:
                out.append(
                    f"{ab.mechanism:<15}{'Δ selection success':>39} {d['selection_success']:+.3f}  {ab.verdict}"
                )
            else:
                vals = [d.get("verdict_accuracy"), d.get("macro_f1"), d.get("f2p_exact")]
                txt = [("—" if x is None else f"{x:+.3f}") for x in vals]
                out.append(f"{ab.mechanism:<15}{txt[0]:>14}{txt[1]:>12}{txt[2]:>13}  {ab.verdict}")
            out.append(f"    removed: {ab.how}")
            out += [f"    {n}" for n in ab.notes]
    if report.pictures:
        out += ["", "confusion matrices: " + ", ".join(report.pictures)]
    return "\n".join(out)


def report_json(report: AbReport) -> dict[str, Any]:
    return {
        "corpus": report.corpus.path,
        "cases": len(report.corpus.cases),
        "labels": report.corpus.labels_from,
        "systems": report.systems,
        "decision": report.decision,
        "wins": report.wins,
        "ablations": [attrs.asdict(a) for a in report.ablations],
        "pictures": list(report.pictures),
        "notes": list(report.notes),
        "per_case": list(report.per_case),
    }
