"""Goal 3, a typed wire: what the driver writes is what the library reads (issue 17).

The driver is exercised as it really runs: its entry (``aexec/_driver/__main__.py``) as
a file, in a subprocess of its own, loading its package (the wire with it) under its
private name. Its records are read back with the library's one reader,
`aexec._driver.wire.decode_report`; its caps are checked by what it does, against a
copy of the driver with other values in its wire.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from aexec._boundary import DRIVER
from aexec._driver import wire as _wire
from aexec._driver.wire import RECORD_FIELDS, decode, decode_report

from .unit.test_wire import MALFORMED

#: One record of every kind, as the driver writes it (``kind`` is Report.write's first argument).
SAMPLES: dict[str, list[dict[str, Any]]] = {
    "exception": [
        {
            "phase": "call",
            "type": "builtins.ValueError",
            "bases": [
                "builtins.ValueError",
                "builtins.Exception",
                "builtins.BaseException",
                "builtins.object",
            ],
            "message": "bad \u00e9 \udc80 surrogate, \n newline, \x00 nul",
            "errno": None,
            "frames": [["/w/test_x.py", 3, "test_x"], ["/w/x.py", 10, "f"]],
            "nodeid": "test_x.py::test_x",
        },
        {
            "phase": "import",
            "type": "builtins.OSError",
            "bases": [],
            "message": "",
            "errno": 2,
            "frames": [],
            "module": "pkg.mod",
        },
    ],
    "exit": [{"code": "None"}, {"code": "'message'"}],
    "child": [{"exit": 3, "signal": None}, {"exit": None, "signal": 9}],
    "main": [{"exit": 0, "signal": None}, {"exit": None, "signal": 15}],
    "usage": [{"cpu_s": 0.25, "maxrss_kib": 10240}, {"cpu_s": 0, "maxrss_kib": 0}],
    "collected": [{"count": 0}, {"count": 12}],
    "collect_error": [{"nodeid": "tests/test_a.py", "text": "E   SyntaxError"}],
    "missing": [
        {"nodeid": "tests/test_a.py::test_a", "what": "fixture", "name": "mocker"},
        {"nodeid": "tests/test_b.py", "what": "marker", "name": "anyio"},
    ],
    "start": [{"nodeid": "tests/test_a.py::test_a[x-1]"}],
    "test": [
        {"nodeid": "tests/test_a.py::test_a", "verdict": v}
        for v in ("passed", "failed", "errored", "skipped")
    ],
    "end": [{"exitstatus": 0}, {"exitstatus": 5}],
    "step_start": [{"name": "build"}],
    "step": [
        {
            "name": "build",
            "exit": 1,
            "signal": None,
            "stdout": "",
            "stderr": "main.c:3: error",
            "evidence": "[]",
        },
        {"name": "run", "exit": None, "signal": 11, "stdout": "partial", "stderr": "", "evidence": None},
    ],
    "go_cold": [{"reason": "python_files = ['*.py']: aexec_helper was not rewritten, imported ahead"}],
}

#: Run the driver's entry as a file (``runpy.run_path``, as ``python __main__.py`` would,
#: minus ``main()``), load the driver as it does, and write the records of stdin through
#: its own ``Report`` (``_driver/reporting.py``).
WRITER = """\
import json, runpy, sys
driver = runpy.run_path(sys.argv[1], run_name="aexec_driver")["load"]()
report = driver.runners.reporting.Report(sys.argv[2])
for kind, fields in json.load(sys.stdin):
    report.write(kind, **fields)
