"""The same observations with and without every speed lever (issue 5).

The levers ``observe_many`` has (`aexec.Options`): the on-disk behavioural cache
(``DiskCache``), in-process single-flight (``Inflight``) of identical candidates, of the
shared FAIL_TO_PASS before-run and of repo hashes, concurrency (``limit`` and the
admission of runs that wait), the warm fork server (``Options(forkserver=False)``
turns it off) and a repo's modules compiled once for all its runs
(``Options(bytecode=False)`` turns it off). Whatever the levers are, they live behind one call.
A small labelled set — passes with FAIL_TO_PASS, failures of several classes, a
tampering patch, an empty selection, snippets, a timeout, and identical candidates —
is observed:

* **off**: every candidate in a call of its own (no dedup, no shared before-run),
  ``limit=1``, no cache, a fresh interpreter per run that compiles what it imports;
* **on**: all in one call, ``limit=8``, a fresh cache dir (cold), then the same call
  again on that cache (warm, served from disk), on both anyio backends;

and the observations must be equal but for what a run cannot repeat: timings, scratch
paths, resource usage and ``cache_hit``. The labels pin what "equal" is equal to.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

import aexec
from aexec import Candidate, ExecutionObservation, Policy, observe_many, unstructure

from .conftest import CountingSupervisor, MakeRepo, diff

pytestmark = pytest.mark.slow

CART = "shop/cart.py"
TESTS = ("tests/test_cart.py",)
CALC = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": (
        "from calc import add\n\n\n"
        "def test_add():\n    assert add(2, 2) == 4\n\n\n"
        "def test_add_str():\n    assert add('a', 'b') == 'ab'\n\n\n"
        "def test_zero():\n    assert add(0, 0) == 0\n"
    ),
}
#: A pytest summary's duration ("1 failed, 3 passed in 0.05s").
TIMING = re.compile(r"\bin \d+(?:\.\d+)?s\b")
#: An object's address in a repr ("<Cart object at 0x7f28…>"): ASLR, not behaviour.
ADDRESS = re.compile(r"\bat 0x[0-9a-f]+\b")


def labelled_set(shop: Path, make_repo: MakeRepo) -> list[tuple[Candidate, tuple[str, str | None]]]:
    cart = (shop / CART).read_text()
    test = (shop / TESTS[0]).read_text()
    fix = diff(
        CART, cart, cart.replace("round(subtotal - discount, 2)", "round(subtotal * (1 - discount), 2)")
    )
    wrong = diff(CART, cart, cart.replace("round(subtotal - discount, 2)", "round(subtotal - discount, 3)"))
    tamper = diff(TESTS[0], test, test.replace("== 18.0", "== 19.9").replace("== 5.0", "== 9.5"))
    calc = make_repo(CALC)
    calc_fix = diff("calc.py", CALC["calc.py"], CALC["calc.py"].replace("a - b", "a + b"))
    calc_type = diff("calc.py", CALC["calc.py"], CALC["calc.py"].replace("a - b", "a + b + len(5)"))

    def suite(ident: str, patch: str | None, repo: Path = shop, tests: tuple[str, ...] = TESTS) -> Candidate:
        shape = "patch" if patch else "test_subset"
        return Candidate("run_suite", shape, id=ident, repo=str(repo), tests=tests, patch=patch)

    def snippet(ident: str, code: str, **kw: Any) -> Candidate:
        return Candidate("run_entry", "snippet", id=ident, code=code, **kw)

    return [
        (suite("fix", fix), ("pass", None)),
        (suite("fix-again", fix), ("pass", None)),  # identical: deduplicated when on
        (suite("wrong-fix", wrong), ("fail", "assertion")),  # shares the before-run with fix
        (suite("tamper", tamper), ("tampered", None)),
        (suite("bug", None), ("fail", "assertion")),
        (suite("no-tests", None, tests=("tests/helpers.py",)), ("empty_success", None)),
        (suite("calc-fix", calc_fix, calc, ("test_calc.py",)), ("pass", None)),
        (suite("calc-type", calc_type, calc, ("test_calc.py",)), ("fail", "type")),
        (snippet("print", "print('hello')"), ("empty_success", None)),
        (snippet("print-again", "print('hello')"), ("empty_success", None)),  # identical
        (snippet("type", "len(5)"), ("fail", "type")),
        (snippet("hang", "while True:\n    pass\n", policy=Policy(timeout_s=1)), ("fail", "timeout")),
    ]


def _scrub(value: Any, paths: list[str]) -> Any:
    if isinstance(value, str):
        for p in paths:
            value = value.replace(p, "<scratch>")
        return ADDRESS.sub("at 0x…", TIMING.sub("in <t>s", value))
    if isinstance(value, dict):
        return {k: _scrub(v, paths) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, paths) for v in value]
    return value


def comparable(obs: ExecutionObservation) -> dict[str, Any]:
    """The observation minus what no two runs share: timings, paths, usage, cache_hit."""
    data = unstructure(obs)
    scratch = data["environment"]["fs_boundary"].pop("scratch_root")
    paths = sorted({p for p in (scratch, data.pop("cwd")) if p}, key=len, reverse=True)
    for key in ("duration", "cache_hit", "resource_usage"):
        data.pop(key)
    pristine = (data.get("env_fault") or {}).get("pristine_failures", [])
    for failure in [data["failure"], *data["failures"], *pristine]:
        if failure is not None:
            failure.pop("duration")
    return _scrub(data, paths)


def observe_counting(
    calls: list[list[Candidate]], backend: str, **kw: Any
) -> tuple[list[ExecutionObservation], int, int]:
    """Run ``observe_many`` once per list in ``calls``; return the observations in order,
    how many candidate processes were spawned, and how many of them by a fork server."""
    counting = CountingSupervisor()

    async def go() -> list[ExecutionObservation]:
        out: list[ExecutionObservation] = []
        async with aexec.observer(kw.pop("options", None), supervisor=counting) as o:
            for cands in calls:
                out.extend(await observe_many(cands, observer=o, **kw))
        return out

    got = anyio.run(go, backend=backend)
    return got, counting.runs, counting.served


def test_observations_are_the_same_with_and_without_every_lever(
    shop: Path, make_repo: MakeRepo, tmp_path: Path
) -> None:
    cases = labelled_set(shop, make_repo)
    cands = [c for c, _ in cases]

    # levers off: one call per candidate (no dedup, no shared before-run), one slot, no
    # cache, every run a fresh interpreter (no fork server) compiling its own modules
    levers_off = aexec.Options(forkserver=False, bytecode=False)
    off, off_runs, off_served = observe_counting([[c] for c in cands], "asyncio", limit=1, options=levers_off)
    assert off_served == 0
    assert [(o.verdict, o.failure.failure_class if o.failure else None) for o in off] == [
        label for _, label in cases
    ], "the levers-off run does not match the labels"
    assert not any(o.cache_hit for o in off)
    reference = [comparable(o) for o in off]

    for backend in ("asyncio", "trio"):
        cache = str(tmp_path / f"cache-{backend}")
        cold, cold_runs, served = observe_counting([cands], backend, limit=8, cache_dir=cache)
        warm, warm_runs, _ = observe_counting([cands], backend, limit=8, cache_dir=cache)
        # the levers were really pulled: fewer processes cold, forked warm, none warm-cached
        assert cold_runs < off_runs, (backend, cold_runs, off_runs)
        assert served == cold_runs, (backend, served, cold_runs)
        assert len(os.listdir(os.path.join(cache, "bytecode"))) == len({c.repo for c in cands} - {None})
        assert warm_runs == 0 and all(o.cache_hit for o in warm), backend
        assert [o.id for o in cold] == [o.id for o in warm] == [c.id for c in cands]
        for name, got in (("cold", cold), ("warm", warm)):
            for ref, obs in zip(reference, got, strict=True):
                assert comparable(obs) == ref, f"{backend} {name}: {obs.id} differs with the levers on"
