"""Property-based fuzzing (issue 19, goal 5) of the JSONL reader and of the records'
round trip through cattrs.

* ``read_cases`` on files written from arbitrary bytes, arbitrary lines and arbitrary
  JSON values either returns candidates (one per non-blank line, each within the
  declared policy bounds) or raises `aexec.RequestError` with a one-line message naming
  a line — never another exception.
* ``ExecutionObservation`` → ``unstructure`` → JSON → ``structure`` is the identity, and
  ``dumps`` is one ``\\n``-free line of valid UTF-8; a `Candidate` unstructured to JSON
  reads back as the same candidate.

Example counts stay modest (≤ 200 per test, no deadline) so the default suite stays fast.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aexec
from aexec._cli import read_cases
from aexec._serde import to_json_data
from aexec._types import (
    ARTIFACT_SHAPES,
    FAILURE_ORDER,
    MAX_RAM_MIB,
    MAX_TIMEOUT_S,
    MIN_RAM_MIB,
    REQUEST_TYPES,
)

from ..conftest import EXAMPLES

NCORES = os.cpu_count() or 1
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# --------------------------------------------------------------------------------------
# The reader
# --------------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()  # NaN and ±inf too: json.dumps writes them as NaN/Infinity
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
FIELD_NAMES = [
    "id",
    "request_type",
    "artifact_shape",
    "code",
    "command",
    "repo",
    "patch",
    "tests",
    "python",
    "policy",
]
SHOP = str(EXAMPLES / "shop")


def field_values(name: str) -> st.SearchStrategy[Any]:
    """Values for one request field: mostly plausible, sometimes anything at all."""
    plausible: dict[str, st.SearchStrategy[Any]] = {
        "id": st.text(max_size=10) | st.integers(),
        "request_type": st.sampled_from(REQUEST_TYPES),
        "artifact_shape": st.sampled_from(ARTIFACT_SHAPES),
        "code": st.text(max_size=30),
        "command": st.lists(st.text(min_size=1, max_size=8), max_size=3),
        "repo": st.sampled_from([SHOP, "no/such/dir", "", ".", "/", "/dev/null"]),
        "patch": st.text(max_size=30),
        "tests": st.lists(st.sampled_from(["tests/test_cart.py", "tests", "nope.py", "::x", ""]), max_size=3),
        "python": st.sampled_from(["/bin/true", "/no/python", "/usr/bin", "python3"]),
        "policy": st.dictionaries(
            st.sampled_from(["timeout_s", "ram_mib", "cpu_cores", "bogus"]),
            st.integers(min_value=-5, max_value=2**21) | st.floats() | st.booleans() | st.text(max_size=3),
            max_size=3,
        ),
    }
    return plausible[name] | json_values


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(FIELD_NAMES), unique=True, max_size=len(FIELD_NAMES)))
    if draw(st.booleans()):
        names = list(dict.fromkeys(["request_type", "artifact_shape", *names]))
    return {n: draw(field_values(n)) for n in names}


def check_read(path: Path, nonblank: int | None) -> None:
    """The reader's contract on one file: candidates within bounds, or one RequestError line."""
    try:
        cands = read_cases(str(path))
    except aexec.RequestError as e:
        message = str(e)
        assert message and "\n" not in message and "\r" not in message, repr(message)
        assert str(path) in message, message
        return
    for c in cands:
        assert isinstance(c, aexec.Candidate)
        p = c.policy
        if p.timeout_s is not None:
            assert not isinstance(p.timeout_s, bool) and 0 < p.timeout_s <= MAX_TIMEOUT_S, p
        if p.ram_mib is not None:
            assert type(p.ram_mib) is int and MIN_RAM_MIB <= p.ram_mib <= MAX_RAM_MIB, p
        if p.cpu_cores is not None:
            assert not isinstance(p.cpu_cores, bool) and 0 < p.cpu_cores <= NCORES, p
        for text in (c.code, c.repo, c.patch, c.python, *(c.command or ()), *(c.tests or ())):
            if text is not None:
                text.encode("utf-8")  # nothing the boundary cannot write down
    if nonblank is not None:
        assert len(cands) == nonblank


@FUZZ
@given(
    data=st.binary(max_size=400)
    | st.tuples(st.binary(max_size=40), st.integers(1, 200_000), st.sampled_from([b"[", b'{"a":'])).map(
        lambda t: t[0] + t[2] * t[1]
    )
)
def test_reader_on_arbitrary_bytes(tmp_path: Path, data: bytes) -> None:
    """Arbitrary bytes: candidates or one RequestError line, never another exception."""
    path = tmp_path / "cases.jsonl"
    path.write_bytes(data)
    check_read(path, None)


