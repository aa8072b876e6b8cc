"""One step of a build (uv, and the repo's setup code it runs) confined (I/O).

As root where namespaces and cgroups are to be had (`aexec._boundary.isolation`), a step
runs in `jail` (run by path):

* **filesystem**: its own mount namespace and root, holding read-only the system
  (``/usr``, ``/bin``, ``/lib*``, ``/etc``, ``/opt``), the interpreter's prefix, uv's, and
  the local directories the index settings name; writable only the paths it is given (the
  environments' root, as ONE mount: uv hardlinks out of its cache, never across mounts;
  its parts other than ``uv-cache/`` and ``envs/`` covered by an empty read-only tmpfs,
  the step's repo copy bound on it) and a private tmp. A write anywhere else fails
  (``EROFS``; ``EACCES`` in the root where a directory is root's). Nothing else of the host
  is there (no ``/root``, ``/home``, the original repo, a file beside the cache).
* **user**: `BUILD_UID`, outside the range runs get theirs from (`run_uid`), no groups,
  no_new_privs; it owns the root's ``uv-cache/`` and the step's own directory (the
  environment being made, the repo copy being resolved). A finished environment's
  directories and own files are handed back to root (`seal`): no later build changes
  them. Variables that look like credentials (`SECRET`) are not given to it.
* **network**: its own namespace, loopback only; the one way out is `proxy.IndexProxy`,
  which aexec runs outside it: ``CONNECT`` to the package index's origins, nothing else.
  Each refusal is a line of the step's log.
* **processes**: a PID namespace (its init's death kills all in it), a cgroup with a CPU
  quota, a memory cap and a process cap, killed whole (``cgroup.kill``) at the deadline,
  niced; and it dies with aexec.

Not root, or no namespaces or cgroups here: the step runs as before, unconfined (logged
once, ``environment_build_unconfined``).

Not confined: builds share one uid and uv's cache, so a build's setup code can change
cache files (and with them the files environments hardlink from the cache) and an
environment another build is making at the same moment; what the bound system
directories hold is readable; the allowed index hosts can carry data out in a URL (TLS
hides it from the proxy); the cache and the private tmp are on the host's disk, with no
cap; no syscall filter (a run's ``seccomp`` deny-list) is applied.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence

import anyio.from_thread
import attrs

from .._boundary.cgroups import Caps, Cgroups, probe_cgroups
from .._boundary.isolation import _probe_namespaces
from .._log import get_logger
from .proxy import IndexProxy, index_settings

log = get_logger(__name__)

#: The uid (and gid) builds run as: just past the range runs' uids are drawn from
#: (``aexec._boundary.scratch.run_uid``: ``2**20 + [0, 2**24)``), so no run ever has it.
BUILD_UID = (1 << 20) + (1 << 24)
#: A build's cgroup: half the machine's cores (at least one), 4 GiB for the whole tree, 2048
#: processes.
CAPS = Caps(cpu_cores=max(1.0, (os.cpu_count() or 2) / 2), memory_bytes=4 << 30, pids=2048)
NICE = 10
#: Names of variables a build is not given (its setup code could send them out in a URL
#: to the index).
SECRET = r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_KEY|PRIVATE|AUTH|SESSION"
JAIL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jail.py")
#: The host's system directories a build reads (absent ones are skipped).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")


@attrs.frozen
class Done:
    """What a step said (stdout, stderr and the proxy's lines) and its exit status (None:
    killed at the deadline)."""

    output: str
    returncode: int | None
    #: The boundary could not be made (``aexec build jail: <what>``): nothing ran, and it
    #: is not the build's failure.
    boundary: str | None = None


@functools.cache
def _cgroups() -> Cgroups | None:
    return probe_cgroups()


@functools.cache
def available() -> bool:
    """Builds are confined here: root, namespaces and cgroups."""
    ok = os.geteuid() == 0 and _probe_namespaces() and _cgroups() is not None
    if not ok:
        log.warning("environment_build_unconfined", reason="not root, or no namespaces or cgroups here")
    return ok


def own(path: str) -> None:
    """``path`` (made if absent) and all under it owned by `BUILD_UID` (a walk only where
    its top is not yet: uv's cache is handed over once)."""
    os.makedirs(path, exist_ok=True)
    if os.lstat(path).st_uid == BUILD_UID:
        return
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(top, name), BUILD_UID, BUILD_UID, follow_symlinks=False)
    os.chown(path, BUILD_UID, BUILD_UID, follow_symlinks=False)


def seal(path: str) -> None:
    """A finished environment, root's again: its directories and the files it alone has.
    Files it shares with uv's cache (hardlinks) stay the build uid's, as the cache does:
    a later build links them (the kernel's ``protected_hardlinks`` lets only a file's
    owner link it)."""
    if os.geteuid() != 0:
        return
    for top, dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(top, name)
            with contextlib.suppress(OSError):
                if os.lstat(full).st_nlink == 1:
                    os.chown(full, 0, 0, follow_symlinks=False)
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chown(os.path.join(top, name), 0, 0, follow_symlinks=False)
    with contextlib.suppress(OSError):
        os.chown(path, 0, 0, follow_symlinks=False)


