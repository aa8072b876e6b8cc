"""Bad input, damaged state and careless callers (issue 19): every kind gets a defined answer.

Each test is one *kind* of bad input or damaged state; its id starts with the property
it is held to (the docstring of each test function states it in full):

* **P0 accepted** — valid JSONL however it is spelled: every request observed, in order,
  exit 0, nothing on stderr but the summary.
* **P1 rejected whole** — exit 2, exactly one line on stderr naming the line number and
  the field, no traceback, no output file, nothing ran.
* **P2 own observation** — the bad request gets ``verdict: error`` with a one-line
  reason; every other request is observed (count and order of the output lines).
* **P12 defined answer** — P1 or P2 (which one is the implementation's choice), never
  a traceback or a lost line.
* **P3 never a hang, nothing left behind** — the CLI ends within a bound; SIGTERM/SIGINT
  end it within 2 s with complete lines; no scratch roots, mounts, cgroups or
  processes stay, even after a SIGKILL (the next aexec, or ``aexec gc``, sweeps them).
* **P4 nothing wrong served** — a damaged cache entry or bytecode store gives the same
  observation as a fresh run (and is repaired: the next run serves the right one).
* **P5 paths checked first** — an output or cache path that cannot be written is
  refused (exit 2, one line) before the first candidate runs.
* **P6 careless Python callers** — a malformed `Candidate` raises `aexec.RequestError`
  (one line) at construction or in ``observe_many`` before anything runs.

Message fragments are matched loosely (any of a few words); the line count, the exit
code and the absence of a traceback are matched exactly.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import aexec
from aexec._jsonl import read_cases
from aexec._serde import dumps

from .conftest import (
    EXAMPLES,
    RefusingSupervisor,
    aexec_in_process,
    diff,
    live_pids_with,
    once_per_session,
    slack,
)

AEXEC = [sys.executable, "-m", "aexec"]
NCORES = os.cpu_count() or 1
#: What a rejection may take at most on a loaded machine (nothing runs).
REJECT_BOUND_S = 60.0
#: A candidate that would make the whole run slow if it ever ran (the "nothing ran" witness).
SLEEPER = {
    "id": "sleeper",
    "request_type": "run_entry",
    "artifact_shape": "snippet",
    "code": "import time\ntime.sleep(40)\n",
    "policy": {"timeout_s": 60},
}


def good(ident: str, code: str = "print(1)") -> dict[str, Any]:
    return {"id": ident, "request_type": "run_entry", "artifact_shape": "snippet", "code": code}


def jline(obj: Any) -> bytes:
    """One JSON line; non-ASCII text raw, except lone surrogates (escaped: JSON can
    carry them, UTF-8 cannot)."""
    try:
        return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(obj).encode("ascii") + b"\n"


def run(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float = 180,
    command: tuple[str, ...] = tuple(AEXEC),
) -> subprocess.CompletedProcess[str]:
    """The CLI as a subprocess (``command``: how it is started); a run past ``timeout`` is
    ended (SIGTERM, then SIGKILL) and fails the test as a hang."""
    proc = subprocess.Popen(
        [*command, *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with proc:
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            err += b" (hung)"
            hung = True
        else:
            hung = False
    if hung:
        pytest.fail(f"aexec {' '.join(args)} did not end within {timeout} s: {err.decode(errors='replace')}")
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    )


def stderr_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip()]


def observations(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().decode("utf-8").split("\n") if line]


def any_of(text: str, words: tuple[str, ...]) -> bool:
    low = text.lower()
    return any(w.lower() in low for w in words)


def assert_rejected_whole(
    done: subprocess.CompletedProcess[str],
    out: Path | None,
    *,
    line: int | None,
    words: tuple[str, ...] = (),
    path: Path | None = None,
) -> str:
    """P1: exit 2, exactly one line on stderr (naming ``path:line:`` and the field), no
    traceback, no output file."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, (done.returncode, done.stderr)
    got = stderr_lines(done)
    assert len(got) == 1, f"want exactly one line on stderr, got {len(got)}:\n{done.stderr}"
    message = got[0]
    if line is not None:
        where = f"{path}:{line}:" if path is not None else f":{line}:"
        assert where in message, f"the message does not name {where!r}: {message}"
    if words:
        assert any_of(message, words), f"the message names none of {words}: {message}"
    if out is not None:
        assert not out.exists(), "nothing may be written when the file is rejected"
    return message


