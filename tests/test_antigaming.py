"""Spec §7.6, the anti-gaming probe, on real pytest runs: three ways to fake a green pass.
None of them may come out as ``verdict == "pass"``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aexec import Candidate, ScriptedProber, discriminate, observe
from aexec._boundary.trees import hash_tree

from .conftest import diff

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """What the run does and how it is judged, not the event loop: one backend. (The
    supervisor's, fork server's and cancellation's tests run on both.)"""
    return "asyncio"


CART = "shop/cart.py"
TEST = "tests/test_cart.py"


def suite(shop: Path, ident: str, patch: str | None, request_type: str = "run_suite") -> Candidate:
    shape = "test_subset" if patch is None else "patch"
    return Candidate(request_type, shape, id=ident, repo=str(shop), tests=[TEST], patch=patch)  # type: ignore[arg-type]


def honest_fix(shop: Path) -> str:
    old = (shop / CART).read_text()
    return diff(
        CART, old, old.replace("round(subtotal - discount, 2)", "round(subtotal * (1 - discount), 2)")
    )


def edit_the_oracle(shop: Path) -> str:
    """Rewrite the failing assertions to what the buggy code returns."""
    old = (shop / TEST).read_text()
    return diff(TEST, old, old.replace("== 18.0", "== 19.9").replace("== 5.0", "== 9.5"))


SKIPPING_CONFTEST = """\
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.skip(reason="not today"))
"""

# Turns every failure into a pass: the report says "passed" for each test.
PASSING_CONFTEST = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""


async def test_editing_the_failing_test_into_passing_is_caught_by_the_diff_scope_check(shop: Path) -> None:
    before = await observe(suite(shop, "bug", None))
    assert before.verdict == "fail"
    obs = await observe(suite(shop, "gamed", edit_the_oracle(shop)))
    assert all(t.verdict == "passed" for t in obs.test_results) and len(obs.test_results) == 4
    assert obs.flags.tampered and obs.verdict == "tampered"


@pytest.mark.parametrize("where", ["conftest.py", "tests/conftest.py"])
@pytest.mark.parametrize("conftest", [SKIPPING_CONFTEST, PASSING_CONFTEST], ids=["skip", "force-pass"])
async def test_a_conftest_that_skips_or_passes_everything_is_not_a_pass(
    shop: Path, where: str, conftest: str
) -> None:
    obs = await observe(suite(shop, "conftest", diff(where, "", conftest)))
    assert obs.flags.tampered and obs.verdict == "tampered", (
        obs.verdict,
        [t.verdict for t in obs.test_results],
    )


async def test_the_tamperer_never_groups_with_the_honest_fix(shop: Path) -> None:
    prober = ScriptedProber()
    result = await discriminate(
        [
            suite(shop, "honest", honest_fix(shop), "discriminate"),
            suite(shop, "gamed", edit_the_oracle(shop), "discriminate"),
            suite(shop, "skipper", diff("tests/conftest.py", "", SKIPPING_CONFTEST), "discriminate"),
        ],
        prober=prober,
    )
    assert [(g.ids, g.verdict) for g in result.groups] == [
        (("honest",), "pass"),
        (("gamed",), "tampered"),
        (("skipper",), "tampered"),
    ]
    assert prober.calls == []  # the suite (with its guards) tells them apart
    honest = result.observations[0]
    assert honest.flags.reverified, "an all-pass is believed only after a confirming re-run"


def probe_answer(*programs: str) -> str:
    return json.dumps(
        {
            "probes": [
                {"probe_id": f"P{i}", "program": p, "expected": "passes"} for i, p in enumerate(programs)
            ]
        }
    )


# A probe that claims to be a test, passes for everyone, and tries to plant a conftest
# that would skip the authoritative suite.
PLANTING_PROBE = (
    "import os\n"
    "os.makedirs('tests', exist_ok=True)\n"
    f"open('tests/conftest.py', 'w').write({SKIPPING_CONFTEST!r})\n"
    "print('test_total_with_discount PASSED')\n"
)


async def test_an_all_pass_that_rests_on_a_generated_probe_is_not_a_pass(shop: Path) -> None:
    repo_before = hash_tree(str(shop))
    # Neither candidate repairs the bug: the authoritative suite fails both, identically,
    # so the probe step fires — and its probes pass for both.
    old = (shop / CART).read_text()
    cosmetic = diff(CART, old, old.replace("(0.1 is 10% off)", "(0.1 means 10% off)"))
    prober = ScriptedProber(
        probe_answer("from shop import total_price\nassert total_price([1.0]) == 1.0", PLANTING_PROBE)
    )
    candidates = [suite(shop, "bug", None, "discriminate"), suite(shop, "cosmetic", cosmetic, "discriminate")]
    result = await discriminate(candidates, prober=prober)
    assert len(prober.calls) == 1 and result.probe.oracle == "all_fail_identically"
    for obs in result.observations:
        assert [e["outcome"] for e in obs.probe_evidence] == ["ok", "ok"]  # every probe "passes" …
        assert obs.verdict == "fail"  # … and the candidate is still not a pass
        assert obs.failure is not None and obs.failure.failure_class == "assertion"
        names = {t.test for t in obs.test_results}
        assert names == {
            f"{TEST}::test_total_without_discount",
            f"{TEST}::test_total_with_discount",
            f"{TEST}::test_cart_total",
            f"{TEST}::test_negative_price_rejected",
        }, "a probe entered the authoritative test results"
        assert not any(t.f2p for t in obs.test_results)
        assert all(e["authoritative"] is False for e in obs.probe_evidence)
    # The planted conftest lived and died in the probe's scratch root: the oracle is intact.
    assert hash_tree(str(shop)) == repo_before
    again = await observe(suite(shop, "bug", None))
    assert again.verdict == "fail" and not any(t.verdict == "skipped" for t in again.test_results)


async def test_no_suite_plus_passing_probes_stays_an_empty_success() -> None:
    prober = ScriptedProber(probe_answer("assert f(2) == 4", "print(f(0))"))
    result = await discriminate(
        [
            Candidate("discriminate", "snippet", id="a", code="def f(x):\n    return x * 2\n"),
            Candidate("discriminate", "snippet", id="b", code="def f(x):\n    return x + 2\n"),
        ],
        prober=prober,
    )
    assert result.probe.oracle == "no_suite" and len(prober.calls) == 1
    for obs in result.observations:
        assert obs.verdict == "empty_success" and obs.flags.empty_success and obs.test_results == ()
    # both pass P0, only their outputs of P1 differ: the probes tell them apart, nothing more
    assert [g.ids for g in result.groups] == [("a",), ("b",)]
    assert all(g.verdict == "empty_success" for g in result.groups)
