"""`Options.recheck_s`: how long a recheck of what runs rest on holds for later calls.

Each call on an `Observer` rechecks that the interpreter (its distributions, its editable
sources) and a warm fork server's imported files are as they were; ``aexec serve``, whose
every request is a call, holds one recheck for ``recheck_s`` seconds instead (issue 42).
The case: an interpreter whose ``.pth`` puts a source directory outside its install on
``sys.path`` and imports a module from it at start-up, so the fork server holds that
module as it was when the server started, and a cold run reads the file. An edit is
seen by the calls that begin ``recheck_s`` after it; within the window it is not (the
window is in effect); with 0 (the library's default) the very next call sees it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from aexec import Candidate, Observer, Options
from aexec._pipeline.cache import Rechecked

pytestmark = pytest.mark.anyio

CODE = "import aexec_recheck_value\nprint(aexec_recheck_value.VALUE)\n"


@pytest.fixture
def anyio_backend() -> str:
    """About what the observer keeps between calls, not the backend: one."""
    return "asyncio"


def venv_importing_at_start(tmp_path: Path) -> tuple[str, Path]:
    """A venv whose ``.pth`` adds a source directory and imports its module at start-up;
    its python and the module's file (``VALUE = 1``)."""
    where = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    src = tmp_path / "src"
    src.mkdir()
    module = src / "aexec_recheck_value.py"
    module.write_text("VALUE = 1\n")
    [site] = where.glob("lib/python*/site-packages")
    (site / "_aexec_recheck.pth").write_text(f"{src}\nimport aexec_recheck_value\n")
    python = str(where / "bin" / "python")
    plain = subprocess.run([python, "-c", CODE], capture_output=True, text=True, check=True)
    assert plain.stdout == "1\n"
    return python, module


async def test_a_held_recheck_is_shared_then_made_again() -> None:
    checks: list[int] = []

    async def check() -> int:
        checks.append(len(checks))
        return len(checks)

    never = Rechecked[int](0.0)  # the library's default: every call rechecks
    assert [await never.run("k", check) for _ in range(3)] == [1, 2, 3]
    assert never.fresh("k") is None

    held = Rechecked[int](0.5)
    assert [await held.run("k", check) for _ in range(3)] == [4, 4, 4]
    assert await held.run("other", check) == 5  # per key
    await anyio.sleep(0.6)
    assert held.fresh("k") is None
    assert await held.run("k", check) == 6


async def test_an_edit_is_seen_once_the_recheck_it_followed_no_longer_holds(tmp_path: Path) -> None:
    python, module = venv_importing_at_start(tmp_path)
    cand = Candidate("run_entry", "snippet", code=CODE, python=python)

    async def printed(observer: Observer) -> str:
        [obs] = await observer.observe_many([cand])
        assert obs.verdict == "empty_success", (obs.verdict, obs.stderr)
        return obs.stdout

    async with Observer(Options(recheck_s=3600)) as held, Observer(Options(recheck_s=0.5)) as short:
        assert await printed(held) == await printed(short) == "1\n"
        [server] = held.warm._servers.values()
        module.write_text("VALUE = 22\n")  # a longer file: no stale bytecode either
        # within the window: the server that imported the old module still serves
        assert await printed(held) == "1\n"
        assert held.warm._servers[next(iter(held.warm._servers))] is server and server.alive
        await anyio.sleep(0.6)
        assert await printed(short) == "22\n"  # past it: rechecked, the server replaced
    async with Observer(Options()) as every:  # 0: the next call sees an edit at once
        assert await printed(every) == "22\n"
        module.write_text("VALUE = 333\n")
        assert await printed(every) == "333\n"


async def test_editable_sources_in_the_cache_key_are_held_as_long(tmp_path: Path) -> None:
    """The key rests on the editable sources as the held recheck saw them: within the
    window an edited source is a cache hit; past it, a miss observed afresh."""
    python, module = venv_importing_at_start(tmp_path)
    other = module.parent / "aexec_recheck_other.py"
    other.write_text("X = 1\n")
    cand = Candidate(
        "run_entry", "snippet", code="import aexec_recheck_other as o\nprint(o.X)\n", python=python
    )
    options = Options(cache_dir=str(tmp_path / "cache"), recheck_s=1.0, forkserver=False)
    async with Observer(options) as observer:
        [first] = await observer.observe_many([cand])
        assert (first.cache_hit, first.stdout) == (False, "1\n"), first.stderr
        other.write_text("X = 22\n")
        [held] = await observer.observe_many([cand])
        assert (held.cache_hit, held.stdout) == (True, "1\n")
        await anyio.sleep(1.1)
        [again] = await observer.observe_many([cand])
        assert (again.cache_hit, again.stdout) == (False, "22\n")


async def served_after_an_edit(python: str, module: Path, recheck_s: float) -> str:
    """What ``/run_code`` prints of the module's value after an edit, on a server with
    ``recheck_s`` that printed it once before."""
    from aexec._serve.server import ServeConfig, serve

    module.write_text("VALUE = 1\n")
    stop, ready, url = anyio.Event(), anyio.Event(), []
    config = ServeConfig(port=0, jobs=2, queue=8, grace=1.0, python=python, recheck_s=recheck_s)

    def on_ready(u: str) -> None:
        url.append(u)
        ready.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve(config, Options(), on_ready=on_ready, stop=stop, signals=False))
        with anyio.fail_after(30):
            await ready.wait()
        try:
            async with httpx.AsyncClient(base_url=url[0], timeout=60) as client:

                async def run() -> str:
                    body = {"code": CODE, "language": "python"}
                    r = await client.post("/run_code", content=json.dumps(body))
                    assert r.json()["status"] == "Success", r.json()
                    return str(r.json()["run_result"]["stdout"])

                assert await run() == "1\n"
                module.write_text("VALUE = 22\n")
                return await run()
        finally:
            stop.set()


async def test_serve_holds_a_recheck_for_its_recheck_s(tmp_path: Path) -> None:
    pytest.importorskip("hypercorn")
    from aexec._serve.server import RECHECK_S, ServeConfig

    assert ServeConfig().recheck_s == RECHECK_S > 0
    python, module = venv_importing_at_start(tmp_path)
    assert await served_after_an_edit(python, module, 3600.0) == "1\n"  # held
    assert await served_after_an_edit(python, module, 0.0) == "22\n"  # every request rechecks