wire = driver.runners.wire
print(json.dumps({
    "caps": [wire.FRAME_CAP, wire.MESSAGE_CAP, wire.BOX_FAILED],
    "aexec_imported": sorted(m for m in sys.modules if "aexec" in m or "driver" in m),
}))
"""


def write_through_driver(
    tmp_path: Path, records: list[tuple[str, dict[str, Any]]], driver: str = DRIVER
) -> tuple[bytes, dict[str, Any]]:
    report = tmp_path / "report.jsonl"
    done = subprocess.run(
        [sys.executable, "-s", "-c", WRITER, driver, str(report)],
        input=json.dumps(records),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return report.read_bytes(), json.loads(done.stdout)


def test_every_record_kind_round_trips_through_the_drivers_report(tmp_path: Path) -> None:
    assert set(SAMPLES) == set(RECORD_FIELDS), "a record kind without a round-trip sample"
    for kind, samples in SAMPLES.items():
        for sample in samples:
            assert set(RECORD_FIELDS[kind]) <= set(sample), (kind, sample)
    written = [(kind, fields) for kind, samples in SAMPLES.items() for fields in samples]
    data, info = write_through_driver(tmp_path, written)
    records, bad = decode_report(data)
    assert bad == 0
    assert list(records) == [{**fields, "kind": kind} for kind, fields in written]
    assert len(data.splitlines()) == len(written), "one line per record"
    # Neither aexec nor the driver's own package (gone from sys.modules once loaded).
    assert info["aexec_imported"] == [], "the driver left modules of aexec's in sys.modules"


def test_a_value_the_driver_cannot_serialize_is_written_as_its_repr(tmp_path: Path) -> None:
    data, _ = write_through_driver(tmp_path, [])  # an empty report is no record and nothing bad
    assert decode_report(data) == ((), 0)
    line = _wire.encode("exit", {"code": object})
    assert decode(line) == {"code": repr(object), "kind": "exit"}


def test_a_report_scribbled_on_keeps_its_good_records(tmp_path: Path) -> None:
    good: list[tuple[str, dict[str, Any]]] = [
        ("collected", {"count": 1}),
        ("start", {"nodeid": "t.py::t"}),
        ("end", {"exitstatus": 0}),
    ]
    data, _ = write_through_driver(tmp_path, good)
    records, bad = decode_report(b"\n".join(MALFORMED) + b"\n" + data + b'{"kind": "te')
    assert [r["kind"] for r in records] == ["collected", "start", "end"]
    assert bad == len(MALFORMED) + 1


# -- the caps: the driver takes them from the wire, as its behaviour shows ---------------

RAISES = """\
def deep(n):
    if n == 0:
        raise ValueError("m" * 20000)
    deep(n - 1)
deep(100)
"""


def run_driver(driver: str, tmp_path: Path, box: dict[str, Any] | None) -> tuple[int, tuple[Any, ...]]:
    """``python -s aexec/_driver/__main__.py SPEC``: a snippet whose exception has a deep traceback and a
    long message (``box``: the boundary spec, which a driver not started by its
    supervisor refuses)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    (run / "work").mkdir(parents=True)
    (run / "snippet.py").write_text(RAISES)
    spec = {
        "runner": "snippet",
        "report": str(run / "report.jsonl"),
        "cwd": str(run / "work"),
        "sys_path": [str(run / "work")],
        "rlimits": {},
        "box": box,
        "cgroups": [],
        "snippet": str(run / "snippet.py"),
        "argv": [],
        "pytest_args": [],
        "import_modules": [],
    }
    (run / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run(
        [sys.executable, "-s", driver, str(run / "spec.json")],
        capture_output=True,
        timeout=60,
        cwd=run / "work",
    )
    report = run / "report.jsonl"
    records, bad = decode_report(report.read_bytes() if report.exists() else b"")
    assert bad == 0
    return done.returncode, records


def a_box(tmp_path: Path) -> dict[str, Any]:
    # supervisor_pids names no process: the driver must refuse to build it, with BOX_FAILED
    return {"supervisor_pids": [], "uid": 65534, "gid": 65534, "scratch_root": str(tmp_path),
            "readonly": [], "hidden": [], "etc": None, "tmp": str(tmp_path),
            "tmp_targets": [], "repo_view": None, "seccomp": True}  # fmt: skip


def observed_caps(driver: str, tmp_path: Path) -> tuple[int, int, int]:
    rc, records = run_driver(driver, tmp_path, None)
    assert rc == 1
    (exc,) = [r for r in records if r["kind"] == "exception"]
    assert exc["type"] == "builtins.ValueError"
    box_rc, box_records = run_driver(driver, tmp_path, a_box(tmp_path))
    assert box_records == ()
    return len(exc["frames"]), len(exc["message"]), box_rc


def test_the_driver_applies_the_wires_caps(tmp_path: Path) -> None:
    assert observed_caps(DRIVER, tmp_path / "real") == (_wire.FRAME_CAP, _wire.MESSAGE_CAP, _wire.BOX_FAILED)
    # A copy of the driver's package, with other caps in its wire: the driver follows.
    other = tmp_path / "other" / "_driver"
    shutil.copytree(Path(DRIVER).parent, other, ignore=shutil.ignore_patterns("__pycache__"))
    wire = Path(_wire.__file__).read_text()
    for name, old, new in [("FRAME_CAP", 32, 7), ("MESSAGE_CAP", 4096, 100), ("BOX_FAILED", 125, 99)]:
        assert getattr(_wire, name) == old
        assert wire.count(f"\n{name} = {old}\n") == 1
        wire = wire.replace(f"\n{name} = {old}\n", f"\n{name} = {new}\n")
    (other / "wire.py").write_text(wire)
    assert observed_caps(str(other / "__main__.py"), tmp_path / "copy") == (7, 100, 99)
