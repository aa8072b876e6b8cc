"""A driver that fails before the candidate's code starts is aexec's failure, not the
candidate's: verdict ``error``, its message naming the driver, no candidate failure class.

The interpreters are real venvs of this machine's Python whose ``site-packages`` holds a
``.pth`` that breaks the driver and nothing a trivial snippet needs:

* ``signal`` made unimportable: the driver fails as it loads (its own imports), so the
  fork server cannot start either (the warm run falls back to a cold one);
* ``ast`` made unimportable in every forked process: the driver loads (and the fork
  server serves), but the run's candidate process fails in the driver's last steps
  (`runners.FIRST_USE_IMPORTS`), before the snippet starts: warm and cold.

A snippet's own ``ImportError`` and ``SyntaxError`` stay the candidate's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aexec import Candidate, Options, observe_many

pytestmark = pytest.mark.anyio

BREAKS = {
    "at-load": "import sys; sys.modules['signal'] = None\n",
    "before-start": (
        "import os, sys; os.register_at_fork(after_in_child=lambda: sys.modules.__setitem__('ast', None))\n"
    ),
}


@pytest.fixture
def anyio_backend() -> str:
    """What the run is judged, not the event loop: one backend."""
    return "asyncio"


def broken_python(where: Path, pth: str) -> str:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    [site] = where.glob("lib/python*/site-packages")
    (site / "aexec_breaks_driver.pth").write_text(pth)
    python = str(where / "bin" / "python")
    # The interpreter itself works, and so does a plain snippet in it.
    done = subprocess.run([python, "-c", "print('ok')"], capture_output=True, text=True, check=True)
    assert done.stdout == "ok\n"
    return python


@pytest.mark.parametrize("forkserver", [True, False], ids=["warm", "cold"])
@pytest.mark.parametrize("breaks", sorted(BREAKS))
async def test_driver_failing_before_the_candidate_is_an_error(
    breaks: str, forkserver: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    python = broken_python(tmp_path / "venv", BREAKS[breaks])
    [obs] = await observe_many(
        [Candidate("run_entry", "snippet", code="print('hi')\n", python=python)],
        options=Options(forkserver=forkserver),
    )
    assert obs.verdict == "error", (obs.verdict, obs.failure, obs.stderr)
    assert obs.failure is None
    assert obs.error is not None and "driver failed before the candidate started" in obs.error, obs.error
    assert ("signal" if breaks == "at-load" else "ast") in obs.error
    assert obs.stdout == ""
    if forkserver:
        # A driver that cannot load cannot serve either; one that fails in a run's
        # candidate process failed in a run forked from the fork server.
        assert ("forkserver_unavailable" in caplog.text) == (breaks == "at-load"), caplog.text


@pytest.mark.parametrize("forkserver", [True, False], ids=["warm", "cold"])
async def test_candidates_own_import_and_syntax_errors_stay_its_own(forkserver: bool) -> None:
    [imports, syntax] = await observe_many(
        [
            Candidate("run_entry", "snippet", code="import json\nimport no_such_module_here\n"),
            Candidate("run_entry", "snippet", code="print('hi'\n"),
        ],
        options=Options(forkserver=forkserver),
    )
    assert imports.verdict == "fail" and imports.failure is not None, imports.stderr
    assert imports.failure.failure_class == "dependency"
    assert syntax.verdict == "fail" and syntax.failure is not None, syntax.stderr
    assert syntax.failure.failure_class == "syntax"
