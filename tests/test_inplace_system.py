"""An in-place build against the environment's Debian packages (issue 43): matplotlib's
``setupext.py`` is told (``MPLSETUPCFG``) to link the system's Qhull and FreeType, which
are the environment's ``apt`` packages, unpacked into its prefix, never the host's.

Real apt (Debian's libqhull-dev, fetched and unpacked), real gcc, real runs: a repo
shaped as matplotlib's build is (its ``setupext.py`` names ``MPLSETUPCFG``; its
``setup.py`` reads that file and links ``qhull_r``), built once for the base and again
in a candidate's copy whose patch touches the C source. The tests the candidates run
call Qhull through the extension. And Ghostscript, which matplotlib compares PDF and EPS
output with, unpacked and run from an environment's prefix (``GS_LIB``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aexec import Candidate, Policy, observe_many
from aexec._environments import system
from aexec._environments.inplace import MPLSETUP, library_env, mplsetup
from aexec._environments.spec import EnvSpec
from aexec._options import Options

from .conftest import MakeRepo, diff

pytestmark = pytest.mark.anyio

SYSTEM = f"{sys.version_info.major}.{sys.version_info.minor}"
QHULL_C = textwrap.dedent(
    """\
    #include <Python.h>
    #include "libqhull_r/libqhull_r.h"

    static PyObject *version(PyObject *self, PyObject *args) { return PyUnicode_FromString(qh_version); }
    static PyMethodDef methods[] = {{"version", version, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
    static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_qhull", NULL, -1, methods};
    PyMODINIT_FUNC PyInit__qhull(void) { return PyModule_Create(&mod); }
    """
)
MPLIKE = {
    "pyproject.toml": '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n',
    "setupext.py": "mplsetup_cfg = os.environ.get('MPLSETUPCFG') or 'mplsetup.cfg'\n",
    "setup.py": """\
        import configparser
        import os

        from setuptools import Extension, setup

        config = configparser.ConfigParser()
        config.read(os.environ["MPLSETUPCFG"])
        assert config.getboolean("libs", "system_qhull") and config.getboolean("libs", "system_freetype")
        setup(
            name="mplike",
            version="0",
            packages=["mplike"],
            ext_modules=[Extension("mplike._qhull", ["src/_qhull.c"], libraries=["qhull_r"])],
        )
        """,
    "mplike/__init__.py": "# mplike\n",
    "src/_qhull.c": QHULL_C,
    "test_q.py": """\
        import mplike._qhull

        def test_qhull():
            assert mplike._qhull.version().startswith("2020.2")
        """,
}


def host_has(package: str) -> bool:
    return subprocess.run(["dpkg", "-s", package], capture_output=True, check=False).returncode == 0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_ghostscript_unpacked_in_an_environment_runs_there(tmp_path: Path) -> None:
    """matplotlib compares PDF and EPS output through ``gs``, whose initialisation files
    are compiled in at /usr/share: the run's ``GS_LIB`` names the prefix's."""
    if shutil.which("apt-get") is None or host_has("ghostscript"):
        pytest.skip("no apt, or the host has ghostscript: the environment would unpack nothing")
    root, env = tmp_path / "root", tmp_path / "env"
    env.mkdir()
    state = system.install(system.resolve(["ghostscript"], str(root)), str(env), str(root))
    run = {k: os.pathsep.join(v) for k, v in state["env"].items()}  # type: ignore[union-attr]
    assert "GS_LIB" in run
    ps = tmp_path / "t.ps"
    ps.write_text("%!PS\n/Helvetica findfont 12 scalefont setfont 72 72 moveto (hi) show showpage\n")
    gs = [str(env / "system/usr/bin/gs"), "-dBATCH", "-dNOPAUSE", "-dSAFER", "-sDEVICE=png16m"]
    done = subprocess.run(
        [*gs, f"-sOutputFile={tmp_path / 't.png'}", str(ps)],
        env={"PATH": run["PATH"], "LD_LIBRARY_PATH": run["LD_LIBRARY_PATH"], "GS_LIB": run["GS_LIB"]},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and (tmp_path / "t.png").stat().st_size > 0, done.stdout + done.stderr


def test_a_matplotlib_checkout_is_built_against_the_environments_libraries(tmp_path: Path) -> None:
    (tmp_path / "setupext.py").write_text("mplsetup_cfg = os.environ.get('MPLSETUPCFG')\n")
    assert mplsetup(str(tmp_path)) == MPLSETUP and "system_qhull = True" in MPLSETUP
    assert mplsetup(str(tmp_path / "nothing")) is None
    prefix = tmp_path / "system"
    for d in ("usr/include/freetype2", "usr/lib/x86_64-linux-gnu"):
        (prefix / d).mkdir(parents=True)
    env = library_env(str(prefix), "/o", MPLSETUP)
    assert env == {
        "MPLSETUPCFG": "/o/aexec-mplsetup.cfg",
        "CPPFLAGS": f"-I{prefix}/usr/include -I{prefix}/usr/include/freetype2",
        "LDFLAGS": f"-L{prefix}/usr/lib/x86_64-linux-gnu",
    }
    assert library_env(str(tmp_path / "none"), "/o", None) == {}  # no prefix, not matplotlib


async def test_built_in_place_against_debians_qhull_unpacked_in_the_environment(
    make_repo: MakeRepo, tmp_path: Path
) -> None:
    if shutil.which("apt-get") is None:
        pytest.skip("no apt on this machine")
    if host_has("libqhull-dev"):
        pytest.skip("the host has libqhull-dev: the environment would unpack nothing")
    repo, root = make_repo(MPLIKE), tmp_path / "envs"
    spec = EnvSpec(
        SYSTEM, install="none", exclude_newer="2025-01-01T00:00:00Z", inplace=True, apt=("libqhull-dev",)
    )

    def candidate(ident: str, patch: str) -> Candidate:
        return Candidate(
            "run_suite",
            "patch",
            id=ident,
            repo=str(repo),
            patch=patch,
            tests=("test_q.py",),
            environment=spec,
            policy=Policy(timeout_s=120.0),
        )

    touched = QHULL_C.replace("qh_version)", "qh_version + 0)")
    got = await observe_many(
        [
            candidate("py", diff("mplike/__init__.py", "# mplike\n", "# mplike, patched\n")),
            candidate("c", diff("src/_qhull.c", QHULL_C, touched)),  # rebuilt in the copy
        ],
        options=Options(env_dir=str(root)),
    )
    for obs in got:
        assert obs.verdict == "pass", (obs.id, obs.failure, obs.stdout[-1500:])
    assert got[1].environment is not None and got[1].environment.inplace_rebuilt
    log = "".join(p.read_text() for p in (root / "logs").glob("*.log"))
    assert "/system/usr/include" in log  # the environment's headers, not the host's
    assert not host_has("libqhull-dev")  # the host's package database never changed
