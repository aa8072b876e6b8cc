"""The probe's pure half (spec §4): the schema check of a model's answer, and the one
reader of the probe's configuration. The real client against a real server on loopback
is tests/test_probe.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aexec import OpenAIProber, RequestError, prober_from_env
from aexec._discrimination.probe import PROBE_CAP, PROBE_PROGRAM_CAP_CHARS, parse_probes


def probes(*items: dict[str, Any]) -> str:
    return json.dumps({"probes": list(items)})


def probe(pid: str = "P1", program: str = "print(1)", expected: str = "prints 1") -> dict[str, Any]:
    return {"probe_id": pid, "program": program, "expected": expected}


# --------------------------------------------------------------------------------------
# The schema check (pure)
# --------------------------------------------------------------------------------------


def test_a_well_formed_answer_is_accepted_in_order() -> None:
    got, problem = parse_probes(probes(probe("P1"), probe("P2", "assert f(1) == 2", "f(1) is 2")))
    assert problem is None
    assert [(p.probe_id, p.program, p.expected) for p in got] == [
        ("P1", "print(1)", "prints 1"),
        ("P2", "assert f(1) == 2", "f(1) is 2"),
    ]


def test_exactly_the_cap_is_accepted_one_more_is_no_probe_at_all() -> None:
    at_cap = probes(*(probe(f"P{i}") for i in range(PROBE_CAP)))
    assert len(parse_probes(at_cap)[0]) == PROBE_CAP
    got, problem = parse_probes(probes(*(probe(f"P{i}") for i in range(PROBE_CAP + 1))))
    assert got == () and problem is not None and "over the cap" in problem


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Sure! Here are probes: {...}", "not JSON"),
        ('```json\n{"probes": []}\n```', "not JSON"),
        ("[]", "schema violation"),
        (json.dumps({"probes": [probe()], "note": "hi"}), "schema violation"),
        (json.dumps({"probes": "P1"}), "must be a list"),
        (probes(), "no probes"),
        (probes({"probe_id": "P1", "program": "print(1)"}), "exactly"),
        (probes({**probe(), "authoritative": True}), "exactly"),
        (probes({**probe(), "program": 42}), "must be a string"),
        (probes(probe("P1"), probe("P1")), "not unique"),
        (probes(probe("")), "probe_id"),
        (probes(probe(program="   ")), "program is empty"),
        (probes(probe(program="x = 1\n" * PROBE_PROGRAM_CAP_CHARS)), "over the cap"),
        (probes(probe(expected="e" * (PROBE_PROGRAM_CAP_CHARS + 1))), "over the cap"),
    ],
)
def test_any_deviation_from_the_schema_is_no_probe(text: str, words: str) -> None:
    got, problem = parse_probes(text)
    assert got == ()
    assert problem is not None and words in problem


# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------


def test_no_configuration_means_no_client() -> None:
    assert prober_from_env({}) is None
    assert prober_from_env({"AEXEC_PROBE_API_KEY": "k"}) is None


def test_a_half_configuration_is_a_one_line_error_naming_the_missing_variable() -> None:
    with pytest.raises(RequestError, match="AEXEC_PROBE_MODEL is not set"):
        prober_from_env({"AEXEC_PROBE_BASE_URL": "http://127.0.0.1:1/v1"})
    with pytest.raises(RequestError, match="AEXEC_PROBE_BASE_URL is not set"):
        prober_from_env({"AEXEC_PROBE_MODEL": "m"})
    with pytest.raises(RequestError, match="not an http"):
        prober_from_env({"AEXEC_PROBE_BASE_URL": "127.0.0.1:8000", "AEXEC_PROBE_MODEL": "m"})


def test_full_configuration_builds_the_client_and_never_shows_the_key() -> None:
    got = prober_from_env(
        {
            "AEXEC_PROBE_BASE_URL": "http://127.0.0.1:9/v1/",
            "AEXEC_PROBE_MODEL": "m",
            "AEXEC_PROBE_API_KEY": "sekret",
        }
    )
    assert got == OpenAIProber("http://127.0.0.1:9/v1/", "m", "sekret")
    assert got.url == "http://127.0.0.1:9/v1/chat/completions"
    assert "sekret" not in repr(got)


def test_options_from_env_is_the_one_reader_of_the_probe_settings() -> None:
    """issue 26, defect 11: ``Options.from_env`` reads ``AEXEC_PROBE_*``; the probe module
    reads no environment and builds its client from the `Options` it is given."""
    import ast
    from pathlib import Path

    import aexec._discrimination.probe as probe_module
    from aexec import Options, prober_from_options

    env = {
        "AEXEC_PROBE_BASE_URL": " http://127.0.0.1:9/v1 ",
        "AEXEC_PROBE_MODEL": "m",
        "AEXEC_PROBE_API_KEY": "k",
    }
    options = Options.from_env(env)
    assert (options.probe_base_url, options.probe_model, options.probe_api_key) == (
        "http://127.0.0.1:9/v1",
        "m",
        "k",
    )
    assert "'k'" not in repr(options)
    assert prober_from_options(options) == OpenAIProber("http://127.0.0.1:9/v1", "m", "k")
    assert prober_from_options(Options()) is None
    with pytest.raises(RequestError, match="AEXEC_PROBE_BASE_URL is not set"):
        prober_from_options(Options(probe_model="m"))
    tree = ast.parse(Path(probe_module.__file__).read_text())
    reads = [
        n.lineno
        for n in ast.walk(tree)
        if (isinstance(n, ast.Attribute) and n.attr in ("environ", "environb", "getenv"))
        or (isinstance(n, ast.ImportFrom) and n.module == "os")
    ]
    assert reads == [], f"probe.py reads the environment itself (lines {reads})"
