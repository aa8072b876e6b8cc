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
    done, result = fresh_interpreter(tmp_path, SCRIPT.format(setup=setup, teardown=teardown), backend)
    assert result["observed"] == EXPECTED
    return done.stdout, done.stderr, result["extra"]


def fresh_interpreter(
    tmp_path: Path, script: str, backend: str
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """``script OUT BACKEND`` in a fresh interpreter with no AEXEC_/PYTEST_ variable and
    nothing configured; it must exit 0, and what it wrote to OUT (JSON) is returned."""
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AEXEC_", "PYTEST_"))}
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", script, str(out), backend],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return done, json.loads(out.read_text())


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


#: A discriminate run with the probe step configured from the environment (through
#: ``prober_from_env``, so ``Options.from_env``) against a chat-completions server on
#: 127.0.0.1 in the same process: one answer with probes (``probe_call``, probes run),
#: one that is not JSON (``probe_answer_rejected``, a warning).
DISCRIMINATE = """\
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import anyio
import aexec
from aexec import Candidate

answers = [
    json.dumps({"probes": [{"probe_id": "neg", "program": "print(f(-3))", "expected": "prints 3"}]}),
    "I think you should test negatives.",
]

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        content = answers.pop(0)
        body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
import os
os.environ["AEXEC_PROBE_BASE_URL"] = f"http://127.0.0.1:{server.server_address[1]}/v1"
os.environ["AEXEC_PROBE_MODEL"] = "m"

pair = [
    Candidate("discriminate", "snippet", id="abs", code="def f(x):\\n    return abs(x)\\n"),
    Candidate("discriminate", "snippet", id="clip", code="def f(x):\\n    return max(x, 0)\\n"),
]

async def main():
    prober = aexec.prober_from_env()
    first = await aexec.discriminate(pair, prober=prober)
    second = await aexec.discriminate(pair, prober=prober)
    await aexec.aclose()
    return [[r.probe.fired, len(r.probe.probes), len(r.groups)] for r in (first, second)]

observed = anyio.run(main, backend=sys.argv[2])
server.shutdown()
with open(sys.argv[1], "w") as f:
    json.dump(observed, f)
"""


def test_a_discriminate_run_with_a_probe_writes_nothing_unconfigured(tmp_path: Path) -> None:
    """issue 26, defect 11: the probe step's events (``probe_call``, a rejected answer)
    and ``discriminated`` went to stdout through structlog's unconfigured default."""
    done, observed = fresh_interpreter(tmp_path, DISCRIMINATE, "asyncio")
    # The probe fired both times: its probes split the pair; the bad answer is no probe.
    assert observed == [[True, 1, 2], [True, 0, 1]]
    assert done.stdout == "", "aexec printed to the application's stdout"
    assert done.stderr == "", "aexec wrote to stderr with no logging configured"


#: Modules that may write to the process's own streams: the command line (its messages
#: and its output), and the driver, which runs in the candidate's process (its streams
#: are the candidate's, read back as the observation's).
WRITERS = {
    "_cli.py",
    "_commands.py",
    "_jsonl.py",
    "_progress.py",
    "_swebench.py",
    "_environments/command.py",
    "_environments/jail.py",  # a program of its own (run by path): its stderr is the build's log
}


def test_nothing_in_the_library_logs_or_prints_outside_log() -> None:
    """The static half: every module logs through ``aexec._log`` (only it and the CLI,
    which configures structlog, import ``structlog`` or ``logging``), and only the
    command line and the driver print or touch ``sys.stdout`` / ``sys.stderr``."""
    import ast

    import aexec

    src = Path(aexec.__file__).parent
    found = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        writer = rel in WRITERS or rel.startswith("_driver/")
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for name in names:
                    if name.split(".")[0] in ("structlog", "logging") and rel not in ("_log.py", "_cli.py"):
                        found.append(f"{rel}:{node.lineno}: imports {name} (log through aexec._log)")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                if not writer:
                    found.append(f"{rel}:{node.lineno}: print")
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "sys"
                and node.attr in ("stdout", "stderr", "__stdout__", "__stderr__")
                and not writer
            ):
                found.append(f"{rel}:{node.lineno}: sys.{node.attr}")
    assert found == []
