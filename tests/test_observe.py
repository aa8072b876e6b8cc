"""The whole pipeline through the public API, on real pytest runs: on asyncio, and on trio
too where the event loop drives it (a pass end to end, deadlines, kills, concurrency)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import structlog.testing

import aexec
from aexec import Candidate, Policy, RequestError, observe, observe_many
from aexec._boundary.isolation import detect_isolation
from aexec._boundary.trees import hash_tree

from .conftest import CountingSupervisor, RefusingSupervisor, diff, scratch_roots, slack

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """A verdict, not the event loop: one backend (the tests marked BOTH run on trio too)."""
    return "asyncio"


BOTH = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])

CART = "shop/cart.py"
TESTS = ["tests/test_cart.py"]


def fix_patch(shop: Path) -> str:
    old = (shop / CART).read_text()
    return diff(
        CART, old, old.replace("round(subtotal - discount, 2)", "round(subtotal * (1 - discount), 2)")
    )


def suite(shop: Path, patch: str | None = None, **kw: object) -> Candidate:
    return Candidate("run_suite", "test_subset", repo=str(shop), tests=TESTS, patch=patch, **kw)  # type: ignore[arg-type]


@BOTH
async def test_repair_is_a_verified_pass_with_exact_f2p(shop: Path, scratch_tmp: Path) -> None:
    before_hash = hash_tree(str(shop))
    obs = await observe(suite(shop, fix_patch(shop), id="fix"))
    assert obs.id == "fix"
    assert obs.verdict == "pass" and obs.failure is None
    assert obs.flags.reverified and not obs.flags.nondeterministic and not obs.flags.tampered
    f2p = {t.test for t in obs.test_results if t.f2p}
    p2p = {t.test for t in obs.test_results if t.p2p}
    assert f2p == {"tests/test_cart.py::test_total_with_discount", "tests/test_cart.py::test_cart_total"}
    assert p2p == {
        "tests/test_cart.py::test_total_without_discount",
        "tests/test_cart.py::test_negative_price_rejected",
    }
    assert obs.environment.timeout_s == 120 and obs.action == "test_execution"
    assert len(obs.artifact_version) == 64
    assert hash_tree(str(shop)) == before_hash, "the original repo was written to"
    assert scratch_roots(scratch_tmp) == [], "a scratch root was left behind"


async def test_unpatched_bug_is_an_assertion_failure(shop: Path) -> None:
    obs = await observe(suite(shop))
    assert obs.verdict == "fail"
    assert obs.failure is not None and obs.failure.failure_class == "assertion"
    assert obs.failure.location == "tests/test_cart.py:11"
    assert obs.exception is not None and obs.exception.startswith("AssertionError")
    assert not obs.flags.reverified  # only passes are re-run


async def test_tampering_with_the_test_is_not_a_pass(shop: Path) -> None:
    test = (shop / TESTS[0]).read_text()
    patch = diff(TESTS[0], test, test.replace("== 18.0", "== 19.9").replace("== 5.0", "== 9.5"))
    obs = await observe(suite(shop, patch))
    assert all(t.verdict == "passed" for t in obs.test_results)  # the runtime saw passes …
    assert obs.flags.tampered and obs.verdict == "tampered"  # … of a mutated oracle


async def test_pytest_config_section_change_is_tampering(shop: Path) -> None:
    old = (shop / "pyproject.toml").read_text()
    new = old.replace('testpaths = ["tests"]', 'testpaths = ["tests"]\naddopts = "-k \'not discount\'"')
    obs = await observe(suite(shop, diff("pyproject.toml", old, new)))
    assert obs.flags.tampered and obs.verdict == "tampered"
    # A harmless edit elsewhere in the same file is not tampering.
    harmless = old.replace('version = "0.0.1"', 'version = "0.0.2"')
    fix = fix_patch(shop) + diff("pyproject.toml", old, harmless)
    obs2 = await observe(suite(shop, fix))
    assert not obs2.flags.tampered and obs2.verdict == "pass"


async def test_patch_that_escapes_or_does_not_apply_is_a_failure_observation(
    shop: Path, scratch_tmp: Path
) -> None:
    escape = "diff --git a/../evil.py b/../evil.py\nnew file mode 100644\n--- /dev/null\n+++ b/../evil.py\n@@ -0,0 +1 @@\n+x = 1\n"
    stale = diff(CART, "nothing like the file\n", "something else\n")
    for patch, words in ((escape, "escapes the repository"), (stale, "patch does not apply")):
        obs = await observe(suite(shop, patch))
        assert obs.verdict == "fail"
        assert obs.failure is not None and obs.failure.failure_class == "compile"
        assert words in obs.failure.message
    assert not (shop.parent / "evil.py").exists()
    assert scratch_roots(scratch_tmp) == []


async def test_selection_without_tests_is_empty_success(shop: Path) -> None:
    obs = await observe(Candidate("run_suite", "test_subset", repo=str(shop), tests=["tests/helpers.py"]))
    assert obs.failure is None and obs.flags.empty_success and obs.verdict == "empty_success"
    assert obs.test_results == ()


async def test_passing_snippet_and_build_check_are_empty_success() -> None:
    for c in (
        Candidate("run_entry", "snippet", code="print(42)"),
        Candidate("build_check", "snippet", code="x = 1"),
    ):
        obs = await observe(c)
        assert (obs.verdict, obs.failure, obs.flags.empty_success) == ("empty_success", None, True)
    assert (await observe(Candidate("run_entry", "snippet", code="print(42)"))).stdout == "42\n"


@pytest.mark.parametrize(
    ("code", "klass"),
    [
        ("assert 1 == 2", "assertion"),
        ("len(5)", "type"),
        ("undefined_name", "runtime"),
        ("raise ValueError('v')", "runtime"),
        ("import aexec_missing_module", "dependency"),
        ("x = (", "syntax"),
        ("b = bytearray(1 << 33)", "resource"),
        ("import sys; sys.exit(3)", "runtime"),
    ],
)
async def test_snippet_failure_classes(code: str, klass: str) -> None:
    obs = await observe(Candidate("run_entry", "snippet", code=code))
    assert obs.failure is not None
    assert obs.failure.failure_class == klass
    assert obs.verdict == "fail"


async def test_memory_cap_is_the_declared_one() -> None:
    # 800 MiB fits under a 1 GiB cap but not under 128 MiB: as an address space (no
    # memory cgroup) or as the tree's memory cgroup (its tmpfs files count).
    code = "b = bytearray(800 << 20)\nprint('ok')"
    roomy = await observe(Candidate("run_entry", "snippet", code=code, policy=Policy(ram_mib=1024)))
    tight = await observe(Candidate("run_entry", "snippet", code=code, policy=Policy(ram_mib=128)))
    assert roomy.stdout == "ok\n" and roomy.failure is None
    assert tight.failure is not None and tight.failure.failure_class == "resource"
    assert tight.environment.ram_cap_mib == 128


@BOTH
async def test_timeout_is_recorded_with_its_deadline(scratch_tmp: Path) -> None:
    obs = await observe(
        Candidate("run_entry", "snippet", code="while True: pass", policy=Policy(timeout_s=1))
    )
    assert obs.timed_out and obs.exit_code is None
    assert obs.failure is not None and obs.failure.failure_class == "timeout"
    assert obs.environment.timeout_s == 1
    assert obs.duration < 1 + slack(1.5)
    assert scratch_roots(scratch_tmp) == []


async def test_cache_hit_does_not_run_again(tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    c = Candidate("run_entry", "snippet", id="a", code="import random; print(random.random())")
    first = await observe(c, cache_dir=cache)
    refusing = RefusingSupervisor()
    (second,) = await observe_many(
        [Candidate("run_entry", "snippet", id="b", code=c.code)], cache_dir=cache, supervisor=refusing
    )
    assert second.cache_hit and not first.cache_hit
    assert second.id == "b" and second.stdout == first.stdout
    # Any change to a key element is a different key: a real run (which now fails loudly).
    changed = Candidate("run_entry", "snippet", code=c.code, policy=Policy(timeout_s=29))
    (obs,) = await observe_many([changed], cache_dir=cache, supervisor=refusing)
    assert obs.verdict == "error" and "the execute stage ran" in (obs.error or "")


@BOTH
async def test_identical_candidates_and_before_runs_are_shared(shop: Path) -> None:
    counting = CountingSupervisor()
    fix = fix_patch(shop)
    old = (shop / CART).read_text()
    other = diff(CART, old, old.replace("round(subtotal - discount, 2)", "round(subtotal - discount, 3)"))
    cs = [suite(shop, fix, id=1), suite(shop, fix, id=2), suite(shop, other, id=3), suite(shop, id=4)]
    results = await observe_many(cs, supervisor=counting)
    assert [r.id for r in results] == [1, 2, 3, 4]
    assert sorted(r.cache_hit for r in results[:2]) == [False, True]  # whichever ran first
    assert not results[2].cache_hit and not results[3].cache_hit
    # fix: run + re-run; other: run (it fails); one before-run, which is also the run of
    # the unpatched candidate 4 (the same code, boundary and tests)
    assert counting.runs == 4
    assert results[0].test_results == results[1].test_results
    fixed = {t.test for t in results[0].test_results if t.f2p}
    assert fixed and {t.test for t in results[3].test_results if t.verdict == "failed"} == fixed
    assert results[3].verdict == "fail" and not results[3].flags.reverified


@BOTH
async def test_results_keep_input_order_and_a_bad_candidate_names_its_index(shop: Path) -> None:
    cs = [
        Candidate("run_entry", "snippet", id=i, code=f"import time; time.sleep({0.3 * (3 - i)}); print({i})")
        for i in range(4)
    ]
    got = await observe_many(cs, limit=4)
    assert [o.stdout for o in got] == [f"{i}\n" for i in range(4)]
    with pytest.raises(RequestError, match=r"candidate 1 .*repo"):
        await observe_many(
            [cs[0], Candidate("run_suite", "test_subset", repo=str(shop / "nope"), tests=TESTS)]
        )


async def test_candidate_sees_a_declared_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AEXEC_TEST_SECRET_TOKEN", "hunter2")
    code = "import os, sys; print(sorted(os.environ)); print(os.environ['PYTHONHASHSEED']); print(sys.stdin.read() == '')"
    obs = await observe(Candidate("run_entry", "snippet", code=code))
    assert "AEXEC_TEST_SECRET_TOKEN" not in obs.stdout and "hunter2" not in obs.stdout
    lines = obs.stdout.splitlines()
    assert lines[1:] == ["0", "True"]
    assert obs.environment.toolchain == sys.executable
    assert obs.environment.toolchain_version.startswith("CPython 3.")


async def test_declared_interpreter_is_used_and_recorded(tmp_path: Path) -> None:
    link = tmp_path / "mypython"
    link.symlink_to(sys.executable)
    obs = await observe(
        Candidate("run_entry", "snippet", code="import sys; print(sys.executable)", python=str(link))
    )
    assert obs.environment.toolchain == str(link)
    assert obs.stdout.strip() == str(link)
    with pytest.raises(RequestError, match="python"):
        await observe(Candidate("run_entry", "snippet", code="1", python=str(tmp_path / "missing")))


async def test_changed_state_names_what_the_candidate_wrote() -> None:
    obs = await observe(Candidate("run_entry", "snippet", code="open('out.txt', 'w').write('hello')"))
    assert "1 created: work/out.txt" in obs.changed_state
    quiet = await observe(Candidate("run_entry", "snippet", code="x = 1"))
    assert quiet.changed_state == "no files written"


async def test_stage_events_carry_the_candidate_id() -> None:
    with structlog.testing.capture_logs() as logs:
        await observe(Candidate("run_entry", "snippet", id="c-42", code="print(1)"))
    events = {e["event"] for e in logs if e.get("candidate") == "c-42"}
    assert {"executed", "observed"} <= events


async def test_observation_round_trips_through_the_contract_json(shop: Path) -> None:
    obs = await observe(suite(shop, fix_patch(shop)))
    data = aexec.unstructure(obs)
    for field in (
        "action",
        "environment",
        "cwd",
        "artifact_version",
        "exit_code",
        "duration",
        "timed_out",
        "stdout",
        "stderr",
        "exception",
        "changed_state",
        "test_results",
        "resource_usage",
        "failure",
        "flags",
        "probe_evidence",
        "cache_hit",
        "id",
    ):
        assert field in data
    assert set(data["flags"]) >= {"empty_success", "tampered", "nondeterministic", "parse_uncertain"}
    assert set(data["test_results"][0]) == {"test", "verdict", "f2p", "p2p"}
    assert aexec.structure(data) == obs


async def test_omitted_tests_run_the_whole_suite_and_an_empty_list_selects_nothing(shop: Path) -> None:
    whole = await observe(Candidate("run_suite", "test_subset", repo=str(shop)))
    assert len(whole.test_results) == 4 and whole.verdict == "fail"
    nothing = await observe(Candidate("run_suite", "test_subset", repo=str(shop), tests=[]))
    assert nothing.test_results == () and nothing.verdict == "empty_success"
    parsed, _ = aexec.candidate_from_json(
        {"request_type": "run_suite", "artifact_shape": "test_subset", "repo": "r", "tests": []}
    )
    assert parsed.tests == ()


@BOTH
async def test_signal_deaths_are_seen_and_a_cpu_cap_kill_is_resource() -> None:
    segv = await observe(
        Candidate("run_entry", "snippet", code="import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    )
    assert segv.signal == "SIGSEGV" and segv.exit_code is None
    assert segv.failure is not None and segv.failure.failure_class == "runtime"
    burn = "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (1, 1))\nwhile True:\n    pass\n"
    # One second of CPU is many seconds of wall on a loaded machine: the deadline is far
    # enough that only the CPU cap can end the run.
    cpu = await observe(Candidate("run_entry", "snippet", code=burn, policy=Policy(timeout_s=60)))
    assert not cpu.timed_out
    assert cpu.failure is not None and cpu.failure.failure_class == "resource"


@pytest.mark.skipif(detect_isolation().cgroups is None, reason="no cgroup to measure a run's CPU use")
@BOTH
async def test_sleeping_runs_do_not_hold_the_cores_busy_work_could_use() -> None:
    cores = os.cpu_count() or 1
    sleep = "import time\nprint(time.time())\ntime.sleep(6)\nprint(time.time())\n"
    busy = "import time\nprint(time.time())\n"
    got = await observe_many(
        [Candidate("run_entry", "snippet", code=sleep + f"# {i}") for i in range(cores)]
        + [Candidate("run_entry", "snippet", code=busy)]
    )
    first_woke = min(float(o.stdout.split()[1]) for o in got[:cores])
    # With one slot per core held for the whole sleep, the last run would start only once
    # a sleeper ended; it starts while they all sleep instead (however loaded the machine).
    assert float(got[-1].stdout) < first_woke
