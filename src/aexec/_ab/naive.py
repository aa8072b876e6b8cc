"""THE naive runner: a case the way a harness without aexec runs it (spec §7).

A copy of the repo, ``git apply`` of the patch, one bare subprocess (pytest, python,
``py_compile`` / ``compileall``, or the command) under rlimits set by an exec wrapper,
killed by process group at the case's deadline; nothing else is isolated, parsed or
re-run. One runner for every figure that stands a naive run beside aexec: the §7
baselines of ``aexec ab`` and ``benchmarks/fidelity.py``, the naive runners of
``benchmarks/throughput.py``, the trees of ``benchmarks/floor.py`` and the label checks
of ``benchmarks/build_corpus.py`` all come from here, so they cannot drift apart.

Also here: the two naive baselines' judgements (A: exit code; B: exit code plus the last
exception-like name in the raw output) and the one exception-name → class table.

Standard library and aexec's named facts (`aexec._types`, `aexec._stages.classify`)
only: no part of the observation pipeline runs a naive case.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from .._stages.classify import classify
from .._types import (
    CPU_BACKSTOP_MARGIN_S,
    DEFAULT_DISK_MIB,
    DEFAULT_OPEN_FILES,
    DEFAULT_RAM_MIB,
    DEFAULT_TIMEOUT_S,
)

__all__ = [
    "NAME_CLASS",
    "baseline_a",
    "baseline_b",
    "case_argv",
    "case_timeout",
    "class_of_exception",
    "guess_class",
    "limited",
    "naive_run",
    "naive_tree",
    "rlimits",
    "run_killable",
]

#: A system's answer for one case: (verdict, failure class).
Prediction = tuple[str | None, str | None]

#: The exec wrapper used where ``prlimit`` is not installed: set each ``NAME=VALUE``
#: rlimit, then exec the argv after ``--`` (no ``preexec_fn``: safe from threads).
LAUNCHER: Final = (
    "import os, resource, sys\n"
    "end = sys.argv.index('--')\n"
    "for kv in sys.argv[1:end]:\n"
    "    name, value = kv.split('=')\n"
    "    resource.setrlimit(getattr(resource, 'RLIMIT_' + name.upper()), (int(value), int(value)))\n"
    "os.execvp(sys.argv[end + 1], sys.argv[end + 1 :])\n"
)
#: What baseline B reads: an exception-like name anywhere in the raw output.
EXC_RE: Final = re.compile(r"\b(\w+(?:Error|Exception|Exit))\b")
#: The one exception-name → failure-class table of the naive readers (anything else:
#: ``runtime``).
NAME_CLASS: Final = {
    "SyntaxError": "syntax",
    "IndentationError": "syntax",
    "TabError": "syntax",
    "ImportError": "dependency",
    "ModuleNotFoundError": "dependency",
    "TypeError": "type",
    "AssertionError": "assertion",
    "MemoryError": "resource",
}
PYTEST: Final = ("-m", "pytest", "-q", "-p", "no:cacheprovider")


# --------------------------------------------------------------------------------------
# Deadlines and rlimits
# --------------------------------------------------------------------------------------


def case_timeout(request: Mapping[str, Any]) -> float:
    """The case's declared deadline, else its mode's default (§3.2), as the pipeline's."""
    pol = request.get("policy") or {}
    mode = classify(request["request_type"], request["artifact_shape"]).mode
    return float(pol.get("timeout_s", DEFAULT_TIMEOUT_S[mode]))


def rlimits(ram_mib: int = DEFAULT_RAM_MIB, timeout_s: float | None = None) -> dict[str, int]:
    """RLIMIT_AS alone (the §7 baselines: that cap "and nothing else"); with ``timeout_s``,
    also the rest the driver sets: the CPU backstop above the deadline, the file-size
    cap, open files, no core dump."""
    out = {"as": ram_mib << 20}
    if timeout_s is not None:
        out |= {
            "cpu": math.ceil(timeout_s + CPU_BACKSTOP_MARGIN_S),
            "fsize": DEFAULT_DISK_MIB << 20,
            "nofile": DEFAULT_OPEN_FILES,
            "core": 0,
        }
    return out


def limited(argv: Sequence[str], limits: Mapping[str, int]) -> list[str]:
    """``argv`` under ``limits``: through ``prlimit`` (an exec wrapper, no interpreter
    start) where it is installed, else through `LAUNCHER`."""
    pairs = [f"{name}={value}" for name, value in limits.items()]
    if shutil.which("prlimit"):
        return ["prlimit", *(f"--{p}" for p in pairs), "--", *argv]
    return [sys.executable, "-c", LAUNCHER, *pairs, "--", *argv]


