"""One uv step under the build's boundary (`aexec._environments.confine`): uv itself, its
settings, its log, and a failure recorded (`aexec._environments.store.fail`). `build`
resolves and installs environments with it, `inplace` adds to them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

from . import confine
from .spec import EnvBroken
from .store import fail

#: How long one uv step may take.
BUILD_TIMEOUT_S = 1800.0
#: Lines of uv's output an ``env_broken`` build failure carries.
TAIL_LINES = 30


def uv_binary() -> str:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            raise EnvBroken("unsupported", "uv is not installed (pip install uv)") from None
        return found


def uv_step(
    root: str,
    key: str,
    step: str,
    argv: list[str],
    *,
    cwd: str,
    writable: list[str],
    python: str,
    extra_env: Mapping[str, str] | None = None,
) -> None:
    """Run one uv step confined (`confine`: only ``writable`` and uv's cache writable, the
    package index the only network; niced: builds yield the cores to test runs), its
    output in ``logs/<key>.log``; a failure is recorded under ``key`` and raised as `EnvBroken`."""
    env = {
        **(extra_env or {}),
        # A log is no terminal: uv would wrap a failing build's output at $COLUMNS.
        **{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
        "UV_CACHE_DIR": os.path.join(root, "uv-cache"),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_CONFIG": "1",
        "UV_LINK_MODE": "hardlink",
        "UV_CONCURRENT_BUILDS": "1",
        "TMPDIR": os.path.join(root, "tmp"),
    }
    os.makedirs(os.path.join(root, "logs"), exist_ok=True)
    logfile = os.path.join(root, "logs", key + ".log")
    # The root is one writable mount (uv hardlinks from its cache into an environment:
    # never across mounts); its other parts are hidden or root's, ``writable`` the build's.
    cache = os.path.join(root, "uv-cache")
    os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
    hidden = [os.path.join(root, n) for n in sorted(os.listdir(root)) if n not in ("uv-cache", "envs")]
    done = confine.run(
        [uv_binary(), *argv],
        env=env,
        cwd=cwd,
        writable=[root, *writable],
        owned=[cache, *writable],
        hidden=hidden,
        programs=[uv_binary(), python],
        scratch=os.path.join(root, "tmp"),
        timeout=BUILD_TIMEOUT_S,
    )
    output, rc = done.output, done.returncode
    if done.boundary is not None:  # aexec's or the machine's, not the build's: not recorded
        raise EnvBroken("build", f"{step}: the build's boundary could not be made ({done.boundary})")
    with open(logfile, "a", encoding="utf-8") as f:
        f.write(f"$ uv {' '.join(argv)}\n{output}\n")
    if rc != 0:
        tail = "\n".join(
            output.replace(os.path.join(root, "tmp"), "<tmp>").strip().splitlines()[-TAIL_LINES:]
        )
        raise fail(root, key, "build", f"{step} failed (exit {rc}); log {logfile}; its tail:\n{tail}")
