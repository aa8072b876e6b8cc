"""Environments aexec builds (issue 30): a declared ``environment`` made into a cached venv
with uv, once per key, its failures the environment's and never the candidate's.

Real uv, real interpreters (pyenv's and the system's), real runs. The packages are tiny
wheels written here and served from a local HTTP "find-links" page; pytest itself comes
from the package index, resolved as of a fixed date.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from aexec import Candidate, observe_many
from aexec._environments.build import ensure, find_interpreters
from aexec._environments.spec import EnvBroken, EnvSpec, pick_interpreter
from aexec._options import Options

from .conftest import MakeRepo, diff, slack

pytestmark = pytest.mark.anyio

SYSTEM = f"{sys.version_info.major}.{sys.version_info.minor}"
AS_OF = "2025-01-01T00:00:00Z"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the builder is blocking code in a worker thread: one backend is enough


def wheel(
    where: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()
) -> None:
    """A pure-Python wheel, written directly (no build backend)."""
    info = f"{name}-{version}.dist-info"
    entries = dict(files)
    entries[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    entries[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = []
    for path, text in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    entries[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(where / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for path, text in entries.items():
            z.writestr(path, text)


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[subprocess.Popen[bytes]]:
    """Tiny wheels on a local HTTP find-links page (``UV_FIND_LINKS``); yields the server."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel(wheels, "aexec_tinydep", "1.0", {"aexec_tinydep/__init__.py": "V = '1.0'\n"})
    wheel(wheels, "aexec_tinydep", "2.0", {"aexec_tinydep/__init__.py": "V = '2.0'\n"})
    # Provides the module `proj` too: the base's code, installed; the scratch copy must win.
    wheel(wheels, "aexec_shadow", "1.0", {"proj/__init__.py": "def f():\n    return 'installed'\n"})
    port_file = tmp_path / "port"
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import http.server, functools, sys\n"
            "h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])\n"
            "s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), h)\n"
            "open(sys.argv[2], 'w').write(str(s.server_address[1]))\n"
            "s.serve_forever()\n",
            str(wheels),
            str(port_file),
        ],
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        if port_file.exists() and port_file.read_text():
            break
        time.sleep(0.05)
    monkeypatch.setenv("UV_FIND_LINKS", f"http://127.0.0.1:{port_file.read_text()}/")
    yield server
    server.kill()
    server.wait()


PROJ = {
    "pyproject.toml": '[project]\nname = "proj"\nversion = "0"\ndependencies = ["aexec_tinydep<2"]\n',
    "proj/__init__.py": "def f():\n    return 1\n",
    "test_p.py": """\
        import os
        import aexec_tinydep
        import proj

        def test_f():
            assert aexec_tinydep.V == "1.0"  # the repo's declared dependency, resolved
            assert "site-packages" not in os.path.abspath(proj.__file__)  # the scratch copy
            assert proj.f() == 2
        """,
}


def spec(**kw: object) -> EnvSpec:
    return EnvSpec(**{"python": SYSTEM, "exclude_newer": AS_OF, **kw})  # type: ignore[arg-type]


def attempts(root: Path, step: str) -> int:
    """How many times uv ran ``step`` (``venv``, ``pip compile``) under ``root``."""
    return sum(f.read_text().count(f"$ uv {step} ") for f in (root / "logs").glob("*.log"))


def test_a_second_use_is_a_cache_hit(index: object, make_repo: MakeRepo, tmp_path: Path) -> None:
    repo, root = make_repo(PROJ), tmp_path / "envs"
    first = ensure(spec(), str(repo), str(root))
    start = time.monotonic()
    again = ensure(spec(), str(repo), str(root))
    warm = time.monotonic() - start
    assert not first.cached and again.cached and warm < slack(1.0)
    assert (again.key, again.lock_hash, again.python) == (first.key, first.lock_hash, first.python)
    assert attempts(root, "venv") == 1
    lock = (Path(first.path) / "aexec-lock.txt").read_text()
    assert "aexec-tinydep==1.0" in lock and "pytest==" in lock
    # The repo itself is not installed (install mode "deps"): its dependencies only.
    assert "proj" not in lock.split("==")[0::2]
    # What an extra environment costs: its files are hardlinks into uv's cache.
    # The packages' files are hardlinks into uv's cache; the bytecode compiled at install
    # (as pip does) is the environment's own.
    pycs = sum(p.stat().st_size for p in Path(first.path).rglob("*.pyc"))
    assert 0 < first.unique_bytes - pycs < 2_000_000


