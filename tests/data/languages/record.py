"""Record the fixtures of ``tests/test_languages.py`` by running the real toolchains.

    python tests/data/languages/record.py              # every case
    python tests/data/languages/record.py rust java    # some languages
    python tests/data/languages/record.py --check      # run live, compare, write nothing

Each case of ``cases.py`` is run exactly as the pipeline would: the source and the
support files are written into a fresh scratch directory, the steps of
``aexec._languages.Language.steps`` run in order (plain subprocesses, each in its own process
group, stopping after the first that fails), and every step's raw output — exit code,
signal, whether the deadline hit, stdout, stderr and its evidence file — is stored as
``<language>/<name>.json`` beside the expected class and location. Resource cases run
under real caps (``prlimit`` on the program, small JVM and V8 heaps), never under a
hand-written imitation of one.

This is the only part of the languages work that does I/O; ``run_case`` is also what
the slow live test calls.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[2] / "src"))

from cases import CASES  # type: ignore[import-not-found]  # noqa: E402

from aexec._languages import StepOutput, language  # noqa: E402
from aexec._types import STREAM_CAP_BYTES  # noqa: E402

EXTRA_PATH = ("/root/.cargo/bin", str(Path.home() / ".cargo" / "bin"))


def resolve_tools(lang: str) -> dict[str, str] | None:
    """Each executable of ``lang`` by its path, or ``None`` when one is missing."""
    found: dict[str, str] = {}
    search = os.pathsep.join([os.environ.get("PATH", ""), *EXTRA_PATH])
    for name in language(lang).tools:
        path = shutil.which(name, path=search)
        if path is None:
            return None
        found[name] = path
    return found


def _decode(data: bytes) -> str:
    return data[:STREAM_CAP_BYTES].decode("utf-8", "replace")


def _run(
    argv: list[str], cwd: str, env: dict[str, str], stdin: str | None, deadline: float
) -> dict[str, Any]:
    stdin_f = open(os.path.join(cwd, stdin), "rb") if stdin else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=stdin_f,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=max(0.05, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    finally:
        if stdin:
            stdin_f.close()  # type: ignore[union-attr]
    rc = proc.returncode
    return {
        "exit_code": None if rc < 0 else rc,
        "signal": -rc if rc < 0 else None,
        "timed_out": timed_out,
        "stdout": _decode(out),
        "stderr": _decode(err),
    }


def toolchain_version(lang: str, tools: dict[str, str]) -> str:
    argv = list(language(lang).version_argv(tools=tools))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    return language(lang).parse_version(done.stdout, done.stderr)


def run_case(case: dict[str, Any], tools: dict[str, str]) -> dict[str, Any]:
    """Run one case for real; the fixture record (without the expectation fields' check)."""
    lang = language(case["language"])
    scratch = tempfile.mkdtemp(prefix=f"aexec-lang-{lang.name}-")
    try:
        files = {lang.source: case["code"], **lang.support_files(case["request_type"], case["code"])}
        for name, text in files.items():
            Path(scratch, name).write_text(text)
        plan = lang.steps(case["request_type"], scratch, tools=tools, ram_mib=case["ram_mib"])
        deadline = time.monotonic() + case["timeout_s"]
        outputs: list[dict[str, Any]] = []
        for step in plan:
            argv = list(step.argv)
            if step.runs_candidate and case["limits"]:
                argv = ["prlimit", *case["limits"], "--", *argv]
            env = {**os.environ, **dict(step.env)}
            raw = _run(argv, step.cwd, env, step.stdin_file, deadline)
            diagnostics = None
            if step.evidence_file and os.path.exists(step.evidence_file):
                diagnostics = Path(step.evidence_file).read_text(errors="replace")
            outputs.append({"name": step.name, "argv": argv, **raw, "diagnostics": diagnostics})
            failed = raw["timed_out"] or raw["signal"] is not None or raw["exit_code"] != 0
            if failed:
                break
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {**case, "scratch": scratch, "steps": outputs}


def step_outputs(record: dict[str, Any]) -> tuple[StepOutput, ...]:
    return tuple(
        StepOutput(
            name=s["name"],
            exit_code=s["exit_code"],
            signal=s["signal"],
            timed_out=s["timed_out"],
            stdout=s["stdout"],
            stderr=s["stderr"],
            diagnostics=s["diagnostics"],
            oom_killed=s.get("oom_killed", False),
        )
        for s in record["steps"]
    )


def verdict(record: dict[str, Any]) -> tuple[str | None, str]:
    """The class and location the parsers read from a record's raw steps."""
    lang = language(record["language"])
    ev = lang.parse(step_outputs(record), record["scratch"], timeout_s=record["timeout_s"])
    primary = ev.primary
    return (primary.failure_class, primary.location) if primary else (None, "")


def main(argv: list[str]) -> int:
    check = "--check" in argv
    wanted = {a for a in argv if not a.startswith("--")}
    bad = 0
    versions: dict[str, str | None] = {}
    for case in CASES:
        name = case["language"]
        if wanted and name not in wanted and f"{name}/{case['name']}" not in wanted:
            continue
        tools = resolve_tools(name)
        if tools is None:
            print(f"SKIP {name}/{case['name']}: toolchain {language(name).tools} not found")
            continue
        if name not in versions:
            versions[name] = toolchain_version(name, tools)
        record = {**run_case(case, tools), "toolchain": versions[name]}
        got = verdict(record)
        want = (case["expected_class"], case["expected_location"])
        ok = got == want
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}/{case['name']}: got {got}, expected {want}")
        if not ok:
            for s in record["steps"]:
                print(f"   step {s['name']} rc={s['exit_code']} sig={s['signal']} to={s['timed_out']}")
                print("   " + s["stderr"][-1500:].replace("\n", "\n   "))
        if not check:
            dest = HERE / name / f"{case['name']}.json"
            dest.parent.mkdir(exist_ok=True)
            dest.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
