"""The unit tests: pure, in-process, no process, no network — the loop that answers in seconds.

``python -m pytest tests/unit -q`` runs them alone (under 30 s). The guard below holds
every test here to it: starting a process (``subprocess``, ``anyio.run_process`` and
``open_process`` on either backend, ``os.fork``/``posix_spawn``/``system``/``exec*``)
or connecting a socket fails the test with one line naming what it tried. A test that
needs one of those belongs in ``tests/``, beside the real thing it runs.
"""

from __future__ import annotations

import os
import socket
import subprocess
from typing import Any

import pytest

#: What starts a process, besides ``subprocess.Popen`` (which every library's spawn,
#: anyio's and trio's included, goes through).
_SPAWNS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve", "execvp", "execvpe")


@pytest.fixture(autouse=True)
def no_processes_no_network(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    def refuse(what: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(
                f"{request.node.nodeid}: a unit test may not {what} (move it out of tests/unit)"
            )

        return refused

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("start a process"))
    for name in _SPAWNS:
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse(f"start a process (os.{name})"))
    monkeypatch.setattr(socket.socket, "connect", refuse("connect a socket"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("connect a socket"))
