"""SandboxFusion's ``/run_code`` mapping (`aexec._serve.sandboxfusion`), pure: its output
cap and truncation, a memory failure, the languages it names, the wait a request may
take (issue 40)."""

from __future__ import annotations

import attrs
import pytest

from aexec._records import Failure
from aexec._serve import sandboxfusion as sf
from aexec._types import TRUNCATION_MARKER

from .test_policy import _declare


def _obs(**fields: object):  # type: ignore[no-untyped-def]
    from aexec._records import ExecutionObservation, Flags, ResourceUsage

    base = ExecutionObservation(
        id=None,
        action="targeted_execution",
        verdict="fail",
        environment=_declare("targeted_execution", sf.request({"code": "", "language": "python"}).policy),
        cwd="/w",
        artifact_version="",
        exit_code=0,
        duration=0.5,
        timed_out=False,
        stdout="",
        stderr="",
        exception=None,
        changed_state="",
        test_results=(),
        resource_usage=ResourceUsage(),
        failure=None,
        flags=Flags(),
        request_type="run_entry",
        probe_gated=False,
    )
    return attrs.evolve(base, **fields)


def test_run_code_keeps_sandboxfusions_mib_of_output_unmarked() -> None:
    candidate = sf.request({"code": "print(1)", "language": "python"})
    assert candidate.policy.output_kib == sf.OUTPUT_KIB == 1024
    kept = "x" * (1024 * 1024)
    cut = kept + TRUNCATION_MARKER.format(dropped=7, stream="stdout", cap=1024 * 1024)
    answer = sf.response(_obs(verdict="empty_success", stdout=cut), "python")
    assert answer["status"] == "Success" and answer["run_result"]["stdout"] == kept
    # a program that prints a mark of another cap keeps it: it is the program's output
    own = "y" + TRUNCATION_MARKER.format(dropped=7, stream="stdout", cap=65536)
    assert sf.response(_obs(stdout=own), "python")["run_result"]["stdout"] == own


@pytest.mark.parametrize(
    ("timed_out", "exit_code", "signal"), [(True, None, "SIGKILL"), (False, None, "SIGKILL")]
)
def test_a_memory_failure_is_a_finished_run_with_a_nonzero_status(
    timed_out: bool, exit_code: int | None, signal: str
) -> None:
    """What SandboxFusion answers a memory hog: the run Finished, a non-zero return code
    (verl: a runtime error, -2), never TimeLimitExceeded (verl: -3)."""
    oom = Failure("resource", "", "a process was killed by the run's memory cap (cgroup OOM)", None, 0.9)
    obs = _obs(timed_out=timed_out, exit_code=exit_code, signal=signal, failure=oom, failures=(oom,))
    answer = sf.response(obs, "python")
    run = answer["run_result"]
    assert (answer["status"], run["status"], run["return_code"]) == ("Failed", "Finished", -9)


def test_a_timeout_is_still_a_time_limit() -> None:
    late = Failure("timeout", "", "killed at the 10 s wall-clock deadline", None, 10.0)
    obs = _obs(timed_out=True, exit_code=None, signal="SIGKILL", failure=late, failures=(late,))
    assert sf.response(obs, "python")["run_result"]["status"] == "TimeLimitExceeded"


def test_languages_sandboxfusion_names_are_run_or_answered_in_its_form() -> None:
    assert sf.request({"code": "echo 1", "language": "bash"}).language == "bash"
    with pytest.raises(sf.Unavailable) as caught:
        sf.request({"code": "package main", "language": "typescript"})
    body = caught.value.body()
    assert (body["status"], body["run_result"]) == ("SandboxError", None) and "typescript" in body["message"]
    with pytest.raises(sf.Invalid):
        sf.request({"code": "", "language": "cobol"})


def test_a_request_waits_only_while_its_run_can_still_end_before_verl_gives_up() -> None:
    body = {"code": "", "language": "python", "compile_timeout": 10, "run_timeout": 10}
    # verl gives up after 10 + 10 + 10 s; a Python run may take 10 s, and 3 s beyond it
    assert sf.start_within(body, sf.request(body)) == 30 - 10 - sf.RUN_OVERHEAD_S
    cpp = {**body, "language": "cpp"}  # one deadline for the build and the run: 20 s
    assert sf.start_within(cpp, sf.request(cpp)) == 30 - 20 - sf.RUN_OVERHEAD_S


def test_the_servers_interpreter_or_environment_is_the_python_programs_only() -> None:
    py = sf.request({"code": "", "language": "python"}, python="/opt/py/bin/python")
    assert py.python == "/opt/py/bin/python"
    sh = sf.request({"code": "", "language": "bash"}, python="/opt/py/bin/python")
    assert sh.python is None
