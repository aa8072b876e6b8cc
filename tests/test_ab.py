"""The §7 harness: `aexec ab` as a real subprocess on a small labelled corpus of real
runs, the metrics and the §7.5 rule from known inputs, and the §7.5.3 instrument."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aexec import RequestError, ScriptedProber
from aexec._ab.corpus import Label, load_corpus, load_selection, parse_label
from aexec._ab.harness import selection_success
from aexec._ab.metrics import metrics
from aexec._ab.naive import guess_class
from aexec._ab.report import ablation_verdict

from .conftest import EXAMPLES, aexec_in_process, diff

ROOT = Path(__file__).resolve().parent.parent
AEXEC = [sys.executable, "-m", "aexec"]
TEST = "tests/test_cart.py"
CART = "shop/cart.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AEXEC_PROBE_")}
    return subprocess.run([*AEXEC, *args], capture_output=True, text=True, timeout=600, check=False, env=env)


def label(verdict: str, cls: str | None = None, f2p: list[str] | None = None) -> dict[str, Any]:
    return {"verdict": verdict, "failure_class": cls, "f2p": f2p}


def small_corpus(root: Path) -> Path:
    """Eleven labelled requests: each label holds by construction."""
    import shutil

    shutil.copytree(EXAMPLES / "shop", root / "shop")
    shop = root / "shop"
    cart, test = (shop / CART).read_text(), (shop / TEST).read_text()
    fix = diff(
        CART, cart, cart.replace("round(subtotal - discount, 2)", "round(subtotal * (1 - discount), 2)")
    )
    tamper = diff(TEST, test, test.replace("== 18.0", "== 19.9").replace("== 5.0", "== 9.5"))
    top_name = diff(CART, cart, cart + "\naexec_undefined_name_xyz\n")

    def suite(
        ident: str, lab: dict[str, Any], patch: str | None = None, tests: list[str] | None = None
    ) -> dict[str, Any]:
        c: dict[str, Any] = {
            "id": ident,
            "request_type": "run_suite",
            "artifact_shape": "test_subset",
            "repo": "shop",
        }
        c["tests"] = tests or [TEST]
        if patch:
            c["patch"] = patch
        return c | {"label": lab}

    def snip(ident: str, code: str, lab: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": ident,
            "request_type": "run_entry",
            "artifact_shape": "snippet",
            "code": code,
            "label": lab,
        }

    cases = [
        suite("bug", label("fail", "assertion")),
        suite(
            "fix", label("pass", f2p=[f"{TEST}::test_cart_total", f"{TEST}::test_total_with_discount"]), fix
        ),
        suite("tamper", label("tampered"), tamper),
        suite("no-tests", label("empty_success"), tests=["tests/helpers.py"]),
        snip("type", "len(5)\n", label("fail", "type")),
        snip("syntax", "def broken(:\n", label("fail", "syntax")),
        snip("resource", "buf = bytearray(1200 << 20)\nprint(len(buf))\n", label("fail", "resource")),
        snip("dependency", "import aexec_no_such_module_xyz\n", label("fail", "dependency")),
        snip("ok", "print('fine')\n", label("empty_success")),
        # the two a raw transcript misreads: an import-time NameError, a misleading message
        suite("top-name", label("fail", "compile"), top_name),
        snip("type-says-assertion", "raise TypeError('AssertionError expected')\n", label("fail", "type")),
    ]
    path = root / "cases.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return path


@pytest.fixture(scope="module")
def ab_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    root = tmp_path_factory.mktemp("ab")
    cases = small_corpus(root)
    out = root / "out"
    done = run("ab", str(cases), "--ablate", "all", "--out", str(out), "--jobs", "2")
    return done, out


def test_ab_prints_the_decision_table_and_the_pipeline_wins(
    ab_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, _ = ab_run
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "§7.4 decision table" in text
    rows = {
        line.split()[0]: line.split()
        for line in text.splitlines()
        if line.startswith(("pipeline ", "baseline_"))
    }
    assert rows["pipeline"][1:4] == ["1.000", "1.000", "1.000"]
    assert rows["pipeline"][4] == "1/1", "the labelled FAIL_TO_PASS set is reproduced exactly"
    # A: right where the exit code is the verdict (no tamper, no empty success)
    assert rows["baseline_A_exitcode"][1] == f"{8 / 11:.3f}"
    assert rows["baseline_B_exc_regex"][1] == f"{8 / 11:.3f}"
    assert float(rows["baseline_B_exc_regex"][2]) < 1.0  # compile and the misleading type
    assert "decision: pipeline WINS" in text
    assert "resolve rate / cost / tokens (§7.3, §7.4): not measured" in text
    for cls in ("assertion", "type", "syntax", "resource", "dependency"):
        assert any(line.startswith(cls) for line in text.splitlines()), cls


def test_ab_ablation_verdicts_follow_the_mechanical_rule(
    ab_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, out = ab_run
    report = json.loads((out / "ab.json").read_text())
    abl = {a["mechanism"]: a for a in report["ablations"]}
    assert list(abl) == ["normalization", "isolation", "empty-success", "anti-gaming", "cache", "probe"]
    # empty success counted as a pass: 2 of 11 verdicts go wrong
    assert abl["empty-success"]["deltas"]["verdict_accuracy"] == pytest.approx(-2 / 11)
    assert abl["empty-success"]["verdict"] == "KEEP"
    # no tamper check: the edited oracle is a pass again
    assert abl["anti-gaming"]["deltas"]["verdict_accuracy"] == pytest.approx(-1 / 11)
    assert abl["anti-gaming"]["verdict"] == "KEEP"
    # no RAM cap: the 1200 MiB allocation (over the RAM cap, the cgroup's) succeeds,
    # an empty success instead of `resource`
    assert abl["isolation"]["deltas"]["verdict_accuracy"] == pytest.approx(-1 / 11)
    assert abl["isolation"]["verdict"] == "KEEP"
    # the raw last line of a failed pytest run names no exception: the class is lost
    assert abl["normalization"]["deltas"]["macro_f1"] < -0.05
    assert abl["normalization"]["deltas"]["verdict_accuracy"] == 0
    assert abl["normalization"]["verdict"] == "KEEP"
    # the cache changes no observation: mechanically DELETE, defended by cost elsewhere
    assert abl["cache"]["deltas"] == {"verdict_accuracy": 0.0, "macro_f1": 0.0, "f2p_exact": 0.0}
    assert abl["cache"]["verdict"] == "DELETE (Δ = 0)"
    assert any("warm cache" in n for n in abl["cache"]["notes"])
    assert abl["probe"]["verdict"].startswith("NOT MEASURED")
    assert any("NOT RUN — no probe client configured" in n for n in abl["probe"]["notes"])
    assert "§7.5.1 repair accuracy" in done.stdout and "NOT RUN" in done.stdout


def test_ab_writes_one_confusion_png_per_run(ab_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    _, out = ab_run
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == sorted(
        f"confusion-{n}.png"
        for n in (
            "pipeline",
            "baseline_A_exitcode",
            "baseline_B_exc_regex",
            "no-normalization",
            "no-isolation",
            "no-empty-success",
            "no-anti-gaming",
            "no-cache",
        )
    )
    for p in out.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 2000


def test_labels_from_a_file_and_bad_input_is_one_line_naming_the_place(tmp_path: Path) -> None:
    cases = small_corpus(tmp_path)
    lines = [json.loads(x) for x in cases.read_text().splitlines()]
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(json.dumps({k: v for k, v in c.items() if k != "label"}) + "\n" for c in lines))
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": c["id"], **c["label"]}) + "\n" for c in lines))
    corpus = load_corpus(str(bare), str(labels))
    assert [c.label for c in corpus.cases] == [parse_label(c["label"], "x") for c in lines]
    labels.write_text("".join(json.dumps({"id": c["id"], **c["label"]}) + "\n" for c in lines[:-1]))
    done = aexec_in_process("ab", str(bare), "--labels", str(labels))
    assert done.returncode == 2
    assert done.stderr.strip() == f"aexec: {bare}:11: no label for id 'type-says-assertion' in {labels}"
    done = aexec_in_process("ab", str(bare))
    assert done.returncode == 2 and f"{bare}:1: no `label` on the line" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    done = aexec_in_process("ab", str(cases), "--ablate", "vibes")
    assert done.returncode == 2 and "invalid choice: 'vibes'" in done.stderr


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"verdict": "green"}, "label verdict 'green' is not one of"),
        ({"verdict": "fail"}, "a `fail` label needs failure_class"),
        ({"verdict": "fail", "failure_class": "oops"}, "needs failure_class"),
        ({"verdict": "pass", "failure_class": "type"}, "must have failure_class null"),
        ({"verdict": "pass", "f2p": "t"}, "label `f2p` must be a list"),
    ],
)
def test_a_bad_label_names_the_line_and_the_field(data: dict[str, Any], words: str) -> None:
    with pytest.raises(RequestError, match=f"cases.jsonl:7: .*{words}"):
        parse_label(data, "cases.jsonl:7")


def test_metrics_are_the_fidelity_report_s() -> None:
    labels = [
        {"verdict": "fail", "failure_class": "type"},
        {"verdict": "fail", "failure_class": "assertion"},
        {"verdict": "pass", "failure_class": None},
        {"verdict": "tampered", "failure_class": None},
    ]
    preds = [("fail", "type"), ("fail", "type"), ("pass", None), ("pass", None)]
    m = metrics(labels, preds)
    assert m["verdict_accuracy"] == 0.75 and m["class_accuracy"] == 0.75
    assert m["per_class"]["type"] == {
        "tp": 1,
        "predicted": 2,
        "labelled": 1,
        "precision": 0.5,
        "recall": 1.0,
        "f1": pytest.approx(2 / 3),
    }
    assert m["per_class"]["assertion"]["f1"] == 0.0
    assert m["macro_f1"] == pytest.approx(1 / 3)
    assert list(m["per_class"]) == ["assertion", "type"]  # only labelled classes count


def test_the_deletion_rule() -> None:
    assert ablation_verdict({"verdict_accuracy": 0.0, "macro_f1": 0.0}) == "DELETE (Δ = 0)"
    assert ablation_verdict({"verdict_accuracy": -0.04, "macro_f1": 0.0}) == "DELETE (|Δ| ≤ 5%)"
    assert ablation_verdict({"verdict_accuracy": -0.06, "macro_f1": 0.0}) == "KEEP"
    assert ablation_verdict({"verdict_accuracy": 0.0, "macro_f1": 0.2}).startswith("DELETE (harm")
    assert ablation_verdict({"verdict_accuracy": -0.2, "macro_f1": 0.2}) == "KEEP"


def test_the_raw_guess_reads_the_last_exception_name() -> None:
    assert guess_class("Traceback ...\nTypeError: object of type 'int' has no len()") == "type"
    assert guess_class("1 failed, 3 passed in 0.1s") == "runtime"
    assert guess_class("ModuleNotFoundError: x\nthen AssertionError") == "assertion"
    assert Label("pass", None).f2p is None


SELECTION = ROOT / "benchmarks" / "selection.jsonl"
# Test-only model answers for the three shipped tasks (they exercise the instrument; no
# reported figure ever comes from a scripted prober).
ANSWERS = [
    "from shop import total_price\ntry:\n    total_price([10.0], discount=1.5)\nexcept ValueError:\n    pass\n"
    "else:\n    raise AssertionError('accepted a discount of 1.5')\n",
    "from shop import total_price\nassert total_price([1.006]) == 1.01, total_price([1.006])\n",
    "from shop import Cart\nassert Cart().total() == 0.0\n",
]


@pytest.mark.anyio
async def test_the_shipped_selection_corpus_needs_a_probe_and_the_instrument_scores_one(
    tmp_path: Path,
) -> None:
    tasks = load_selection(str(SELECTION))
    assert [t.task for t in tasks] == ["over-one", "rounding", "empty-cart"]
    cache = str(tmp_path / "cache")
    without, rows = await selection_success(tasks, prober=None, jobs=2, cache_dir=cache)
    assert without == 0.0, rows  # the suite passes every candidate of every task
    assert all(r["probe"] == "absent: no probe client configured" for r in rows)
    prober = ScriptedProber(
        *(json.dumps({"probes": [{"probe_id": "P1", "program": a, "expected": "correct"}]}) for a in ANSWERS)
    )
    with_probe, rows = await selection_success(tasks, prober=prober, jobs=2, cache_dir=cache)
    assert len(prober.calls) == 3  # one call per task
    assert with_probe == 1.0, rows
    assert [r["selected"] for r in rows] == [(1,), (0,), (0,)]


def test_a_bad_selection_corpus_names_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "sel.jsonl"
    line = json.loads(SELECTION.read_text().splitlines()[0])
    bad.write_text(json.dumps({k: v for k, v in line.items() if k != "correct"}) + "\n")
    with pytest.raises(RequestError, match=r"sel.jsonl:1: a selection line needs a boolean `correct`"):
        load_selection(str(bad))
    bad.write_text(json.dumps(line | {"repo": str(EXAMPLES / "shop")}) + "\n")
    with pytest.raises(RequestError, match="task 'over-one' needs 2\\+ candidates"):
        load_selection(str(bad))
