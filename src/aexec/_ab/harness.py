"""The §7 A/B harness: the pipeline against two naive baselines, and the §7.5 ablations.

``aexec ab CORPUS [--labels FILE] [--ablate MECH ...]`` runs, on the identical labelled
corpus and in one process:

* **pipeline** — `observe_many`, with a fresh behavioural cache;
* **baseline A** — a bare ``subprocess.run`` of each case, judged by its exit code
  (pass iff 0; ``timeout`` on a timeout, else ``runtime``);
* **baseline B** — A plus the last exception-like name in the raw stdout+stderr;

and prints the §7.4 decision table: verdict accuracy, failure-class precision / recall /
F1 per class and macro, FAIL_TO_PASS / PASS_TO_PASS agreement, wall time, and the
decision (the pipeline wins iff it is strictly better than both baselines on verdict
accuracy AND macro-F1). The baselines run under the same 512 MiB address-space cap the
pipeline declares, nothing else. ``--ablate`` re-measures the pipeline with one
mechanism removed and prints Δ per metric with the §7.5 verdict (see `ablate`).

This module measures; it never changes what `observe` does for anyone else. The one
ablations it asks for (`Options.ablate`) hold for one ablated call only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
import attrs

from .._api import observe_many, validate
from .._discrimination.discriminate import Discrimination, discriminate
from .._discrimination.probe import Prober
from .._errors import RequestError
from .._options import Options
from .._records import Candidate, ExecutionObservation, Policy
from .._serde import candidate as candidate_from_json
from .._types import MAX_RAM_MIB

__all__ = [
    "CLASSES",
    "MECHANISMS",
    "AbReport",
    "Case",
    "Corpus",
    "Label",
    "baseline_a",
    "baseline_b",
    "load_corpus",
    "metrics",
    "naive_run",
    "render",
    "run_ab",
]

#: The failure-class vocabulary in the order the tables print it.
CLASSES: Final = ("compile", "syntax", "assertion", "runtime", "timeout", "resource", "type", "dependency")
VERDICTS: Final = ("pass", "fail", "empty_success", "tampered", "error")
#: What ``--ablate`` can remove (spec §7.5): normalization (§7.5.1), the four other
#: mechanisms of §7.5.2, and the probe step (§7.5.3).
MECHANISMS: Final = ("normalization", "isolation", "empty-success", "anti-gaming", "cache", "probe")
#: §7.5: a removal whose Δ stays within this (absolute, on 0..1 metrics) is noise.
NOISE: Final = 0.05
#: The naive baselines' RAM cap: the one the pipeline declares by default (§3.2).
BASELINE_RAM_MIB: Final = 512
MODE_DEFAULT_TIMEOUT: Final = {
    "build_check": 60,
    "run_entry": 30,
    "run_suite": 120,
    "probe": 30,
    "discriminate": 30,
}
CAP_LAUNCHER: Final = (
    "import os, resource, sys\n"
    "cap = int(sys.argv[1]) * 1024 * 1024\n"
    "resource.setrlimit(resource.RLIMIT_AS, (cap, cap))\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)
EXC_RE: Final = re.compile(r"\b(\w+(?:Error|Exception|Exit))\b")
NAME_CLASS: Final = {
    "SyntaxError": "syntax",
    "IndentationError": "syntax",
    "TabError": "syntax",
    "ImportError": "dependency",
    "ModuleNotFoundError": "dependency",
    "TypeError": "type",
    "AssertionError": "assertion",
    "MemoryError": "resource",
}
NOT_RUN_REPAIR: Final = (
    "§7.5.1 repair accuracy (normalized failure vs raw transcript → a model's repair): NOT RUN — "
    "it needs a model that repairs from each form; aexec ab has no repair loop, and no figure is reported."
)

Prediction = tuple[str | None, str | None]


# --------------------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------------------


@attrs.frozen
class Label:
    """What a case is known (by construction) to be."""

    verdict: str
    failure_class: str | None
    f2p: tuple[str, ...] | None = None
    p2p: tuple[str, ...] | None = None


@attrs.frozen
class Case:
    line: int
    #: The request as written (without ``label``); the baselines run it from this.
    request: dict[str, Any]
    candidate: Candidate
    label: Label


@attrs.frozen
class Corpus:
    path: str
    #: Where relative ``repo`` paths point from: the cases file's directory.
    base: str
    cases: tuple[Case, ...]
    labels_from: str


def _tests(value: Any, where: str, name: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequestError(f"{where}: label `{name}` must be a list of test ids or null")
    return tuple(sorted(value))


def parse_label(data: Any, where: str) -> Label:
    """A label object → `Label`; raises `RequestError` naming ``where`` and the field."""
    if not isinstance(data, dict):
        raise RequestError(f"{where}: a label must be an object, got {type(data).__name__}")
    verdict = data.get("verdict")
    if verdict not in VERDICTS:
        raise RequestError(f"{where}: label verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    cls = data.get("failure_class")
    if verdict == "fail" and cls not in CLASSES:
        raise RequestError(
            f"{where}: a `fail` label needs failure_class in {', '.join(CLASSES)}, got {cls!r}"
        )
    if verdict != "fail" and cls is not None:
        raise RequestError(f"{where}: a {verdict!r} label must have failure_class null, got {cls!r}")
    return Label(verdict, cls, _tests(data.get("f2p"), where, "f2p"), _tests(data.get("p2p"), where, "p2p"))


def _read_jsonl(path: str) -> list[tuple[int, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise RequestError(f"{path}: cannot read: {e}") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((number, json.loads(line)))
        except ValueError as e:
            raise RequestError(f"{path}:{number}: bad JSON: {e}") from None
    return out


def _labels_file(path: str) -> dict[str, Label]:
    """``--labels``: JSONL, one ``{"id": ..., "verdict": ..., "failure_class": ..., "f2p": ...}``
    (or ``{"id": ..., "label": {...}}``) per line."""
    out: dict[str, Label] = {}
    for number, data in _read_jsonl(path):
        where = f"{path}:{number}"
        if not isinstance(data, dict) or not isinstance(data.get("id"), str | int):
            raise RequestError(f"{where}: a label line needs an `id`")
        key = str(data["id"])
        if key in out:
            raise RequestError(f"{where}: a second label for id {key!r}")
        body = data["label"] if "label" in data else {k: v for k, v in data.items() if k != "id"}
        out[key] = parse_label(body, where)
    return out


def _request_candidate(request: dict[str, Any], base: str, where: str) -> Candidate:
    """A request line as a checked candidate, its repo relative to the corpus dir."""
    try:
        cand, _ = candidate_from_json(request)
        if cand.repo is not None:
            cand = attrs.evolve(cand, repo=os.path.normpath(os.path.join(base, cand.repo)))
        validate(cand)
    except RequestError as e:
        raise RequestError(f"{where}: {e}") from None
    return cand


def load_corpus(path: str, labels: str | None = None) -> Corpus:
    """A labelled corpus: ``path`` is a cases JSONL (the contract's requests) or a directory
    holding ``cases.jsonl``. Labels come from each line's ``label`` or from ``labels``.
    Raises `RequestError` naming the file and line of the first problem."""
    cases_path = os.path.join(path, "cases.jsonl") if os.path.isdir(path) else path
    base = os.path.dirname(os.path.abspath(cases_path))
    from_file = None if labels is None else _labels_file(labels)
    out: list[Case] = []
    seen: set[str] = set()
    for number, data in _read_jsonl(cases_path):
        where = f"{cases_path}:{number}"
        if not isinstance(data, dict):
            raise RequestError(f"{where}: a request must be a JSON object")
        request = {k: v for k, v in data.items() if k != "label"}
        ident = request.get("id")
        key = None if ident is None else str(ident)
        if key is not None and key in seen:
            raise RequestError(f"{where}: duplicate id {key!r}")
        if key is not None:
            seen.add(key)
        if from_file is not None:
            if key is None or key not in from_file:
                raise RequestError(f"{where}: no label for id {ident!r} in {labels}")
            label = from_file[key]
        elif "label" in data:
            label = parse_label(data["label"], where)
        else:
            raise RequestError(f"{where}: no `label` on the line (give one, or --labels FILE)")
        cand = _request_candidate(request, base, where)
        out.append(Case(number, request, cand, label))
    if not out:
        raise RequestError(f"{cases_path}: no cases")
    return Corpus(cases_path, base, tuple(out), labels or "inline `label` fields")


# --------------------------------------------------------------------------------------
# The naive baselines (spec §7: "bare subprocess.run + raw stdout")
# --------------------------------------------------------------------------------------


def case_timeout(request: Mapping[str, Any]) -> float:
    pol = request.get("policy") or {}
    return float(pol.get("timeout_s", MODE_DEFAULT_TIMEOUT[request["request_type"]]))


def naive_run(request: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """Run one request the naive way (a copy of the repo, ``git apply``, a bare subprocess
    under a 512 MiB RLIMIT_AS, killed by process group at the deadline); return its exit
    code, whether it timed out, its raw output and duration. Blocking."""
    tmo = case_timeout(request)
    with tempfile.TemporaryDirectory(prefix="aexec-naive-") as td:
        if "repo" in request:
            work = Path(td) / "repo"
            shutil.copytree(Path(base) / request["repo"], work, symlinks=True)
            if request.get("patch"):
                pf = Path(td) / "candidate.patch"
                pf.write_text(request["patch"])
                env = dict(os.environ, GIT_CEILING_DIRECTORIES=td)
                r = subprocess.run(
                    ["git", "apply", "-p1", str(pf)], cwd=work, capture_output=True, text=True, env=env
                )
                if r.returncode != 0:
                    return {
                        "rc": r.returncode,
                        "timed_out": False,
                        "output": r.stdout + r.stderr,
                        "duration": 0.0,
                    }
        else:
            work = Path(td) / "scratch"
            work.mkdir()
        rt, shape = request["request_type"], request["artifact_shape"]
        if shape == "command":
            argv = list(request["command"])
        elif rt == "run_suite" or (rt == "discriminate" and "code" not in request):
            argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *request.get("tests", [])]
        elif rt == "build_check":
            if "code" in request:
                f = Path(td) / "candidate.py"
                f.write_text(request["code"])
                argv = [sys.executable, "-m", "py_compile", str(f)]
            else:
                argv = [sys.executable, "-m", "compileall", "-q", "."]
        else:  # run_entry / probe snippets
            argv = [sys.executable, "-c", request["code"]]
        argv = [sys.executable, "-c", CAP_LAUNCHER, str(BASELINE_RAM_MIB), *argv]
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            out, err = proc.communicate(timeout=tmo)
            return {
                "rc": proc.returncode,
                "timed_out": False,
                "output": out + err,
                "duration": time.monotonic() - t0,
            }
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return {
                "rc": None,
                "timed_out": True,
                "output": (out or "") + (err or ""),
                "duration": time.monotonic() - t0,
            }


def baseline_a(run: Mapping[str, Any]) -> Prediction:
    """Exit code only."""
    if run["timed_out"]:
        return "fail", "timeout"
    if run["rc"] == 0:
        return "pass", None
    return "fail", "runtime"


def guess_class(text: str) -> str:
    """The class of the last exception-like name in ``text`` (``runtime`` if none)."""
    names = EXC_RE.findall(text)
    return NAME_CLASS.get(names[-1], "runtime") if names else "runtime"


def baseline_b(run: Mapping[str, Any]) -> Prediction:
    """Exit code + the last exception-like name in the raw stdout+stderr."""
    if run["timed_out"]:
        return "fail", "timeout"
    if run["rc"] == 0:
        return "pass", None
    return "fail", guess_class(run["output"])


# --------------------------------------------------------------------------------------
# Metrics (spec §7.1, §7.2)
# --------------------------------------------------------------------------------------


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


def _tagged(obs: ExecutionObservation, which: str) -> tuple[str, ...]:
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


# --------------------------------------------------------------------------------------
# Running the systems
# --------------------------------------------------------------------------------------


def _last_line(obs: ExecutionObservation) -> str:
    for stream in (obs.stderr, obs.stdout):
        lines = [ln for ln in stream.splitlines() if ln.strip()]
        if lines:
            return lines[-1]
    return ""


def _without_normalization(obs: ExecutionObservation) -> Prediction:
    """The raw transcript instead of the normalized class: a failing run's class is
    guessed from the last non-empty line of its output (stderr first)."""
    if obs.verdict != "fail":
        return prediction(obs)
    return "fail", "timeout" if obs.timed_out else guess_class(_last_line(obs))


def _without_empty_success_guard(obs: ExecutionObservation) -> Prediction:
    """Nothing failed and no test ran: without the guard that is a pass."""
    return ("pass", None) if obs.verdict == "empty_success" else prediction(obs)


async def run_pipeline(
    corpus: Corpus,
    *,
    name: str = "pipeline",
    jobs: int | None,
    cache_dir: str | None,
    disabled: frozenset[str] = frozenset(),
    lift_caps: bool = False,
) -> tuple[SystemRun, list[ExecutionObservation]]:
    """`observe_many` over the corpus, with ``disabled`` mechanisms removed
    (`Options.ablate`) and, with ``lift_caps``, every declared resource cap raised to its maximum."""
    candidates = [c.candidate for c in corpus.cases]
    if lift_caps:
        cores = float(os.cpu_count() or 1)
        candidates = [
            attrs.evolve(c, policy=Policy(timeout_s=c.policy.timeout_s, ram_mib=MAX_RAM_MIB, cpu_cores=cores))
            for c in candidates
        ]
    t0 = time.monotonic()
    observations = await observe_many(
        candidates, options=Options.from_env(limit=jobs, cache_dir=cache_dir, ablate=disabled)
    )
    wall = time.monotonic() - t0
    run = SystemRun(
        name=name,
        predictions=tuple(prediction(o) for o in observations),
        f2p=tuple(_tagged(o, "f2p") for o in observations),
        p2p=tuple(_tagged(o, "p2p") for o in observations),
        wall_s=wall,
    )
    return run, observations


async def run_baselines(
    corpus: Corpus, *, jobs: int | None
) -> tuple[SystemRun, SystemRun, list[dict[str, Any]]]:
    """Both baselines from one naive run of every case (on worker threads).

    **Cancellation:** a naive run already started on a thread finishes (at worst at its
    deadline) before the cancellation propagates.
    """
    limiter = anyio.CapacityLimiter(jobs or os.cpu_count() or 1)
    runs: list[dict[str, Any]] = [{} for _ in corpus.cases]
    base = Path(corpus.base)

    async def one(i: int) -> None:
        runs[i] = await anyio.to_thread.run_sync(naive_run, corpus.cases[i].request, base, limiter=limiter)

    t0 = time.monotonic()
    async with anyio.create_task_group() as tg:
        for i in range(len(corpus.cases)):
            tg.start_soon(one, i)
    wall = time.monotonic() - t0
    none: tuple[None, ...] = (None,) * len(runs)
    note = "both baselines are judged from the same naive runs (one wall time)"
    a = SystemRun("baseline_A_exitcode", tuple(baseline_a(r) for r in runs), none, none, wall, note)
    b = SystemRun("baseline_B_exc_regex", tuple(baseline_b(r) for r in runs), none, none, wall, note)
    return a, b, runs


# --------------------------------------------------------------------------------------
# The §7.5.3 instrument: does the probe step improve selection?
# --------------------------------------------------------------------------------------


@attrs.frozen
class SelectionTask:
    task: str
    question: str | None
    candidates: tuple[Candidate, ...]
    correct: frozenset[int]


def load_selection(path: str) -> tuple[SelectionTask, ...]:
    """A discrimination corpus: request lines (``request_type: discriminate``) with
    ``task`` (str), ``correct`` (bool) and optionally ``property``; lines of one task
    share repo and tests. Raises `RequestError` naming the line."""
    base = os.path.dirname(os.path.abspath(path))
    tasks: dict[str, list[tuple[int, Candidate, bool, str | None]]] = {}
    for number, data in _read_jsonl(path):
        where = f"{path}:{number}"
        if not isinstance(data, dict) or not isinstance(data.get("task"), str):
            raise RequestError(f"{where}: a selection line needs a string `task`")
        if not isinstance(data.get("correct"), bool):
            raise RequestError(f"{where}: a selection line needs a boolean `correct`")
        request = {k: v for k, v in data.items() if k not in ("task", "correct", "property")}
        cand = _request_candidate(request, base, where)
        prop = data.get("property")
        tasks.setdefault(data["task"], []).append(
            (number, cand, data["correct"], prop if isinstance(prop, str) else None)
        )
    out = []
    for name, rows in tasks.items():
        if len(rows) < 2 or not any(r[2] for r in rows) or all(r[2] for r in rows):
            raise RequestError(
                f"{path}:{rows[0][0]}: task {name!r} needs 2+ candidates, some correct and some not"
            )
        question = next((r[3] for r in rows if r[3]), None)
        out.append(
            SelectionTask(
                name, question, tuple(r[1] for r in rows), frozenset(i for i, r in enumerate(rows) if r[2])
            )
        )
    return tuple(out)


def selected(result: Discrimination) -> tuple[int, ...] | None:
    """The instrument's selection rule: the one group ranked highest by (verdict is pass,
    tests passed, probes ``ok``); None when two groups tie at the top."""

    def rank(g: Any) -> tuple[int, int, int]:
        return (g.verdict == "pass", len(g.passed), sum(o == "ok" for _, o in g.probes))

    ranked = sorted(result.groups, key=rank, reverse=True)
    if len(ranked) > 1 and rank(ranked[0]) == rank(ranked[1]):
        return None
    return tuple(ranked[0].members)


async def selection_success(
    tasks: Sequence[SelectionTask], *, prober: Prober | None, jobs: int | None, cache_dir: str | None = None
) -> tuple[float, list[dict[str, Any]]]:
    """Fraction of tasks whose selected group is non-empty and holds only correct candidates."""
    rows: list[dict[str, Any]] = []
    for t in tasks:
        result = await discriminate(
            t.candidates, property=t.question, prober=prober, limit=jobs, cache_dir=cache_dir
        )
        pick = selected(result)
        ok = pick is not None and set(pick) <= t.correct
        rows.append({"task": t.task, "selected": pick, "success": ok, "probe": result.probe.outcome})
    return (sum(r["success"] for r in rows) / len(rows) if rows else 0.0), rows


# --------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------


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


def verdict_of(deltas: Mapping[str, float]) -> str:
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


def _compare(
    mechanism: str, how: str, base: Mapping[str, Any], got: Mapping[str, Any], notes: Sequence[str] = ()
) -> Ablation:
    hb, hg = _honest(base), _honest(got)
    deltas = {k: hg[k] - hb[k] for k in hb}
    notes = (
        *notes,
        f"wall {base['wall_s']:.1f}s → {got['wall_s']:.1f}s (Δ {got['wall_s'] - base['wall_s']:+.1f}s; cost, not an honest metric of §7.5)",
    )
    return Ablation(mechanism, how, dict(got), deltas, verdict_of(deltas), tuple(notes))


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


async def run_ab(
    corpus: Corpus,
    *,
    jobs: int | None = None,
    ablate: Sequence[str] = (),
    out_dir: str | None = None,
    prober: Prober | None = None,
    selection: str | None = None,
) -> AbReport:
    """The §7 A/B run: pipeline and both baselines on ``corpus``, then each ablation.

    **Cancellation:** cancelling kills every running candidate (see `observe_many`);
    baseline runs already on a thread finish first.
    """
    for m in ablate:
        if m not in MECHANISMS:
            raise RequestError(f"--ablate: unknown mechanism {m!r} (expected one of {', '.join(MECHANISMS)})")
    if selection is not None:
        load_selection(selection)  # reject a bad file before anything runs
    notes: list[str] = []
    cache = tempfile.mkdtemp(prefix="aexec-ab-cache-")
    try:
        pipe, observations = await run_pipeline(corpus, jobs=jobs, cache_dir=cache)
        a, b, _naive = await run_baselines(corpus, jobs=jobs)
        runs = {r.name: r for r in (pipe, a, b)}
        systems = {name: score(corpus, r) for name, r in runs.items()}
        p = systems["pipeline"]
        others = [systems[a.name], systems[b.name]]
        wins = all(
            p["verdict_accuracy"] > o["verdict_accuracy"] and p["macro_f1"] > o["macro_f1"] for o in others
        )
        decision = (
            "pipeline WINS: strictly better verdict accuracy AND macro-F1 than both baselines"
            if wins
            else "pipeline does NOT win: it is not strictly better than both baselines on verdict accuracy AND macro-F1"
        )
        notes.append(
            "resolve rate / cost / tokens (§7.3, §7.4): not measured — no model is in this loop;"
            " the observation path itself makes no model call"
        )
        ablations: list[Ablation] = []
        extra_runs: list[SystemRun] = []
        for m in dict.fromkeys(ablate):
            abl, run = await _ablate(
                m, corpus, observations, p, jobs=jobs, cache=cache, prober=prober, selection=selection
            )
            ablations.append(abl)
            if run is not None:
                extra_runs.append(run)
        if "normalization" in ablate:
            notes.append(NOT_RUN_REPAIR)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    pictures: list[str] = []
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        for r in (pipe, a, b, *extra_runs):
            cats, grid = confusion(corpus, r)
            path = os.path.join(out_dir, f"confusion-{r.name}.png")
            if write_confusion_png(path, f"{r.name} on {len(corpus.cases)} cases", cats, grid):
                pictures.append(path)
            else:
                notes.append("no confusion-matrix PNG: matplotlib is not installed (pip install 'aexec[ab]')")
                break
    per_case = tuple(
        {
            "id": c.candidate.id,
            "label": [c.label.verdict, c.label.failure_class],
            **{r.name: list(r.predictions[i]) for r in (pipe, a, b, *extra_runs)},
        }
        for i, c in enumerate(corpus.cases)
    )
    report = AbReport(
        corpus, systems, decision, wins, tuple(ablations), tuple(pictures), tuple(notes), per_case
    )
    if out_dir is not None:
        text = json.dumps(_report_json(report), indent=1)
        await anyio.Path(out_dir, "ab.json").write_text(text, encoding="utf-8")
    return report


async def _ablate(
    m: str,
    corpus: Corpus,
    observations: Sequence[ExecutionObservation],
    base: Mapping[str, Any],
    *,
    jobs: int | None,
    cache: str,
    prober: Prober | None,
    selection: str | None,
) -> tuple[Ablation, SystemRun | None]:
    if m in ("normalization", "empty-success"):
        fn = _without_normalization if m == "normalization" else _without_empty_success_guard
        how = (
            "the class of a failing run guessed from the last line of its raw output (stderr first)"
            if m == "normalization"
            else "an empty success (nothing failed, no test ran) counted as a pass"
        )
        run = SystemRun(
            f"no-{m}",
            tuple(fn(o) for o in observations),
            tuple(_tagged(o, "f2p") for o in observations),
            tuple(_tagged(o, "p2p") for o in observations),
            base["wall_s"],
            "post-processed from the pipeline's own observations: the stage is pure",
        )
        return _compare(
            m,
            how + " (applied to the pipeline run's observations: the stage is pure)",
            base,
            score(corpus, run),
        ), run
    if m == "isolation":
        run, _ = await run_pipeline(corpus, name="no-isolation", jobs=1, cache_dir=None, lift_caps=True)
        how = (
            "every declared resource cap lifted to its maximum (RAM "
            f"{MAX_RAM_MIB} MiB address space, CPU = all cores); the wall-clock deadline stays; "
            "run one candidate at a time so an uncapped allocation cannot starve the host"
        )
        return _compare(
            m, how, base, score(corpus, run), ("jobs=1 in this run: its wall time is not comparable",)
        ), run
    if m == "anti-gaming":
        run, _ = await run_pipeline(
            corpus, name="no-anti-gaming", jobs=jobs, cache_dir=None, disabled=frozenset({"antigaming"})
        )
        how = "no confirming re-run of a passing suite and no diff-scope (tamper) check"
        return _compare(m, how, base, score(corpus, run)), run
    if m == "cache":
        run, _ = await run_pipeline(
            corpus, name="no-cache", jobs=jobs, cache_dir=None, disabled=frozenset({"cache"})
        )
        warm, _ = await run_pipeline(corpus, name="pipeline-warm", jobs=jobs, cache_dir=cache)
        how = "no disk cache and no in-process dedup (every before-run and identical request runs)"
        notes: tuple[str, ...] = (
            f"the same corpus again on the pipeline's now-warm cache: {warm.wall_s:.1f}s",
        )
        if warm.predictions != tuple(prediction(o) for o in observations):
            notes += ("WARNING: the warm cache changed a prediction",)
        return _compare(m, how, base, score(corpus, run), notes), run
    # probe
    how = (
        "the probe step removed: the observe path never calls a model, so the fidelity Δ is 0 by construction"
    )
    got = dict(base)
    abl = _compare(m, how, base, got)
    if prober is None or selection is None:
        why = (
            "no probe client configured (set AEXEC_PROBE_BASE_URL and AEXEC_PROBE_MODEL)"
            if prober is None
            else "no --selection corpus given"
        )
        return (
            attrs.evolve(
                abl,
                verdict="NOT MEASURED — the step stays absent unless a client is configured (an empty L column is permitted)",
                notes=(
                    f"§7.5.3 probe selection value: NOT RUN — {why}; no model answer is faked into a figure",
                ),
            ),
            None,
        )
    tasks = load_selection(selection)
    without, rows0 = await selection_success(tasks, prober=None, jobs=jobs, cache_dir=cache)
    with_probe, rows1 = await selection_success(tasks, prober=prober, jobs=jobs, cache_dir=cache)
    deltas = {"selection_success": without - with_probe}
    lines = (
        f"§7.5.3 selection success on {len(tasks)} tasks: probe {with_probe:.3f}, no probe {without:.3f}",
        *(
            f"{r1['task']}: probe {'✓' if r1['success'] else '✗'} ({r1['probe']}); no probe {'✓' if r0['success'] else '✗'}"
            for r0, r1 in zip(rows0, rows1, strict=True)
        ),
    )
    return Ablation(
        m, "no probe vs probe on the selection corpus", None, deltas, verdict_of(deltas), lines
    ), None


# --------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------


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


def _report_json(report: AbReport) -> dict[str, Any]:
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
