"""The interpreters on this machine an environment can be made from (uv cannot download
one here): pyenv's versions, and ``python3.N`` on PATH. Each asked for its version once
per process while unchanged.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess

_VERSIONS: dict[tuple[str, int], str] = {}


def _version_of(python: str) -> str | None:
    st = os.stat(python)
    key = (python, st.st_mtime_ns)
    if key not in _VERSIONS:
        try:
            done = subprocess.run(
                [python, "-c", "import platform; print(platform.python_version())"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode != 0 or not re.match(r"^\d+\.\d+\.\d+", done.stdout.strip()):
            return None
        _VERSIONS[key] = done.stdout.strip()
    return _VERSIONS[key]


def find_interpreters() -> dict[str, str]:
    """The interpreters on this machine, full version → real path: pyenv's versions
    (``$PYENV_ROOT``, default ``~/.pyenv``), then ``python3.N`` on PATH."""
    found: dict[str, str] = {}
    pyenv = os.path.join(os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv"), "versions")
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(pyenv)):
            for exe in ("python3", "python"):
                path = os.path.join(pyenv, name, "bin", exe)
                if re.match(r"^\d+\.\d+\.\d+$", name) and os.access(path, os.X_OK):
                    found.setdefault(name, os.path.realpath(path))
                    break
    where = os.pathsep.join(
        d for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if "shims" not in d
    )
    for minor in range(6, 16):
        on_path = shutil.which(f"python3.{minor}", path=where)
        if on_path is None:
            continue
        real = os.path.realpath(on_path)
        version = None if real in found.values() else _version_of(real)
        if version is not None:
            found.setdefault(version, real)
    return found
