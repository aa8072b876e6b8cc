"""The command line against the JSONL contract: run as a real subprocess, and what it
refuses before anything runs called in-process (`aexec_in_process`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .conftest import EXAMPLES, aexec_in_process, live_pids_with, slack

AEXEC = [sys.executable, "-m", "aexec"]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AEXEC, *args], capture_output=True, text=True, cwd=cwd, timeout=300, check=False)


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def example_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    d = tmp_path_factory.mktemp("cli")
    out, cache = d / "obs.jsonl", d / "cache"
    done = run("observe", str(EXAMPLES / "cases.jsonl"), "-o", str(out), "--cache-dir", str(cache))
    return done, out, cache


def test_shipped_example_gives_one_line_per_request_in_order(
    example_run: tuple[subprocess.CompletedProcess[str], Path, Path],
) -> None:
    done, out, _ = example_run
    assert done.returncode == 0, done.stderr
    cases = [json.loads(line) for line in (EXAMPLES / "cases.jsonl").read_text().splitlines() if line.strip()]
    got = lines(out)
    assert [o["id"] for o in got] == [c["id"] for c in cases]
    by_id = {o["id"]: o for o in got}
    assert by_id["suite-fix"]["verdict"] == "pass"
    assert by_id["suite-tamper-test"]["verdict"] == "tampered"
    assert by_id["suite-no-tests"]["flags"]["empty_success"] is True
    assert by_id["suite-module-name-error"]["failure"]["failure_class"] == "compile"
    assert by_id["snippet-timeout"]["failure"]["failure_class"] == "timeout"
    assert "observed 14 requests" in done.stderr and "cache hits: 0" in done.stderr


def test_second_run_is_served_from_the_cache(
    example_run: tuple[subprocess.CompletedProcess[str], Path, Path], tmp_path: Path
) -> None:
    _, first_out, cache = example_run
    out = tmp_path / "again.jsonl"
    done = run("observe", str(EXAMPLES / "cases.jsonl"), "-o", str(out), "--cache-dir", str(cache))
    assert done.returncode == 0, done.stderr
    again = lines(out)
    assert all(o["cache_hit"] for o in again)
    for a, b in zip(lines(first_out), again, strict=True):
        a.pop("cache_hit"), b.pop("cache_hit")
        assert a == b


@pytest.mark.parametrize(
    ("bad_line", "words"),
    [
        ("{not json", "bad JSON"),
        (
            '{"request_type": "explode", "artifact_shape": "snippet", "code": "1"}',
            "unknown request_type 'explode'",
        ),
        (
            '{"request_type": "run_suite", "artifact_shape": "test_subset", "tests": ["t.py"]}',
            "run_suite needs `repo`",
        ),
        (
            '{"request_type": "run_suite", "artifact_shape": "test_subset", "repo": "no/such/dir", "tests": []}',
            "is not a directory",
        ),
        (
            '{"request_type": "run_entry", "artifact_shape": "snippet", "code": "1", "policy": {"timeout_s": "soon"}}',
            "policy.timeout_s",
        ),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_malformed_file_is_rejected_whole_naming_the_line(tmp_path: Path, bad_line: str, words: str) -> None:
    cases = tmp_path / "cases.jsonl"
    good = json.dumps(
        {"id": "ok", "request_type": "run_entry", "artifact_shape": "snippet", "code": "print(1)"}
    )
    cases.write_text(good + "\n\n" + bad_line + "\n" + good + "\n")
    out = tmp_path / "obs.jsonl"
    done = aexec_in_process("observe", str(cases), "-o", str(out))
    assert done.returncode == 2
    message = done.stderr.strip()
    assert "\n" not in message
    assert f"{cases}:3:" in message and words in message
    assert not out.exists(), "nothing may run when the file is rejected"


def test_unknown_fields_are_ignored_and_blank_lines_skipped(tmp_path: Path) -> None:
    cases = tmp_path / "cases.jsonl"
    rows = [
        {
            "id": i,
            "request_type": "run_entry",
            "artifact_shape": "snippet",
            "code": f"print({i})",
            "label": "x",
        }
        for i in range(3)
    ]
    cases.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n   \n")
    out = tmp_path / "obs.jsonl"
    done = run("observe", str(cases), "-o", str(out), "--no-cache", "--jobs", "2")
    assert done.returncode == 0, done.stderr
    assert [o["stdout"] for o in lines(out)] == ["0\n", "1\n", "2\n"]
    assert "ignoring fields the contract does not define: label (3×)" in done.stderr


def test_relative_repo_resolves_against_the_cases_file(tmp_path: Path) -> None:
    cases = tmp_path / "cases.jsonl"
    case = {
        "request_type": "run_suite",
        "artifact_shape": "test_subset",
        "repo": os.path.relpath(EXAMPLES / "shop", tmp_path),
        "tests": ["tests/test_cart.py::test_total_without_discount"],
    }
    cases.write_text(json.dumps(case) + "\n")
    out = tmp_path / "obs.jsonl"
    done = run("observe", "cases.jsonl", "-o", str(out), "--no-cache", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (obs,) = lines(out)
    assert obs["verdict"] == "pass"


def test_no_cache_and_cache_dir_exclude_each_other(tmp_path: Path) -> None:
    done = aexec_in_process("observe", "x.jsonl", "-o", "y", "--no-cache", "--cache-dir", str(tmp_path))
    assert done.returncode == 2 and "not allowed with" in done.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interruption_kills_candidates_and_a_rerun_finishes_the_rest(tmp_path: Path, signum: int) -> None:
    marker = f"aexec-test-{uuid.uuid4()}"
    hang = (
        "import subprocess, time\n"
        f"subprocess.Popen([{marker!r}, '300'], executable={shutil.which('sleep')!r}, start_new_session=True)\n"
        "time.sleep(300)\n"
    )
    rows = [
        {"id": "quick", "request_type": "run_entry", "artifact_shape": "snippet", "code": "print(1)"},
        {
            "id": "hang",
            "request_type": "run_entry",
            "artifact_shape": "snippet",
            "code": hang,
            "policy": {"timeout_s": 3},
        },
    ]
    cases, out, scratch = tmp_path / "cases.jsonl", tmp_path / "obs.jsonl", tmp_path / "tmp"
    scratch.mkdir()
    cases.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "TMPDIR": str(scratch)}
    command = [*AEXEC, "observe", str(cases), "-o", str(out), "--cache-dir", str(tmp_path / "cache")]
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (live_pids_with(marker) and out.exists() and out.read_text().endswith("\n")):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"the candidates never started: {proc.communicate()[1]}")
        time.sleep(0.02)
    sent = time.monotonic()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=10)
    assert time.monotonic() - sent < slack(2.0)
    assert proc.returncode == 128 + signum, err
    assert "interrupted" in err
    assert live_pids_with(marker) == []
    assert os.listdir(scratch) == []
    text = out.read_text()
    assert text.endswith("\n")
    assert [json.loads(line)["id"] for line in text.splitlines()] == ["quick"]
    # The same command again: what was observed comes from the cache, the rest runs.
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(o["id"], o["cache_hit"]) for o in lines] == [("quick", True), ("hang", False)], again.stderr
    assert lines[1]["failure"]["failure_class"] == "timeout"
    assert live_pids_with(marker) == []


def test_an_interpreter_is_probed_once_per_call_and_once_per_change_with_a_cache(tmp_path: Path) -> None:
    # A wrapper interpreter that logs its probes (``python -s -c PROBE``) and execs ours.
    calls = tmp_path / "calls.log"
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\n[ "$2" = -c ] && echo probe >> {calls}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    cases = tmp_path / "cases.jsonl"
    rows = [
        {"request_type": "run_entry", "artifact_shape": "snippet", "code": f"print({i})"} for i in range(6)
    ]
    cases.write_text("".join(json.dumps({**r, "python": str(python)}) + "\n" for r in rows))

    def probes_of_a_run(*extra: str) -> int:
        before = calls.read_text().count("probe") if calls.exists() else 0
        done = run("observe", str(cases), "-o", str(tmp_path / "obs.jsonl"), *extra)
        assert done.returncode == 0, done.stderr
        assert [o["stdout"] for o in lines(tmp_path / "obs.jsonl")] == [f"{i}\n" for i in range(6)]
        return calls.read_text().count("probe") - before

    assert probes_of_a_run("--no-cache") == 1  # six candidates, one probe
    cache = ("--cache-dir", str(tmp_path / "cache"))
    assert probes_of_a_run(*cache) == 1
    assert probes_of_a_run(*cache) == 0  # the probe's answer came from the cache
    time.sleep(0.01)
    python.write_text(python.read_text())  # the interpreter changed: its answer may have
    assert probes_of_a_run(*cache) == 1


def test_an_env_broken_observation_is_a_result_and_an_aexec_error_is_not(tmp_path: Path) -> None:
    """issue 26, defect 4: a suite whose environment lacks a module it imports was
    observed (``env_broken``: exit 0, counted as such); a request aexec itself could not
    observe (an interpreter that does not answer as Python) still exits 1 and names it."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_x.py").write_text(
        "import aexec_not_installed_anywhere\n\n\ndef test_x():\n    pass\n"
    )
    suite = {
        "id": "broken-env",
        "request_type": "run_suite",
        "artifact_shape": "test_subset",
        "repo": str(repo),
        "tests": ["tests/test_x.py"],
    }
    ok = {"id": "ok", "request_type": "run_entry", "artifact_shape": "snippet", "code": "print(1)"}
    cases, out = tmp_path / "cases.jsonl", tmp_path / "obs.jsonl"
    cases.write_text(json.dumps(suite) + "\n" + json.dumps(ok) + "\n")
    done = run("observe", str(cases), "-o", str(out), "--no-cache")
    broken, fine = lines(out)
    assert broken["flags"]["env_broken"] is True and broken["verdict"] == "error"  # type: ignore[index]
    assert fine["verdict"] == "empty_success"
    assert done.returncode == 0, done.stderr
    assert "could not observe" not in done.stderr
    assert "environment broken: 1" in done.stderr

    cases.write_text(
        json.dumps({**ok, "id": "bad-python", "python": "/bin/true"}) + "\n" + json.dumps(suite) + "\n"
    )
    done = run("observe", str(cases), "-o", str(out), "--no-cache")
    bad, broken = lines(out)
    assert bad["verdict"] == "error" and not bad["flags"]["env_broken"]  # type: ignore[index]
    assert done.returncode == 1, done.stderr
    assert "aexec: could not observe 'bad-python'" in done.stderr
    assert "could not observe 'broken-env'" not in done.stderr
    assert "environment broken: 1" in done.stderr