def assert_observed(
    done: subprocess.CompletedProcess[str], out: Path, ids: list[Any], *, errors: tuple[Any, ...] = ()
) -> list[dict[str, Any]]:
    """P0/P2: one line per request, in input order; exactly the ``errors`` have
    ``verdict: error``, each with a one-line reason; no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    assert out.exists(), done.stderr
    raw = out.read_bytes()
    assert raw == b"" or raw.endswith(b"\n"), "the last line is incomplete"
    got = observations(out)
    assert [o["id"] for o in got] == ids, done.stderr
    for o in got:
        if o["id"] in errors:
            assert o["verdict"] == "error", o
            assert o["error"] and "\n" not in o["error"].strip(), f"not one line: {o['error']!r}"
        else:
            assert o["verdict"] != "error", o["error"]
    assert done.returncode == (1 if errors else 0), done.stderr
    return got


# --------------------------------------------------------------------------------------
# P1 — the whole file is rejected before anything runs
# --------------------------------------------------------------------------------------


#: A request line with a raw policy value (JSON text, so that Infinity/NaN/1e400 stay as written).
def policy_line(name: str, raw: str) -> bytes:
    return (
        b'{"id": "bad", "request_type": "run_entry", "artifact_shape": "snippet", '
        b'"code": "print(1)", "policy": {"' + name.encode() + b'": ' + raw.encode() + b"}}\n"
    )


def req(**fields: Any) -> bytes:
    return jline({"id": "bad", **fields})


SNIPPET = {"request_type": "run_entry", "artifact_shape": "snippet", "code": "print(1)"}
SUITE = {"request_type": "run_suite", "artifact_shape": "test_subset", "tests": ["tests/test_cart.py"]}
COMMAND = {"request_type": "run_entry", "artifact_shape": "command"}

# (id, the bad line as bytes (``{shop}`` is replaced by a private shop repo's path),
#  words of which one must appear in the message)
REJECTED: list[tuple[str, bytes, tuple[str, ...]]] = [
    # --- not JSON, or not one JSON object
    ("bad-json", b"{not json\n", ("json",)),
    ("truncated-object", b'{"request_type": "run_entry", "artifact_sh\n', ("json",)),
    (
        "trailing-comma",
        b'{"request_type": "run_entry", "artifact_shape": "snippet", "code": "1",}\n',
        ("json",),
    ),
    ("single-quotes", b"{'request_type': 'run_entry'}\n", ("json",)),
    ("top-level-array", b"[1, 2]\n", ("object",)),
    ("top-level-string", b'"run_entry"\n', ("object",)),
    ("top-level-null", b"null\n", ("object",)),
    ("top-level-number", b"42\n", ("object",)),
    ("top-level-bool", b"true\n", ("object",)),
    ("two-objects-one-line", jline(good("x"))[:-1] + jline(good("y")), ("json",)),
    (
        "raw-nul-in-string",
        b'{"request_type": "run_entry", "artifact_shape": "snippet", "code": "a\x00b"}\n',
        ("json",),
    ),
    (
        "raw-control-char-in-string",
        b'{"request_type": "run_entry", "artifact_shape": "snippet", "code": "a\x1cb"}\n',
        ("json",),
    ),
    ("raw-formfeed-between-tokens", b'{"request_type":\x0c"run_entry"}\n', ("json",)),
    (
        "deep-nesting-100000-array",
        b"[" * 100_000 + b"]" * 100_000 + b"\n",
        ("json", "deep", "nest", "object"),
    ),
    (
        "deep-nesting-100000-in-field",
        b'{"id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
        ("json", "deep", "nest", "id"),
    ),
    ("integer-of-5000-digits", policy_line("ram_mib", "9" * 5000), ("json", "ram_mib", "digits")),
    # --- not UTF-8 (the line is named, not a byte offset)
    (
        "invalid-utf8-byte",
        b'{"request_type": "run_entry", "artifact_shape": "snippet", "code": "\xff"}\n',
        ("utf-8", "utf8", "encod", "decod"),
    ),
    ("invalid-utf8-outside-string", b"\xfe\xff{}\n", ("utf-8", "utf8", "encod", "decod")),
    (
        "utf8-encoded-surrogate",
        b'{"request_type": "run_entry", "artifact_shape": "snippet", "code": "\xed\xa0\x80"}\n',
        ("utf-8", "utf8", "encod", "decod", "surrogate"),
    ),
    (
        "overlong-utf8",
        b'{"request_type": "run_entry", "artifact_shape": "snippet", "code": "\xc0\xaf"}\n',
        ("utf-8", "utf8", "encod", "decod"),
    ),
    (
        "truncated-multibyte",
        b'{"request_type": "run_entry", "artifact_shape": "snippet", "code": "\xe2\x82"}\n',
        ("utf-8", "utf8", "encod", "decod"),
    ),
    (
        "latin1-text",
        b'{"request_type": "run_entry", "artifact_shape": "snippet", "code": "caf\xe9"}\n',
        ("utf-8", "utf8", "encod", "decod"),
    ),
    (
        "bom-in-a-later-line",
        b"\xef\xbb\xbf" + jline({**SNIPPET, "id": "bad"}),
        ("json", "bom", "utf-8", "byte order"),
    ),
    # --- request_type / artifact_shape
    ("missing-request_type", req(artifact_shape="snippet", code="1"), ("request_type",)),
    ("missing-artifact_shape", req(request_type="run_entry", code="1"), ("artifact_shape",)),
    (
        "unknown-request_type",
        req(request_type="explode", artifact_shape="snippet", code="1"),
        ("request_type",),
    ),
    (
        "request_type-wrong-case",
        req(request_type="Run_Entry", artifact_shape="snippet", code="1"),
        ("request_type",),
    ),
    ("request_type-not-a-string", req(request_type=3, artifact_shape="snippet", code="1"), ("request_type",)),
    (
        "request_type-a-list",
        req(request_type=["run_entry"], artifact_shape="snippet", code="1"),
        ("request_type",),
    ),
    (
        "unknown-artifact_shape",
        req(request_type="run_entry", artifact_shape="snipet", code="1"),
        ("artifact_shape",),
    ),
    (
        "artifact_shape-an-object",
        req(request_type="run_entry", artifact_shape={}, code="1"),
        ("artifact_shape",),
    ),
    # --- field types
    ("id-a-list", jline({**SNIPPET, "id": [1]}), ("id",)),
    ("id-a-float", jline({**SNIPPET, "id": 1.5}), ("id",)),
    ("id-a-bool", jline({**SNIPPET, "id": True}), ("id",)),
    ("id-an-object", jline({**SNIPPET, "id": {"a": 1}}), ("id",)),
    ("code-an-integer", req(request_type="run_entry", artifact_shape="snippet", code=5), ("code",)),
    ("code-a-list", req(request_type="run_entry", artifact_shape="snippet", code=["print(1)"]), ("code",)),
    ("snippet-without-code", req(request_type="run_entry", artifact_shape="snippet"), ("code",)),
    ("command-a-string", req(**COMMAND, command="ls -l"), ("command",)),
    ("command-with-a-number", req(**COMMAND, command=["echo", 1]), ("command",)),
    ("command-empty", req(**COMMAND, command=[]), ("command",)),
    ("command-shape-without-command", req(**COMMAND), ("command",)),
    ("patch-not-a-string", req(**SUITE, repo="{shop}", patch=["--- a"]), ("patch",)),
    ("python-not-a-string", req(**SNIPPET, python=3), ("python",)),
    ("tests-a-string", req(**{**SUITE, "tests": "tests/test_cart.py"}, repo="{shop}"), ("tests",)),
    ("tests-with-a-number", req(**{**SUITE, "tests": [1]}, repo="{shop}"), ("tests",)),
    ("repo-not-a-string", req(**SUITE, repo=7), ("repo",)),
    # --- paths that name nothing usable
    ("run_suite-without-repo", req(**SUITE), ("repo",)),
    ("repo-missing", req(**SUITE, repo="no/such/dir"), ("repo",)),
    ("repo-a-file", req(**SUITE, repo="{shop}/pyproject.toml"), ("repo",)),
    ("repo-empty-string", req(**SUITE, repo=""), ("repo",)),
    ("repo-with-nul", req(**SUITE, repo="{shop}\u0000x"), ("repo",)),
    (
        "tests-naming-a-missing-file",
        req(**{**SUITE, "tests": ["tests/test_nope.py"]}, repo="{shop}"),
        ("tests", "test_nope"),
    ),
    (
        "tests-missing-file-with-node-id",
        req(**{**SUITE, "tests": ["tests/nope.py::test_x"]}, repo="{shop}"),
        ("tests", "nope"),
    ),
    ("tests-with-nul", req(**{**SUITE, "tests": ["tests/test_cart.py\u0000"]}, repo="{shop}"), ("tests",)),
    ("python-missing", req(**SNIPPET, python="/no/such/python3"), ("python",)),
    ("python-a-directory", req(**SNIPPET, python="/usr/bin"), ("python",)),
    ("python-bare-name-not-on-path", req(**SNIPPET, python="python-aexec-nonexistent"), ("python",)),
    ("python-with-nul", req(**SNIPPET, python="/usr/bin/python3\u0000"), ("python",)),
    # --- policy: shape and bounds (timeout_s in (0, 3600], ram_mib integer in [16, 1048576],
    #     cpu_cores in (0, ncores])
    ("policy-a-list", req(**SNIPPET, policy=[5]), ("policy",)),
    ("policy-a-string", req(**SNIPPET, policy="fast"), ("policy",)),
    ("policy-unknown-key", req(**SNIPPET, policy={"timeout": 5}), ("policy", "timeout")),
    (
        "policy-deep-nesting",
        b'{"request_type": "run_entry", "artifact_shape": "snippet", "code": "1", "policy": {"timeout_s": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}}\n",
        ("policy", "timeout_s", "json", "deep", "nest"),
    ),
    ("timeout_s-zero", policy_line("timeout_s", "0"), ("timeout_s",)),
    ("timeout_s-negative", policy_line("timeout_s", "-1"), ("timeout_s",)),
    ("timeout_s-just-above-3600", policy_line("timeout_s", "3600.5"), ("timeout_s",)),
    ("timeout_s-1e9", policy_line("timeout_s", "1e9"), ("timeout_s",)),
    ("timeout_s-Infinity", policy_line("timeout_s", "Infinity"), ("timeout_s",)),
    ("timeout_s-minus-Infinity", policy_line("timeout_s", "-Infinity"), ("timeout_s",)),
    ("timeout_s-NaN", policy_line("timeout_s", "NaN"), ("timeout_s",)),
    ("timeout_s-1e400-overflows-to-inf", policy_line("timeout_s", "1e400"), ("timeout_s",)),
    ("timeout_s-bool", policy_line("timeout_s", "true"), ("timeout_s",)),
    ("timeout_s-string", policy_line("timeout_s", '"5"'), ("timeout_s",)),
    ("timeout_s-object", policy_line("timeout_s", "{}"), ("timeout_s",)),
    ("ram_mib-zero", policy_line("ram_mib", "0"), ("ram_mib",)),
    ("ram_mib-negative", policy_line("ram_mib", "-1"), ("ram_mib",)),
    ("ram_mib-below-16", policy_line("ram_mib", "15"), ("ram_mib",)),
    ("ram_mib-above-1048576", policy_line("ram_mib", "1048577"), ("ram_mib",)),
    ("ram_mib-1e27", policy_line("ram_mib", "1e27"), ("ram_mib",)),
    ("ram_mib-huge-integer", policy_line("ram_mib", str(10**30)), ("ram_mib",)),
    ("ram_mib-fraction", policy_line("ram_mib", "1.5"), ("ram_mib",)),
    ("ram_mib-bool", policy_line("ram_mib", "true"), ("ram_mib",)),
    ("ram_mib-string", policy_line("ram_mib", '"512"'), ("ram_mib",)),
    ("cpu_cores-zero", policy_line("cpu_cores", "0"), ("cpu_cores",)),
    ("cpu_cores-negative", policy_line("cpu_cores", "-0.5"), ("cpu_cores",)),
    ("cpu_cores-4096", policy_line("cpu_cores", "4096"), ("cpu_cores",)),
    ("cpu_cores-ncores-plus-one", policy_line("cpu_cores", str(NCORES + 1)), ("cpu_cores",)),
    ("cpu_cores-NaN", policy_line("cpu_cores", "NaN"), ("cpu_cores",)),
    ("cpu_cores-Infinity", policy_line("cpu_cores", "Infinity"), ("cpu_cores",)),
    ("cpu_cores-bool", policy_line("cpu_cores", "true"), ("cpu_cores",)),
    ("cpu_cores-string", policy_line("cpu_cores", '"1"'), ("cpu_cores",)),
]


@pytest.fixture
def private_shop(tmp_path: Path) -> Path:
    dest = tmp_path / "shop"
    shutil.copytree(EXAMPLES / "shop", dest)
    return dest


def _fill(line: bytes, shop: Path) -> bytes:
    return line.replace(b"{shop}", str(shop).encode())


@pytest.mark.parametrize(("bad", "words"), [pytest.param(b, w, id=f"P1-{i}") for i, b, w in REJECTED])
def test_rejected_whole_naming_line_and_field(
    tmp_path: Path, private_shop: Path, bad: bytes, words: tuple[str, ...]
) -> None:
    """P1: a file with this bad line on line 3 (after a good line and a blank one) is
    rejected whole before anything runs: exit 2, one stderr line naming ``FILE:3:`` and
    the field, no traceback, no output file — and the sleeper on line 4 never ran."""
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(jline(good("ok")) + b"\n" + _fill(bad, private_shop) + jline(SLEEPER))
    out = tmp_path / "obs.jsonl"
    done = aexec_in_process("observe", str(cases), "-o", str(out), "--no-cache")
    assert_rejected_whole(done, out, line=3, words=words, path=cases)


@pytest.mark.parametrize(
    "earlier",
    [
        pytest.param("\u2028", id="P1-line-numbers-after-raw-U+2028"),
        pytest.param("\u2029", id="P1-line-numbers-after-raw-U+2029"),
        pytest.param("\u0085", id="P1-line-numbers-after-raw-U+0085"),
        pytest.param("\r\n", id="P1-line-numbers-after-CRLF-lines"),
        pytest.param(" \t ", id="P1-line-numbers-after-whitespace-only-line"),
    ],
)
def test_line_numbers_count_only_newlines(tmp_path: Path, earlier: str) -> None:
    """P1: line numbers count ``\\n`` only — a raw U+2028/U+2029/U+0085 inside a JSON
    string of an earlier (valid) line, CRLF endings or a whitespace-only line do not shift
    the number of the bad line that follows."""
    if earlier == "\r\n":
        first = jline(good("a"))[:-1] + b"\r\n" + jline(good("b"))[:-1] + b"\r\n"
    elif earlier.strip():
        first = jline(good("a", f"print('x{earlier}y')")) + jline(good("b"))
    else:
        first = jline(good("a")) + earlier.encode() + b"\n"
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(first + b"{oops\n" + jline(SLEEPER))
    out = tmp_path / "obs.jsonl"
    done = aexec_in_process("observe", str(cases), "-o", str(out), "--no-cache")
    assert_rejected_whole(done, out, line=3, words=("json",), path=cases)


def test_utf16_file_is_rejected_naming_line_1(tmp_path: Path) -> None:
    """P1: a UTF-16 file (what some editors save) is rejected naming line 1 and the encoding."""
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(jline(good("a")).decode().encode("utf-16"))
    out = tmp_path / "obs.jsonl"
    done = aexec_in_process("observe", str(cases), "-o", str(out), "--no-cache")
    assert_rejected_whole(done, out, line=1, words=("utf-8", "utf8", "encod", "decod", "json", "bom"))


def test_truncated_last_line_is_rejected(tmp_path: Path) -> None:
    """P1: a file cut off in the middle of its last line (no newline) is rejected naming
    that line; the complete lines before it do not run."""
    cases = tmp_path / "cases.jsonl"
    whole = jline(SLEEPER) + jline(good("b"))
    cases.write_bytes(whole[: len(whole) - 15])
    out = tmp_path / "obs.jsonl"
    done = aexec_in_process("observe", str(cases), "-o", str(out), "--no-cache")
    assert_rejected_whole(done, out, line=2, words=("json",), path=cases)


@pytest.mark.parametrize(
    "kind", ["P1-real-command-bad-json", "P1-real-command-unknown-option", "P1-real-command-output-is-input"]
)
def test_the_real_command_refuses_as_the_in_process_one_does(tmp_path: Path, kind: str) -> None:
    """P1, the witnesses: the rejection tests call ``aexec._cli.main`` in-process; the real
    ``python -m aexec`` gives the same exit status (2) and the same one stderr line, within
    the bound, and the sleeper after the bad line never runs."""
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(jline(good("ok")) + (b"{oops\n" if "json" in kind else b"") + jline(SLEEPER))
    out = tmp_path / ("cases.jsonl" if "input" in kind else "obs.jsonl")
    args = ["observe", str(cases), "-o", str(out), "--no-cache"]
    if "option" in kind:
        args.append("--frobnicate")
    start = time.monotonic()
    real = run(*args, timeout=REJECT_BOUND_S)
    assert time.monotonic() - start < REJECT_BOUND_S
    message = assert_rejected_whole(real, None, line=2 if "json" in kind else None)
    here = aexec_in_process(*args)
    assert (here.returncode, stderr_lines(here)) == (real.returncode, [message])
    if "input" not in kind:
        assert not out.exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        pytest.param(("--jobs", "0"), ("jobs",), id="P1-jobs-zero"),
        pytest.param(("--jobs", "-1"), ("jobs",), id="P1-jobs-negative"),
        pytest.param(("--jobs", "abc"), ("jobs",), id="P1-jobs-not-a-number"),
        pytest.param(("--jobs", "1.5"), ("jobs",), id="P1-jobs-fraction"),
        pytest.param(("--no-cache", "--cache-dir", "x"), ("cache",), id="P1-no-cache-with-cache-dir"),
        pytest.param(("--frobnicate",), ("frobnicate", "unrecognized"), id="P1-unknown-option"),
    ],
)
def test_bad_options_are_one_line(tmp_path: Path, args: tuple[str, ...], words: tuple[str, ...]) -> None:
    """P1: a bad command-line option is refused with exit 2 and exactly one stderr line
    naming it (no usage block), before anything runs."""
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(jline(SLEEPER))
    out = tmp_path / "obs.jsonl"
    done = aexec_in_process("observe", str(cases), "-o", str(out), *args)
    assert_rejected_whole(done, out, line=None, words=words)


@pytest.mark.parametrize(
    "kind", ["P1-input-missing", "P1-input-a-directory", "P1-input-unreadable", "P1-input-a-socket"]
)
def test_unusable_input_file_is_one_line(tmp_path: Path, kind: str) -> None:
    """P1: an input that is missing, a directory, unreadable (``/proc/self/mem`` — root
    ignores mode bits) or a socket is refused with exit 2 and one line naming it."""
    out = tmp_path / "obs.jsonl"
    with contextlib.ExitStack() as stack:
        if kind == "P1-input-missing":
            cases = str(tmp_path / "nope.jsonl")
        elif kind == "P1-input-a-directory":
            cases = str(tmp_path)
        elif kind == "P1-input-unreadable":
            cases = "/proc/self/mem"
        else:
            cases = str(tmp_path / "s.sock")
            sock = stack.enter_context(socket.socket(socket.AF_UNIX))
            sock.bind(cases)
        done = aexec_in_process("observe", cases, "-o", str(out), "--no-cache")
    message = assert_rejected_whole(done, out, line=None)
    assert cases in message or os.path.basename(cases) in message, message


# --------------------------------------------------------------------------------------
# P0 — valid JSONL however it is spelled is accepted
# --------------------------------------------------------------------------------------


def _lines_p0(kind: str) -> tuple[bytes, list[Any]]:
    a, b = jline(good("a")), jline(good("b", "print(2)"))
    if kind == "crlf":
        return a[:-1] + b"\r\n" + b[:-1] + b"\r\n", ["a", "b"]
    if kind == "blank-and-whitespace-lines":
        return b"\n \n\t\n" + a + b"   \n\n" + b + b"\n\n", ["a", "b"]
    if kind == "no-final-newline":
        return a + b[:-1], ["a", "b"]
    if kind == "raw-U+2028-in-code":
        return jline(good("a", "print('x\u2028y')")) + b, ["a", "b"]
    if kind == "raw-U+0085-in-code":
        return jline(good("a", "print('x\u0085y')")) + b, ["a", "b"]
    if kind == "raw-U+2029-in-id":
        return jline(good("a\u2029b")) + b, ["a\u2029b", "b"]
    if kind == "escaped-control-chars-in-id":
        return jline(good("a\x1c\x1d\x1e")) + b, ["a\x1c\x1d\x1e", "b"]
    if kind == "non-BMP-id":
        return jline(good("🦀\U0010fffd")) + b, ["🦀\U0010fffd", "b"]
    if kind == "integer-ids":
        return jline(good(7)) + jline(good(0)), [7, 0]  # type: ignore[arg-type]
    if kind == "timeout_s-3600-upper-bound":
        return policy_line("timeout_s", "3600").replace(b'"bad"', b'"a"') + b, ["a", "b"]
    if kind == "timeout_s-tiny":
        return policy_line("timeout_s", "0.5").replace(b'"bad"', b'"a"') + b, ["a", "b"]
    if kind == "ram_mib-1048576-upper-bound":
        return policy_line("ram_mib", "1048576").replace(b'"bad"', b'"a"') + b, ["a", "b"]
    if kind == "cpu_cores-ncores-upper-bound":
        return policy_line("cpu_cores", str(NCORES)).replace(b'"bad"', b'"a"') + b, ["a", "b"]
    if kind == "cpu_cores-half":
        return policy_line("cpu_cores", "0.5").replace(b'"bad"', b'"a"') + b, ["a", "b"]
    if kind == "policy-null-keeps-defaults":
        return jline({**good("a"), "policy": None}) + b, ["a", "b"]
    if kind == "escaped-nul-in-id":
        return jline(good("a\u0000b")) + b, ["a\u0000b", "b"]
    raise AssertionError(kind)


P0_KINDS = [
    "crlf",
    "blank-and-whitespace-lines",
    "no-final-newline",
    "raw-U+2028-in-code",
    "raw-U+0085-in-code",
    "raw-U+2029-in-id",
    "escaped-control-chars-in-id",
    "non-BMP-id",
    "integer-ids",
    "timeout_s-3600-upper-bound",
    "timeout_s-tiny",
    "ram_mib-1048576-upper-bound",
    "cpu_cores-ncores-upper-bound",
    "cpu_cores-half",
    "policy-null-keeps-defaults",
    "escaped-nul-in-id",
]


@pytest.mark.parametrize("kind", [pytest.param(k, id=f"P0-{k}") for k in P0_KINDS])
def test_valid_jsonl_is_accepted(tmp_path: Path, kind: str) -> None:
    """P0: valid JSONL — CRLF, blank lines, raw U+2028/U+0085/U+2029 inside strings,
    non-BMP text, declared bounds at their edge — is observed line for line, in order,
    ids echoed verbatim, exit 0."""
    data, ids = _lines_p0(kind)
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(data)
    out = tmp_path / "obs.jsonl"
    done = aexec_in_process("observe", str(cases), "-o", str(out), "--no-cache", runs=True)
    got = assert_observed(done, out, ids)
    if kind.startswith("raw-U+"):
        assert len(out.read_bytes().split(b"\n")) == len(ids) + 1, "one observation per \\n-terminated line"
    if kind == "raw-U+2028-in-code":
        assert got[0]["stdout"] == "x\u2028y\n"
    if kind == "raw-U+0085-in-code":
        assert got[0]["stdout"] == "x\u0085y\n"


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="P0-empty-file"),
        pytest.param(b"\n\n\n", id="P0-only-blank-lines"),
        pytest.param(b"  \n\t\n \r\n", id="P0-only-whitespace-lines"),
    ],
)
def test_a_file_without_requests_gets_a_defined_answer(tmp_path: Path, content: bytes) -> None:
    """P0 or P1: a file with no request either gives an empty output and exit 0, or is
    rejected with one line (exit 2, no output) — never a traceback."""
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(content)
    out = tmp_path / "obs.jsonl"
    done = aexec_in_process("observe", str(cases), "-o", str(out), "--no-cache")
    if done.returncode == 2:
        assert_rejected_whole(done, out, line=None, words=("request", "empty", "no "))
    else:
        assert_observed(done, out, [])


@pytest.mark.parametrize(
    "kind", ["P01-BOM-at-start", "P01-CR-only-line-endings", "P01-duplicate-ids", "P01-duplicate-keys"]
)
def test_debatable_spellings_are_accepted_or_rejected_whole(tmp_path: Path, kind: str) -> None:
    """P0 or P1: a UTF-8 BOM at the start, old-Mac CR-only line ends, two requests with
    one id, or one object with a key twice: either every request is observed in order, or
    the file is rejected whole with one line naming line 1 — never half of each."""
    a, b = jline(good("a")), jline(good("b", "print(2)"))
    ids: list[Any] = ["a", "b"]
    if kind == "P01-BOM-at-start":
        data = b"\xef\xbb\xbf" + a + b
    elif kind == "P01-CR-only-line-endings":
        data = a[:-1] + b"\r" + b[:-1] + b"\r"
    elif kind == "P01-duplicate-ids":
        data, ids = a + jline(good("a", "print(2)")), ["a", "a"]
    else:
        data = (
            b'{"id": "a", "id": "a", "request_type": "run_entry", "artifact_shape": "snippet", "code": "1"}\n'
            + b
        )
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(data)
    out = tmp_path / "obs.jsonl"
    done = aexec_in_process("observe", str(cases), "-o", str(out), "--no-cache", runs=True)
    if done.returncode == 2:
        assert_rejected_whole(done, out, line=1, path=cases)
    else:
        assert_observed(done, out, ids)


def test_ten_thousand_identical_lines_run_once(tmp_path: Path) -> None:
    """P0: 10,000 identical requests give 10,000 lines in order, all one shared
    observation (one run: one scratch root, one duration), within a bound."""
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(jline(good("same")) * 10_000)
    out = tmp_path / "obs.jsonl"
    start = time.monotonic()
    done = run("observe", str(cases), "-o", str(out), "--no-cache", timeout=180)
    got = assert_observed(done, out, ["same"] * 10_000)
    assert len({o["environment"]["fs_boundary"]["scratch_root"] for o in got}) == 1
    assert len({o["duration"] for o in got}) == 1
    assert time.monotonic() - start < 120


def test_stdin_and_stdout_as_dash(tmp_path: Path) -> None:
    """P0: ``-`` reads the requests from stdin and writes the observations to stdout
    (the summary stays on stderr); relative repos resolve against the working directory."""
    data = jline(good("a")) + jline({**SUITE, "id": "s", "repo": "shop"})
    shutil.copytree(EXAMPLES / "shop", tmp_path / "shop")
    done = run("observe", "-", "-o", "-", "--no-cache", cwd=tmp_path, stdin=data)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in done.stdout.split("\n") if line]
    assert [o["id"] for o in got] == ["a", "s"]
    assert got[1]["failure"]["failure_class"] == "assertion"
    assert not (tmp_path / "-").exists()


def test_input_from_a_fifo_with_a_writer(tmp_path: Path) -> None:
    """P0: requests from a FIFO (what ``<(...)`` gives) are read and observed."""
    fifo = tmp_path / "cases.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "obs.jsonl"
    writer = subprocess.Popen(["sh", "-c", f"cat > {fifo}"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert writer.stdin is not None
    writer.stdin.write(jline(good("a")) + jline(good("b", "print(2)")))
    writer.stdin.close()
    try:
        done = run("observe", str(fifo), "-o", str(out), "--no-cache", timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
        writer.wait()
    assert_observed(done, out, ["a", "b"])


def test_relative_cache_dir_resolves_once_against_the_working_directory(tmp_path: Path) -> None:
    """P0: a relative ``--cache-dir`` is the directory under the working directory, for
    observations and for the bytecode store alike; nothing is created under ``/``, and a
    second run from the same directory is served from it."""
    name = f"aexec-relcache-{uuid.uuid4().hex[:8]}"
    shutil.copytree(EXAMPLES / "shop", tmp_path / "shop")
    (tmp_path / "cases.jsonl").write_bytes(jline({**SUITE, "id": "s", "repo": "shop"}) + jline(good("a")))
    try:
        done = run("observe", "cases.jsonl", "-o", "obs.jsonl", "--cache-dir", name, cwd=tmp_path)
        assert_observed(done, tmp_path / "obs.jsonl", ["s", "a"])
        assert not os.path.lexists(f"/{name}"), "the cache (or its bytecode store) went under /"
        assert (tmp_path / name / "bytecode").is_dir()
        again = run("observe", "cases.jsonl", "-o", "obs.jsonl", "--cache-dir", name, cwd=tmp_path)
        got = assert_observed(again, tmp_path / "obs.jsonl", ["s", "a"])
        assert all(o["cache_hit"] for o in got)
    finally:
        if os.path.lexists(f"/{name}"):
            shutil.rmtree(f"/{name}")


# --------------------------------------------------------------------------------------
# P12 — a defined answer: rejected whole, or the bad request's own error observation
# --------------------------------------------------------------------------------------


def _script(tmp_path: Path, name: str, body: str) -> str:
    p = tmp_path / "bin" / name
    p.parent.mkdir(exist_ok=True)
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return str(p)


def _p12_line(kind: str, tmp_path: Path, shop: Path) -> bytes:
    s = str(shop)
    if kind == "lone-surrogate-in-id":
        return jline({**SNIPPET, "id": "bad\ud800"})
    if kind == "lone-surrogate-in-code":
        return jline({**SNIPPET, "id": "bad", "code": "x = '\ud800'"})
    if kind == "lone-low-surrogate-in-code":
        return jline({**SNIPPET, "id": "bad", "code": "x = '\udcff'"})
    if kind == "lone-surrogate-in-repo":
        return jline({**SUITE, "id": "bad", "repo": s + "\ud800"})
    if kind == "lone-surrogate-in-patch":
        return jline({**SUITE, "id": "bad", "repo": s, "patch": diff("shop/cart.py", "a\n", "\ud800\n")})
    if kind == "lone-surrogate-in-tests":
        return jline({**SUITE, "id": "bad", "repo": s, "tests": ["tests/test_cart.py::\ud800"]})
    if kind == "lone-surrogate-in-command":
        return jline({**COMMAND, "id": "bad", "command": ["echo", "\ud800"]})
    if kind == "nul-in-command":
        return jline({**COMMAND, "id": "bad", "command": ["echo", "a\u0000b"]})
    if kind == "python-is-bin-true":
        return jline({**SNIPPET, "id": "bad", "python": "/bin/true"})
    if kind == "python-is-bin-false":
        return jline({**SNIPPET, "id": "bad", "python": "/bin/false"})
    if kind == "python-prints-garbage":
        return jline({**SNIPPET, "id": "bad", "python": _script(tmp_path, "garbage", "echo '\\377{]'\n")})
    if kind == "python-not-executable":
        p = tmp_path / "notexec"
        p.write_text("#!/bin/sh\n")
        return jline({**SNIPPET, "id": "bad", "python": str(p)})
    if kind == "tests-absolute-path-outside-repo":
        return jline({**SUITE, "id": "bad", "repo": s, "tests": ["/etc/passwd"]})
    if kind == "tests-escaping-the-repo":
        (shop.parent / "test_outside.py").write_text("def test_x():\n    pass\n")
        return jline({**SUITE, "id": "bad", "repo": s, "tests": ["../test_outside.py"]})
    raise AssertionError(kind)


P12_KINDS = [
    "lone-surrogate-in-id",
    "lone-surrogate-in-code",
    "lone-low-surrogate-in-code",
    "lone-surrogate-in-repo",
    "lone-surrogate-in-patch",
    "lone-surrogate-in-tests",
    "lone-surrogate-in-command",
    "nul-in-command",
    "python-is-bin-true",
    "python-is-bin-false",
    "python-prints-garbage",
    "python-not-executable",
    "tests-absolute-path-outside-repo",
    "tests-escaping-the-repo",
]


@pytest.mark.parametrize("kind", [pytest.param(k, id=f"P12-{k}") for k in P12_KINDS])
def test_bad_request_is_rejected_whole_or_observed_as_error(
    tmp_path: Path, private_shop: Path, kind: str
) -> None:
    """P12: the bad request on line 2 of 3 either gets the whole file rejected (P1:
    exit 2, one line naming ``:2:``) or its own ``verdict: error`` observation with a
    one-line reason while lines 1 and 3 are observed (P2) — never a traceback, never a
    lost or half-written line."""
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(
        jline(good("a")) + _p12_line(kind, tmp_path, private_shop) + jline(good("c", "print(3)"))
    )
    out = tmp_path / "obs.jsonl"
    args = ("observe", str(cases), "-o", str(out), "--no-cache")
    # What reaches stderr's encoder (a surrogate, a NUL) needs the real command's streams.
    real = "surrogate" in kind or "nul" in kind
    done = run(*args, timeout=120) if real else aexec_in_process(*args, runs=True)
    if done.returncode == 2:
        assert_rejected_whole(done, out, line=2, path=cases)
    else:
        bad_id = observations(out)[1]["id"] if out.exists() and len(observations(out)) == 3 else "bad"
        assert_observed(done, out, ["a", bad_id, "c"], errors=(bad_id,))
        assert out.read_bytes().decode("utf-8")  # the output is valid UTF-8 throughout


# --------------------------------------------------------------------------------------
# P3 — never a hang; SIGTERM ends it; nothing left behind
# --------------------------------------------------------------------------------------


def cgroups_of(pid: int) -> list[str]:
    """The run cgroups named after aexec ``pid`` (``aexec-<pid>-*``), in every hierarchy."""
    found = []
    base = Path("/sys/fs/cgroup")
    if not base.is_dir():
        return []
    stack = [(base, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if e.name.startswith(f"aexec-{pid}-"):
                    found.append(e.path)
                elif depth < 4:
                    stack.append((Path(e.path), depth + 1))
    return found


def mounts_under(path: Path) -> list[str]:
    prefix = str(path)
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(prefix)]


def leftovers(tmpdir: Path, pid: int, marker: str) -> dict[str, list[Any]]:
    return {
        "scratch roots": sorted(n for n in os.listdir(tmpdir) if n.startswith("aexec-")),
        "mounts": mounts_under(tmpdir),
        "cgroups": cgroups_of(pid),
        "processes": live_pids_with(marker),
    }


def _clean_up_after(tmpdir: Path, pid: int, marker: str) -> None:
    """A failed test must not leave its mess on a shared machine: only what it made."""
    for p in live_pids_with(marker):
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)
    for m in sorted(mounts_under(tmpdir), key=len, reverse=True):
        subprocess.run(["umount", "-l", m], check=False, capture_output=True)
    for cg in sorted(cgroups_of(pid), key=len, reverse=True):
        for sub, _, _ in sorted(os.walk(cg), key=lambda t: len(t[0]), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(sub)


def hang_code(marker: str) -> str:
    sleep = shutil.which("sleep")
    return (
        "import subprocess, time\n"
        f"subprocess.Popen([{marker!r}, '60'], executable={sleep!r}, start_new_session=True)\n"
        "time.sleep(60)\n"
    )


@contextlib.contextmanager
def started(
    args: list[str], tmpdir: Path, *, stdin: int | None = subprocess.DEVNULL, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    proc = subprocess.Popen([*AEXEC, *args], env=env, stdin=stdin, stderr=subprocess.PIPE, cwd=cwd)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def wait_for(cond: Callable[[], bool], proc: subprocess.Popen[bytes], bound: float = 30) -> None:
    deadline = time.monotonic() + bound
    while not cond():
        if proc.poll() is not None:
            pytest.fail(
                f"aexec ended before the state under test: {proc.stderr.read() if proc.stderr else ''!r}"
            )
        if time.monotonic() > deadline:
            return  # signal it anyway: the property is about ending, whatever it was doing
        time.sleep(0.05)


def fifo_has_reader(fifo: Path, held: list[int]) -> bool:
    """True once something opened ``fifo`` to read; keeps a writer open so that reader
    then blocks in read() forever (a stuck worker thread)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False
    held.append(fd)
    return True


