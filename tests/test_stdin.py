"""A run's standard input, files beside its source and files read back after it
(``stdin``, ``files``, ``fetch_files``): real runs, warm (fork server) and cold."""

from __future__ import annotations

import base64
import sys
import time

import pytest

import aexec
from aexec import Candidate, Options, RequestError, observe, observe_many

from .test_forkserver import served_pids

pytestmark = pytest.mark.anyio

SUM = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


async def test_stdin_reaches_the_snippet_warm_and_cold() -> None:
    cands = [Candidate("run_entry", "snippet", code=SUM, stdin=f"{n} 2\n3\n") for n in (1, 10)]
    async with aexec.observer() as obs:
        warm = await obs.observe_many(cands)
        assert served_pids(), "the warm runs were forked by a fork server"
    cold = await observe_many(cands, options=Options(forkserver=False))
    for runs in (warm, cold):
        assert [o.stdout for o in runs] == ["6\n", "15\n"], [o.stderr for o in runs]
        assert all(o.failure is None for o in runs)


async def test_a_snippet_without_stdin_still_reads_end_of_file() -> None:
    obs = await observe(Candidate("run_entry", "snippet", code="import sys\nprint(repr(sys.stdin.read()))\n"))
    assert obs.stdout == "''\n"


async def test_a_program_that_never_reads_its_large_stdin_finishes() -> None:
    big = "7 " * (512 * 1024)  # 1 MiB
    start = time.monotonic()
    obs = await observe(Candidate("run_entry", "snippet", code="print('done')\n", stdin=big))
    assert obs.failure is None and obs.stdout == "done\n" and not obs.timed_out
    assert time.monotonic() - start < 30
    counted = await observe(
        Candidate("run_entry", "snippet", code="import sys\nprint(len(sys.stdin.buffer.read()))\n", stdin=big)
    )
    assert counted.stdout == f"{len(big)}\n"


async def test_files_in_and_fetch_files_out() -> None:
    code = (
        "import os\n"
        "data = open('data/in.txt').read()\n"
        "open('out.txt', 'w').write(data.upper())\n"
        "os.symlink('/etc/passwd', 'link.txt')\n"
    )
    obs = await observe(
        Candidate(
            "run_entry",
            "snippet",
            code=code,
            files={"data/in.txt": b64("hello\n")},
            fetch_files=["out.txt", "missing.txt", "link.txt", "data/in.txt"],
        )
    )
    assert obs.failure is None, obs.stderr
    assert obs.files_out == {
        "out.txt": b64("HELLO\n"),
        "missing.txt": None,
        "link.txt": None,  # never read through a link the candidate made
        "data/in.txt": b64("hello\n"),
    }


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"files": {"../x": b64("a")}}, "files: path '../x' contains '..'"),
        ({"files": {"/etc/x": b64("a")}}, "files: path '/etc/x' is absolute"),
        ({"files": {"a//b": b64("a")}}, "files: path 'a//b' is not normalized"),
        ({"files": {"a.txt": "not base64!"}}, "files['a.txt'] is not valid base64"),
        ({"files": {".aexec/spec.json": b64("a")}}, "is aexec's own"),
        ({"fetch_files": ["a/../../b"]}, "fetch_files: path 'a/../../b' contains '..'"),
        ({"stdin": "x" * (9 << 20)}, "stdin is 9437184 bytes, over the cap"),
    ],
)
def test_a_bad_input_is_a_one_line_request_error(fields: dict[str, object], named: str) -> None:
    with pytest.raises(RequestError) as e:
        Candidate("run_entry", "snippet", code="pass", **fields)  # type: ignore[arg-type]
    assert named in str(e.value) and "\n" not in str(e.value)


def test_inputs_are_for_a_run_entry() -> None:
    with pytest.raises(RequestError, match="for a run_entry"):
        Candidate("build_check", "snippet", code="pass", stdin="1")


async def test_the_cache_key_and_artifact_version_change_with_the_inputs() -> None:
    base = Candidate("run_entry", "snippet", code=SUM)
    variants = [
        base,
        Candidate("run_entry", "snippet", code=SUM, stdin="1 2"),
        Candidate("run_entry", "snippet", code=SUM, stdin="1 3"),
        Candidate("run_entry", "snippet", code=SUM, stdin="1 2", files={"a": b64("x")}),
        Candidate("run_entry", "snippet", code=SUM, stdin="1 2", fetch_files=["a"]),
    ]
    runs = await observe_many(variants)
    assert len({o.cache_key for o in runs}) == len(variants)
    assert len({o.artifact_version for o in runs}) == len(variants)
    assert [o.stdout for o in runs[:3]] == ["0\n", "3\n", "4\n"]


async def test_stdin_reaches_a_command_and_its_children() -> None:
    argv = [
        sys.executable,
        "-c",
        "import subprocess, sys; subprocess.run([sys.executable, '-c', 'print(input()[::-1])'])",
    ]
    obs = await observe(Candidate("run_entry", "command", command=argv, stdin="abc\n"))
    assert (obs.failure, obs.stdout) == (None, "cba\n"), obs.stderr
