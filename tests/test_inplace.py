"""Repos that build C extensions in place (issue 30, goal 3): the base's extensions built
once per key, carried into each candidate's scratch copy, built again there (under the
boundary) when a patch touches a compiled source; a base that does not build is
``env_broken`` ``build``, a patch that breaks the build is the candidate's ``compile``.

Real gcc, real setuptools (from the package index, as of a fixed date), real runs. The
repo's ``setup.py`` appends a line to ``built.txt`` each time it builds: the base's
build leaves one line (carried with the artifacts), a rebuild in the copy a second.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import attrs
import pytest

from aexec import Candidate, ExecutionObservation, Policy, observe_many
from aexec._environments.build import ensure
from aexec._environments.inplace import InPlace, ensure_inplace, gc_inplace
from aexec._environments.spec import EnvSpec
from aexec._options import Options

from .conftest import MakeRepo, diff

pytestmark = pytest.mark.anyio

SYSTEM = f"{sys.version_info.major}.{sys.version_info.minor}"
AS_OF = "2025-01-01T00:00:00Z"
SPEED_C = textwrap.dedent(
    """\
    #include <Python.h>
    #include "speed.h"

    static PyObject *value(PyObject *self, PyObject *args) { return PyLong_FromLong(VALUE); }
    static PyMethodDef methods[] = {{"value", value, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
    static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_speed", NULL, -1, methods};
    PyMODINIT_FUNC PyInit__speed(void) { return PyModule_Create(&mod); }
    """
)
CPROJ = {
    "pyproject.toml": '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n',
    "setup.py": """\
        from setuptools import Extension, setup

        with open("built.txt", "a") as f:
            f.write("built\\n")
        setup(
            name="cproj",
            version="0",
            packages=["cproj"],
            ext_modules=[
                Extension("cproj._speed", ["cproj/_speed.c"], include_dirs=["cproj"]),
                Extension("cproj._other", ["cproj/_other.c"]),
            ],
        )
        """,
    "cproj/__init__.py": "from ._speed import value\n",
    "cproj/speed.h": "#define VALUE 21\n",
    "cproj/_speed.c": SPEED_C,
    "cproj/_other.c": SPEED_C.replace('#include "speed.h"', "#define VALUE 0").replace("_speed", "_other"),
    "test_c.py": """\
        import os
        import cproj
        import cproj._speed

        def test_value():
            assert os.path.dirname(os.path.dirname(cproj._speed.__file__)) == os.getcwd()
            assert cproj.value() == 22

        def test_built_twice():  # the base's build (carried), then one in this copy
            with open("built.txt") as f:
                assert len(f.read().split()) == 2

        def test_only_the_patched_extension_relinked():  # the other one is the base's
            import glob

            # build/lib's copy (the in-place one gets whole seconds: distutils' copy_file)
            (other,) = glob.glob("build/lib*/cproj/_other*.so")
            assert os.path.getmtime(other) < os.path.getmtime("built.txt")
        """,
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the builder is blocking code in a worker thread: one backend is enough


def declared() -> EnvSpec:
    return EnvSpec(SYSTEM, install="none", exclude_newer=AS_OF, inplace=True)


def candidate(ident: str, repo: Path, patch: str) -> Candidate:
    return Candidate(
        "run_suite",
        "patch",
        id=ident,
        repo=str(repo),
        patch=patch,
        tests=("test_c.py",),
        environment=declared(),
        policy=Policy(timeout_s=120.0),
    )


def verdicts(obs: ExecutionObservation) -> dict[str, str]:
    return {t.test.split("::")[-1]: t.verdict for t in obs.test_results}


async def test_built_once_carried_and_rebuilt_when_a_patch_touches_a_compiled_source(
    make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo, root = make_repo(CPROJ), tmp_path / "envs"
    cands = [
        # .py only: no rebuild, the base's extension (21) is imported from the copy.
        candidate(
            "py",
            repo,
            diff("cproj/__init__.py", CPROJ["cproj/__init__.py"], "from ._speed import value  # x\n"),
        ),
        # the .c file: rebuilt in the copy, and the rebuilt code is the one imported.
        candidate("c", repo, diff("cproj/_speed.c", SPEED_C, SPEED_C.replace("VALUE", "(VALUE + 1)"))),
        # a header, which build_ext does not track: rebuilt with --force.
        candidate("h", repo, diff("cproj/speed.h", CPROJ["cproj/speed.h"], "#define VALUE 22\n")),
        # the .c file no longer compiles: the candidate's failure, class compile.
        candidate(
            "broken",
            repo,
            diff("cproj/_speed.c", SPEED_C, SPEED_C.replace("PyLong_FromLong(VALUE);", "oops")),
        ),
    ]
    got = {o.id: o for o in await observe_many(cands, options=Options(env_dir=str(root)))}
    # The base's extension (21) imported from the copy; built.txt carried, no rebuild.
    assert verdicts(got["py"])["test_value"] == "failed", got["py"].stdout
    assert verdicts(got["py"])["test_built_twice"] == "failed"
    assert "assert 21 == 22" in got["py"].stdout and "assert 1 == 2" in got["py"].stdout
    # Built again in the candidate's copy, and that build imported: for a .c file only its
    # extension; for a header (untracked by build_ext), all of them (--force).
    assert got["c"].verdict == "pass", (got["c"].failure, got["c"].stdout[-800:])
    assert set(verdicts(got["c"]).values()) == {"passed"} and len(verdicts(got["c"])) == 3
    want = {
        "test_value": "passed",
        "test_built_twice": "passed",
        "test_only_the_patched_extension_relinked": "failed",
    }
    assert verdicts(got["h"]) == want, got["h"].stdout[-800:]
    broken = got["broken"]
    assert broken.verdict == "fail" and not broken.flags.env_broken
    assert broken.failure is not None and broken.failure.failure_class == "compile"
    assert "the in-place build failed" in broken.failure.message and "oops" in broken.failure.message
    # Built once per base, whatever the candidates; the repo itself never written.
    markers = list((root / "inplace").glob("*/aexec-inplace.json"))
    assert len(markers) == 1
    assert not (repo / "built.txt").exists() and not list(repo.rglob("*.so"))
    # A second call is a cache hit: nothing is built again for the base.
    again = await observe_many(cands[:1], options=Options(env_dir=str(root)))
    assert again[0].verdict == "fail" and "assert 1 == 2" in again[0].stdout
    log = next((root / "logs").glob(f"{markers[0].parent.name}.log")).read_text()
    assert log.count("build_ext --inplace") == 1
    # `aexec env gc` keeps it while its environment is there, and removes it after.
    assert gc_inplace(str(root)) == []
    shutil.rmtree(root / "envs")
    assert gc_inplace(str(root)) == [str(markers[0].parent)] and not markers[0].parent.exists()


async def test_a_base_that_does_not_build_is_env_broken_and_not_tried_again(
    make_repo: MakeRepo, tmp_path: Path
) -> None:
    broken = SPEED_C.replace("PyLong_FromLong(VALUE);", "nope")
    repo, root = make_repo({**CPROJ, "cproj/_speed.c": broken}), tmp_path / "envs"
    cand = candidate("gold", repo, diff("cproj/_speed.c", broken, SPEED_C))
    first = await observe_many([cand], options=Options(env_dir=str(root)))
    again = await observe_many([cand], options=Options(env_dir=str(root)))
    for o in (*first, *again):
        assert o.verdict == "error" and o.flags.env_broken and o.failure is None, o
        assert o.env_fault is not None and o.env_fault.kind == "build"
        assert "the in-place build failed" in o.env_fault.message and "nope" in o.env_fault.message
    logs = "".join(p.read_text() for p in (root / "logs").glob("*.log"))
    assert logs.count("build_ext --inplace") == 1  # recorded: the second call did not rebuild


def test_concurrent_asks_of_one_base_build_it_once(make_repo: MakeRepo, tmp_path: Path) -> None:
    repo, root = make_repo(CPROJ), tmp_path / "envs"
    built = ensure(declared(), str(repo), str(root))
    got: list[InPlace] = []
    threads = [
        threading.Thread(target=lambda: got.append(ensure_inplace(built, str(repo), str(root))))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({g.key for g in got}) == 1 and sorted(g.cached for g in got) == [False, True, True]
    assert "".join(p.read_text() for p in (root / "logs").glob("*.log")).count("build_ext --inplace") == 1
    files = got[0].files  # what the build made: the extensions (in place and in build/lib), no objects
    assert "built.txt" in files and not any(f.endswith(".o") for f in files)
    assert sorted(os.path.basename(f).split(".")[0] for f in files if f.endswith(".so")) == [
        "_other",
        "_other",
        "_speed",
        "_speed",
    ]


async def test_a_test_patch_that_breaks_the_build_is_the_instance_s_error(
    make_repo: MakeRepo, tmp_path: Path
) -> None:
    repo, root = make_repo(CPROJ), tmp_path / "envs"
    cand = attrs.evolve(
        candidate(
            "gold",
            repo,
            diff("cproj/__init__.py", CPROJ["cproj/__init__.py"], "from ._speed import value\n\n"),
        ),
        test_patch=diff("cproj/speed.h", CPROJ["cproj/speed.h"], "#define VALUE 22 +\n"),
    )
    (obs,) = await observe_many([cand], options=Options(env_dir=str(root)))
    assert obs.verdict == "error" and obs.failure is None, obs
    assert obs.error is not None and "breaks the in-place build" in obs.error


def test_env_build_builds_the_extensions_too(make_repo: MakeRepo, tmp_path: Path) -> None:
    """``aexec env build`` pre-builds what a request's ``"inplace": true`` declares."""
    repo, root = make_repo(CPROJ), tmp_path / "envs"
    environment = {"python": SYSTEM, "install": "none", "exclude_newer": AS_OF, "inplace": True}
    line = {
        "request_type": "run_suite",
        "artifact_shape": "test_subset",
        "repo": str(repo),
        "environment": environment,
    }
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps(line) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "aexec", "env", "build", str(cases), "--env-dir", str(root)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert len(list((root / "inplace").glob("*/aexec-inplace.json"))) == 1