def assert_ends_cleanly(
    proc: subprocess.Popen[bytes], signum: int, out: Path | None, tmpdir: Path, marker: str
) -> None:
    sent = time.monotonic()
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"{signal.Signals(signum).name} did not end aexec (SIGKILL did)")
    took = time.monotonic() - sent
    text = err.decode("utf-8", "replace")
    assert took < slack(2.0), f"{signal.Signals(signum).name} took {took:.1f} s to end aexec"
    assert "Traceback" not in text, text
    assert proc.returncode in (128 + signum, -signum), (proc.returncode, text)
    if out is not None and out.exists():
        raw = out.read_bytes()
        assert raw == b"" or raw.endswith(b"\n"), "a half-written line"
        for line in raw.split(b"\n")[:-1]:
            json.loads(line)
    time.sleep(0.3)
    assert leftovers(tmpdir, proc.pid, marker) == {
        "scratch roots": [],
        "mounts": [],
        "cgroups": [],
        "processes": [],
    }


SPECIAL = [
    "fifo",
    "socket",
    "char-device",
    "block-device",
    "symlink-loop",
    "dir-symlink-loop",
    "dangling-symlink",
    "fifo-named-like-a-module",
]


def add_special(repo: Path, kind: str, stack: contextlib.ExitStack) -> Path | None:
    """Put a special file of ``kind`` into ``repo``; returns the FIFO when there is one."""
    d = repo / "shop" / "data"
    d.mkdir(exist_ok=True)
    if kind == "fifo":
        os.mkfifo(d / "pipe")
        return d / "pipe"
    if kind == "fifo-named-like-a-module":
        os.mkfifo(repo / "shop" / "pipe.py")
        return repo / "shop" / "pipe.py"
    if kind == "socket":
        s = stack.enter_context(socket.socket(socket.AF_UNIX))
        s.bind(str(d / "sock"))
    elif kind == "char-device":
        os.mknod(d / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    elif kind == "block-device":
        os.mknod(d / "loop", stat.S_IFBLK | 0o600, os.makedev(7, 0))
    elif kind == "symlink-loop":
        os.symlink("b", d / "a")
        os.symlink("a", d / "b")
    elif kind == "dir-symlink-loop":
        os.symlink("..", d / "up")
        os.symlink(".", d / "self")
    elif kind == "dangling-symlink":
        os.symlink("/no/such/target", d / "gone")
    return None


def _special_repos(d: Path) -> dict[str, Any]:
    """One ``aexec observe`` of a repo per `SPECIAL` kind (each a shop holding that special
    file, and a file naming the kind, so that no two repos share a hash: each is walked,
    compiled and run for itself, none served from another's run), then a snippet."""
    with contextlib.ExitStack() as stack:
        rows = []
        for kind in SPECIAL:
            repo = d / f"shop-{kind}"
            shutil.copytree(EXAMPLES / "shop", repo)
            (repo / "KIND.txt").write_text(kind)
            add_special(repo, kind, stack)
            rows.append({**SUITE, "id": kind, "repo": str(repo)})
        cases = d / "cases.jsonl"
        cases.write_bytes(b"".join(jline(r) for r in rows) + jline(good("a")))
        scratch = d / "tmp"
        scratch.mkdir()
        done = run(
            "observe",
            str(cases),
            "-o",
            str(d / "obs.jsonl"),
            "--cache-dir",
            str(d / "cache"),
            env={**os.environ, "TMPDIR": str(scratch)},
            timeout=90 + 15 * len(SPECIAL),
        )
    return {
        "returncode": done.returncode,
        "stderr": done.stderr,
        "left": [n for n in os.listdir(scratch) if n.startswith("aexec-") and "-bytecode-" not in n],
    }


@pytest.fixture(scope="module")
def special_repos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return once_per_session(tmp_path_factory, "bad-input-special-repos", _special_repos)


@pytest.mark.parametrize("kind", [pytest.param(k, id=f"P3-repo-with-{k}") for k in SPECIAL])
def test_repo_with_special_files_is_observed_within_a_bound(
    special_repos: tuple[Path, dict[str, Any]], kind: str
) -> None:
    """P3: a repo holding a FIFO, a socket, a device node, a symlink loop or a dangling
    symlink is observed within a bound (special files are skipped, never opened), with
    the same answer as the repo without it; the other request is observed too.

    One ``aexec observe`` observes a repo of each kind (`_special_repos`, once per
    session): a special file that were opened would hang that run (and fail every kind
    here), one that broke a walk or a copy would make this kind's observation an error."""
    d, done = special_repos
    assert "Traceback" not in done["stderr"], done["stderr"]
    got = {o["id"]: o for o in observations(d / "obs.jsonl")}
    assert list(got) == [*SPECIAL, "a"], done["stderr"]
    mine = got[kind]
    assert mine["verdict"] == "fail" and mine["failure"]["failure_class"] == "assertion", mine
    assert got["a"]["verdict"] != "error", got["a"]
    assert (d / "obs.jsonl").read_bytes().endswith(b"\n")
    assert done["returncode"] == 0, done["stderr"]
    assert done["left"] == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["P3-SIGTERM", "P3-SIGINT"])
