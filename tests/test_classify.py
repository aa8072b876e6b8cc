"""Stage (a): the §3.1 table, exactly; and which runner each request gets."""

from __future__ import annotations

import pytest

from aexec import Candidate, RequestError
from aexec._stages.classify import classify, route
from aexec._types import ARTIFACT_SHAPES, REQUEST_TYPES

TABLE = {
    ("build_check", "patch"): "compile_parse",
    ("build_check", "snippet"): "compile_parse",
    ("build_check", "command"): "compile_parse",
    ("run_entry", "snippet"): "targeted_execution",
    ("run_entry", "command"): "targeted_execution",
    ("run_suite", "test_subset"): "test_execution",
    ("probe", "probe_program"): "diagnostic_probe",
}


@pytest.mark.parametrize("request_type", REQUEST_TYPES)
@pytest.mark.parametrize("shape", ARTIFACT_SHAPES)
def test_every_pair_follows_the_table(request_type: str, shape: str) -> None:
    c = classify(request_type, shape)  # type: ignore[arg-type]
    if request_type == "discriminate":
        assert (c.mode, c.probe_gated) == ("diagnostic_probe", True)
    else:
        assert c.mode == TABLE.get((request_type, shape), "targeted_execution")
        assert c.probe_gated is False


def test_only_discriminate_arms_the_probe() -> None:
    armed = {(r, s) for r in REQUEST_TYPES for s in ARTIFACT_SHAPES if classify(r, s).probe_gated}
    assert armed == {("discriminate", s) for s in ARTIFACT_SHAPES}


@pytest.mark.parametrize(
    ("candidate", "runner"),
    [
        (Candidate("build_check", "snippet", code="x = 1"), "compile_snippet"),
        (Candidate("build_check", "patch", repo="r", patch="p"), "compile_tree"),
        (Candidate("build_check", "command", command=["true"]), "command"),
        (Candidate("run_entry", "snippet", code="x"), "snippet"),
        (Candidate("run_entry", "command", command=["true"]), "command"),
        (Candidate("run_suite", "test_subset", repo="r", tests=["t.py"]), "pytest"),
        (Candidate("probe", "probe_program", code="x"), "snippet"),
    ],
)
def test_runner_follows_mode_and_fields(candidate: Candidate, runner: str) -> None:
    assert route(candidate)[1] == runner


@pytest.mark.parametrize(
    ("candidate", "message"),
    [
        (Candidate("run_suite", "test_subset", tests=["t.py"]), "run_suite needs `repo`"),
        (Candidate("run_entry", "snippet"), "needs `code` or `command`"),
        (Candidate("run_entry", "command", command=[]), "non-empty list"),
        (Candidate("run_entry", "snippet", code="x", patch="p"), "`patch` needs `repo`"),
        (Candidate("run_suite", "test_subset", repo="r", tests=["../x.py"]), "tests[0]"),
        (Candidate("run_suite", "test_subset", repo="r", tests=["/abs.py"]), "tests[0]"),
    ],
)
def test_malformed_requests_are_named(candidate: Candidate, message: str) -> None:
    with pytest.raises(RequestError, match=message.replace("[", r"\[").replace("`", "`")):
        route(candidate)