def test_concurrent_builds_of_one_key_build_once(index: object, make_repo: MakeRepo, tmp_path: Path) -> None:
    """Three processes and three threads ask at once: one resolution, one build."""
    repo, root = make_repo(PROJ), tmp_path / "envs"
    code = (
        "import sys; from aexec._environments.build import ensure;"
        "from aexec._environments.spec import EnvSpec;"
        f"print(ensure(EnvSpec({SYSTEM!r}, exclude_newer={AS_OF!r}), sys.argv[1], sys.argv[2]).key)"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(repo), str(root)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    keys: list[str] = []
    threads = [
        threading.Thread(target=lambda: keys.append(ensure(spec(), str(repo), str(root)).key))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    keys += [p.communicate()[0].strip() for p in procs]
    assert len(keys) == 6 and len(set(keys)) == 1
    assert attempts(root, "pip compile") == 1 and attempts(root, "venv") == 1


async def test_gold_and_wrong_graded_through_a_built_env_the_patched_code_imported(
    index: object, make_repo: MakeRepo, tmp_path: Path
) -> None:
    """The environment holds an installed `proj` (the base's code) and the repo's
    dependencies; the code under test is each candidate's patched scratch copy."""
    repo, root = make_repo(PROJ), tmp_path / "envs"
    gold = diff("proj/__init__.py", PROJ["proj/__init__.py"], "def f():\n    return 2\n")
    wrong = diff("proj/__init__.py", PROJ["proj/__init__.py"], "def f():\n    return 3\n")
    declared = spec(packages=("aexec_shadow==1.0",))
    cands = [
        Candidate(
            "run_suite", "patch", id=i, repo=str(repo), patch=p, tests=("test_p.py",), environment=declared
        )
        for i, p in (("gold", gold), ("wrong", wrong))
    ]
    got = await observe_many(cands, options=Options(env_dir=str(root)))
    assert [o.verdict for o in got] == ["pass", "fail"], [o.error or o.stdout[-600:] for o in got]
    assert got[1].failure is not None and "assert 3 == 2" in got[1].failure.message
    built = ensure(declared, str(repo), str(root))
    for o in got:
        assert o.environment.toolchain == built.python
        assert (o.environment.environment_key, o.environment.lock_hash) == (built.key, built.lock_hash)
    assert attempts(root, "venv") == 1


async def test_unsupported_python_is_env_broken(make_repo: MakeRepo, tmp_path: Path) -> None:
    repo = make_repo(PROJ)
    cands = [
        Candidate(
            "run_suite", "test_subset", id=v, repo=str(repo), tests=("test_p.py",), environment=EnvSpec(v)
        )
        for v in ("3.99", "2.7")
    ]
    cands.append(
        Candidate(
            "run_suite",
            "test_subset",
            id="conda",
            repo=str(repo),
            tests=("test_p.py",),
            environment=EnvSpec(SYSTEM, system=("conda: gdal",)),
        )
    )
    got = await observe_many(cands, options=Options(env_dir=str(tmp_path / "envs")))
    for o in got:
        assert o.verdict == "error" and o.flags.env_broken and o.env_fault is not None, o
        assert o.env_fault.kind == "unsupported"
    assert got[0].env_fault is not None and "Python 3.99: no such interpreter" in got[0].env_fault.message
    assert got[1].env_fault is not None and "runs on Python 3.6 or later" in got[1].env_fault.message
    assert got[2].env_fault is not None and "conda: gdal" in got[2].env_fault.message
    assert not (tmp_path / "envs" / "envs").exists()  # nothing was built


async def test_a_failing_build_is_env_broken_and_not_tried_again(
    index: object, make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo, root = make_repo(PROJ), tmp_path / "envs"
    declared = spec(packages=("aexec_tinydep==9.9",))  # no such version anywhere
    cand = Candidate("run_suite", "test_subset", repo=str(repo), tests=("test_p.py",), environment=declared)
    first = await observe_many([cand], options=Options(env_dir=str(root)))
    again = await observe_many([cand], options=Options(env_dir=str(root)))
    for o in (*first, *again):
        assert o.verdict == "error" and o.flags.env_broken and o.failure is None
        assert o.env_fault is not None and o.env_fault.kind == "build"
        assert "aexec-tinydep==9.9" in o.env_fault.message  # uv's log tail says why
    assert attempts(root, "pip compile") == 1  # the second candidate did not rebuild it


def test_an_offline_rebuild_from_the_cache_has_the_same_lock_hash(
    index: subprocess.Popen[bytes], make_repo: MakeRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, root = make_repo(PROJ), tmp_path / "envs"
    online = ensure(spec(), str(repo), str(root))
    index.kill()  # the find-links page is gone, and uv may not reach the index either
    index.wait()
    shutil.rmtree(root / "envs")
    shutil.rmtree(root / "resolved")
    monkeypatch.setenv("UV_OFFLINE", "1")
    offline = ensure(spec(), str(repo), str(root))
    assert not offline.cached
    assert (offline.lock_hash, offline.key) == (online.lock_hash, online.key)
    assert attempts(root, "venv") == 2


def test_interpreters_are_found_and_picked() -> None:
    found = find_interpreters()
    assert pick_interpreter(SYSTEM, found) is not None
    assert pick_interpreter("3.9", {"3.9.1": "/a", "3.9.18": "/b", "3.10.0": "/c"}) == "/b"
    assert pick_interpreter("3.1", {"3.10.0": "/c"}) is None
    with pytest.raises(EnvBroken, match=r"unsupported: Python 2\.7"):
        ensure(EnvSpec("2.7"), str(Path(__file__).parent), "/nonexistent-never-written")


def test_an_editable_install_of_the_repo_in_its_requirements_is_not_installed(
    index: object, make_repo: MakeRepo, tmp_path: Path
) -> None:
    """``-e .`` in a requirements file names the repo: the environment never holds it
    (an editable install would point at a checkout, not at the candidate's copy)."""
    repo = make_repo({**PROJ, "requirements-dev.txt": "-e .\naexec_tinydep<2\n"})
    root = tmp_path / "envs"
    built = ensure(spec(requirements=("requirements-dev.txt",), install="none"), str(repo), str(root))
    lock = (Path(built.path) / "aexec-lock.txt").read_text()
    assert "aexec-tinydep==1.0" in lock and "proj" not in lock and "file:" not in lock
    assert not list(Path(built.path).glob("lib/python*/site-packages/*proj*"))