def _secret(name: str) -> bool:
    """A variable that looks like a credential: not given to a build (uv's own index
    credentials, ``UV_*``, are)."""
    return not name.startswith("UV_") and re.search(SECRET, name, re.I) is not None


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _prefix(program: str) -> list[str]:
    """What a program needs bound: its path and, for an interpreter, its prefix (the
    directory above ``bin/``), as named and as resolved."""
    out = []
    for path in dict.fromkeys((os.path.abspath(program), os.path.realpath(program))):
        parent = os.path.dirname(path)
        out.append(os.path.dirname(parent) if os.path.basename(parent) == "bin" else path)
    return out


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    writable: Sequence[str],
    owned: Sequence[str],
    hidden: Sequence[str] = (),
    programs: Sequence[str],
    scratch: str,
    timeout: float,
) -> Done:
    """Run ``argv`` confined (see the module docstring): ``writable`` the only paths
    bound writable (each one mount), besides a private tmp made under ``scratch``;
    ``hidden`` directories under them covered by an empty read-only tmpfs (a writable
    path under one is bound on it); ``owned`` (made if absent) owned by `BUILD_UID`, the
    rest stays root's; ``programs`` (uv, the interpreter) readable with their prefixes."""
    if not available():
        return _unconfined(argv, env=env, cwd=cwd, timeout=timeout)
    try:
        return _confined(argv, env, cwd, writable, owned, hidden, programs, scratch, timeout)
    except OSError as e:  # its directories could not be made or handed over
        return Done("", None, f"aexec build jail: {e}")


def _confined(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    writable: Sequence[str],
    owned: Sequence[str],
    hidden: Sequence[str],
    programs: Sequence[str],
    scratch: str,
    timeout: float,
) -> Done:
    cgroups = _cgroups()
    assert cgroups is not None
    origins, local = index_settings(env)
    for path in owned:
        own(path)
    os.makedirs(scratch, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="build-tmp-", dir=scratch)
    os.chown(tmp, BUILD_UID, BUILD_UID)
    covered = [os.path.abspath(p) for p in hidden if os.path.isdir(p)]
    # A writable path under another is in its mount already (uv's hardlinks cannot
    # cross mounts), unless it is under a hidden one.
    paths = [os.path.abspath(p) for p in writable]
    binds = [
        p
        for p in dict.fromkeys(paths)
        if not any(_under(p, q) and p != q for q in paths) or any(_under(p, h) for h in covered)
    ]
    proxy = IndexProxy(origins)
    name = f"build-{uuid.uuid4().hex[:12]}"
    readonly = [*SYSTEM, *(p for prog in programs for p in _prefix(prog)), *local, proxy.dir]
    spec = {
        "parent": os.getpid(),
        "cgroups": cgroups.procs_files(name),
        "nice": NICE,
        "uid": BUILD_UID,
        "gid": BUILD_UID,
        "readonly": list(dict.fromkeys(readonly)),
        "writable": binds,
        "hidden": covered,
        "tmp": tmp,
        "proxy_socket": proxy.socket_path,
        "argv": list(argv),
        "env": {**{k: v for k, v in env.items() if not _secret(k)}, "HOME": "/tmp", "TMPDIR": "/tmp"},
        "cwd": cwd,
    }
    status_r, status_w = os.pipe()
    boundary, cancelled = None, False
    try:
        cgroups.create(name, CAPS)
        spec["status_fd"] = status_w
        with subprocess.Popen(
            [sys.executable, "-I", "-S", JAIL],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            pass_fds=(status_w,),
        ) as proc:
            os.close(status_w)
            status_w = -1
            output, rc, stopped = _wait(proc, json.dumps(spec), timeout)
            if stopped is not None:
                cgroups.kill(name)  # uv and all it spawned, at once
                output += proc.communicate()[0] + stopped
                cancelled = rc == -1
                rc = None
        os.set_blocking(status_r, False)
        with contextlib.suppress(BlockingIOError):
            boundary = os.read(status_r, 4096).decode(errors="replace").strip() or None
        if cancelled:  # aexec's doing, not the build's: not recorded as the key's failure
            boundary = "aexec build jail: the build was cancelled"
    except OSError as e:
        output, rc, boundary = "", None, f"aexec build jail: {e}"
    finally:
        for fd in (status_r, status_w):
            if fd >= 0:
                os.close(fd)
        proxy.close()
        cgroups.remove(name)
        shutil.rmtree(tmp, ignore_errors=True)
    if proxy.events:  # each line once, with its count
        counts = collections.Counter(proxy.events)
        output += "".join(f"\n{e}" + (f" (x{counts[e]})" if counts[e] > 1 else "") for e in counts)
    return Done(output, rc, boundary)


def _wait(proc: subprocess.Popen[str], spec: str, timeout: float) -> tuple[str, int | None, str | None]:
    """Feed the jail its spec and read its output until it exits: (output, exit status,
    None); or stop at the deadline: ("", None, why); or stop when the task that runs this
    build in a worker thread is cancelled (aexec signalled, a client gone): ("", -1, why),
    aexec's doing, not the build's. Stopped, the output so far is the next
    ``communicate()``'s."""
    deadline = time.monotonic() + timeout
    given: str | None = spec
    while True:
        left = max(0.0, deadline - time.monotonic())
        try:
            return proc.communicate(given, timeout=min(0.5, left))[0], proc.returncode, None
        except subprocess.TimeoutExpired:
            given = None  # fed once; a retry loses nothing
        if time.monotonic() >= deadline:
            return "", None, f"\ntimed out after {timeout:g} s: the build's cgroup was killed"
        try:
            anyio.from_thread.check_cancelled()
        except RuntimeError:  # not in an anyio worker thread (aexec env build's own pool)
            pass
        except BaseException:  # the backend's cancellation: the caller's to raise, not ours
            return "", -1, "\ncancelled: the build's cgroup was killed"


def _unconfined(argv: Sequence[str], *, env: Mapping[str, str], cwd: str, timeout: float) -> Done:
    nice = shutil.which("nice")
    try:
        done = subprocess.run(
            [*([nice, "-n", str(NICE)] if nice else []), *argv],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        said = [x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr)]
        return Done(f"{''.join(said)}\ntimed out after {timeout:g} s", None)
    return Done(done.stdout + done.stderr, done.returncode)
