"""Debian packages inside an environment, never on the host (I/O).

An environment's ``apt`` packages (SWE-bench's ``apt-get install -y graphviz``) are
resolved by apt against the host's package database, read and never written (``apt-get
-s install``: what the host lacks of them and of what they depend on), fetched from
Debian's archive by ``apt-get download`` into the root's ``apt-cache/`` and unpacked
with ``dpkg-deb -x`` into the environment's own prefix ``envs/<key>/system``: no
maintainer script runs, the host's dpkg database is never changed. The resolution
(``name=version`` of each package) is part of the environment's key and kept under
``resolved/<skey>.json``; apt's lists are updated once (``apt-get update``) when a
package is not found in them.

``system/aexec-system.json`` says what is there and what a run needs to find it
(`run_env`): the prefix's ``bin`` directories on ``PATH``, its library directories on
``LD_LIBRARY_PATH``, ``PKG_CONFIG_PATH``, ``XDG_DATA_DIRS`` (dictionaries, fonts),
for Ghostscript ``GS_LIB`` (its initialisation files and fonts), and for graphviz
``GVBINDIR`` (its plugins' configuration, made by ``dot -c`` as its
maintainer script would). The run's view binds the environment read-only, the prefix
with it.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from .._log import get_logger
from .._stages.keys import system_key
from .spec import EnvBroken
from .store import once, read_json, unique_bytes, write_json

log = get_logger(__name__)

__all__ = ["PREFIX", "STATE", "install", "resolve", "run_env"]

#: The prefix's name in an environment, and the record in it.
PREFIX = "system"
STATE = "aexec-system.json"
APT_TIMEOUT_S = 900.0
#: ``Inst name (version …)``: a package apt would install; ``Inst name [old] (…)`` an
#: upgrade of one the host has (the host's stands: the prefix never shadows it).
_INST = re.compile(r"^Inst (\S+) (\[[^\]]*\] )?\((\S+) ", re.M)


def _apt(argv: Sequence[str], cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            list(argv), cwd=cwd, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EnvBroken("unsupported", f"apt packages: {argv[0]} cannot run here ({e})") from None


def _host() -> dict[str, str]:
    """The host's release and architecture: what a resolution is of."""
    with open("/etc/os-release", encoding="utf-8") as f:
        lines = f.read().splitlines()
    release = " ".join(
        ln.split("=", 1)[1].strip('"') for ln in lines if ln.startswith(("ID=", "VERSION_ID="))
    )
    arch = _apt(["dpkg", "--print-architecture"]).stdout.strip()
    return {"release": release, "arch": arch}


def _simulate(packages: Sequence[str]) -> subprocess.CompletedProcess[str]:
    argv = ["apt-get", "-s", "-q", "-o", "Debug::NoLocking=1", "install", "--no-install-recommends"]
    return _apt([*argv, *packages])


def _resolve(packages: Sequence[str]) -> list[str]:
    done = _simulate(packages)
    if done.returncode != 0:  # a list older than the package: apt's lists updated once
        log.info("apt_update", packages=list(packages))
        _apt(["apt-get", "update", "-q"])
        done = _simulate(packages)
    if done.returncode != 0:
        said = [ln for ln in done.stderr.splitlines() if ln.startswith("E:")] or [done.stderr.strip()]
        raise EnvBroken("unsupported", f"apt packages {' '.join(packages)}: {said[0][:200]}")
    return sorted(f"{m.group(1)}={m.group(3)}" for m in _INST.finditer(done.stdout) if not m.group(2))


def resolve(packages: Sequence[str], root: str) -> list[str]:
    """``name=version`` of each Debian package to unpack for ``packages`` (those the host
    lacks, with what they depend on), resolved once per set and host (``resolved/``)."""
    names = sorted(set(packages))
    if shutil.which("apt-get") is None:
        raise EnvBroken("unsupported", f"apt packages {' '.join(names)}: no apt-get on this machine")
    key = system_key(packages=names, host=_host())
    record = os.path.join(root, "resolved", key + ".json")
    got = once(root, key, record, lambda: {"packages": names, "resolved": _resolve(names)})[1]["resolved"]
    return [str(p) for p in got] if isinstance(got, list) else []


