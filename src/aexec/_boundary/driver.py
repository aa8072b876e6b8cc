"""The in-candidate driver: the first code that runs inside the boundary.

Longer than 400 lines because it is one file by necessity: it runs by path in the
candidate's interpreter, importing nothing of aexec but the wire, so the boundary's
kernel calls, the runners, the fork server's loop and the bytecode job cannot be split
into modules it would have to import from the candidate's ``sys.path``.

It is run by path (``python -s driver.py SPEC.json``) with the candidate's interpreter,
so it imports only the standard library (plus pytest, for test runs) and, by path, the
wire it shares with the library (``aexec/_wire.py``: its `Instructions` in, its report
records out). It builds the boundary, runs the candidate, and appends one JSON record
per event to the report file, flushed line by line, so that whatever was reported
before a kill survives it.

With a ``box`` in the spec (root, namespaces available) it runs as three processes::

    outer   joins the run's cgroups, dies with aexec (PR_SET_PDEATHSIG), unshares
            PID + network + mount namespaces, and waits for:
    init    pid 1 of the new namespaces: builds the filesystem view (everything
            read-only but the scratch dirs, /tmp bound to the scratch tmp, a fresh
            /proc), then forks and reaps:
    child   the candidate: drops to the run's own unprivileged uid, no_new_privs,
            kernel rlimits; then runs the snippet, command, or pytest.

When init dies, the kernel kills everything left in its PID namespace. Any step of the
boundary that fails aborts the run (exit 125) rather than run it with less. A child
that is not pytest ends through `leave`: the interpreter's shutdown as a program can
see it, without freeing the driver's heap object by object.

``python -s driver.py --serve MODE SUPERVISOR_PID FD`` is the fork server
(``aexec._boundary.forkserver``): one warm interpreter that has imported what a cold driver
imports before the candidate's code anyway (``runpy``, ``subprocess``; with ``MODE``
``pytest`` also pytest, its built-in plugins and the interpreter's auto-loaded plugins)
and forks each run on request: a run with a ``box`` straight into its new namespaces
as their init (`fork_init`; the outer process above is then not needed), any other its
outer process. The forked child sets up exactly what a fresh
``python -s driver.py SPEC`` would have (fds 0-2, session, cwd, environment, argv) and
goes on as ``main()`` — same boundary, same code; only the start-up is skipped.

``python -I driver.py --bytecode < JOB.json`` is not a run: it compiles a pristine
repo's modules once for all of its runs (``aexec._boundary.bytecode.compile_bytecode``). It
executes none of the repo's code, only the interpreter's compiler and pytest's
assertion rewriter over its source.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import json
import os
import resource
import signal
import stat
import sys
import traceback
from typing import TYPE_CHECKING, Any


def _load_wire() -> Any:
    """``aexec/_wire.py``, loaded by path and kept out of ``sys.modules``: a candidate's
    own module of that name is never shadowed, and no aexec package is imported."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_wire.py")
    spec = importlib.util.spec_from_file_location("_aexec_wire", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from .. import _wire as wire
    from .._wire import Box, BytecodeJob, Instructions, SpawnRequest
else:
    wire = _load_wire()

FRAME_CAP = wire.FRAME_CAP
MESSAGE_CAP = wire.MESSAGE_CAP


class Report:
    def __init__(self, path: str) -> None:
        self._f = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def write(self, kind: str, **fields: Any) -> None:
        try:
            self._f.write(wire.encode(kind, fields) + "\n")
        except (OSError, ValueError):
            pass  # the candidate closed or broke our file; the exit code still speaks


def qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def describe(exc: BaseException) -> dict[str, Any]:
    """An exception as plain data: type, MRO, message, innermost frames."""
    if isinstance(exc, SyntaxError) and exc.filename:
        frames = [[exc.filename, exc.lineno or 0, "<module>"]]
    else:
        tb = traceback.extract_tb(exc.__traceback__)[-FRAME_CAP:]
        frames = [[f.filename, f.lineno or 0, f.name] for f in tb]
    try:
        message = str(exc)
    except Exception:  # a hostile __str__
        message = "<unprintable>"
    return {
        "type": qualname(type(exc)),
        "bases": [qualname(c) for c in type(exc).__mro__],
        "message": message[:MESSAGE_CAP],
        "errno": getattr(exc, "errno", None) if isinstance(exc, OSError) else None,
        "frames": frames,
    }


def apply_limits(spec: Instructions) -> None:
    for name, value in spec["rlimits"].items():
        which = getattr(resource, name)
        resource.setrlimit(which, (value, value))


# -- the kernel side of the boundary (Linux; ctypes because the driver is stdlib-only) --

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 0x400, 0x800, 0x200000
MNT_DETACH = 0x2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
BOX_FAILED = wire.BOX_FAILED
_PER_MOUNT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
}

