"""The recorded toolchain outputs of tests/data/languages still match the live toolchains
(their parsing is tested, pure, in tests/unit/test_languages.py)."""

from __future__ import annotations

import pytest

from aexec import _languages as langs

from .unit.test_languages import DATA, _load, record

LIVE = [
    ("c", "assertion"),
    ("c", "compile_link"),
    ("cpp", "resource_bad_alloc"),
    ("rust", "dependency_import"),
    ("rust", "assertion"),
    ("java", "type"),
    ("java", "assertion"),
    ("javascript", "type"),
    ("javascript", "syntax"),
    ("sql", "build_no_column"),
    ("sql", "runtime_constraint"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("language", "name"), LIVE, ids=[f"{a}/{b}" for a, b in LIVE])
def test_recordings_still_match_the_live_toolchains(language: str, name: str) -> None:
    tools = record.resolve_tools(language)
    if tools is None:
        pytest.skip(f"{language}: toolchain {' '.join(langs.language(language).tools)} is not installed")
    recorded = _load(DATA / language / f"{name}.json")
    live = record.run_case(recorded, tools)
    assert (
        record.verdict(live)
        == record.verdict(recorded)
        == (
            recorded["expected_class"],
            recorded["expected_location"],
        )
    )
    assert [s["name"] for s in live["steps"]] == [s["name"] for s in recorded["steps"]]
