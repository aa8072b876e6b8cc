"""Goal 6: a library is quiet (issue 17).

Each case runs in a fresh interpreter (the test process's logging and structlog state
are not the question): observing candidates that fail, time out, and that aexec itself
cannot observe (a supervisor that raises: an ``error``-level event) writes nothing to
stdout or stderr unless the application asks for aexec's events, and then they arrive
where it asked: the standard library's ``logging`` tree under ``aexec.*``, or structlog.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

#: The three observations every case makes; ``SETUP`` is the application's logging setup.
SCRIPT = """\
import json, sys
import anyio
import aexec
from aexec import Candidate, Policy
{setup}

class Broken:
    async def execute(self, invocation):
        raise RuntimeError("the supervisor broke")

async def main():
    fails = await aexec.observe(Candidate("run_entry", "snippet", code="print('out'); raise ValueError('boom')"))
    slow = await aexec.observe(
        Candidate("run_entry", "snippet", code="while True: pass", policy=Policy(timeout_s=1))
    )
    (broken,) = await aexec.observe_many([Candidate("run_entry", "snippet", code="pass")], supervisor=Broken())
    await aexec.aclose()
    return [[o.verdict, o.failure.failure_class if o.failure else None, o.stdout] for o in (fails, slow, broken)]

observed = anyio.run(main, backend=sys.argv[2])
{teardown}
with open(sys.argv[1], "w") as f:
    json.dump({{"observed": observed, "extra": extra}}, f)
"""

EXPECTED = [["fail", "runtime", "out\n"], ["fail", "timeout", ""], ["error", None, ""]]


def run(
    tmp_path: Path, backend: str, setup: str = "", teardown: str = "extra = None"
) -> tuple[str, str, Any]:
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AEXEC_", "PYTEST_"))}
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(setup=setup, teardown=teardown), str(out), backend],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["observed"] == EXPECTED
    return done.stdout, done.stderr, result["extra"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_unconfigured_aexec_writes_nothing(tmp_path: Path, backend: str) -> None:
    stdout, stderr, _ = run(tmp_path, backend)
    assert stdout == "", "aexec printed to the application's stdout"
    assert stderr == "", "aexec wrote to stderr with no logging configured"


def test_stdlib_logging_gets_aexecs_events_under_its_loggers(tmp_path: Path) -> None:
    setup = (
        "import logging\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format='LOG %(name)s %(levelname)s %(message)s')"
    )
    stdout, stderr, _ = run(tmp_path, "asyncio", setup)
    assert stdout == ""
    lines = stderr.splitlines()
    log_lines = [line for line in lines if line.startswith("LOG ")]
    aexec_lines = [line for line in log_lines if line.split()[1].startswith("aexec.")]
    events = {(line.split()[1], line.split()[2], line.split()[3]) for line in aexec_lines}
    assert ("aexec._pipeline.witness", "INFO", "observed") in events
    assert ("aexec._pipeline.witness", "INFO", "executed") in events
    assert ("aexec._pipeline.observer", "ERROR", "observation_failed") in events
    assert any("the supervisor broke" in line for line in lines), "the traceback of the error goes along"
    # everything else on stderr is the logging output: the traceback of that error event
    others = [line for line in lines if not line.startswith("LOG ")]
    assert all(
        line.startswith(("Traceback", "  ", "RuntimeError", "    ")) or not line.strip() for line in others
    ), others
    assert not any("boom" in line for line in lines), "a candidate's output reached the application's stderr"


def test_structlog_configured_by_the_caller_gets_the_events(tmp_path: Path) -> None:
    setup = (
        "import logging, structlog.testing\n"
        "stdlib = []\n"
        "class Keep(logging.Handler):\n"
        "    def emit(self, record): stdlib.append(record.name)\n"
        "logging.getLogger().addHandler(Keep()); logging.getLogger().setLevel(logging.DEBUG)\n"
        "capture = structlog.testing.capture_logs()\n"
        "logs = capture.__enter__()"
    )
    teardown = (
        "capture.__exit__(None, None, None)\n"
        "extra = {'events': [[e['event'], e['log_level']] for e in logs], 'stdlib': stdlib}"
    )
    stdout, stderr, extra = run(tmp_path, "asyncio", setup, teardown)
    assert stdout == "" and stderr == ""
    events = [tuple(e) for e in extra["events"]]
    assert ("observed", "info") in events
    assert ("executed", "info") in events
    assert ("observation_failed", "error") in events
    assert [n for n in extra["stdlib"] if n.startswith("aexec")] == [], "routed to both"
