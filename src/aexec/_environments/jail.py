"""The confined build's own process (Linux, root; stdlib only: run by path, never
imported as an aexec module). `confine` runs ``python -I -S jail.py``, the spec (JSON) on stdin:
names the cgroups to join, the uid, the host paths bound read-only and writable, the
private tmp, the proxy's Unix socket and the command (uv).

    outer   joins the build's cgroups, unshares PID, mount, network, IPC and UTS
            namespaces, forks the init and exits with its status (dies with aexec)
    init    pid 1 of the new PID namespace: a new root on a tmpfs holding only the spec's
            paths (read-only: the system, the interpreter, uv, local indexes; writable:
            what this step of the build writes, and a private /tmp), pivot_root, the
            host's root detached; loopback up, no other interface; forwards
            ``127.0.0.1:<port>`` to aexec's index proxy (`proxy`); forks the command
    command drops to the build's uid (no groups, no_new_privs: no capability, no
            setuid), ``HTTPS_PROXY``/``HTTP_PROXY`` set to the forwarder, and execs

When the command ends, the init exits with its status and the kernel kills all else in
the namespace. A step of the boundary that fails ends the build with exit 125 and a line
``aexec build jail: <what>`` on stderr: the build never runs with less.

The syscalls and the view's seal are the run boundary's (the driver's ``kernel`` and
``mounts``: its package loaded by path, under a name of the jail's own).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import signal
import socket
import stat
import sys
import threading
from typing import Any

JAIL_FAILED = 125
HERE = os.path.dirname(os.path.abspath(__file__))
#: The driver's package (stdlib only at run time), whose kernel and mount calls the jail uses.
_DRIVER = os.path.join(os.path.dirname(HERE), "_driver")
_dspec = importlib.util.spec_from_file_location(
    "_aexec_jail_driver", os.path.join(_DRIVER, "__init__.py"), submodule_search_locations=[_DRIVER]
)
assert _dspec is not None and _dspec.loader is not None
sys.modules[_dspec.name] = importlib.util.module_from_spec(_dspec)
_dspec.loader.exec_module(sys.modules[_dspec.name])
kernel = importlib.import_module(_dspec.name + ".kernel")
mounts = importlib.import_module(_dspec.name + ".mounts")

STAGE = "/dev"  # covered in this namespace only; the sources are held as fds first
OLD = "/.aexec-host"
DEV_NODES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9))
DEV_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)
#: Where the build's private tmp is bound (writable).
TMPS = ("/tmp", "/var/tmp", "/dev/shm")


def _mkdirs(path: str) -> None:
    os.makedirs(path, mode=0o755, exist_ok=True)


def _bind(fd: int, where: str) -> None:
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        _mkdirs(where)
    elif not os.path.lexists(where):
        _mkdirs(os.path.dirname(where))
        os.close(os.open(where, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
    kernel.mount(f"/proc/self/fd/{fd}", where, None, kernel.MS_BIND | kernel.MS_REC)


def build_root(spec: dict[str, Any]) -> None:
    """The new root (see the module docstring), entered by pivot_root."""
    kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE)
    held = {}
    for path in [*spec["readonly"], *spec["writable"], spec["tmp"]]:
        if path not in held and os.path.lexists(path):
            held[path] = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
    os.umask(0o022)
    kernel.mount("aexec-build", STAGE, "tmpfs", kernel.MS_NOSUID, "mode=0755,size=8m")
    writable = sorted(spec["writable"], key=lambda p: p.split("/"))
    hidden = sorted(spec["hidden"], key=lambda p: p.split("/"))
    # Placed once the private tmp and the writable binds are: what lies under them.
    after = [*TMPS, *writable]
    late = []
    for path in sorted(spec["readonly"], key=lambda p: p.split("/")):
        if path not in held:
            continue  # not on this host
        if any(mounts.under(path, w) for w in after):
            late.append(path)
        elif stat.S_ISLNK(os.fstat(held[path]).st_mode):
            _mkdirs(os.path.dirname(STAGE + path))
            os.symlink(os.readlink(path), STAGE + path)
        else:
            _bind(held[path], STAGE + path)
    os.mkdir(STAGE + "/dev", 0o755)
    for name, major, minor in DEV_NODES:
        os.mknod(f"{STAGE}/dev/{name}", 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(f"{STAGE}/dev/{name}", 0o666)  # the umask's 022 would leave them the root's alone
    for name, target in DEV_LINKS:
        os.symlink(target, f"{STAGE}/dev/{name}")
    os.mkdir(STAGE + "/proc", 0o755)
    kernel.mount("proc", STAGE + "/proc", "proc", kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC)
    for path in [*TMPS, *writable]:
        if not any(mounts.under(path, t) for t in [*TMPS, *hidden]) or path in TMPS:
            _mkdirs(STAGE + path)  # its mount point, made before the seal
    os.mkdir(STAGE + OLD, 0)
    mounts.readonly(STAGE)
    for path in TMPS:
        _bind(held[spec["tmp"]], STAGE + path)
    for path in writable:
        if not any(mounts.under(path, h) for h in hidden):
            _bind(held[path], STAGE + path)
    for path in hidden:  # under a writable path: an empty tmpfs, read-only once what is in it is placed
        kernel.mount(
            "aexec-hidden", STAGE + path, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, "mode=0755,size=64k"
        )
    for path in writable:
        if any(mounts.under(path, h) for h in hidden):
            _bind(held[path], STAGE + path)
    for path in hidden:
        flags = kernel.MS_REMOUNT | kernel.MS_BIND | kernel.MS_RDONLY | kernel.MS_NOSUID | kernel.MS_NODEV
        kernel.mount(None, STAGE + path, None, flags)
    for path in late:  # read-only parts under the tmp or a writable path
        _bind(held[path], STAGE + path)
        flags = kernel.MS_REMOUNT | kernel.MS_BIND | kernel.MS_RDONLY | kernel.MS_NOSUID
        kernel.mount(None, STAGE + path, None, flags)
    for fd in held.values():
        os.close(fd)
    mounts.pivot(STAGE, OLD)
    kernel.detach(OLD)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _forward(listener: socket.socket, socket_path: str) -> None:
    """Each connection to the namespace's ``127.0.0.1:<port>``, carried to aexec's proxy."""
    while True:
        conn, _ = listener.accept()
        try:
            out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            out.connect(socket_path)
        except OSError as e:
            sys.stderr.write(f"aexec build jail: the index proxy cannot be reached: {e}\n")
            conn.close()
            continue
        for a, b in ((conn, out), (out, conn)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def command(spec: dict[str, Any], port: int) -> None:
    """In the command's process: drop to the build's uid and exec."""
    kernel.drop_privileges(spec)
    proxy = f"http://127.0.0.1:{port}"
    env = dict(spec["env"])
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
        env[name] = proxy
    for name in ("NO_PROXY", "no_proxy"):
        env.pop(name, None)
    os.chdir(spec["cwd"])
    os.set_inheritable(spec["status_fd"], False)  # closed as uv starts: its code never has it
    os.execve(spec["argv"][0], spec["argv"], env)


def init(spec: dict[str, Any]) -> None:
    kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
    build_root(spec)
    kernel.name_host()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        try:
            listener.close()
            command(spec, port)
        except BaseException as e:
            fail(spec, e)
        os._exit(JAIL_FAILED)
    threading.Thread(target=_forward, args=(listener, spec["proxy_socket"]), daemon=True).start()
    while True:  # pid 1: reap everything; end with the command
        got, status = os.wait()
        if got == pid:
            os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def fail(spec: dict[str, Any], error: BaseException) -> None:
    """A step of the boundary failed: said on stderr (the build's log) and on the status
    pipe, which only aexec's code holds (the build's code cannot say it)."""
    line = f"aexec build jail: {error}\n"
    sys.stderr.write(line)
    try:
        os.write(spec["status_fd"], line.encode(errors="replace"))
    except OSError:
        pass


def main() -> None:
    spec = json.load(sys.stdin)  # not in argv: the environment is no other user's to read
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != spec["parent"]:
            os._exit(JAIL_FAILED)  # aexec died before the prctl
        os.nice(spec["nice"])  # builds yield the cores to test runs
        kernel.enter_cgroups(spec["cgroups"])
        kernel.unshare()
        pid = os.fork()
        if pid == 0:
            try:
                init(spec)
            except BaseException as e:
                fail(spec, e)
            os._exit(JAIL_FAILED)
    except (OSError, kernel.BoxError) as e:
        fail(spec, e)
        os._exit(JAIL_FAILED)
    _, status = os.waitpid(pid, 0)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    main()
