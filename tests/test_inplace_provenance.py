"""An in-place build's provenance and housekeeping (issue 30): each observation says
which in-place build it ran with and whether its run rebuilt the extensions (in ``aexec
observe``'s JSONL and ``aexec swebench``'s report); ``aexec env ls`` lists the builds,
``aexec env gc`` says which it removed; a failure recorded by another aexec version is
built again. Real gcc, real setuptools, the real commands (``tests/test_inplace.py``'s
tiny C-extension repo)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from aexec._environments.build import ensure
from aexec._environments.inplace import ensure_inplace
from aexec._environments.spec import EnvBroken
from aexec._version import VERSION

from .conftest import MakeRepo, diff
from .test_inplace import AS_OF, CPROJ, SPEED_C, SYSTEM, declared

ENVIRONMENT = {"python": SYSTEM, "install": "none", "exclude_newer": AS_OF, "inplace": True}
PATCHES = {
    "py": diff("cproj/__init__.py", CPROJ["cproj/__init__.py"], "from ._speed import value  # x\n"),
    "c": diff("cproj/_speed.c", SPEED_C, SPEED_C.replace("VALUE", "(VALUE + 1)")),
}


def aexec(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "aexec", *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "AEXEC_ENV_DIR": str(root)},
    )
    assert done.returncode == 0, done.stderr
    return done


def test_provenance_reaches_observe_and_swebench_and_env_ls_gc_list_the_build(
    make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo, root = make_repo(CPROJ), tmp_path / "envs"
    cases = tmp_path / "cases.jsonl"
    lines = [
        {
            "request_type": "run_suite",
            "artifact_shape": "patch",
            "id": ident,
            "repo": str(repo),
            "patch": patch,
            "tests": ["test_c.py"],
            "environment": ENVIRONMENT,
            "policy": {"timeout_s": 120},
        }
        for ident, patch in PATCHES.items()
    ]
    cases.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out.jsonl"
    aexec("observe", str(cases), "-o", str(out), "--no-cache", root=root)
    got = {o["id"]: o["environment"] for o in map(json.loads, out.read_text().splitlines())}
    (marker,) = (root / "inplace").glob("*/aexec-inplace.json")
    key, env_key = marker.parent.name, json.loads(marker.read_text())["environment"]
    for ident, rebuilt in (("py", False), ("c", True)):
        assert got[ident]["environment_key"] == env_key and len(got[ident]["lock_hash"]) == 64
        assert got[ident]["inplace_key"] == key and got[ident]["inplace_rebuilt"] is rebuilt, got[ident]

    instances, preds, report = tmp_path / "inst.jsonl", tmp_path / "preds.jsonl", tmp_path / "report.json"
    instance = {
        "instance_id": "c",
        "repo": str(repo),
        "environment": ENVIRONMENT,
        "test_patch": "",
        "FAIL_TO_PASS": ["test_c.py::test_value"],
        "PASS_TO_PASS": [],
    }
    instances.write_text(json.dumps(instance) + "\n")
    preds.write_text(json.dumps({"instance_id": "c", "model_name_or_path": "m", "model_patch": PATCHES["c"]}))
    aexec("swebench", str(preds), str(instances), "-o", str(report), "--no-cache", root=root)
    detail = json.loads(report.read_text())["instances"]["c"]
    assert detail["resolved"] is True, detail
    assert detail["environment"]["environment_key"] == env_key and detail["environment"]["lock_hash"]
    assert detail["environment"]["inplace_key"] == key and detail["environment"]["inplace_rebuilt"] is True

    # `aexec env ls`: the build, its environment, what it carries, its size, time, last use.
    listed = aexec("env", "ls", root=root).stdout.splitlines()
    (line,) = [x for x in listed if x.startswith(key[:12])]
    files = len(json.loads(marker.read_text())["files"])
    assert f"in-place build of environment {env_key[:12]}  {files} files carried" in line, line
    assert " MiB own  built in " in line and "  used 20" in line, line
    # `aexec env gc` keeps it while its environment is there, and says it removed it after.
    assert str(marker.parent) not in aexec("env", "gc", root=root).stderr
    shutil.rmtree(root / "envs")
    assert f"aexec env gc: removed {marker.parent}\n" in aexec("env", "gc", root=root).stderr
    assert not marker.parent.exists()


def test_a_failure_recorded_by_another_aexec_is_built_again(make_repo: MakeRepo, tmp_path: Path) -> None:
    broken = SPEED_C.replace("PyLong_FromLong(VALUE);", "nope")
    repo, root = make_repo({**CPROJ, "cproj/_speed.c": broken}), tmp_path / "envs"
    built = ensure(declared(), str(repo), str(root))

    def builds() -> int:
        return "".join(p.read_text() for p in (root / "logs").glob("*.log")).count("build_ext --inplace")

    for _ in range(2):  # built once, recorded: the second ask fails at once
        with pytest.raises(EnvBroken, match="nope"):
            ensure_inplace(built, str(repo), str(root))
    assert builds() == 1
    (record,) = (root / "failed").glob("*.json")
    assert json.loads(record.read_text())["aexec_version"] == VERSION
    # As an older aexec recorded it (no version): absent, said so, built (and failed) again.
    old = {k: v for k, v in json.loads(record.read_text()).items() if k != "aexec_version"}
    record.write_text(json.dumps(old))
    with structlog.testing.capture_logs() as logs, pytest.raises(EnvBroken, match="nope"):
        ensure_inplace(built, str(repo), str(root))
    assert builds() == 2
    assert any(e["event"] == "env_failure_stale" and e["recorded_by"] is None for e in logs), logs
    assert json.loads(record.read_text())["aexec_version"] == VERSION
    with pytest.raises(EnvBroken, match="nope"):  # this version's record holds again
        ensure_inplace(built, str(repo), str(root))
    assert builds() == 2