def test_a_rejected_input_leaves_the_output_file_of_each_command_as_it_was(tmp_path: Path) -> None:
    """issue 26, defect 9: every input and the output path are checked before the output
    is touched, and before anything runs. ``discriminate`` truncated an existing ``-o`` to
    0 bytes when it refused a lone candidate; ``swebench`` wrote its report over its own
    predictions file, and ``ab`` crashed on an ``--out`` that is a file, after all the runs."""
    precious = b"a result of yesterday's long run\n"
    out = tmp_path / "out.jsonl"
    out.write_bytes(precious)
    lone = tmp_path / "lone.jsonl"
    lone.write_text(
        json.dumps({"id": "only", "request_type": "discriminate", "artifact_shape": "snippet", "code": "1"})
        + "\n"
    )
    done = aexec_in_process("discriminate", str(lone), "-o", str(out), "--no-cache")
    assert done.returncode == 2
    assert (
        done.stderr
        == f"aexec: {lone}:1: a task needs 2 or more candidates (candidates of one task share repo and tests)\n"
    )
    assert out.read_bytes() == precious

    # swebench: the report would go over an input; and into a directory.
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    inst = tmp_path / "instances.jsonl"
    inst.write_text(
        json.dumps(
            {
                "instance_id": "i",
                "repo": "repo",
                "FAIL_TO_PASS": ["tests/test_x.py::test_x"],
                "PASS_TO_PASS": [],
            }
        )
        + "\n"
    )
    preds = tmp_path / "preds.jsonl"
    preds_text = json.dumps({"instance_id": "i", "model_name_or_path": "m", "model_patch": ""}) + "\n"
    preds.write_text(preds_text)
    for target, words in ((preds, f"is the input file {preds}"), (tmp_path, "is a directory")):
        done = aexec_in_process("swebench", str(preds), str(inst), "-o", str(target), "--no-cache")
        assert done.returncode == 2, done.stderr
        assert done.stderr == f"aexec: -o {target}: {words}" + (
            "; refusing to overwrite it\n" if target == preds else "\n"
        )
        assert preds.read_text() == preds_text

    # ab: --out is a file, not a directory: refused before the runs.
    corpus = tmp_path / "corpus.jsonl"
    snippet = {"id": "s", "request_type": "run_entry", "artifact_shape": "snippet", "code": "print(1)"}
    corpus.write_text(
        json.dumps(snippet | {"label": {"verdict": "pass", "failure_class": None, "f2p": None}}) + "\n"
    )
    done = aexec_in_process("ab", str(corpus), "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"aexec: --out {out}: exists and is not a directory\n"
    assert out.read_bytes() == precious