@pytest.mark.parametrize(
    "state", ["hanging-candidate", "repo-with-fifo", "python-probe-hangs", "many-identical-requests"]
)
def test_a_signal_ends_aexec_within_2s_leaving_nothing(
    tmp_path: Path, private_shop: Path, state: str, signum: int
) -> None:
    """P3: SIGTERM or SIGINT ends ``aexec observe`` within 2 s — while a candidate hangs,
    while a worker thread is stuck reading a FIFO in a repo, while the ``python`` probe
    hangs, or in a run of many requests — with complete lines written and no scratch
    roots, mounts, cgroups (``aexec-<pid>-*``) or processes left."""
    marker = f"aexec-test-{uuid.uuid4()}"
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    cases, out = tmp_path / "cases.jsonl", tmp_path / "obs.jsonl"
    held: list[int] = []
    hang = {**good("hang", hang_code(marker)), "policy": {"timeout_s": 60}}
    fifo = None
    if state == "hanging-candidate":
        rows = [good("quick"), hang]
    elif state == "repo-with-fifo":
        fifo = private_shop / "shop" / "pipe.py"
        os.mkfifo(fifo)
        rows = [good("quick"), {**SUITE, "id": "s", "repo": str(private_shop)}, hang]
    elif state == "python-probe-hangs":
        python = _script(
            tmp_path, "python", f"exec {sys.executable} -c 'import time; time.sleep(60)' {marker}\n"
        )
        rows = [{**good("p"), "python": python}]
    else:
        rows = [good("quick"), hang] + [good("same")] * 5000
    cases.write_bytes(b"".join(jline(r) for r in rows))
    pid = 0
    try:
        with started(["observe", str(cases), "-o", str(out), "--no-cache"], tmpdir) as proc:
            pid = proc.pid

            def busy() -> bool:
                if fifo is not None and fifo_has_reader(fifo, held):
                    return True
                return bool(live_pids_with(marker)) and (state == "python-probe-hangs" or out.exists())

            wait_for(busy, proc)
            assert_ends_cleanly(proc, signum, out, tmpdir, marker)
    finally:
        for fd in held:
            os.close(fd)
        _clean_up_after(tmpdir, pid, marker)


