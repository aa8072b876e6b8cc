"""`discriminate` on real pytest runs: grouping, who passes what, and the gating of the
one probe call (fires only when armed AND the suite cannot tell the candidates apart)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aexec import Candidate, ProbeCallError, RequestError, ScriptedProber, discriminate

from .conftest import diff

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """What the run does and how it is judged, not the event loop: one backend. (The
    supervisor's, fork server's and cancellation's tests run on both.)"""
    return "asyncio"


CART = "shop/cart.py"
TESTS = ["tests/test_cart.py"]
SUITE = {
    "tests/test_cart.py::test_cart_total",
    "tests/test_cart.py::test_negative_price_rejected",
    "tests/test_cart.py::test_total_with_discount",
    "tests/test_cart.py::test_total_without_discount",
}
MULTIPLY = "    return round(subtotal * (1 - discount), 2)"
CHECKED = (
    "    if not 0 <= discount <= 1:\n"
    "        raise ValueError('discount must be in [0, 1]')\n"
    "    return round(subtotal * (1 - discount), 2)"
)


def variant(shop: Path, body: str) -> str:
    old = (shop / CART).read_text()
    return diff(CART, old, old.replace("    return round(subtotal - discount, 2)", body))


def cand(shop: Path, ident: str, patch: str | None, request_type: str = "discriminate") -> Candidate:
    shape = "patch" if patch is not None else "test_subset"
    return Candidate(request_type, shape, id=ident, repo=str(shop), tests=TESTS, patch=patch)  # type: ignore[arg-type]


def two_fixes(shop: Path, request_type: str = "discriminate") -> list[Candidate]:
    """Both repair the bug and pass the suite; they differ on a discount above 1."""
    return [
        cand(shop, "multiply", variant(shop, MULTIPLY), request_type),
        cand(shop, "checked", variant(shop, CHECKED), request_type),
    ]


OVER_ONE = json.dumps(
    {
        "probes": [
            {
                "probe_id": "over-one",
                "program": "from shop import total_price\ntry:\n    print(total_price([10.0], discount=1.5))\n"
                "except ValueError as e:\n    print('ValueError', e)\n    raise SystemExit(0)\nraise SystemExit(1)\n",
                "expected": "a discount above 1 is refused with ValueError",
            }
        ]
    }
)


async def test_a_suite_that_tells_them_apart_groups_them_and_never_calls_the_model(shop: Path) -> None:
    prober = ScriptedProber(OVER_ONE)
    result = await discriminate([cand(shop, "bug", None), *two_fixes(shop)], prober=prober)
    assert prober.calls == []
    assert result.probe.armed and result.probe.oracle == "adequate" and not result.probe.fired
    assert result.probe.outcome.startswith("not needed")
    assert [g.ids for g in result.groups] == [("bug",), ("multiply", "checked")]
    bug, fixed = result.groups
    assert (bug.verdict, bug.failure_class) == ("fail", "assertion")
    assert set(bug.passed) == {
        "tests/test_cart.py::test_total_without_discount",
        "tests/test_cart.py::test_negative_price_rejected",
    }
    assert dict(bug.not_passed) == {
        "tests/test_cart.py::test_total_with_discount": "failed",
        "tests/test_cart.py::test_cart_total": "failed",
    }
    assert fixed.verdict == "pass" and set(fixed.passed) == SUITE
    passed_by = dict(result.passed_by)
    assert passed_by["tests/test_cart.py::test_total_with_discount"] == (1, 2)
    assert passed_by["tests/test_cart.py::test_total_without_discount"] == (0, 1, 2)
    assert result.discriminated
    assert all(o.probe_evidence == () for o in result.observations)


async def test_without_a_client_the_step_is_absent_and_identical_candidates_stay_together(shop: Path) -> None:
    result = await discriminate(two_fixes(shop))
    assert result.probe.outcome == "absent: no probe client configured"
    assert result.probe.oracle == "all_pass" and not result.probe.fired and result.probe.calls == 0
    assert [g.members for g in result.groups] == [(0, 1)] and not result.discriminated


async def test_an_unarmed_request_never_fires_even_when_the_suite_cannot_decide(shop: Path) -> None:
    prober = ScriptedProber(OVER_ONE)
    result = await discriminate(two_fixes(shop, "run_suite"), prober=prober)
    assert prober.calls == []
    assert not result.probe.armed and result.probe.oracle == "all_pass"
    assert result.probe.outcome.startswith("not armed: candidate 0 ('multiply') is a run_suite request")


async def test_all_pass_fires_once_and_the_probe_splits_groups_but_never_verdicts(shop: Path) -> None:
    prober = ScriptedProber(OVER_ONE, OVER_ONE)
    result = await discriminate(two_fixes(shop), property="a discount above 1", prober=prober)
    [call] = prober.calls  # one call, though a second reply was there to be had
    assert call.temperature == 0 and call.max_completion_tokens == 2048
    user = json.loads(call.messages[1]["content"])
    assert list(user) == ["candidates", "property", "existing_tests"]  # the spec's order
    assert user["property"] == "a discount above 1" and set(user["existing_tests"]) == SUITE
    assert "raise ValueError" in user["candidates"][1]["patch"]
    assert result.probe.fired and [p.probe_id for p in result.probe.probes] == ["over-one"]
    assert [(g.ids, g.probes) for g in result.groups] == [
        (("multiply",), (("over-one", "runtime"),)),
        (("checked",), (("over-one", "ok"),)),
    ]
    for obs in result.observations:
        # invariant 7: the suite's verdicts are the suite's, the probe is evidence beside them
        assert obs.verdict == "pass" and {t.test for t in obs.test_results} == SUITE
        [ev] = obs.probe_evidence
        assert ev["authoritative"] is False and ev["verdict"] != "pass"
    multiply, checked = (o.probe_evidence[0] for o in result.observations)
    assert multiply["stdout"] == "-5.0\n" and multiply["exit_code"] == 1
    assert checked["stdout"].startswith("ValueError discount must be in [0, 1]")


async def test_all_fail_identically_also_fires(shop: Path) -> None:
    # Both leave the bug in place (one only reformats a docstring): same failures.
    old = (shop / CART).read_text()
    cosmetic = diff(CART, old, old.replace("(0.1 is 10% off)", "(0.1 means 10% off)"))
    prober = ScriptedProber(OVER_ONE)
    result = await discriminate([cand(shop, "bug", None), cand(shop, "cosmetic", cosmetic)], prober=prober)
    assert result.probe.oracle == "all_fail_identically" and len(prober.calls) == 1
    assert all(o.verdict == "fail" for o in result.observations)
    assert all(len(o.probe_evidence) == 1 for o in result.observations)


SNIPPETS = [
    Candidate("discriminate", "snippet", id="a", code="def f(x):\n    return x * 2\n"),
    Candidate("discriminate", "snippet", id="b", code="def f(x):\n    return x + x\n"),
]


def answer(n: int) -> str:
    return json.dumps(
        {"probes": [{"probe_id": f"P{i}", "program": "print(f(3))", "expected": "6"} for i in range(n)]}
    )


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        ("no JSON here", "not JSON"),
        (answer(9), "over the cap: 9 probes > 8"),
        (json.dumps({"probes": [{"probe_id": "P", "program": "print(1)"}]}), "schema violation"),
        (json.dumps({"probes": [], "extra": 1}), "schema violation"),
        (ProbeCallError("HTTP 503"), "call failed: HTTP 503"),
        (RuntimeError("client bug"), "call failed: client bug"),
    ],
)
async def test_any_bad_answer_is_no_probe_and_no_second_call(reply: str | Exception, words: str) -> None:
    prober = ScriptedProber(reply, answer(1))
    result = await discriminate(SNIPPETS, prober=prober)
    assert len(prober.calls) == 1
    assert len(prober.replies) == 1, "the good second answer was never asked for"
    assert result.probe.fired and result.probe.probes == ()
    assert "no probe" in result.probe.outcome and words in result.probe.outcome
    assert all(o.probe_evidence == () for o in result.observations)


