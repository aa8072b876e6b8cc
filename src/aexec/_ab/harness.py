"""The §7 A/B harness: the pipeline against two naive baselines, and the §7.5 ablations.

``aexec ab CORPUS [--labels FILE] [--ablate MECH ...]`` runs, on the identical labelled
corpus (`corpus`) and in one process:

* **pipeline** — `observe_many`, with a fresh behavioural cache;
* **baseline A** — a bare subprocess of each case (`naive`), judged by its exit code
  (pass iff 0; ``timeout`` on a timeout, else ``runtime``);
* **baseline B** — A plus the last exception-like name in the raw stdout+stderr;

and prints the §7.4 decision table (`report`): verdict accuracy, failure-class precision /
recall / F1 per class and macro (`metrics`), FAIL_TO_PASS / PASS_TO_PASS agreement, wall
time, and the decision (the pipeline wins iff it is strictly better than both baselines
on verdict accuracy AND macro-F1). The baselines run under the same 512 MiB address-space
cap the pipeline declares, nothing else. ``--ablate`` re-measures the pipeline with one
mechanism removed and prints Δ per metric with the §7.5 verdict (see `_ablate`).

This module measures; it never changes what `observe` does for anyone else. The one
ablations it asks for (`Options.ablate`) hold for one ablated call only.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
import attrs

from .._api import observe_many
from .._discrimination.discriminate import Discrimination, discriminate
from .._discrimination.probe import Prober
from .._errors import RequestError
from .._options import Options
from .._records import ExecutionObservation, Policy
from .._types import MAX_RAM_MIB
from .corpus import Corpus, SelectionTask, load_selection
from .metrics import SystemRun, confusion, prediction, score, tagged
from .naive import Prediction, baseline_a, baseline_b, guess_class, naive_run
from .report import Ablation, AbReport, ablation_verdict, compare, report_json, write_confusion_png

__all__ = ["MECHANISMS", "run_ab", "run_baselines", "run_pipeline", "selected", "selection_success"]

#: What ``--ablate`` can remove (spec §7.5): normalization (§7.5.1), the four other
#: mechanisms of §7.5.2, and the probe step (§7.5.3).
MECHANISMS: Final = ("normalization", "isolation", "empty-success", "anti-gaming", "cache", "probe")
NOT_RUN_REPAIR: Final = (
    "§7.5.1 repair accuracy (normalized failure vs raw transcript → a model's repair): NOT RUN — "
    "it needs a model that repairs from each form; aexec ab has no repair loop, and no figure is reported."
)


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
    options: Options,
    jobs: int | None,
    cache_dir: str | None,
    disabled: frozenset[str] = frozenset(),
    lift_caps: bool = False,
) -> tuple[SystemRun, list[ExecutionObservation]]:
    """`observe_many` over the corpus with ``options`` (the caller's: the CLI reads the
    environment, this does not), ``disabled`` mechanisms removed (`Options.ablate`) and,
    with ``lift_caps``, every declared resource cap raised to its maximum."""
    candidates = [c.candidate for c in corpus.cases]
    if lift_caps:
        cores = float(os.cpu_count() or 1)
        candidates = [
            attrs.evolve(c, policy=Policy(timeout_s=c.policy.timeout_s, ram_mib=MAX_RAM_MIB, cpu_cores=cores))
            for c in candidates
        ]
    t0 = time.monotonic()
    # (attrs' stub types a converter's input, here ``ablate``'s, as an unbound TypeVar.)
    run_options = attrs.evolve(options, limit=jobs, cache_dir=cache_dir, ablate=disabled)  # type: ignore[arg-type]
    observations = await observe_many(candidates, options=run_options)
    wall = time.monotonic() - t0
    run = SystemRun(
        name=name,
        predictions=tuple(prediction(o) for o in observations),
        f2p=tuple(tagged(o, "f2p") for o in observations),
        p2p=tuple(tagged(o, "p2p") for o in observations),
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
# The A/B run and its ablations
# --------------------------------------------------------------------------------------


async def run_ab(
    corpus: Corpus,
    *,
    jobs: int | None = None,
    options: Options | None = None,
    ablate: Sequence[str] = (),
    out_dir: str | None = None,
    prober: Prober | None = None,
    selection: str | None = None,
) -> AbReport:
    """The §7 A/B run: pipeline and both baselines on ``corpus``, then each ablation.
    ``options`` is how aexec runs (default `Options()`); ``jobs``, the cache and the
    ablated mechanisms are set here, per run.

    **Cancellation:** cancelling kills every running candidate (see `observe_many`);
    baseline runs already on a thread finish first.
    """
    for m in ablate:
        if m not in MECHANISMS:
            raise RequestError(f"--ablate: unknown mechanism {m!r} (expected one of {', '.join(MECHANISMS)})")
    if selection is not None:
        load_selection(selection)  # reject a bad file before anything runs
    options = Options() if options is None else options
    notes: list[str] = []
    cache = tempfile.mkdtemp(prefix="aexec-ab-cache-")
    try:
        pipe, observations = await run_pipeline(corpus, options=options, jobs=jobs, cache_dir=cache)
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
                m,
                corpus,
                observations,
                p,
                options=options,
                jobs=jobs,
                cache=cache,
                prober=prober,
                selection=selection,
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
        text = json.dumps(report_json(report), indent=1)
        await anyio.Path(out_dir, "ab.json").write_text(text, encoding="utf-8")
    return report


async def _ablate(
    m: str,
    corpus: Corpus,
    observations: Sequence[ExecutionObservation],
    base: Mapping[str, Any],
    *,
    options: Options,
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
            tuple(tagged(o, "f2p") for o in observations),
            tuple(tagged(o, "p2p") for o in observations),
            base["wall_s"],
            "post-processed from the pipeline's own observations: the stage is pure",
        )
        return compare(
            m,
            how + " (applied to the pipeline run's observations: the stage is pure)",
            base,
            score(corpus, run),
        ), run
    if m == "isolation":
        run, _ = await run_pipeline(
            corpus, name="no-isolation", options=options, jobs=1, cache_dir=None, lift_caps=True
        )
        how = (
            "every declared resource cap lifted to its maximum (RAM "
            f"{MAX_RAM_MIB} MiB address space, CPU = all cores); the wall-clock deadline stays; "
            "run one candidate at a time so an uncapped allocation cannot starve the host"
        )
        return compare(
            m, how, base, score(corpus, run), ("jobs=1 in this run: its wall time is not comparable",)
        ), run
    if m == "anti-gaming":
        run, _ = await run_pipeline(
            corpus,
            name="no-anti-gaming",
            options=options,
            jobs=jobs,
            cache_dir=None,
            disabled=frozenset({"antigaming"}),
        )
        how = "no confirming re-run of a passing suite and no diff-scope (tamper) check"
        return compare(m, how, base, score(corpus, run)), run
    if m == "cache":
        run, _ = await run_pipeline(
            corpus, name="no-cache", options=options, jobs=jobs, cache_dir=None, disabled=frozenset({"cache"})
        )
        warm, _ = await run_pipeline(
            corpus, name="pipeline-warm", options=options, jobs=jobs, cache_dir=cache
        )
        how = "no disk cache and no in-process dedup (every before-run and identical request runs)"
        notes: tuple[str, ...] = (
            f"the same corpus again on the pipeline's now-warm cache: {warm.wall_s:.1f}s",
        )
        if warm.predictions != tuple(prediction(o) for o in observations):
            notes += ("WARNING: the warm cache changed a prediction",)
        return compare(m, how, base, score(corpus, run), notes), run
    # probe
    how = (
        "the probe step removed: the observe path never calls a model, so the fidelity Δ is 0 by construction"
    )
    got = dict(base)
    abl = compare(m, how, base, got)
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
        m, "no probe vs probe on the selection corpus", None, deltas, ablation_verdict(deltas), lines
    ), None