def test_a_signal_while_reading_stdin_ends_aexec(tmp_path: Path) -> None:
    """P3: ``aexec observe -`` waiting on a stdin that never ends is ended by SIGTERM
    within 2 s, without a traceback and without an output file."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = tmp_path / "obs.jsonl"
    r, w = os.pipe()
    try:
        with started(["observe", "-", "-o", str(out), "--no-cache"], tmpdir, stdin=r) as proc:
            os.write(w, jline(good("a")))
            time.sleep(2.0)
            assert proc.poll() is None, "aexec did not wait for the rest of stdin"
            assert_ends_cleanly(proc, signal.SIGTERM, None, tmpdir, f"aexec-none-{uuid.uuid4()}")
        assert not out.exists() or out.read_bytes() == b""
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("sweeper", ["P3-next-aexec-elsewhere-sweeps", "P3-aexec-gc-sweeps"])
def test_what_a_killed_aexec_left_is_swept(tmp_path: Path, sweeper: str) -> None:
    """P3: after a SIGKILL of aexec (its scratch roots, tmpfs mounts, cgroups and a
    candidate's escaped process left behind under TMPDIR A), the next aexec started with
    a different TMPDIR — or ``aexec gc`` — removes all of them."""
    marker = f"aexec-test-{uuid.uuid4()}"
    a, b = tmp_path / "tmp-a", tmp_path / "tmp-b"
    a.mkdir(), b.mkdir()
    cases, out = tmp_path / "cases.jsonl", tmp_path / "obs.jsonl"
    cases.write_bytes(
        jline(good("quick")) + jline({**good("hang", hang_code(marker)), "policy": {"timeout_s": 60}})
    )
    pid = 0
    try:
        with started(["observe", str(cases), "-o", str(out), "--no-cache"], a) as proc:
            pid = proc.pid
            wait_for(lambda: bool(live_pids_with(marker)) and out.exists(), proc)
            proc.kill()
            proc.wait()
        left = leftovers(a, pid, marker)
        assert left["scratch roots"], "the SIGKILL left nothing to sweep: the test proves nothing"
        if sweeper == "P3-aexec-gc-sweeps":
            done = run("gc", env={**os.environ, "TMPDIR": str(b)}, timeout=60)
        else:
            (tmp_path / "other.jsonl").write_bytes(jline(good("x")))
            done = run(
                "observe",
                str(tmp_path / "other.jsonl"),
                "-o",
                str(tmp_path / "other.out"),
                "--no-cache",
                env={**os.environ, "TMPDIR": str(b)},
                timeout=60,
            )
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        time.sleep(0.3)
        assert leftovers(a, pid, marker) == {
            "scratch roots": [],
            "mounts": [],
            "cgroups": [],
            "processes": [],
        }
    finally:
        _clean_up_after(a, pid, marker)
        for n in os.listdir(a):
            shutil.rmtree(a / n, ignore_errors=True)


def aexec_with(module: str, name: str, value: float) -> tuple[str, ...]:
    """The real command with one of aexec's bounds or intervals (``module.name``) cut to
    ``value``, for a test of what the bound does rather than of how long it is. A renamed
    or already shorter constant fails the command (an AssertionError), so the test cannot
    pass by silently waiting out the full length."""
    return (
        sys.executable,
        "-c",
        f"import importlib, sys; m = importlib.import_module({module!r}); assert m.{name} >= {value!r}"
        f"; m.{name} = {value!r}; import aexec._cli as c; sys.exit(c.main(sys.argv[1:]))",
    )


#: The interpreter probe's bound cut from 60 s to 10 s (room for a sane interpreter's
#: probe on a loaded machine).
SHORT_PROBE = aexec_with("aexec._pipeline.toolchain", "PROBE_TIMEOUT_S", 10.0)


def test_python_that_hangs_is_bounded(tmp_path: Path) -> None:
    """P3: a ``python`` that never answers its probe does not hang the run: the CLI
    ends within a bound with a defined answer (rejected whole, or an error observation),
    and the hanging interpreter is not left running."""
    marker = f"aexec-test-{uuid.uuid4()}"
    python = _script(
        tmp_path, "python", f"exec {sys.executable} -c 'import time; time.sleep(600)' {marker}\n"
    )
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(
        jline(good("a")) + jline({**good("bad"), "python": python}) + jline(good("c", "print(3)"))
    )
    out = tmp_path / "obs.jsonl"
    try:
        done = run("observe", str(cases), "-o", str(out), "--no-cache", timeout=90, command=SHORT_PROBE)
        if done.returncode == 2:
            assert_rejected_whole(done, out, line=2, words=("python",), path=cases)
        else:
            assert_observed(done, out, ["a", "bad", "c"], errors=("bad",))
        assert live_pids_with(marker) == []
    finally:
        for p in live_pids_with(marker):
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)


# --------------------------------------------------------------------------------------
# P4 — nothing wrong is served from a damaged cache or bytecode store
# --------------------------------------------------------------------------------------

#: The fields that say what happened (not when, where, or how fast).
STABLE = ("id", "verdict", "stdout", "exception", "artifact_version", "cache_key", "exit_code", "timed_out")


def behaviour(o: dict[str, Any]) -> dict[str, Any]:
    b = {k: o[k] for k in STABLE}
    b["stdout"] = re.sub(r"\bin \d+\.\d+s\b", "in Ns", b["stdout"])  # pytest's own timing
    b["failure_class"] = o["failure"] and o["failure"]["failure_class"]
    b["tests"] = sorted((t["test"], t["verdict"], t["f2p"], t["p2p"]) for t in o["test_results"])
    b["flags"] = {k: v for k, v in o["flags"].items() if k not in ("reverified", "nondeterministic")}
    return b


def suite_fix() -> dict[str, Any]:
    rows = [json.loads(line) for line in (EXAMPLES / "cases.jsonl").read_text().splitlines() if line.strip()]
    return next(r for r in rows if r["id"] == "suite-fix")


def _fresh(d: Path) -> dict[str, Any]:
    shutil.copytree(EXAMPLES / "shop", d / "shop")
    rows = [
        good("A", "print('A')"),
        good("B", "print('B')"),
        {**suite_fix(), "id": "S", "repo": str(d / "shop")},
    ]
    cases = d / "cases.jsonl"
    cases.write_bytes(b"".join(jline(r) for r in rows))
    done = run("observe", str(cases), "-o", str(d / "obs.jsonl"), "--cache-dir", str(d / "cache"))
    assert done.returncode == 0, done.stderr
    obs = {o["id"]: o for o in observations(d / "obs.jsonl")}
    assert obs["S"]["verdict"] == "pass", obs["S"]
    assert obs["A"]["stdout"] == "A\n" and obs["B"]["stdout"] == "B\n"
    return obs


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One fresh cached run of two snippets and the shop repair (a reference for the whole
    session: each test copies the cache it damages; nothing writes to this one)."""
    d, obs = once_per_session(tmp_path_factory, "bad-input-fresh", _fresh)
    return {"dir": d, "cases": d / "cases.jsonl", "obs": obs, "cache": d / "cache"}


def observe_cli(kind: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI on a damaged cache: in-process, but for a FIFO, whose read could block for
    ever: that one is the real command, ended as a hang after 120 s."""
    if "fifo" in kind:
        return run(*args, timeout=120)
    return aexec_in_process(*args, runs=True)


def entry(cache: Path, o: dict[str, Any]) -> Path:
    return cache / (o["cache_key"] + ".json")


def damage_entry(kind: str, cache: Path, a: dict[str, Any], b: dict[str, Any], held: list[int]) -> None:
    pa, pb = entry(cache, a), entry(cache, b)
    assert pa.exists() and pb.exists(), os.listdir(cache)
    body = pa.read_bytes()
    if kind == "replaced-by-another-entry":
        shutil.copyfile(pb, pa)
    elif kind == "swapped-with-another-entry":
        tmp = pa.with_suffix(".swap")
        os.rename(pa, tmp), os.rename(pb, pa), os.rename(tmp, pb)
    elif kind == "another-entry-relabelled-with-this-key":
        other = json.loads(pb.read_bytes())
        other["key"] = a["cache_key"]
        pa.write_text(json.dumps(other))
    elif kind == "value-edited-hash-kept":
        mine = json.loads(body)
        mine["value"]["stdout"] = "B\n"
        pa.write_text(json.dumps(mine))
    elif kind == "value-edited-hash-recomputed-key-kept":
        mine = json.loads(body)
        mine["value"]["stdout"] = "B\n"
        mine["value"]["artifact_version"] = b["artifact_version"]
        blob = json.dumps(mine["value"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        mine["sha256"] = hashlib.sha256(blob.encode()).hexdigest()
        pa.write_text(json.dumps(mine))
    elif kind == "truncated-half":
        pa.write_bytes(body[: len(body) // 2])
    elif kind == "truncated-empty":
        pa.write_bytes(b"")
    elif kind == "garbage":
        pa.write_bytes(os.urandom(len(body)))
    elif kind == "invalid-utf8":
        pa.write_bytes(body.replace(b'"A', b'"\xff', 1))
    elif kind == "json-of-the-wrong-shape":
        pa.write_text("[]")
    elif kind == "deep-nesting":
        pa.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    elif kind == "a-directory":
        pa.unlink()
        pa.mkdir()
    elif kind == "symlink-to-another-entry":
        pa.unlink()
        pa.symlink_to(pb)
    elif kind == "dangling-symlink":
        pa.unlink()
        pa.symlink_to(cache / "nowhere.json")
    elif kind == "a-fifo":
        pa.unlink()
        os.mkfifo(pa)
        # a writer that never writes: an open() of it succeeds, a read() blocks forever
        held.append(os.open(pa, os.O_RDWR))
    else:
        raise AssertionError(kind)


ENTRY_DAMAGE = [
    "replaced-by-another-entry",
    "swapped-with-another-entry",
    "another-entry-relabelled-with-this-key",
    "value-edited-hash-kept",
    "value-edited-hash-recomputed-key-kept",
    "truncated-half",
    "truncated-empty",
    "garbage",
    "invalid-utf8",
    "json-of-the-wrong-shape",
    "deep-nesting",
    "a-directory",
    "symlink-to-another-entry",
    "dangling-symlink",
    "a-fifo",
]


@pytest.mark.parametrize("kind", [pytest.param(k, id=f"P4-cache-entry-{k}") for k in ENTRY_DAMAGE])
def test_a_damaged_cache_entry_is_never_served(tmp_path: Path, fresh: dict[str, Any], kind: str) -> None:
    """P4: with this candidate's cache entry damaged (another entry's valid JSON over it,
    truncated, garbage, a directory, a symlink, a FIFO, ...), the observation equals a
    fresh one and is not a cache hit; the entry is repaired, so the next run is a hit
    with the right observation. Never a hang, never a traceback."""
    cache = tmp_path / "cache"
    shutil.copytree(fresh["cache"], cache, symlinks=True)
    a, b = fresh["obs"]["A"], fresh["obs"]["B"]
    held: list[int] = []
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(jline(good("A", "print('A')")))
    out = tmp_path / "obs.jsonl"
    try:
        damage_entry(kind, cache, a, b, held)
        done = observe_cli(kind, "observe", str(cases), "-o", str(out), "--cache-dir", str(cache))
    finally:
        for fd in held:
            os.close(fd)
    (got,) = assert_observed(done, out, ["A"])
    assert behaviour(got) == behaviour(a)
    assert got["cache_hit"] is False, "a damaged entry was served"
    again = observe_cli(kind, "observe", str(cases), "-o", str(out), "--cache-dir", str(cache))
    (got,) = assert_observed(again, out, ["A"])
    assert behaviour(got) == behaviour(a)
    assert got["cache_hit"] is True, "the damaged entry was not replaced by the fresh observation"


def pycs(store: Path) -> list[Path]:
    return sorted(store.rglob("*.pyc"))


def damage_bytecode(kind: str, cache: Path, held: list[int]) -> None:
    store = cache / "bytecode"
    files = pycs(store)
    assert files, "no bytecode store to damage"
    cart = next(p for p in files if p.name.startswith("cart."))
    init = next(p for p in files if p.name.startswith("__init__."))
    rewritten = [p for p in files if "-pytest-" in p.name]
    if kind == "pyc-garbage-body-header-kept":
        for p in files:
            data = p.read_bytes()
            p.write_bytes(data[:16] + os.urandom(max(len(data) - 16, 16)))
    elif kind == "pyc-truncated":
        for p in files:
            p.write_bytes(p.read_bytes()[:8])
    elif kind == "pyc-empty":
        for p in files:
            p.write_bytes(b"")
    elif kind == "pyc-code-of-another-module-header-kept":
        cart.write_bytes(cart.read_bytes()[:16] + init.read_bytes()[16:])
    elif kind == "pyc-wrong-magic":
        for p in files:
            p.write_bytes(b"\0\0\0\0" + p.read_bytes()[4:])
    elif kind == "rewritten-test-pyc-garbage":
        assert rewritten
        for p in rewritten:
            data = p.read_bytes()
            p.write_bytes(data[:16] + os.urandom(len(data) - 16))
    elif kind == "pyc-a-directory":
        cart.unlink()
        cart.mkdir()
    elif kind == "pyc-a-fifo":
        cart.unlink()
        os.mkfifo(cart)
        held.append(os.open(cart, os.O_RDWR))
    elif kind == "pyc-a-symlink-outside":
        cart.unlink()
        cart.symlink_to("/etc/passwd")
    elif kind == "compiled-repo-a-file":
        (d,) = [p for p in store.iterdir() if p.is_dir()]
        shutil.rmtree(d)
        d.write_bytes(b"not a directory")
    elif kind == "store-a-file":
        shutil.rmtree(store)
        store.write_bytes(b"not a directory")
    elif kind == "stray-pyc-for-a-module-the-repo-lacks":
        (d,) = [p for p in store.iterdir() if p.is_dir()]
        (d / "shop" / "__pycache__" / "extra.cpython-311.pyc").write_bytes(init.read_bytes())
    else:
        raise AssertionError(kind)


BYTECODE_DAMAGE = [
    "pyc-garbage-body-header-kept",
    "pyc-truncated",
    "pyc-empty",
    "pyc-code-of-another-module-header-kept",
    "pyc-wrong-magic",
    "rewritten-test-pyc-garbage",
    "pyc-a-directory",
    "pyc-a-fifo",
    "pyc-a-symlink-outside",
    "compiled-repo-a-file",
    "store-a-file",
    "stray-pyc-for-a-module-the-repo-lacks",
]


@pytest.fixture(scope="module")
def observe_with_a_cache() -> Iterator[Callable[[Path, Path], list[dict[str, Any]]]]:
    """``aexec observe CASES --cache-dir CACHE``'s observations, as its JSON lines, made by
    one `aexec.Observer` for the module: one interpreter probe and one warm pytest server
    for all the damaged stores, not one per case. What a case damages is its cache dir's,
    which each call gets for itself (`observe_many`'s ``cache_dir``): the call finds its
    store, checks it and repairs it as the command's own observer would. The server is
    started on an empty directory (`_driver.startup`) and holds none of a repo's modules:
    each run imports the repo's from its own view, over the call's compiled repo."""
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(aexec.observer(aexec.Options.from_env())) as own,
    ):

        def observe(cases: Path, cache: Path) -> list[dict[str, Any]]:
            got = portal.call(
                functools.partial(
                    aexec.observe_many, read_cases(str(cases)), observer=own, cache_dir=str(cache)
                )
            )
            return [json.loads(dumps(o)) for o in got]

        yield observe


@pytest.mark.slow
@pytest.mark.parametrize("kind", [pytest.param(k, id=f"P4-bytecode-{k}") for k in BYTECODE_DAMAGE])
def test_a_damaged_bytecode_store_is_never_trusted(
    tmp_path: Path,
    fresh: dict[str, Any],
    observe_with_a_cache: Callable[[Path, Path], list[dict[str, Any]]],
    kind: str,
) -> None:
    """P4: with the cache's bytecode store damaged (a corrupted, truncated or swapped
    .pyc, a .pyc that is a directory, a FIFO or a symlink, the store a file) and the
    observations themselves gone from the cache, the repair observed again is ``pass`` as
    it was fresh — not a ``compile`` failure — and what gets cached is right too.

    Observed by the module's one observer (`observe_with_a_cache`); a FIFO, whose read
    could block for ever, by the real command, ended as a hang after 120 s."""
    cache = tmp_path / "cache"
    shutil.copytree(fresh["cache"], cache, symlinks=True)
    for p in cache.glob("*.json"):
        p.unlink()
    s = fresh["obs"]["S"]
    held: list[int] = []
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(jline({**suite_fix(), "id": "S", "repo": str(fresh["dir"] / "shop")}))
    out = tmp_path / "obs.jsonl"

    def observe() -> list[dict[str, Any]]:
        if "fifo" not in kind:
            return observe_with_a_cache(cases, cache)
        return assert_observed(
            run("observe", str(cases), "-o", str(out), "--cache-dir", str(cache), timeout=120), out, ["S"]
        )

    try:
        damage_bytecode(kind, cache, held)
        (got,) = observe()
    finally:
        for fd in held:
            os.close(fd)
    assert behaviour(got) == behaviour(s), got["failure"]
    assert got["cache_hit"] is False
    (got,) = observe()
    assert behaviour(got) == behaviour(s) and got["cache_hit"] is True


# --------------------------------------------------------------------------------------
# P5 — output and cache paths are checked before the first candidate runs
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def read_only(d: Path) -> Iterator[Path]:
    """``d`` made really unwritable (root ignores mode bits): a read-only bind mount."""
    d.mkdir(exist_ok=True)
    subprocess.run(["mount", "--bind", str(d), str(d)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(d)], check=True)
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


P5_KINDS = [
    "output-in-a-missing-directory",
    "output-is-a-directory",
    "output-in-a-read-only-directory",
    "output-is-dev-full",
    "output-under-proc",
    "output-parent-is-a-file",
    "output-equals-input",
    "output-is-a-symlink-to-input",
    "output-is-a-hardlink-of-input",
    "output-is-input-spelled-differently",
    "cache-dir-is-a-file",
    "cache-dir-read-only",
    "cache-dir-under-proc",
    "cache-dir-parent-is-a-file",
]


@pytest.mark.parametrize("kind", [pytest.param(k, id=f"P5-{k}") for k in P5_KINDS])
def test_unwritable_paths_are_refused_before_anything_runs(tmp_path: Path, kind: str) -> None:
    """P5: an output path or cache dir that cannot be written (missing directory, a
    directory, read-only, /dev/full, under /proc, a file in the way) or an output that is
    the input itself (by name, symlink or hardlink) is refused with exit 2 and one line
    naming it, before the first candidate runs (the 40 s sleeper makes a run that started
    miss the bound); the input is left as it was."""
    cases = tmp_path / "cases.jsonl"
    original = jline(good("a")) + jline(SLEEPER)
    cases.write_bytes(original)
    out: Path | None = tmp_path / "obs.jsonl"
    extra = ["--no-cache"]
    with contextlib.ExitStack() as stack:
        if kind == "output-in-a-missing-directory":
            out = tmp_path / "missing" / "obs.jsonl"
        elif kind == "output-is-a-directory":
            out = tmp_path / "adir"
            out.mkdir()
        elif kind == "output-in-a-read-only-directory":
            out = stack.enter_context(read_only(tmp_path / "ro")) / "obs.jsonl"
        elif kind == "output-is-dev-full":
            out = Path("/dev/full")
        elif kind == "output-under-proc":
            out = Path("/proc/aexec-obs.jsonl")
        elif kind == "output-parent-is-a-file":
            (tmp_path / "afile").write_text("x")
            out = tmp_path / "afile" / "obs.jsonl"
        elif kind == "output-equals-input":
            out = cases
        elif kind == "output-is-a-symlink-to-input":
            out = tmp_path / "link.jsonl"
            out.symlink_to(cases)
        elif kind == "output-is-a-hardlink-of-input":
            out = tmp_path / "hard.jsonl"
            os.link(cases, out)
        elif kind == "output-is-input-spelled-differently":
            (tmp_path / "sub").mkdir()
            out = tmp_path / "sub" / ".." / "." / "cases.jsonl"
        elif kind == "cache-dir-is-a-file":
            (tmp_path / "cachefile").write_text("x")
            extra = ["--cache-dir", str(tmp_path / "cachefile")]
        elif kind == "cache-dir-read-only":
            extra = ["--cache-dir", str(stack.enter_context(read_only(tmp_path / "rocache")))]
        elif kind == "cache-dir-under-proc":
            extra = ["--cache-dir", "/proc/aexec-cache"]
        elif kind == "cache-dir-parent-is-a-file":
            (tmp_path / "afile").write_text("x")
            extra = ["--cache-dir", str(tmp_path / "afile" / "cache")]
        done = aexec_in_process("observe", str(cases), "-o", str(out), *extra)
        assert_rejected_whole(done, None, line=None, words=("output", "-o", "cache", "input", str(out)))
    assert cases.read_bytes() == original, "the input was overwritten"


@pytest.mark.parametrize(
    "kind", ["P5-discriminate-output-in-a-missing-directory", "P5-discriminate-output-equals-input"]
)
def test_discriminate_checks_its_output_before_running(tmp_path: Path, private_shop: Path, kind: str) -> None:
    """P5: ``aexec discriminate`` refuses an unwritable output (or its own input) with one
    line before any candidate runs (each candidate would sleep 40 s)."""
    slow = diff("shop/slow.py", "", "import time\ntime.sleep(40)\n")
    rows = [
        {**SUITE, "id": i, "repo": str(private_shop), "patch": slow + p, "policy": {"timeout_s": 60}}
        for i, p in enumerate(["", diff("shop/other.py", "", "X = 1\n")])
    ]
    for r in rows:  # make the patched suite import the slow module
        r["patch"] = r["patch"] + diff("tests/conftest.py", "", "import shop.slow\n")
    cases = tmp_path / "cases.jsonl"
    original = b"".join(jline(r) for r in rows)
    cases.write_bytes(original)
    out = tmp_path / "missing" / "out.jsonl" if "missing" in kind else cases
    done = aexec_in_process("discriminate", str(cases), "-o", str(out), "--no-cache")
    assert_rejected_whole(done, None, line=None, words=("output", "-o", "input", str(out)))
    assert cases.read_bytes() == original


# --------------------------------------------------------------------------------------
# P6 — careless Python callers get a RequestError before anything runs
# --------------------------------------------------------------------------------------

P6_BUILDERS: dict[str, Callable[[], aexec.Candidate]] = {
    "policy-a-dict": lambda: aexec.Candidate("run_entry", "snippet", code="1", policy={"timeout_s": 5}),  # type: ignore[arg-type]
    "policy-none": lambda: aexec.Candidate("run_entry", "snippet", code="1", policy=None),  # type: ignore[arg-type]
    "artifact_shape-misspelled": lambda: aexec.Candidate("run_entry", "snipet", code="1"),  # type: ignore[arg-type]
    "request_type-wrong-case": lambda: aexec.Candidate("Run_Entry", "snippet", code="1"),  # type: ignore[arg-type]
    "code-an-int": lambda: aexec.Candidate("run_entry", "snippet", code=5),  # type: ignore[arg-type]
    "code-bytes": lambda: aexec.Candidate("run_entry", "snippet", code=b"print(1)"),  # type: ignore[arg-type]
    "command-a-string": lambda: aexec.Candidate("run_entry", "command", command="ls -l"),  # type: ignore[arg-type]
    "command-with-an-int": lambda: aexec.Candidate("run_entry", "command", command=["echo", 1]),  # type: ignore[list-item]
    "tests-a-string": lambda: aexec.Candidate(
        "run_suite",
        "test_subset",
        repo=str(EXAMPLES / "shop"),
        tests="tests/test_cart.py",  # type: ignore[arg-type]
    ),
    "repo-an-int": lambda: aexec.Candidate("run_suite", "test_subset", repo=3, tests=[]),  # type: ignore[arg-type]
    "id-a-list": lambda: aexec.Candidate("run_entry", "snippet", code="1", id=[1]),  # type: ignore[arg-type]
    "id-a-float": lambda: aexec.Candidate("run_entry", "snippet", code="1", id=1.5),  # type: ignore[arg-type]
    "python-an-int": lambda: aexec.Candidate("run_entry", "snippet", code="1", python=3),  # type: ignore[arg-type]
    "timeout_s-inf": lambda: aexec.Candidate(
        "run_entry", "snippet", code="1", policy=aexec.Policy(timeout_s=float("inf"))
    ),
    "timeout_s-nan": lambda: aexec.Candidate(
        "run_entry", "snippet", code="1", policy=aexec.Policy(timeout_s=float("nan"))
    ),
    "timeout_s-1e9": lambda: aexec.Candidate(
        "run_entry", "snippet", code="1", policy=aexec.Policy(timeout_s=1e9)
    ),
    "timeout_s-zero": lambda: aexec.Candidate(
        "run_entry", "snippet", code="1", policy=aexec.Policy(timeout_s=0)
    ),
    "timeout_s-bool": lambda: aexec.Candidate(
        "run_entry", "snippet", code="1", policy=aexec.Policy(timeout_s=True)
    ),
    "timeout_s-string": lambda: aexec.Candidate(
        "run_entry", "snippet", code="1", policy=aexec.Policy(timeout_s="5")
    ),  # type: ignore[arg-type]
    "ram_mib-fraction": lambda: aexec.Candidate(
        "run_entry", "snippet", code="1", policy=aexec.Policy(ram_mib=1.5)
    ),  # type: ignore[arg-type]
    "ram_mib-below-16": lambda: aexec.Candidate(
        "run_entry", "snippet", code="1", policy=aexec.Policy(ram_mib=8)
    ),
    "ram_mib-above-1048576": lambda: aexec.Candidate(
        "run_entry", "snippet", code="1", policy=aexec.Policy(ram_mib=1 << 40)
    ),
    "cpu_cores-4096": lambda: aexec.Candidate(
        "run_entry", "snippet", code="1", policy=aexec.Policy(cpu_cores=4096)
    ),
    "cpu_cores-nan": lambda: aexec.Candidate(
        "run_entry", "snippet", code="1", policy=aexec.Policy(cpu_cores=float("nan"))
    ),
    "lone-surrogate-in-code": lambda: aexec.Candidate("run_entry", "snippet", code="x = '\ud800'"),
    "repo-missing": lambda: aexec.Candidate("run_suite", "test_subset", repo="/no/such/repo", tests=[]),
}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", [pytest.param(k, id=f"P6-{k}") for k in P6_BUILDERS])
async def test_careless_candidate_raises_request_error_before_anything_runs(kind: str) -> None:
    """P6: a malformed `Candidate` (a dict for ``policy``, a misspelled
    ``artifact_shape``, a wrong type, a bound exceeded) raises `aexec.RequestError` with a
    one-line message — at construction, or in ``observe_many`` before anything runs (the
    supervisor refuses every run) — never attrs' ValueError or an ``error`` observation."""
    # either statement may raise: construction or the call (noqa: both are the property)
    with pytest.raises(aexec.RequestError) as caught:  # noqa: PT012
        candidate = P6_BUILDERS[kind]()
        await aexec.observe_many([candidate], supervisor=RefusingSupervisor())
    message = str(caught.value)
    assert message and "\n" not in message, message


@pytest.mark.anyio
async def test_a_bad_candidate_in_a_batch_is_named_by_its_index() -> None:
    """P6: in a batch, the malformed candidate is named by its index and nothing of the
    batch runs."""
    good_one = aexec.Candidate("run_entry", "snippet", code="print(1)")
    # (a bad policy value is refused earlier, when the Policy is made)
    bad_one = aexec.Candidate("run_suite", "test_subset", repo="/nonexistent/repo", tests=["t.py"])
    with pytest.raises(aexec.RequestError, match=r"\b1\b") as caught:
        await aexec.observe_many([good_one, bad_one, good_one], supervisor=RefusingSupervisor())
    assert "\n" not in str(caught.value)


class FaultySupervisor:
    """Runs every invocation with the real supervisor except one, where aexec itself
    fails (the raised exception stands for a bug or an environment fault)."""

    def __init__(self, poison: str, exc: BaseException) -> None:
        self.poison, self.exc = poison, exc
        self._real = aexec.LocalSupervisor()

    async def execute(self, invocation: aexec.Invocation) -> aexec.RawRun:
        # the driver's spec (the last argument) names the snippet file the run executes
        poisoned = False
        with contextlib.suppress(OSError, ValueError, KeyError):
            spec = json.loads(await anyio.Path(invocation.argv[-1]).read_text())
            poisoned = self.poison in await anyio.Path(spec["snippet"]).read_text()
        if poisoned:
            raise self.exc
        return await self._real.execute(invocation)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(RuntimeError("boom"), id="P2-internal-error"),
        pytest.param(OSError(28, "No space left on device"), id="P2-environment-fault"),
        pytest.param(
            RuntimeError("first line\nsecond line\n" + "x = 1\n" * 100), id="P2-multiline-internal-error"
        ),
    ],
)
async def test_an_internal_fault_is_that_candidates_own_one_line_error(exc: BaseException) -> None:
    """P2: when aexec itself fails on one candidate, that candidate's observation is
    ``verdict: error`` with a one-line reason (no traceback, no locals), and the others
    are observed as usual, in order."""
    poison = f"poison-{uuid.uuid4().hex}"
    cands = [
        aexec.Candidate("run_entry", "snippet", code="print(1)", id="a"),
        aexec.Candidate("run_entry", "snippet", code=f"print({poison!r})", id="bad"),
        aexec.Candidate("run_entry", "snippet", code="print(3)", id="c"),
    ]
    got = await aexec.observe_many(cands, supervisor=FaultySupervisor(poison, exc))
    assert [o.id for o in got] == ["a", "bad", "c"]
    assert [o.verdict for o in got][0::2] == ["empty_success", "empty_success"]
    assert got[1].verdict == "error"
    assert got[1].error and "\n" not in got[1].error.strip() and "Traceback" not in got[1].error, got[1].error


