"""A served run's output is drained by the fork server (``_driver/outputs.py``, issue 42):
what the observation says a run printed must be what a cold run's pipes, drained by the
library, say — the bytes kept, the count of those dropped past each cap, their order —
and a run's pipes held open past its end are given up, as a cold run's are."""

from __future__ import annotations

import time

import pytest

from aexec import Candidate, Options, Policy, observe_many

from .test_forkserver import both

pytestmark = pytest.mark.anyio

CAP_KIB = 4

PROGRAMS = {
    "nothing": "pass",
    "both streams, under the cap": "import sys\nprint('out')\nprint('err', file=sys.stderr)\n",
    "exactly the cap": f"import sys\nsys.stdout.write('a' * {CAP_KIB * 1024})\n",
    "past the cap on both, more than a pipe holds": (
        "import sys\n"
        "for i in range(3000):\n"
        "    sys.stdout.write(f'{i:05d} ' * 20 + '\\n')\n"
        "    sys.stderr.write(f'e{i:05d}' * 20 + '\\n')\n"
    ),
    "bytes that are not UTF-8": "import sys\nsys.stdout.buffer.write(bytes(range(256)) * 3)\n",
    "chatty, unbuffered, with pauses": (
        "import sys, time\nfor i in range(40):\n    print(i, flush=True)\n    time.sleep(0.003)\n"
    ),
    "killed at the deadline while printing": "import sys\nwhile True:\n    print('x' * 100, flush=True)\n",
    "a crash after output": "print('before')\nraise SystemExit(3)\n",
}


def _candidates() -> list[Candidate]:
    timeout = Policy(timeout_s=1.5, output_kib=CAP_KIB)
    return [
        Candidate("run_entry", "snippet", code=code, id=name, policy=timeout)
        for name, code in PROGRAMS.items()
    ]


async def test_served_output_is_what_a_cold_run_prints() -> None:
    warm, cold = await both(_candidates())
    for w, c in zip(warm, cold, strict=True):
        assert w.verdict == c.verdict, w.id
        if w.id == "killed at the deadline while printing":
            # what a killed run had printed depends on when it was killed: the cap holds
            assert len(w.stdout.encode()) > CAP_KIB * 1024 and "not kept" in w.stdout
            continue
        assert (w.stdout, w.stderr) == (c.stdout, c.stderr), w.id
    by_id = {o.id: o for o in warm}
    past = by_id["past the cap on both, more than a pipe holds"]
    for text, stream in ((past.stdout, "stdout"), (past.stderr, "stderr")):
        kept, marker = text.split("\n[aexec: ", 1)
        assert len(kept.encode()) == CAP_KIB * 1024
        assert f"more bytes of {stream} not kept" in marker
    assert "not kept" not in by_id["exactly the cap"].stdout
    assert by_id["chatty, unbuffered, with pauses"].stdout == "".join(f"{i}\n" for i in range(40))


async def test_a_pipe_held_open_past_the_run_is_given_up() -> None:
    # Without namespaces nothing kills a grandchild that left the run's process group
    # with its stdout; the server stops reading one second after the reap, as the
    # library does for a cold run, and the observation comes back then.
    code = (
        "import os, subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(4)'], start_new_session=True)\n"
        "print('parent done', flush=True)\n"
    )
    cand = Candidate("run_entry", "snippet", code=code, policy=Policy(timeout_s=3))
    for forkserver in (True, False):
        start = time.monotonic()
        (obs,) = await observe_many(
            [cand], options=Options(namespaces=False, cgroups=False, forkserver=forkserver)
        )
        took = time.monotonic() - start
        assert obs.stdout == "parent done\n", forkserver
        assert obs.verdict == "empty_success", (forkserver, obs.verdict)  # it exited 0 in time
        assert took < 3.5, (forkserver, took)  # not held to the grandchild's 4 s
