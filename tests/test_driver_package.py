"""Issue 28 goal 4: the driver is one package, loaded under a private name, and nothing
of it is in sight of the candidate once it hands over.

What a candidate can look for: ``sys.modules`` (by any name: ``_aexec_driver.*``,
``wire``, ``kernel``), an import of the driver's module names or of aexec, the
``__main__`` module (a test runner's run has the driver's entry as its ``__main__``),
``sys.meta_path`` and ``sys.path``. Before, a pytest run's ``__main__`` was the driver
itself, holding every part of it (``__main__.kernel``, ``__main__.wire``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aexec import Candidate, Options, observe_many

pytestmark = pytest.mark.anyio

#: What the candidate sees of the driver: every list empty when it sees nothing.
LOOK = """\
import importlib.util, json, sys, types


def finds(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def seen():
    import __main__

    return {
        "modules": sorted(m for m in sys.modules if "aexec" in m or "driver" in m),
        "imports": [n for n in ("wire", "kernel", "contain", "runners", "_aexec_driver", "aexec") if finds(n)],
        "main": sorted(
            n
            for n, v in vars(__main__).items()
            if isinstance(v, types.ModuleType) and v is not sys and not n.startswith("__")
        ),
        "meta_path": [
            repr(f) for f in sys.meta_path if type(f).__module__ == "__main__" or "_aexec" in type(f).__module__
        ],
        "path": [p for p in sys.path if "_driver" in p],
    }
"""

NOTHING = {"modules": [], "imports": [], "main": [], "meta_path": [], "path": []}


@pytest.fixture
def anyio_backend() -> str:
    """What the candidate sees, not the event loop: one backend."""
    return "asyncio"


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An interpreter without aexec (nor pytest): a venv of this machine's Python."""
    where = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    return str(where / "bin" / "python")


@pytest.mark.parametrize("forkserver", [True, False], ids=["warm", "cold"])
async def test_a_pytest_run_sees_nothing_of_the_driver(forkserver: bool, tmp_path: Path) -> None:
    """pytest runs with the driver's entry as ``__main__``: it holds no module of the
    driver's, and nothing else names one. (This interpreter has aexec installed: an
    ``import aexec`` here finds the library, which is not the driver.)"""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_look.py").write_text(
        LOOK + "\n\ndef test_nothing_of_the_driver():\n    s = seen()\n    print(json.dumps(s))\n"
        "    s['imports'].remove('aexec')\n    assert s == " + repr(NOTHING) + ", s\n"
    )
    [obs] = await observe_many(
        [Candidate("run_suite", "test_subset", repo=str(tmp_path), tests=["tests/test_look.py"])],
        options=Options(forkserver=forkserver),
    )
    assert obs.verdict == "pass", (obs.verdict, obs.failure and obs.failure.message, obs.error)


@pytest.mark.parametrize("forkserver", [True, False], ids=["warm", "cold"])
async def test_a_snippet_sees_nothing_of_the_driver(forkserver: bool, bare_python: str) -> None:
    """In an interpreter without aexec, neither aexec nor a module of the driver's is
    importable by any name, nor in ``sys.modules``."""
    [obs] = await observe_many(
        [Candidate("run_entry", "snippet", code=LOOK + "\nprint(json.dumps(seen()))\n", python=bare_python)],
        options=Options(forkserver=forkserver),
    )
    assert obs.exit_code == 0, (obs.stdout, obs.stderr, obs.error)
    seen = json.loads(obs.stdout)
    assert seen.pop("main") == ["importlib", "json", "types"]  # a snippet's __main__ is its own
    assert seen == {k: v for k, v in NOTHING.items() if k != "main"}