# --------------------------------------------------------------------------------------
# Friendly to callers (goal 6) and the documented rules (goal 1)
# --------------------------------------------------------------------------------------


def test_the_contract_lists_the_bounds() -> None:
    """P1 documented: docs/contract.md states the declared bounds of every numeric
    policy value that the reader enforces."""
    text = (EXAMPLES.parent / "docs" / "contract.md").read_text()
    for needle in ("3600", "1048576", "16", "cpu_cores", "exit"):
        assert needle in text, needle
    assert re.search(r"cores", text)


def test_a_long_run_prints_progress_on_a_non_terminal_stderr(tmp_path: Path) -> None:
    """P0: a run longer than a few seconds with stderr not on a terminal prints a
    one-line progress on stderr before it ends."""
    cases = tmp_path / "cases.jsonl"
    rows = [good("quick")] + [
        {**good(f"s{i}", f"import time\ntime.sleep(2)\nprint({i})"), "policy": {"timeout_s": 30}}
        for i in range(3)
    ]
    cases.write_bytes(b"".join(jline(r) for r in rows))
    err = tmp_path / "err.txt"
    # A progress line every second instead of every 10 s: runs of 3 x 2 s show it.
    command = aexec_with("aexec._cli", "PROGRESS_EVERY_S", 1.0)
    with open(err, "wb") as e:
        proc = subprocess.Popen(
            [*command, "observe", str(cases), "-o", str(tmp_path / "obs.jsonl"), "--no-cache", "--jobs", "1"],
            stderr=e,
        )
        try:
            seen: float | None = None
            progress = re.compile(r"\d+\s*/\s*\d+|\d+ of \d+|\bobserved\b|progress", re.I)
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                # a progress line (a count), not just any log line a loaded machine provokes
                if any(progress.search(line) for line in err.read_text().splitlines()):
                    seen = time.monotonic()
                    break
                time.sleep(0.2)
            proc.wait(timeout=120)
            ended = time.monotonic()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # seen well before the end: the final summary ("observed 4 requests in ...") is not progress
    assert seen is not None and ended - seen > 2.0, "no progress line on stderr until the end"
    first = err.read_text().splitlines()[0]
    assert "Traceback" not in first