_libc = ctypes.CDLL(None, use_errno=True)
#: mount_setattr(2) (Linux 5.12): one call makes a whole mount tree read-only. Its
#: number is 442 on every architecture but alpha; elsewhere the per-mount loop is used.
_SYS_MOUNT_SETATTR = (
    442 if os.uname().machine in ("x86_64", "aarch64", "riscv64", "ppc64le", "s390x") else None
)
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x1, 0x2


class _MountAttr(ctypes.Structure):
    _fields_ = [  # ctypes wants a list
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class BoxError(Exception):
    """A step of the boundary failed: the run must not go ahead without it."""


def _call(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise BoxError(f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    enc = [None if x is None else os.fsencode(x) for x in (source, target, fstype)]
    _call(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), None), f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _call(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def _unescape(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal
    out, i = [], 0
    while i < len(path):
        if path[i] == "\\" and path[i + 1 : i + 4].isdigit():
            out.append(chr(int(path[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def mounts() -> list[tuple[str, int]]:
    """(mount point, per-mount flags) of every mount this process sees, parents first."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            flags = 0
            for opt in fields[5].split(","):
                flags |= _PER_MOUNT_FLAGS.get(opt, 0)
            found.append((_unescape(fields[4]), flags))
    return found


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _bind(source: str, target: str, *, readonly: bool) -> None:
    mount(source, target, None, MS_BIND | MS_REC)
    extra = MS_RDONLY if readonly else 0
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_NOSUID | extra)


def build_view(box: Box) -> None:
    """In the new mount namespace: the whole host read-only, the scratch dirs writable."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Other runs' scratch roots (siblings under the same base) must not be readable.
    # Under a tmp target (the default: /tmp) the scratch tmp bound over it below covers
    # them, whole; elsewhere they leave this view one by one (a detach costs an RCU
    # grace period, and a busy machine has dozens of them).
    own, siblings = box["scratch_root"], box["sibling_prefix"]
    covered = any(_under(own, t) and os.path.isdir(t) for t in box["tmp_targets"])
    for point, _ in [] if covered else mounts():
        if point.startswith(siblings) and not _under(point, own):
            _libc.umount2(os.fsencode(point), MNT_DETACH)  # fails only if already gone
    # Held open: binding /tmp may cover these paths (the scratch root, an interpreter).
    keep = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in box["keep"]}
    tmp = os.open(box["tmp"], os.O_PATH | os.O_DIRECTORY)
    # A /proc of the new PID namespace: the host's processes are not even visible.
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # Directories others cannot traverse (e.g. /root holding the interpreter) are
    # covered by a fresh tmpfs holding only what the candidate needs from them, bound
    # back through fds opened before the cover (the scratch root may be among them).
    for mask in box["masks"]:
        hidden, needed = mask["hidden"], mask["paths"]
        held = {path: os.open(path, os.O_PATH) for path in needed}
        mount("aexec-mask", hidden, "tmpfs", MS_NOSUID | MS_NODEV)
        os.chmod(hidden, 0o755)
        for path, fd in sorted(held.items()):
            if not any(_under(path, p) for p in needed if p != path):
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    os.makedirs(path, mode=0o755, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                    open(path, "a").close()
                mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            os.close(fd)
    readonly_everywhere()
    for path in box["writable"]:
        _bind(path, path, readonly=False)
    for target in box["tmp_targets"]:
        if os.path.isdir(target):
            _bind(f"/proc/self/fd/{tmp}", target, readonly=False)
    # What lives under /tmp on the host is covered now: put it back in place.
    for path, fd in keep.items():
        here = os.fstat(fd)
        try:
            seen = os.stat(path)
            same = (seen.st_dev, seen.st_ino) == (here.st_dev, here.st_ino)
        except OSError:
            same = False
        if not same:
            os.makedirs(path, mode=0o755, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            if path != box["scratch_root"]:
                mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
        os.close(fd)
    os.close(tmp)


def readonly_everywhere() -> None:
    """Every mount of this namespace read-only and nosuid, its other flags kept."""
    if _SYS_MOUNT_SETATTR is not None:
        # One call for the whole tree, atomic against mounts coming and going.
        attr = _MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
        rc = _libc.syscall(
            ctypes.c_long(_SYS_MOUNT_SETATTR),
            ctypes.c_int(AT_FDCWD),
            ctypes.c_char_p(b"/"),
            ctypes.c_uint(AT_RECURSIVE),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        )
        if rc == 0:
            return
        if ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM):  # EPERM: seccomp may deny it
            _call(rc, "mount_setattr / read-only")
    for point, flags in mounts():  # an older kernel: one remount per mount
        try:
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | flags)
        except BoxError:
            # Gone since the list was read (another run's scratch root, removed on the
            # host, leaves this namespace too) or hidden by a mask: unreachable anyway.
            if os.path.exists(point) and any(p == point for p, _ in mounts()):
                raise


def enter_cgroups(procs_files: list[str]) -> None:
    for path in procs_files:
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        except OSError as e:
            raise BoxError(f"join cgroup {os.path.dirname(path)}: {e.strerror}") from None


def drop_privileges(box: Box) -> None:
    uid, gid = box["uid"], box["gid"]
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def run_snippet(spec: Instructions, report: Report) -> int:
    import runpy

    path = spec["snippet"]
    assert path is not None  # a snippet runner always has one
    sys.argv = [path]
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = e.code
        report.write("exit", code=repr(code))
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException as e:
        report.write("exception", phase="run", **describe(e))
        traceback.print_exc()
        return 1
    return 0


def run_command(spec: Instructions, report: Report) -> int:
    import subprocess

    try:
        # The repo's import roots, as a snippet or pytest run gets them on sys.path.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(spec["sys_path"]))
        proc = subprocess.Popen(spec["argv"], cwd=spec["cwd"], env=env)
    except OSError as e:
        report.write("exception", phase="spawn", **describe(e))
        print(f"aexec: cannot run {spec['argv'][0]!r}: {e}", file=sys.stderr)
        return 127
    _, status, _ = os.wait4(proc.pid, 0)
    if os.WIFSIGNALED(status):
        report.write("child", exit=None, signal=os.WTERMSIG(status))
        return 128 + os.WTERMSIG(status)
    code = os.waitstatus_to_exitcode(status)
    report.write("child", exit=code, signal=None)
    return code


def compile_snippet(spec: Instructions, report: Report) -> int:
    path = spec["snippet"]
    assert path is not None  # a snippet runner always has one
    with open(path, encoding="utf-8") as f:
        source = f.read()
    try:
        compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        report.write("exception", phase="compile", **describe(e))
        traceback.print_exc(limit=0)
        return 1
    return 0


SKIP_DIRS = {".git", "__pycache__", ".tox", ".venv", "venv", ".eggs", "node_modules"}


def compile_tree(spec: Instructions, report: Report) -> int:
    import importlib

    root = spec["cwd"]
    failed = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as f:
                    compile(f.read(), path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError) as e:
                failed += 1
                report.write("exception", phase="compile", **describe(e))
                print("".join(traceback.format_exception_only(e)), end="", file=sys.stderr)
    if failed:
        return 1
    for module in spec["import_modules"]:
        try:
            importlib.import_module(module)
        except BaseException as e:
            failed += 1
            report.write("exception", phase="import", module=module, **describe(e))
            traceback.print_exc()
    return 1 if failed else 0


class Reporter:
    """A pytest plugin: per-test verdicts from pytest's own hooks, not its terminal text."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.verdicts: dict[str, str] = {}

    def pytest_collection_finish(self, session: Any) -> None:
        self.report.write("collected", count=len(session.items))

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.report.write("collect_error", nodeid=report.nodeid, text=str(report.longrepr)[:MESSAGE_CAP])

    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        exc = call.excinfo.value
        phase = getattr(report, "when", None) or "collect"
        if phase == "collect" and exc.__cause__ is not None:
            exc = exc.__cause__  # pytest wraps SyntaxError/ImportError in CollectError
        self.report.write("exception", phase=phase, nodeid=node.nodeid, **describe(exc))

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.report.write("start", nodeid=nodeid)

    def pytest_runtest_logreport(self, report: Any) -> None:
        prior = self.verdicts.get(report.nodeid)
        if report.when == "setup":
            verdict = "errored" if report.failed else "skipped" if report.skipped else None
        elif report.when == "call":
            verdict = "passed" if report.passed else "skipped" if report.skipped else "failed"
            if prior == "failed":
                verdict = prior  # a failed subtest report is not undone by the test's own pass
        else:  # teardown
            verdict = "errored" if report.failed and prior in (None, "passed") else prior
        if verdict is not None:
            self.verdicts[report.nodeid] = verdict
        if report.failed and getattr(report, "node", None) is not None:
            self.relay(report)  # a pytest-xdist worker's: its exception never reaches this process

    def relay(self, report: Any) -> None:
        """The exception of a worker's failed report, from its crash line (``Type: message``,
        or a rewritten assert's ``assert ...``): its type's MRO is known for builtins only."""
        import builtins
        import re

        crash: Any = getattr(report.longrepr, "reprcrash", None)
        text = str(getattr(crash, "message", "") or "")
        name, sep, message = text.partition(": ")
        if text.startswith("assert ") or text == "assert":
            name, message = "AssertionError", text
        elif not re.fullmatch(r"[A-Za-z_][\w.]*", name) or not (sep or name == text):
            return
        cls = getattr(builtins, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            bases = [qualname(c) for c in cls.__mro__]
        else:
            bases = [name if "." in name else f"builtins.{name}"]  # pytest's Failed is "builtins"
        frames = [[str(crash.path), int(crash.lineno or 0), ""]] if getattr(crash, "path", None) else []
        self.report.write(
            "exception",
            phase=report.when,
            nodeid=report.nodeid,
            type=bases[0],
            bases=bases,
            message=message[:MESSAGE_CAP],
            errno=None,
            frames=frames,
        )

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.report.write("test", nodeid=nodeid, verdict=self.verdicts.get(nodeid, "errored"))


def run_pytest(spec: Instructions, report: Report) -> int:
    try:
        import pytest
    except BaseException as e:
        report.write("exception", phase="import", **describe(e))
        traceback.print_exc()
        return 1
    rc = pytest.main(list(spec["pytest_args"]), plugins=[Reporter(report)])
    report.write("end", exitstatus=int(rc))
    return int(rc)


# -- the steps runner: toolchains of languages beyond Python (aexec._languages) --------


def _pump_step(proc: Any, forward: dict[int, int]) -> dict[int, str]:
    """Drain a step's stdout and stderr pipes until both close: forward each chunk to
    ``forward[fd]`` (the run's own stdout or stderr) and keep its text, capped."""
    import selectors

    cap = wire.STEP_STREAM_CAP
    head: dict[int, bytearray] = {}
    tail: dict[int, bytearray] = {}
    total: dict[int, int] = {}
    sel = selectors.DefaultSelector()
    for f in (proc.stdout, proc.stderr):
        fd = f.fileno()
        head[fd], tail[fd], total[fd] = bytearray(), bytearray(), 0
        sel.register(fd, selectors.EVENT_READ)
    while sel.get_map():
        for key, _ in sel.select():
            fd = int(key.fd)
            try:
                chunk = os.read(fd, 65536)
            except InterruptedError:
                continue
            if not chunk:
                sel.unregister(fd)
                continue
            if fd in forward:
                with contextlib.suppress(OSError):
                    os.write(forward[fd], chunk)
            total[fd] += len(chunk)
            room = cap // 2 - len(head[fd])
            if room > 0:
                head[fd] += chunk[:room]
                chunk = chunk[room:]
            tail[fd] += chunk
            del tail[fd][: max(0, len(tail[fd]) - cap // 2)]
    sel.close()
    out = {}
    for fd in head:
        text = head[fd].decode("utf-8", "replace")
        dropped = total[fd] - len(head[fd]) - len(tail[fd])
        if dropped > 0:
            text += wire.CUT_MARKER.format(dropped=dropped)
        out[fd] = text + tail[fd].decode("utf-8", "replace")
    return out


def _read_evidence(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(wire.STEP_EVIDENCE_CAP).decode("utf-8", "replace")


def run_steps(spec: Instructions, report: Report) -> int:
    """Run the planned toolchain steps in order; stop at the first that fails.

    Each step's stdout and stderr are pipes the driver drains, kept, capped (head and
    tail), in the step's report record with its exit status and evidence file. The
    program's (``run``) streams are also forwarded as they come to the run's stdout and
    stderr, so those are what the program printed; a build step's are written to the
    run's stderr only when it failed (a compiler's successful ``[]`` is not the program's). The run's deadline covers them
    all: the supervisor kills the whole tree, and ``step_start`` says which one was running.
    """
    import subprocess

    code = 0
    for step in spec["steps"]:
        report.write("step_start", name=step["name"])
        env = dict(os.environ, **step["env"])
        limits = step["rlimits"]

        def lower(limits: dict[str, int] = limits) -> None:
            for name, value in limits.items():
                resource.setrlimit(getattr(resource, name), (value, value))

        stdin: Any = subprocess.DEVNULL
        try:
            if step["stdin_file"] is not None:
                stdin = open(os.path.join(step["cwd"], step["stdin_file"]), "rb")  # noqa: SIM115
            proc = subprocess.Popen(
                step["argv"],
                cwd=step["cwd"],
                env=env,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                preexec_fn=lower if limits else None,  # single-threaded child
            )
        except OSError as e:
            message = f"aexec: cannot run {step['argv'][0]!r}: {e}"
            print(message, file=sys.stderr)
            report.write(
                "step", name=step["name"], exit=127, signal=None, stdout="", stderr=message, evidence=None
            )
            return 127
        finally:
            if stdin is not subprocess.DEVNULL:
                stdin.close()
        assert proc.stdout is not None and proc.stderr is not None
        program = step["stdout_is_program"]
        pipes = {proc.stdout.fileno(): 1, proc.stderr.fileno(): 2}
        texts = _pump_step(proc, pipes if program else {})
        out_text, err_text = texts[proc.stdout.fileno()], texts[proc.stderr.fileno()]
        _, status, _ = os.wait4(proc.pid, 0)
        proc.returncode = 0  # reaped here; keep Popen from waiting for it again
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        exit_code = None if signum is not None else os.waitstatus_to_exitcode(status)
        report.write(
            "step",
            name=step["name"],
            exit=exit_code,
            signal=signum,
            stdout=out_text,
            stderr=err_text,
            evidence=_read_evidence(step["evidence_file"]),
        )
        proc.stdout.close()
        proc.stderr.close()
        code = 128 + signum if signum is not None else int(exit_code or 0)
        if code != 0:
            if not program:  # a failed build step's output is the run's stderr
                for text in (out_text, err_text):
                    with contextlib.suppress(OSError):
                        os.write(2, text.encode("utf-8", "replace"))
            return code
    return code


RUNNERS = {
    "snippet": run_snippet,
    "command": run_command,
    "compile_snippet": compile_snippet,
    "compile_tree": compile_tree,
    "pytest": run_pytest,
    "steps": run_steps,
}


#: What ``runpy.run_path`` imports on its first call: imported before the candidate
#: runs, cold and warm alike (the fork server has them already).
RUNPY_IMPORTS = ("runpy", "pkgutil", "weakref")


def run_candidate(spec: Instructions) -> None:
    # The driver's own directory is not the candidate's: take it off sys.path.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != here]
    sys.path[0:0] = spec["sys_path"]
    box = spec["box"]
    if box:
        drop_privileges(box)
    os.chdir(spec["cwd"])
    report = Report(spec["report"])
    apply_limits(spec)
    runner = spec["runner"]
    if runner == "pytest":
        # pytest and its plugins get the interpreter's whole shutdown, as plain pytest does.
        sys.exit(RUNNERS[runner](spec, report))
    for name in RUNPY_IMPORTS:
        __import__(name)
    ours = set(sys.modules)
    # The driver's own objects are never garbage: the collector no longer walks them
    # (nor, at exit, copies every page of a forked server's heap to do so).
    gc.freeze()
    leave(RUNNERS[runner](spec, report), ours)


def leave(code: int, ours: set[str]) -> None:
    """Exit as the interpreter's own shutdown does, as far as a program can tell, without
    tearing down the driver's heap object by object (most of a trivial run's CPU).

    In CPython's order (``Py_FinalizeEx``): non-daemon threads are joined, ``atexit``
    callbacks run, the modules the candidate imported are dropped and the garbage
    collected (so their objects' finalizers run and open files are flushed), then
    stdout and stderr are flushed (exit status 120 if stdout cannot be, as CPython's).
    What is left unfreed is the driver's own, which nothing of the candidate's refers to.
    """
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:
        traceback.print_exc()
    atexit._run_exitfuncs()
    flushed = _flushed()
    for name in [n for n in sys.modules if n not in ours]:
        del sys.modules[name]
    gc.collect()
    if not (_flushed() and flushed):
        code = 120
    os._exit(code)


def _flushed() -> bool:
    """Flush stdout and stderr as the interpreter does at exit: False if stdout failed."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            ok = ok and stream is not sys.stdout
    return ok


def box_failed(error: BoxError) -> None:
    print(f"aexec: the boundary could not be built, nothing ran: {error}", file=sys.stderr)
    os._exit(BOX_FAILED)


def write_bytecode(job: BytecodeJob) -> None:
    """Write the ``__pycache__`` files a run of ``job["root"]`` would compile, under ``job["out"]``.

    Each of ``job["files"]`` gets a checked-hash pyc (PEP 552: the importer verifies the
    source's hash, so a patched module is never run from a stale pyc); with a pytest whose
    rewritten pycs are checked by hash and relocatable (its ``_fix_code_filename``), those
    of ``job["rewrite"]`` also get the pyc pytest's assertion rewriter would write. A file
    that does not compile, or whose compiling warns (a run must see that warning), gets none.
    """
    import ast
    import importlib
    import importlib.util
    import py_compile
    import warnings

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (120, 120))
    rewrite: Any = None
    with contextlib.suppress(ImportError):
        rewrite = importlib.import_module("_pytest.assertion.rewrite")
    if not (hasattr(rewrite, "_fix_code_filename") and hasattr(rewrite, "_write_pyc_fp")):
        rewrite = None  # an older pytest: its pycs would carry the path they were made at
    root, out, rewritten = job["root"], job["out"], set(job["rewrite"])
    for rel in job["files"]:
        source_path = os.path.join(root, rel)
        pyc = importlib.util.cache_from_source(os.path.join(out, rel))
        base = os.path.basename(rel)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                py_compile.compile(
                    source_path,
                    cfile=pyc,
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
                )
            except (py_compile.PyCompileError, OSError, ValueError, RecursionError, MemoryError):
                continue
            if caught:
                os.unlink(pyc)
                continue
            if rewrite is None or rel not in rewritten:
                continue
            with open(source_path, "rb") as f:
                source = f.read()
            try:  # as pytest's own _rewrite_test does
                tree = ast.parse(source, filename=source_path)
                rewrite.rewrite_asserts(tree, source, source_path, None)
                code = compile(tree, source_path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            if caught:
                continue
            with open(os.path.join(os.path.dirname(pyc), base[:-3] + rewrite.PYC_TAIL), "wb") as fp:
                rewrite._write_pyc_fp(fp, importlib.util.source_hash(source), code)


def main() -> None:
    """Build the boundary, then be the run's init (see the module docstring)."""
    if sys.argv[1] == "--bytecode":
        write_bytecode(json.load(sys.stdin))
        return
    as_init = False  # already the init of new namespaces (forked so by the fork server)
    if sys.argv[1] == "--serve":
        spec_path, as_init = serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        sys.argv[1:] = [spec_path]
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    box = spec.get("box")
    try:
        if box:
            # Die with aexec, even if it is SIGKILLed; if it already died, do nothing.
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if _parent_pid(as_init) not in box["supervisor_pids"]:  # aexec, or its fork server
                os._exit(BOX_FAILED)
        enter_cgroups(spec["cgroups"])
        if box and not as_init:
            _call(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET), "unshare")
    except BoxError as e:
        box_failed(e)
    if box:
        if not as_init:
            init = os.fork()
            if init != 0:
                _, status = os.waitpid(init, 0)
                os._exit(
                    os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
                )
        try:
            if not as_init:
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            build_view(box)
        except (BoxError, OSError) as e:
            box_failed(BoxError(str(e)))
    be_init(spec)


def _parent_pid(as_init: bool) -> int:
    """The parent's pid as the supervisor knows it. The init of a new PID namespace has
    no parent in it (``getppid()`` is 0), but until it mounts its own /proc, /proc is the
    host's, where its parent is named."""
    if not as_init:
        return os.getppid()
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


#: clone(2) by number, to fork straight into new namespaces (x86-64 and arm64; elsewhere
#: the run's outer process unshares them and forks the init, as a cold run does).
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)
#: libc through the Python API's calling convention: the GIL stays held across the
#: call, as ``os.fork`` holds it across ``fork()``.
_libc_gil = ctypes.PyDLL(None, use_errno=True)


def fork_init() -> int:
    """``os.fork()``, with the child in new PID, mount and network namespaces, whose
    init (pid 1) it is: what an outer process's ``unshare`` + ``fork`` gives, in one
    process fewer. The interpreter's own fork hooks run around it as around ``os.fork``."""
    assert _SYS_CLONE is not None
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | signal.SIGCHLD
    ctypes.pythonapi.PyOS_BeforeFork()
    try:
        pid = _libc_gil.syscall(
            ctypes.c_long(_SYS_CLONE),
            ctypes.c_ulong(flags),
            ctypes.c_long(0),
            ctypes.c_long(0),
            ctypes.c_long(0),
            ctypes.c_long(0),
        )
    except BaseException:
        ctypes.pythonapi.PyOS_AfterFork_Parent()
        raise
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"clone: {os.strerror(err)}")
    return int(pid)


def be_init(spec: Instructions) -> None:
    """Fork the candidate, reap everything, report its end.

    In a PID namespace this process is the init: the candidate is not, so signals it
    sends itself behave as usual, and orphans are reaped. Its wait status and rusage
    (the whole tree it reaped) are reported here, where a signal death is still visible.
    """
    pid = os.fork()
    if pid == 0:
        try:
            run_candidate(spec)
        except BoxError as e:
            box_failed(e)
    while True:
        try:
            reaped, status, rusage = os.wait4(-1, 0)
        except InterruptedError:
            continue
        if reaped == pid:
            break
    report = Report(spec["report"])
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        report.write("main", exit=None, signal=sig)
        code = 128 + sig
    else:
        code = os.waitstatus_to_exitcode(status)
        report.write("main", exit=code, signal=None)
    report.write("usage", cpu_s=rusage.ru_utime + rusage.ru_stime, maxrss_kib=rusage.ru_maxrss)
    os._exit(code)


def preload_pytest() -> None:
    """Import what a cold pytest run imports before the candidate's code: pytest, its
    built-in plugins and — unless the environment turns auto-loading off, as a run's
    would — the modules of the interpreter's plugins (entry points ``pytest11``), so
    warm runs do not pay for them. Importing a plugin registers nothing: each run's
    pytest still loads it itself. One that does not import is left to fail in the run,
    as it would cold."""
    import importlib

    import _pytest.config

    for name in _pytest.config.default_plugins:
        importlib.import_module(f"_pytest.{name}")
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return
    import importlib.metadata

    # Through pytest's assertion-rewriting import hook, with the plugins' modules marked
    # as pytest marks them: a run's pytest then finds them rewritten, as a cold run
    # would have imported them (and warns of no "already imported" module).
    hook: Any = None
    try:
        import _pytest.assertion

        config = _pytest.config.get_config()
        hook = _pytest.assertion.install_importhook(config)
        config._mark_plugins_for_rewrite(hook, False)
    except Exception:
        # An older pytest (< 8.4: the hook reads the ini at once): a plugin imported
        # plainly here would make the run's pytest warn "Module already imported so
        # cannot be rewritten" (an error under ``filterwarnings = error``), as a cold
        # run never does. Leave the plugins to the run.
        if hook is not None and hook in sys.meta_path:
            sys.meta_path.remove(hook)
        return
    try:
        for dist in importlib.metadata.distributions():
            for ep in dist.entry_points:
                if ep.group == "pytest11":
                    with contextlib.suppress(Exception):
                        importlib.import_module(ep.module)
        # What the plugins import when pytest configures (hypothesis imports most of
        # itself then): learnt from a pytest start on an empty directory in a child of
        # this interpreter, and imported here in the same order. Imports only: no hook
        # runs, nothing is configured; each run's pytest still does all of that itself.
        for name in startup_modules():
            if name not in sys.modules:
                with contextlib.suppress(Exception):
                    importlib.import_module(name)
    finally:
        if hook is not None and hook in sys.meta_path:
            sys.meta_path.remove(hook)


#: Run by `startup_modules` in a child: pytest started on an empty directory, then the
#: modules it imported, in order, written to the file named by argv[1].
_STARTUP = """\
import json, sys, pytest
pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "--rootdir", ".", "."])
with open(sys.argv[1], "w") as f:
    json.dump(list(sys.modules), f)
"""


def startup_modules() -> list[str]:
    """The modules a pytest start imports in this interpreter and environment (none if
    that cannot be learnt within a few seconds)."""
    import shutil
    import subprocess
    import tempfile

    home = tempfile.mkdtemp(prefix="aexec-startup-")
    out = os.path.join(home, "modules.json")
    try:
        subprocess.run(
            [sys.executable, "-s", "-c", _STARTUP, out],
            cwd=home,
            env=dict(os.environ, HOME=home, TMPDIR=home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=20,
            check=False,
        )
        with open(out, encoding="utf-8") as f:
            names = json.load(f)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return [n for n in names if isinstance(n, str) and n != "__main__" and not n.startswith("_pytest")]


def serve(mode: str, supervisor_pid: int, fd: int) -> tuple[str, bool]:
    """Fork a run's outer process per request; returns only in a child, with its spec
    and whether the child is already the init of the run's namespaces (`fork_init`).

    A request is one datagram ``{"spec", "cwd", "env", "box"}`` on the control socket
    carrying three fds: the reply socket, the run's stdout and stderr. The reply socket gets
    ``{"pid"}`` at once and ``{"status"}`` (the raw wait status) when the child is reaped.
    The server exits when aexec closes the control socket or dies (PR_SET_PDEATHSIG).
    """
    import selectors
    import socket

    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    ctrl = socket.socket(fileno=fd)
    if os.getppid() != supervisor_pid:
        os._exit(BOX_FAILED)
    try:
        # What a cold driver imports anyway before the candidate's code runs.
        import subprocess  # noqa: F401

        for name in RUNPY_IMPORTS:
            __import__(name)

        if mode == "pytest":
            preload_pytest()
    except BaseException as e:
        ctrl.send(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}).encode())
        os._exit(1)
    ctrl.send(json.dumps({"ok": True, "modules": sorted({m.split(".")[0] for m in sys.modules})}).encode())
    # No gc.freeze(): a frozen heap hides the server's objects from gc.get_referrers
    # and gc.get_objects, so a forked run would not see the heap a cold one does
    # (hypothesis's register_random check warned, and filterwarnings = error failed it).
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(ctrl, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    replies: dict[int, socket.socket] = {}
    inits: set[int] = set()
    while True:
        for key, _ in sel.select():
            if key.fileobj is ctrl:
                msg, fds, _, _ = socket.recv_fds(ctrl, 1 << 20, 3)
                if not msg:
                    os._exit(0)  # aexec is done or gone
                request = json.loads(msg)
                reply, out, err = fds
                as_init = bool(request.get("box")) and _SYS_CLONE is not None
                try:
                    pid = fork_init() if as_init else os.fork()
                except OSError:  # clone refused (a seccomp filter, say): the outer way
                    as_init = False
                    pid = os.fork()
                if pid == 0:
                    # Nothing of the server survives into the run: its sockets are
                    # detached (not closed later by the GC, on fds the run may reuse).
                    for sock in (ctrl, *replies.values()):
                        sock.detach()
                    sel.close()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    become(request, out, err, as_init=as_init)
                    return str(request["spec"]), as_init
                os.close(out)
                os.close(err)
                replies[pid] = socket.socket(fileno=reply)
                if as_init:
                    inits.add(pid)
                with contextlib.suppress(OSError):
                    replies[pid].send(json.dumps({"pid": pid, "init": as_init}).encode())
            else:
                with contextlib.suppress(OSError):
                    os.read(wake_r, 4096)
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    sock = replies.pop(pid)
                    if pid in inits:
                        inits.discard(pid)
                        if os.WIFSIGNALED(status):  # as the outer process reports it
                            status = (128 + os.WTERMSIG(status)) << 8
                    with contextlib.suppress(OSError):
                        sock.send(json.dumps({"status": status}).encode())
                    sock.close()


def become(
    request: SpawnRequest, out: int, err: int, *, as_init: bool = False, go: int | None = None
) -> None:
    """What a fresh ``Popen(argv, stdin=DEVNULL, cwd, env, start_new_session)`` gives.

    An init forked into its namespaces starts no session of its own: a cold run's
    session is its outer process's, outside the PID namespace, and so is the server's.
    """
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    if not as_init:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile.tempdir = None  # type: ignore[attr-defined]  # read from TMPDIR afresh


if __name__ == "__main__":
    main()