@FUZZ
@given(lines=st.lists(st.text(max_size=60), max_size=8))
def test_reader_on_arbitrary_lines(tmp_path: Path, lines: list[str]) -> None:
    """Arbitrary text lines (any code point but lone surrogates, U+2028 and friends
    included): candidates or one RequestError line."""
    path = tmp_path / "cases.jsonl"
    path.write_bytes("\n".join(lines).encode("utf-8"))
    check_read(path, None)


@FUZZ
@given(values=st.lists(json_values | requests(), min_size=1, max_size=6), crlf=st.booleans())
def test_reader_on_arbitrary_json_values(tmp_path: Path, values: list[Any], crlf: bool) -> None:
    """One JSON value per line (objects shaped like requests with arbitrary field values,
    and anything else): candidates — one per line — or one RequestError line."""
    end = b"\r\n" if crlf else b"\n"
    path = tmp_path / "cases.jsonl"
    path.write_bytes(b"".join(json.dumps(v).encode("ascii") + end for v in values))
    check_read(path, len(values))


GOOD = {"request_type": "run_entry", "artifact_shape": "snippet", "code": "print(1)"}
BAD_LINES = st.sampled_from(
    [
        b"{oops",
        b"[]",
        b'{"request_type": "run_entry"}',
        b'{"request_type": "run_entry", "artifact_shape": "snippet", "code": 1}',
        b'{"request_type": "run_entry", "artifact_shape": "snippet", "code": "1", "policy": {"timeout_s": NaN}}',
        b'{"request_type": "run_entry", "artifact_shape": "snippet", "code": "\xff"}',
        b"[" * 50_000,
    ]
)


@FUZZ
@given(
    before=st.lists(st.sampled_from(["good", "blank", "ws", "u2028", "u0085", "crlf"]), max_size=6),
    bad=BAD_LINES,
    after=st.integers(min_value=0, max_value=3),
)
def test_reader_names_the_line_of_the_first_bad_request(
    tmp_path: Path, before: list[str], bad: bytes, after: int
) -> None:
    """With good, blank, whitespace-only, CRLF-ended lines and valid lines holding a raw
    U+2028/U+0085 before it, the one bad line is the one the message names (line numbers
    count ``\\n`` only)."""
    chunks = []
    for kind in before:
        if kind == "good":
            chunks.append(json.dumps(GOOD).encode() + b"\n")
        elif kind == "blank":
            chunks.append(b"\n")
        elif kind == "ws":
            chunks.append(b" \t \n")
        elif kind == "crlf":
            chunks.append(json.dumps(GOOD).encode() + b"\r\n")
        else:
            sep = "\u2028" if kind == "u2028" else "\u0085"
            chunks.append(json.dumps({**GOOD, "code": f"x = '{sep}'"}, ensure_ascii=False).encode() + b"\n")
    chunks.append(bad + b"\n")
    chunks.extend(json.dumps(GOOD).encode() + b"\n" for _ in range(after))
    path = tmp_path / "cases.jsonl"
    path.write_bytes(b"".join(chunks))
    with pytest.raises(aexec.RequestError) as caught:
        read_cases(str(path))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{len(before) + 1}:"), message


# --------------------------------------------------------------------------------------
# Records through cattrs
# --------------------------------------------------------------------------------------

text = st.text(max_size=40)
finite = st.floats(allow_nan=False, allow_infinity=False, min_value=0, max_value=1e6)
small_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=8,
)
failures = st.builds(
    aexec.Failure,
    failure_class=st.sampled_from(FAILURE_ORDER),
    location=text,
    message=text,
    exit_code=st.none() | st.integers(-255, 255),
    duration=finite,
)
environments = st.builds(
    aexec.Environment,
    toolchain=text,
    toolchain_version=text,
    cpu_cap_cores=st.floats(min_value=0.01, max_value=64),
    ram_cap_mib=st.integers(MIN_RAM_MIB, MAX_RAM_MIB),
    timeout_s=st.floats(min_value=0.01, max_value=MAX_TIMEOUT_S),
    fs_boundary=st.builds(
        aexec.FsBoundary,
        scratch_root=text,
        repo_ro=st.booleans(),
        repo_view=st.sampled_from(["copy", "none"]),
    ),
    network=text,
    stdout_cap_kib=st.integers(0, 1 << 20),
    stderr_cap_kib=st.integers(0, 1 << 20),
    enforced=st.dictionaries(text, text, max_size=4),
    disk_cap_mib=st.integers(1, 1 << 20),
    pids_cap=st.integers(1, 1 << 16),
    open_files_cap=st.integers(1, 1 << 16),
)
observations = st.builds(
    aexec.ExecutionObservation,
    id=st.none() | text | st.integers(-(2**63), 2**63),
    action=st.sampled_from(["compile_parse", "targeted_execution", "test_execution", "diagnostic_probe"]),
    verdict=st.sampled_from(["pass", "fail", "empty_success", "tampered", "error"]),
    environment=environments,
    cwd=text,
    artifact_version=text,
    exit_code=st.none() | st.integers(-255, 255),
    duration=finite,
    timed_out=st.booleans(),
    stdout=st.text(max_size=200),
    stderr=st.text(max_size=200),
    exception=st.none() | text,
    changed_state=text,
    test_results=st.lists(
        st.builds(
            aexec.TestResult,
            test=text,
            verdict=st.sampled_from(["passed", "failed", "errored", "skipped"]),
            f2p=st.booleans(),
            p2p=st.booleans(),
        ),
        max_size=4,
    ).map(tuple),
    resource_usage=st.builds(
        aexec.ResourceUsage,
        peak_cpu=st.none() | st.floats(0, 1),
        peak_ram_mib=st.none() | st.integers(0, 1 << 20),
    ),
    failure=st.none() | failures,
    flags=st.builds(
        aexec.Flags,
        empty_success=st.booleans(),
        tampered=st.booleans(),
        nondeterministic=st.booleans(),
        parse_uncertain=st.booleans(),
        reverified=st.booleans(),
        retried=st.booleans(),
    ),
    request_type=st.sampled_from(REQUEST_TYPES),
    probe_gated=st.booleans(),
    signal=st.none() | st.sampled_from(["SIGKILL", "SIGTERM", "SIGXCPU"]),
    failures=st.lists(failures, max_size=3).map(tuple),
    probe_evidence=st.lists(st.dictionaries(st.text(max_size=6), small_json, max_size=3), max_size=3).map(
        tuple
    ),
    cache_hit=st.booleans(),
    cache_key=text,
    error=st.none() | text,
    aexec_version=text,
)


