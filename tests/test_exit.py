"""How a snippet's interpreter ends (issue 20): as plain ``python snippet.py`` ends, as far
as the program can tell, cold and warm alike.

The driver no longer tears its own heap down object by object at exit (``leave``): it
joins threads, runs ``atexit``, drops the candidate's modules, collects garbage, flushes
and exits. Each program below prints or writes something at one of those steps; its
stdout, stderr, exit code and written files must be what plain ``python`` gives, through
the fork server and through a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aexec import Candidate, Options, observe_many

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """What the run does and how it is judged, not the event loop: one backend. (The
    supervisor's, fork server's and cancellation's tests run on both.)"""
    return "asyncio"


PROGRAMS = {
    "atexit": "import atexit\natexit.register(print, 'at exit')\nprint('main')\n",
    "thread-joined": (
        "import threading, time\n"
        "def late():\n    time.sleep(0.05)\n    print('thread done', flush=True)\n"
        "threading.Thread(target=late).start()\nprint('main ends')\n"
    ),
    "global-del": (
        "class A:\n    def __del__(self):\n        print('del', self.n)\n"
        "a = A(); a.n = 1\nb = A(); b.n = 2\nprint('main')\n"
    ),
    "cycle-del": (
        "class A:\n    def __del__(self):\n        print('cycle collected')\n"
        "x = A(); x.me = x\ndel x\nprint('main')\n"
    ),
    "imported-module-file": (
        "import sys, types\nm = types.ModuleType('helper')\nsys.modules['helper'] = m\n"
        "m.f = open('helper.txt', 'w')\nm.f.write('flushed at exit')\nprint('main')\n"
    ),
    # The snippet's globals and its function refer to each other: garbage at exit,
    # whose collector must not close the file's raw layer before its buffer is flushed.
    "file-in-globals-cycle": (
        "f = open('out.txt', 'w')\nf.write('flushed at exit')\ndef g():\n    return f\nprint('main')\n"
    ),
    "file-in-globals-cycle-class": (
        "f = open('out.txt', 'w')\nf.write('a class refers to it')\n"
        "class C:\n    def m(self):\n        return f\n"
    ),
    "file-in-globals-cycle-raise": (
        "f = open('out.txt', 'w')\nf.write('then it raised')\ndef g():\n    return f\nraise ValueError('x')\n"
    ),
    "file-in-globals-cycle-exit": (
        "import sys\nf = open('out.txt', 'w')\nf.write('then it exited')\ndef g():\n    return f\nsys.exit(2)\n"
    ),
    # Objects that print if the exit's search for the globals runs the candidate's code
    # (made in another namespace, so that the search meets them before ``g``).
    "file-in-globals-cycle-hooks": (
        'HOOKS = """\n'
        "class Loud:\n"
        "    @property\n"
        "    def __class__(self):\n"
        "        print('__class__ read')\n"
        "        return type\n"
        "    def __eq__(self, other):\n"
        "        print('__eq__ called')\n"
        "        return False\n"
        "    __hash__ = object.__hash__\n"
        "class Meta(type):\n"
        "    @property\n"
        "    def __dict__(cls):\n"
        "        print('metaclass __dict__ read')\n"
        "        return {}\n"
        "def probe():\n"
        "    pass\n"
        '"""\n'
        "ns = {}\n"
        "exec(HOOKS, ns)\n"
        "ns['__file__'] = ns['Loud']()\n"
        "x = ns['Loud']()\n"
        "K = ns['Meta']('K', (), {})\n"
        "probe = ns['probe']\n"
        "f = open('out.txt', 'w')\n"
        "f.write('kept')\n"
        "def g():\n"
        "    return f\n"
        "print('main')\n"
    ),
    "unflushed-no-newline": "import sys\nsys.stdout.write('no newline')\n",
    "exit-3": "import sys\nprint('bye')\nsys.exit(3)\n",
    "exit-message": "import sys\nsys.exit('a message')\n",
    "raise": "print('before')\nraise ValueError('boom')\n",
    "os-exit": "import os, sys\nsys.stdout.write('lost')\nos._exit(7)\n",
    "atexit-raises": "import atexit\ndef bad():\n    raise RuntimeError('in atexit')\natexit.register(bad)\n",
    "stdout-closed": "import os, sys\nprint('x')\nos.close(1)\n",
}


def plain(code: str, tmp: Path) -> tuple[str, int, dict[str, str]]:
    work = tmp / "plain"
    work.mkdir()
    (work / "snippet.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "-s", "snippet.py"], cwd=work, capture_output=True, text=True, timeout=30
    )
    files = {p.name: p.read_text() for p in work.iterdir() if p.name != "snippet.py"}
    return done.stdout, done.returncode, files


@pytest.mark.parametrize("forkserver", [True, False], ids=["warm", "cold"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
async def test_exit_is_plain_pythons(name: str, forkserver: bool, tmp_path: Path) -> None:
    code = PROGRAMS[name]
    want_out, want_rc, want_files = plain(code, tmp_path)
    [obs] = await observe_many(
        [Candidate("run_entry", "snippet", code=code)], options=Options(forkserver=forkserver)
    )
    assert obs.exit_code == want_rc, (obs.stdout, obs.stderr)
    assert obs.stdout == want_out
    got_files = {c.path.split("/")[-1]: c for c in obs.changes}
    assert set(got_files) == set(want_files)
    for fname, text in want_files.items():
        assert got_files[fname].size == len(text.encode())
    if name == "atexit-raises":
        assert "in atexit" in obs.stderr
    if name == "raise":
        assert "ValueError: boom" in obs.stderr


async def test_gc_sees_only_the_candidates_objects(tmp_path: Path) -> None:
    """The driver's own objects are frozen: a snippet's collector walks its objects only,
    warm and cold alike."""
    code = (
        "import gc\nclass Mine: pass\nkeep = [Mine() for _ in range(3)]\n"
        "print(sum(isinstance(o, Mine) for o in gc.get_objects()))\n"
    )
    for forkserver in (True, False):
        [obs] = await observe_many(
            [Candidate("run_entry", "snippet", code=code)], options=Options(forkserver=forkserver)
        )
        assert obs.stdout == "3\n", (forkserver, obs.stderr)
    assert os.path.exists(tmp_path)
