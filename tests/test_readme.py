"""The README's Python example runs as written, on both anyio backends."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _example() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"```python\n(.*?)```", text, re.S)
    assert found, "the README has no Python example"
    return found.group(1)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_readme_python_example_runs_as_written(backend: str) -> None:
    code = _example()
    if backend == "trio":
        assert "anyio.run(main)" in code
        code = code.replace("anyio.run(main)", 'anyio.run(main, backend="trio")', 1)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # the repair passes with its FAIL_TO_PASS test named; the snippet is an empty success
    assert lines[0].startswith("pass None ['tests/test_cart.py::"), lines
    assert lines[1] == "empty_success None []", lines
    assert len(lines) == 2, "aexec printed something of its own to stdout"