async def test_probes_are_run_once_per_candidate_and_equal_behaviour_stays_grouped() -> None:
    prober = ScriptedProber(answer(2))
    result = await discriminate(SNIPPETS, prober=prober)
    assert result.probe.oracle == "no_suite"
    for obs in result.observations:
        assert [(e["probe_id"], e["outcome"], e["stdout"]) for e in obs.probe_evidence] == [
            ("P0", "ok", "6\n"),
            ("P1", "ok", "6\n"),
        ]
    assert [g.ids for g in result.groups] == [("a", "b")]


async def test_not_one_task_is_refused_before_anything_runs(shop: Path, tmp_path: Path) -> None:
    prober = ScriptedProber(OVER_ONE)
    with pytest.raises(RequestError, match="needs 2 or more candidates of one task, got 1"):
        await discriminate(two_fixes(shop)[:1], prober=prober)
    other = tmp_path / "other"
    other.mkdir()
    mixed = [two_fixes(shop)[0], Candidate("discriminate", "snippet", id="x", code="1", repo=str(other))]
    with pytest.raises(RequestError, match=r"candidate 1 \('x'\): repo .* differs from candidate 0's"):
        await discriminate(mixed, prober=prober)
    narrower = Candidate(
        "discriminate", "patch", id="y", repo=str(shop), tests=[TESTS[0] + "::test_cart_total"]
    )
    with pytest.raises(RequestError, match=r"candidate 1 \('y'\): tests .* differ"):
        await discriminate([two_fixes(shop)[0], narrower], prober=prober)
    assert prober.calls == []


