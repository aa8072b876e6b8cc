"""The candidate's process is forked by the run's init without the interpreter's
after-fork work run again (`kernel.fork_again`), its report opened once for both
(`contain.fork_candidate`), and the driver's modules taken from its fork server
(`contain.driver_modules`). What a program can see of its process is still what a fresh
``python`` shows: its one thread, named by its own ids; a random state of its own;
threads and forks that work; the init's end records as `Report.write` writes them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aexec import Candidate, Options, observe_many
from aexec._driver import reporting, wire

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """What the run is judged, not the event loop: one backend."""
    return "asyncio"


#: What a program sees of its threads and of a fork of its own.
THREADS = """
import json, os, threading
main = threading.main_thread()
seen = {
    "native_is_own": main.native_id == threading.get_native_id(),
    "ident_is_own": main.ident == threading.get_ident(),
    "current_is_main": threading.current_thread() is main,
    "count": threading.active_count(),
    "enumerate": [t.name for t in threading.enumerate()],
}
box = []
t = threading.Thread(target=lambda: box.append(threading.get_native_id()))
t.start()
t.join()
seen["thread_ran"] = len(box) == 1 and box[0] != main.native_id
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    m = threading.main_thread()
    os.write(w, json.dumps([m.native_id == threading.get_native_id(), threading.active_count()]).encode())
    os._exit(0)
os.close(w)
seen["fork_child"] = json.loads(os.read(r, 100))
os.waitpid(pid, 0)
print(json.dumps(seen, sort_keys=True))
"""


def plain(code: str, work: Path) -> str:
    """What plain ``python -s snippet.py`` prints."""
    (work / "snippet.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "-s", "snippet.py"], cwd=work, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("forkserver", [True, False], ids=["warm", "cold"])
async def test_the_candidates_threads_are_a_fresh_pythons(forkserver: bool, tmp_path: Path) -> None:
    want = json.loads(plain(THREADS, tmp_path))
    [obs] = await observe_many(
        [Candidate("run_entry", "snippet", code=THREADS)], options=Options(forkserver=forkserver)
    )
    assert obs.exit_code == 0, obs.stderr
    got = json.loads(obs.stdout)
    assert got == want
    # Its main thread is named by its own native id (main forked the candidate with
    # os.fork, whose after-fork work left the init's there: False).
    assert got["native_is_own"] and got["count"] == 1 and got["thread_ran"]


async def test_forked_candidates_draw_random_numbers_of_their_own() -> None:
    """Each run's init is reseeded as it is forked; the candidate, forked from it without
    the interpreter's after-fork work, starts from that state: no two runs of one server
    draw the same numbers (nor the same as the server would)."""
    code = "# run {}\nimport random\nprint(random.getrandbits(64), random.random())\n"
    # (each code its own: observe_many runs a candidate seen before once)
    got = await observe_many([Candidate("run_entry", "snippet", code=code.format(i)) for i in range(6)])
    outs = [obs.stdout for obs in got]
    assert all(obs.exit_code == 0 for obs in got), [obs.stderr for obs in got]
    assert len(set(outs)) == len(outs), outs


@pytest.mark.parametrize("forkserver", [True, False], ids=["warm", "cold"])
async def test_a_module_swapped_for_another_is_dropped_at_exit(forkserver: bool, tmp_path: Path) -> None:
    """A snippet that takes a module out of sys.modules and puts one of its own in (as
    many names as before) still has its own dropped at exit, its file flushed then: the
    check that nothing was imported looks at the names, not their count."""
    code = (
        "import sys, types\nsys.modules.pop('json', None)\n"
        "m = types.ModuleType('helper')\nsys.modules['helper'] = m\n"
        "m.f = open('helper.txt', 'w')\nm.f.write('flushed at exit')\nprint('main')\n"
    )
    [obs] = await observe_many(
        [Candidate("run_entry", "snippet", code=code)], options=Options(forkserver=forkserver)
    )
    assert obs.exit_code == 0 and obs.stdout == "main\n", obs.stderr
    [change] = [c for c in obs.changes if c.path.endswith("helper.txt")]
    assert change.size == len("flushed at exit")


@pytest.mark.parametrize(
    ("status", "cpu_s", "maxrss"),
    [(0, 0.0123, 9876), (3 << 8, 1e-05, 0), (9, 2.5, 123456789), (255 << 8, 0.1 + 0.2, 1)],
)
def test_the_inits_end_records_are_what_write_writes(
    status: int, cpu_s: float, maxrss: int, tmp_path: Path
) -> None:
    """`Report.end` writes, without the json module, the lines `Report.write` writes."""
    ended, written = tmp_path / "end.jsonl", tmp_path / "write.jsonl"
    code = reporting.Report(str(ended)).end(status, cpu_s, maxrss)
    report = reporting.Report(str(written))
    if os.WIFSIGNALED(status):
        report.write("main", exit=None, signal=os.WTERMSIG(status))
        assert code == 128 + os.WTERMSIG(status)
    else:
        report.write("main", exit=os.WEXITSTATUS(status), signal=None)
        assert code == os.WEXITSTATUS(status)
    report.write("usage", cpu_s=cpu_s, maxrss_kib=maxrss)
    assert ended.read_bytes() == written.read_bytes()
    records, bad = wire.decode_report(ended.read_bytes())
    assert bad == 0 and [r["kind"] for r in records] == ["main", "usage"]