def _debs(resolved: Sequence[str], cache: str) -> list[str]:
    """The ``.deb`` of each ``name=version``, from ``cache`` or downloaded into it."""
    os.makedirs(cache, exist_ok=True)

    def path(item: str) -> str:
        return os.path.join(cache, re.sub(r"[^A-Za-z0-9+.~=-]", "_", item) + ".deb")

    missing = [r for r in resolved if not os.path.isfile(path(r))]
    if missing:
        work = tempfile.mkdtemp(prefix="download-", dir=cache)
        os.chmod(work, 0o755)  # apt downloads as its own user where it can
        try:
            done = _apt(["apt-get", "download", "-q", *missing], cwd=work)
            if done.returncode != 0:
                raise EnvBroken("build", f"apt-get download failed: {done.stderr.strip()[-400:]}")
            for deb in glob.glob(os.path.join(work, "*.deb")):
                what = _apt(["dpkg-deb", "--show", "--showformat=${Package}=${Version}", deb]).stdout
                os.replace(deb, path(what.strip()))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    absent = [r for r in resolved if not os.path.isfile(path(r))]
    if absent:
        raise EnvBroken("build", f"apt-get download did not fetch {', '.join(absent)}")
    return [path(r) for r in resolved]


def _dirs(prefix: str, *patterns: str) -> list[str]:
    return [d for p in patterns for d in sorted(glob.glob(os.path.join(prefix, p))) if os.path.isdir(d)]


def _env(prefix: str) -> dict[str, list[str]]:
    """The run's variables that find what is unpacked at ``prefix`` (its directories)."""
    env = {
        "PATH": _dirs(prefix, "usr/bin", "bin", "usr/sbin", "sbin"),
        "LD_LIBRARY_PATH": _dirs(prefix, "usr/lib/*-linux-gnu*", "lib/*-linux-gnu*", "usr/lib", "lib"),
        "PKG_CONFIG_PATH": _dirs(prefix, "usr/lib/*-linux-gnu*/pkgconfig", "usr/share/pkgconfig"),
        "XDG_DATA_DIRS": _dirs(prefix, "usr/share"),
        "GVBINDIR": _dirs(prefix, "usr/lib/*-linux-gnu*/graphviz"),
        # Ghostscript's initialisation files and fonts (compiled in at /usr/share).
        "GS_LIB": _dirs(
            prefix,
            "usr/share/ghostscript/*/Resource/Init",
            "usr/share/ghostscript/*/lib",
            "usr/share/ghostscript/*/Resource/Font",
            "usr/share/ghostscript/fonts",
            "usr/share/fonts/type1/urw-base35",
        ),
    }
    return {k: v for k, v in env.items() if v}


def install(resolved: Sequence[str], path: str, root: str) -> dict[str, object]:
    """Unpack ``resolved`` into ``path``/system (the environment being built); its
    record (`STATE`): the packages, the run's variables, the bytes."""
    prefix = os.path.join(path, PREFIX)
    os.makedirs(prefix, exist_ok=True)
    for deb in _debs(resolved, os.path.join(root, "apt-cache")):
        done = _apt(["dpkg-deb", "-x", deb, prefix])
        if done.returncode != 0:
            raise EnvBroken("build", f"dpkg-deb -x {os.path.basename(deb)}: {done.stderr.strip()[-400:]}")
    env = _env(prefix)
    if env.get("GVBINDIR") and os.path.isfile(os.path.join(prefix, "usr", "bin", "dot")):
        # graphviz's maintainer script: its plugins' configuration, where GVBINDIR says.
        vars_ = {**os.environ, **{k: os.pathsep.join(v) for k, v in env.items()}}
        subprocess.run(
            [os.path.join(prefix, "usr", "bin", "dot"), "-c"], env=vars_, capture_output=True, check=False
        )
    state: dict[str, object] = {"packages": list(resolved), "env": env, "bytes": unique_bytes(prefix)}
    write_json(os.path.join(prefix, STATE), state)
    return state


def run_env(python: str) -> dict[str, str]:
    """What a run of ``python`` (an environment's ``bin/python``) needs to find the
    environment's Debian packages: ``{}`` for one without any."""
    state = read_json(os.path.join(os.path.dirname(os.path.dirname(python)), PREFIX, STATE))
    env = state.get("env") if state else None
    if not isinstance(env, dict):
        return {}
    return {str(k): os.pathsep.join(map(str, v)) for k, v in env.items() if isinstance(v, list)}