def test_the_command_line_writes_one_line_per_task_and_refuses_a_lone_candidate(
    shop: Path, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    lines = [
        {
            "id": c.id,
            "request_type": "discriminate",
            "artifact_shape": "patch",
            "repo": "shop",
            "tests": TESTS,
            "patch": c.patch,
        }
        for c in two_fixes(shop)
    ] + [
        {"id": c.id, "request_type": c.request_type, "artifact_shape": c.artifact_shape, "code": c.code}
        for c in SNIPPETS
    ]
    cases = shop.parent / "cases.jsonl"
    cases.write_text("".join(json.dumps(x) + "\n" for x in [lines[2], lines[0], lines[3], lines[1]]))
    out = tmp_path / "groups.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AEXEC_PROBE_")}
    argv = [sys.executable, "-m", "aexec", "discriminate", str(cases), "-o", str(out), "--no-cache"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr
    tasks = [json.loads(x) for x in out.read_text().splitlines()]
    assert [t["task"] for t in tasks] == [0, 1]
    snippets, fixes = tasks  # in order of first appearance
    assert snippets["repo"] is None and [o["id"] for o in snippets["observations"]] == ["a", "b"]
    assert fixes["repo"] == str(shop) and fixes["tests"] == TESTS
    assert [g["ids"] for g in fixes["groups"]] == [["multiply", "checked"]]
    assert fixes["discriminated"] is False
    assert fixes["probe"]["outcome"] == "absent: no probe client configured"
    assert all(o["verdict"] == "pass" for o in fixes["observations"])
    assert "task 1 (2 candidates): 1 groups: [multiply, checked] pass" in done.stderr
    cases.write_text(
        json.dumps(lines[0]) + "\n" + json.dumps(lines[1]) + "\n\n" + json.dumps(lines[2]) + "\n"
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"aexec: {cases}:4: a task needs 2 or more candidates (candidates of one task share repo and tests)"
    )
    half = env | {"AEXEC_PROBE_BASE_URL": "http://127.0.0.1:9/v1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=half)
    assert done.returncode == 2 and "AEXEC_PROBE_MODEL is not set" in done.stderr


async def test_an_environment_that_cannot_run_the_suite_is_named_as_the_reason_the_probe_did_not_fire(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "mod.py").write_text("def f(x):\n    return x\n")
    (repo / "tests" / "test_mod.py").write_text(
        "import aexec_no_such_module_here\nfrom mod import f\n\ndef test_f():\n    assert f(1) == 1\n"
    )
    old = (repo / "mod.py").read_text()
    candidates = [
        Candidate(
            "discriminate",
            "patch",
            id=name,
            repo=str(repo),
            tests=["tests/test_mod.py"],
            patch=diff("mod.py", old, old.replace("return x", body)),
        )
        for name, body in [("same", "return x + 0"), ("abs", "return abs(x)")]
    ]
    prober = ScriptedProber(OVER_ONE)
    result = await discriminate(candidates, prober=prober)
    assert all(o.flags.env_broken for o in result.observations)
    assert prober.calls == [] and not result.probe.fired
    assert result.probe.outcome == "not fired: the environment of candidate 0 ('same') is broken"