@FUZZ
@given(obs=observations)
def test_observations_round_trip_through_cattrs_and_json(obs: aexec.ExecutionObservation) -> None:
    """``structure(json.loads(dumps(o))) == o``; ``dumps`` is one line (no ``\\n``) of
    valid UTF-8 whose JSON equals ``unstructure(o)``."""
    line = aexec.dumps(obs)
    assert "\n" not in line
    line.encode("utf-8")
    data = json.loads(line)
    assert data == aexec.unstructure(obs)
    assert aexec.structure(data) == obs
    assert aexec.structure(aexec.unstructure(obs)) == obs


policies = st.builds(
    aexec.Policy,
    timeout_s=st.none() | st.floats(min_value=0.001, max_value=MAX_TIMEOUT_S),
    ram_mib=st.none() | st.integers(MIN_RAM_MIB, MAX_RAM_MIB),
    cpu_cores=st.none() | st.floats(min_value=0.01, max_value=float(NCORES)),
)


#: A path or argv element: valid Unicode without NUL (a NUL there is refused up front).
path_text = st.text(
    alphabet=st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=10
)


@st.composite
def candidates(draw: st.DrawFn) -> aexec.Candidate:
    shape = draw(st.sampled_from(ARTIFACT_SHAPES))
    return aexec.Candidate(
        request_type=draw(st.sampled_from(REQUEST_TYPES)),
        artifact_shape=shape,
        id=draw(st.none() | text | st.integers(-(2**53), 2**53)),
        code=draw(st.none() | text),
        command=draw(st.none() | st.lists(path_text.filter(bool), min_size=1, max_size=3).map(tuple)),
        repo=draw(st.none() | st.just(SHOP)),
        patch=draw(st.none() | text),
        tests=draw(st.none() | st.lists(st.text(max_size=10), max_size=3).map(tuple)),
        python=draw(st.none() | path_text),
        policy=draw(policies),
    )


@FUZZ
@given(cand=candidates())
def test_candidates_round_trip_through_json(cand: aexec.Candidate) -> None:
    """A `Candidate` unstructured to JSON and read back with ``candidate_from_json`` is the
    same candidate, with no field ignored."""
    data = json.loads(json.dumps(to_json_data(cand), ensure_ascii=False))
    back, ignored = aexec.candidate_from_json(data)
    assert ignored == []
    assert back == cand


@FUZZ
@given(
    cand=candidates(),
    junk=st.dictionaries(st.sampled_from(["policy", "tests", "command", "id"]), json_values, min_size=1),
)
def test_candidate_from_json_never_raises_anything_but_request_error(
    cand: aexec.Candidate, junk: dict[str, Any]
) -> None:
    """Any value in any field: a `Candidate` or one-line `RequestError`, never attrs',
    cattrs' or Python's own exceptions."""
    data = {**json.loads(json.dumps(to_json_data(cand))), **junk}
    try:
        back, _ = aexec.candidate_from_json(data)
    except aexec.RequestError as e:
        message = str(e)
        assert "\n" not in message
        return
    assert attrs.has(type(back))
    for name in ("timeout_s", "cpu_cores"):
        value = getattr(back.policy, name)
        assert value is None or (math.isfinite(value) and value > 0), back.policy
