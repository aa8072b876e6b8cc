"""What the benchmarks that grade real PyPI sdists share (not a script).

``inplace.py``, ``inplace_swebench.py`` and ``swebench_specs.py`` each stand a PyPI sdist
in for a checkout of its repository: :func:`checkout` downloads it once, unpacks it and
commits it as the base of a fresh git repository. :func:`diff` writes the patches graded
on it, :func:`aexec` runs the CLI on the benchmark's environment root, and
:func:`run_cases` is the command line of the scripts that take ``WORKDIR [CASE ...]``.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Mapping
from typing import Any

#: The two predictions of the graded instances: *gold* defines what the instance's test
#: asks for, *wrong* defines it wrong.
GOLD, WRONG = "\n\ndef aexec_answer():\n    return 42\n", "\n\ndef aexec_answer():\n    return 41\n"

#: The setuptools of the sdists' era: what pip builds their metadata with (astropy 5.1's
#: build cannot tell pip its metadata with a newer one).
SETUPTOOLS = "setuptools==68.0.0"


def checkout(
    work: str, req: str, *, force_add: bool = False, prepare: Callable[[str], None] | None = None
) -> str:
    """``WORK/repos/<sdist>``: the sdist of ``req`` (``name==version``, ``pip download``
    into ``WORK/sdists`` once) unpacked and committed, a git checkout of the base.
    ``prepare`` edits the unpacked tree before the commit; ``force_add`` commits what its
    ``.gitignore`` ignores too."""
    name, version = req.split("==")
    sdists = os.path.join(work, "sdists")
    os.makedirs(sdists, exist_ok=True)
    want = f"{name}-{version}.tar.gz".lower()
    found = [p for p in os.listdir(sdists) if p.lower() == want]
    if not found:
        cons = os.path.join(work, "constraints.txt")
        with open(cons, "w") as f:
            f.write(SETUPTOOLS + "\n")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                name,
                req,
                "-d",
                sdists,
            ],
            check=True,
            env={**os.environ, "PIP_CONSTRAINT": cons},
        )
        found = [p for p in os.listdir(sdists) if p.lower() == want]
        if not found:
            raise SystemExit(f"pip download {req}: no {want} in {sdists} (got {sorted(os.listdir(sdists))})")
    repo = os.path.join(work, "repos", found[0].removesuffix(".tar.gz"))
    if not os.path.isdir(os.path.join(repo, ".git")):
        with tarfile.open(os.path.join(sdists, found[0])) as t:
            t.extractall(os.path.join(work, "repos"), filter="data")
        if prepare is not None:
            prepare(repo)
        git = ["git", "-C", repo, "-c", "user.email=a@b", "-c", "user.name=bench"]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "-A", *(["-f"] if force_add else [])], check=True)
        subprocess.run([*git, "commit", "-qm", "base"], check=True)
    return repo


def diff(path: str, old: str | None, new: str) -> str:
    """A git diff of one file from ``old`` to ``new``: ``old`` None is a new file."""
    lines = new.splitlines(keepends=True)
    if old is None:
        head = f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        return head + f"@@ -0,0 +1,{len(lines)} @@\n" + "".join("+" + ln for ln in lines)
    body = difflib.unified_diff(old.splitlines(keepends=True), lines, f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def aexec(*argv: str, root: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    """``python -m aexec ARGV`` with ``AEXEC_ENV_DIR=root``: its seconds and what it said."""
    t = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "aexec", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "AEXEC_ENV_DIR": root},
        check=False,
    )
    return time.monotonic() - t, done


def help_asked(doc: str | None, argv: list[str]) -> bool:
    """``-h``/``--help`` among ``argv``: then the script's docstring is printed."""
    if "-h" in argv or "--help" in argv:
        print((doc or "").strip())
        return True
    return False


def run_cases(
    doc: str | None, cases: Mapping[str, Any], measure: Callable[[str, str], dict[str, Any]]
) -> None:
    """``SCRIPT WORKDIR [CASE ...]``: one JSON line of ``measure(WORKDIR, case)`` per case
    named (every case when none is)."""
    argv = sys.argv[1:]
    if help_asked(doc, argv):
        return
    script = os.path.basename(sys.argv[0])
    if not argv:
        raise SystemExit(f"usage: {script} WORKDIR [CASE ...] (cases: {', '.join(cases)})")
    unknown = [n for n in argv[1:] if n not in cases]
    if unknown:
        raise SystemExit(f"{script}: no case {unknown[0]!r} (cases: {', '.join(cases)})")
    work = os.path.abspath(argv[0])
    os.makedirs(work, exist_ok=True)
    for name in argv[1:] or list(cases):
        print(json.dumps(measure(work, name)), flush=True)