# --------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------


def run_killable(
    argv: Sequence[str],
    cwd: str | Path,
    timeout: float,
    env: Mapping[str, str] | None = None,
    *,
    merge: bool = False,
) -> dict[str, Any]:
    """One process in a new session, stdin from /dev/null, killed by process group at
    its deadline: exit status (None on a timeout), ``timed_out``, the raw ``output``
    (stdout then stderr, or interleaved with ``merge``), ``out_bytes`` and ``duration``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge else subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = None
    raw = (out or b"") + (err or b"")
    return {
        "rc": rc,
        "timed_out": rc is None,
        "output": raw.decode("utf-8", "replace"),
        "out_bytes": len(raw),
        "duration": time.perf_counter() - t0,
    }


def naive_tree(repo: Path | None, patch: str | None, td: str) -> tuple[Path, int, str]:
    """The naive tree in ``td``: a copy of ``repo`` with ``patch`` ``git apply``'d (an
    empty dir without a repo); git's exit status (0: applied) and its output."""
    if repo is None:
        work = Path(td) / "scratch"
        work.mkdir()
        return work, 0, ""
    work = Path(td) / "repo"
    shutil.copytree(repo, work, symlinks=True)
    if not patch:
        return work, 0, ""
    pf = Path(td) / "candidate.patch"
    pf.write_text(patch)
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=td)
    r = subprocess.run(["git", "apply", "-p1", str(pf)], cwd=work, capture_output=True, text=True, env=env)
    return work, r.returncode, r.stdout + r.stderr


def case_argv(request: Mapping[str, Any], td: str) -> list[str]:
    """What the naive runner runs for ``request`` (a snippet to compile is written to ``td``)."""
    rt, shape = request["request_type"], request["artifact_shape"]
    if shape == "command":
        return list(request["command"])
    if rt == "run_suite" or (rt == "discriminate" and "code" not in request):
        return [sys.executable, *PYTEST, *request.get("tests", [])]
    if rt == "build_check":
        if "code" not in request:
            return [sys.executable, "-m", "compileall", "-q", "."]
        f = Path(td) / "candidate.py"
        f.write_text(request["code"])
        return [sys.executable, "-m", "py_compile", str(f)]
    return [sys.executable, "-c", request["code"]]  # run_entry / probe snippets


def naive_run(
    request: Mapping[str, Any],
    base: Path | str,
    *,
    env: Mapping[str, str] | None = None,
    driver_limits: bool = False,
) -> dict[str, Any]:
    """Run one request (a contract request line; ``repo`` relative to ``base``) the naive
    way, under the RAM cap it declares (default 512 MiB) and, with ``driver_limits``, the
    driver's other rlimits too. Blocking. Returns `run_killable`'s dict (``duration`` 0
    and git's output when the patch does not apply)."""
    tmo = case_timeout(request)
    ram = int((request.get("policy") or {}).get("ram_mib", DEFAULT_RAM_MIB))
    repo = Path(base) / request["repo"] if "repo" in request else None
    with tempfile.TemporaryDirectory(prefix="aexec-naive-") as td:
        work, rc, git_out = naive_tree(repo, request.get("patch"), td)
        if rc != 0:
            return {"rc": rc, "timed_out": False, "output": git_out, "out_bytes": 0, "duration": 0.0}
        argv = limited(case_argv(request, td), rlimits(ram, tmo if driver_limits else None))
        return run_killable(argv, work, tmo, env)


# --------------------------------------------------------------------------------------
# The baselines' judgements (spec §7: "bare subprocess.run + raw stdout")
# --------------------------------------------------------------------------------------


def class_of_exception(name: str) -> str:
    """The class of one exception name (`NAME_CLASS`, else ``runtime``)."""
    return NAME_CLASS.get(name, "runtime")


def guess_class(text: str) -> str:
    """The class of the last exception-like name in ``text`` (``runtime`` if none)."""
    names = EXC_RE.findall(text)
    return class_of_exception(names[-1]) if names else "runtime"


def baseline_a(run: Mapping[str, Any]) -> Prediction:
    """Exit code only."""
    if run["timed_out"]:
        return "fail", "timeout"
    if run["rc"] == 0:
        return "pass", None
    return "fail", "runtime"


def baseline_b(run: Mapping[str, Any]) -> Prediction:
    """Exit code + the last exception-like name in the raw stdout+stderr."""
    if run["timed_out"]:
        return "fail", "timeout"
    if run["rc"] == 0:
        return "pass", None
    return "fail", guess_class(run["output"])
