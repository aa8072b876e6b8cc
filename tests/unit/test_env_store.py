"""A recorded environment failure holds for the aexec version that recorded it only: one
from another version (or from before failures carried one) is absent, and said so
(``aexec._environments.store``); ``aexec env ls`` says which records are ignored."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import structlog

from aexec._environments.command import gc_main, ls_main
from aexec._environments.spec import EnvBroken
from aexec._environments.store import check_failed, fail, recorded_failure
from aexec._version import VERSION


def test_a_failure_holds_for_the_version_that_recorded_it(tmp_path: Path) -> None:
    err = fail(str(tmp_path), "k" * 64, "build", "uv said no")
    record = json.loads((tmp_path / "failed" / ("k" * 64 + ".json")).read_text())
    assert record["aexec_version"] == VERSION and err.kind == "build"
    with pytest.raises(EnvBroken, match="uv said no"):
        check_failed(str(tmp_path), "k" * 64)


@pytest.mark.parametrize("was", [None, "0.0.1"])
def test_another_version_s_failure_is_absent_and_logged(tmp_path: Path, was: str | None) -> None:
    path = tmp_path / "failed" / ("k" * 64 + ".json")
    path.parent.mkdir()
    record = {"kind": "build", "message": "old builder bug", "at": 0.0}
    path.write_text(json.dumps(record if was is None else {**record, "aexec_version": was}))
    with structlog.testing.capture_logs() as logs:
        assert recorded_failure(str(tmp_path), "k" * 64) is None
        check_failed(str(tmp_path), "k" * 64)  # does not raise
    stale = [e for e in logs if e["event"] == "env_failure_stale"]
    assert len(stale) == 2 and stale[0]["recorded_by"] == was and stale[0]["aexec_version"] == VERSION


def test_env_ls_says_which_failures_are_ignored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fail(str(tmp_path), "a" * 64, "build", "current")
    (tmp_path / "failed" / ("b" * 64 + ".json")).write_text(json.dumps({"kind": "build", "message": "old"}))
    args = argparse.Namespace(env_dir=str(tmp_path), cache_dir=None)
    assert ls_main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{'a' * 12}  env_broken build: current",
        f"{'b' * 12}  env_broken build: old (recorded by an older aexec: ignored, built again)",
    ]


def test_env_gc_removes_the_failures_another_version_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fail(str(tmp_path), "a" * 64, "build", "current")
    old = tmp_path / "failed" / ("b" * 64 + ".json")
    old.write_text(json.dumps({"kind": "build", "message": "old", "aexec_version": "0.0.1"}))
    args = argparse.Namespace(env_dir=str(tmp_path), cache_dir=None, unused_days=None, failures=False)
    assert gc_main(args) == 0
    assert [p.name for p in (tmp_path / "failed").iterdir()] == ["a" * 64 + ".json"]
    assert f"aexec env gc: removed {old}\n" in capsys.readouterr().err
