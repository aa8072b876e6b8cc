"""The unit loop's guard holds: every way a test could start a process or reach the
network fails it, on both anyio backends (see ``tests/unit/conftest.py``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import anyio
import pytest


def test_subprocess_is_refused() -> None:
    with pytest.raises(AssertionError, match="may not start a process"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


@pytest.mark.parametrize("name", ["fork", "posix_spawn", "system"])
def test_os_spawns_are_refused(name: str) -> None:
    with pytest.raises(AssertionError, match=f"may not start a process \\(os.{name}\\)"):
        getattr(os, name)()


@pytest.mark.anyio
async def test_anyio_processes_are_refused() -> None:
    with pytest.raises(AssertionError, match="may not start a process"):
        await anyio.run_process([sys.executable, "-c", "pass"])


def test_connecting_a_socket_is_refused() -> None:
    with socket.socket() as s, pytest.raises(AssertionError, match="may not connect a socket"):
        s.connect(("127.0.0.1", 9))
