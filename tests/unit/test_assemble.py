"""Stage (g) guards, synchronously: empty success, tampering, re-verification, f2p."""

from __future__ import annotations

import pytest

from aexec._stages.assemble import reconcile, tag, touches_oracle
from aexec._stages.parse import Evidence, ParsedTest


@pytest.mark.parametrize(
    ("paths", "selectors", "expected"),
    [
        (["src/pkg/mod.py"], ["tests/test_mod.py"], False),
        (["tests/test_mod.py"], ["tests/test_mod.py"], True),
        (["tests/test_mod.py"], ["./tests/test_mod.py"], True),
        (["tests/test_mod.py"], ["tests/test_mod.py::TestA::test_x"], True),
        (["tests/test_other.py"], ["tests/test_mod.py"], False),
        (["tests/helpers.py"], ["tests"], True),  # a directory selection covers its files
        (["tests/conftest.py"], ["tests/test_mod.py"], True),
        (["conftest.py"], [], True),
        (["tests/test_new.py"], [], False),  # an empty selection has no test files
        (["deep/er/conftest.py"], ["tests/test_mod.py"], True),
        (["pytest.ini"], ["tests/test_mod.py"], True),
        (["tests/test_new.py"], None, True),  # the whole suite is the oracle
        (["README.md"], None, False),
    ],
)
def test_diff_scope_check(paths: list[str], selectors: list[str] | None, expected: bool) -> None:
    assert touches_oracle(paths, selectors, config_changed=False) is expected


def test_changed_pytest_section_is_tampering() -> None:
    assert touches_oracle(["setup.cfg"], ["tests/test_mod.py"], config_changed=True)


def _ev(**verdicts: str) -> Evidence:
    return Evidence(
        runner="pytest",
        exit_code=0,
        signal=None,
        timed_out=False,
        duration=0.1,
        tests=tuple(ParsedTest(n, v) for n, v in verdicts.items()),  # type: ignore[arg-type]
        errors=(),
        in_flight=None,
        pytest_exit=0,
        parse_uncertain=False,
    )


def test_agreeing_rerun_confirms() -> None:
    first = _ev(a="passed", b="passed")
    merged, agreed = reconcile(first, _ev(a="passed", b="passed"))
    assert agreed and merged == first


def test_disagreeing_rerun_keeps_the_worse_verdict() -> None:
    merged, agreed = reconcile(_ev(a="passed", b="passed"), _ev(a="passed", b="failed"))
    assert not agreed
    assert {t.nodeid: t.verdict for t in merged.tests} == {"a": "passed", "b": "failed"}


def test_fail_to_pass_and_pass_to_pass() -> None:
    after = [
        ParsedTest("fixed", "passed"),
        ParsedTest("kept", "passed"),
        ParsedTest("new", "passed"),
        ParsedTest("broke", "failed"),
        ParsedTest("skip", "skipped"),
        ParsedTest("was_error", "passed"),
    ]
    before = {
        "fixed": "failed",
        "kept": "passed",
        "broke": "passed",
        "skip": "failed",
        "was_error": "errored",
    }
    got = {t.test: (t.f2p, t.p2p) for t in tag(after, before)}  # type: ignore[arg-type]
    assert got == {
        "fixed": (True, False),
        "kept": (False, True),
        "new": (True, False),
        "broke": (False, False),
        "skip": (False, False),
        "was_error": (True, False),
    }
    assert all(not (t.f2p or t.p2p) for t in tag(after, None))
