"""The fork server (``python -s _driver/__main__.py --serve MODE SUPERVISOR_PID FD``, started by
`aexec._boundary.forkserver`): one warm interpreter that has imported what a cold driver
imports before the candidate's code anyway, and forks each run on request.

A run with a ``box`` is forked straight into its new namespaces as their init
(`kernel.fork_init`), any other as its outer process. The forked child sets up exactly
what a fresh ``python -s _driver/__main__.py SPEC`` would have (`become`: fds 0-2, session, cwd,
environment) and returns to the driver's ``main()`` with its spec: same boundary, same
code; only the start-up is skipped.

A boxed run's spec is read here, before the fork: its view's read-only part is a
template the server makes once per view (`template.template`) and each run's init clones.

A module of the driver's package (see `aexec._driver`).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal.py's C core: no stub
import contextlib
import json
import os
import resource
import signal
import sys
from typing import TYPE_CHECKING, Any

from . import contain, kernel, outputs, rewriting, runners, startup, template, wire

if TYPE_CHECKING:
    from .wire import Instructions, ServerReady, SpawnRequest


def _recv_fds(sock: Any, size: int, most: int) -> tuple[bytes, list[int]]:
    """``socket.recv_fds`` (3.9+), as 3.6 can: a message and the fds passed with it."""
    import array
    import socket

    fds = array.array("i")
    msg, ancdata, _, _ = sock.recvmsg(size, socket.CMSG_LEN(most * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return msg, list(fds)


#: hypothesis.configuration's default home, computed from the cwd when it is imported.
HYPOTHESIS_HOME = "__hypothesis_home_directory_default"


#: The oldest pytest whose plugins `preload_pytest` imports: from it to 8.3, the
#: one-argument ``_mark_plugins_for_rewrite`` marks what a run's pytest marks (the
#: ``pytest11`` distributions' files, by importlib.metadata, unless
#: ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``), and the run's hook does not warn of a module a
#: hook of its kind imported. 5.4 to 6.1 have the same code there as 6.2 (read in each
#: release); 5.4 is tried on Python 3.8 (``tests/test_plugin_preload.py``); before 5.4
#: the fallback below.
OLDEST_ALIKE = (5, 4)


def _pytest_version() -> tuple[int, ...]:
    """The installed pytest's (major, minor)."""
    from _pytest._version import version

    return tuple(int(part) for part in version.split(".")[:2])


def preload_pytest(startup_dir: str | None = None) -> str:
    """Import what a cold pytest run imports before the candidate's code: pytest, its
    built-in plugins and — unless the environment turns auto-loading off, as a run's
    would — the modules of the interpreter's plugins (entry points ``pytest11``), so
    warm runs do not pay for them. Importing a plugin registers nothing: each run's
    pytest still loads it itself. One that does not import is left to fail in the run,
    as it would cold. Returns how the plugins' start-up imports were known
    (`startup.modules`; ``none``: not asked)."""
    import importlib

    import _pytest.config

    for name in _pytest.config.default_plugins:
        importlib.import_module(f"_pytest.{name}")
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return "none"
    try:
        import importlib.metadata
    except ImportError:  # before 3.8 (whose pytest is < 8.4 anyway): plugins left to the run
        return "none"

    # Through pytest's assertion-rewriting import hook, with the plugins' modules marked
    # as pytest marks them: a run's pytest then finds them rewritten, as a cold run
    # would have imported them (and warns of no "already imported" module).
    hook: Any = None
    try:
        import _pytest.assertion

        config = _pytest.config.get_config()
        # The hook's constructor asks the ini (``python_files``), which a Config before
        # pytest 9.1 holds only once it has read its files (``inicfg`` to 9.0.0,
        # ``_inicfg`` in 9.0.x; unset, getini raised AttributeError and no plugin was
        # preloaded). Give it an empty one, as 9.1's Config starts with: every value
        # its default, as 9.1 and later preload with.
        if "_inicfg" not in vars(config) and "inicfg" not in vars(config):
            vars(config).update(_inicfg={}, inicfg={})
        hook = _pytest.assertion.install_importhook(config)
        before = set(sys.modules)  # a run's own pytest imported these before its hook too
        mark: Any = config._mark_plugins_for_rewrite
        if OLDEST_ALIKE <= _pytest_version() < (8, 4):
            # No ``disable_autoload`` argument yet: the environment alone decides, for
            # the run's pytest as here (where it does not disable them).
            mark(hook)
        else:
            mark(hook, False)
    except Exception:
        # An older pytest (< `OLDEST_ALIKE`: the call above raised TypeError): a plugin
        # imported plainly here would make the run's pytest warn "Module already
        # imported so cannot be rewritten" (an error under ``filterwarnings = error``),
        # as a cold run never does. Leave the plugins to the run.
        if hook is not None and hook in sys.meta_path:
            sys.meta_path.remove(hook)
        return "none"
    try:
        for dist in importlib.metadata.distributions():
            for ep in dist.entry_points:
                if ep.group == "pytest11":
                    with contextlib.suppress(Exception):
                        importlib.import_module(ep.module)
        # What the plugins import when pytest configures (hypothesis imports most of
        # itself then): learnt from a pytest start on an empty directory in a child of
        # this interpreter (once per interpreter and environment: kept in
        # ``startup_dir``), and imported here in the same order. Imports only: no hook
        # runs, nothing is configured; each run's pytest still does all of that itself.
        names, how = startup.modules(startup_dir)
        for name in names:
            if name not in sys.modules:
                with contextlib.suppress(Exception):
                    importlib.import_module(name)
    finally:
        if hook is not None and hook in sys.meta_path:
            sys.meta_path.remove(hook)
        # imported as a default configuration has pytest rewrite them: a run whose
        # configuration differs checks them (`rewriting.unlike_cold`)
        rewriting.preloaded(hook, before)
    return how


def serve(
    mode: str, supervisor_pid: int, fd: int, startup_dir: str | None = None
) -> tuple[str, bool, Instructions | None, int | None]:
    """Fork a run's outer process per request; returns only in a child, with its spec's
    path, whether the child is already the init of the run's namespaces (`fork_init`),
    and for a boxed run its spec as read here and its view's template (or None).
    ``startup_dir``: where what a pytest start imports is kept (`startup.modules`).

    A request is one datagram (`wire.SpawnRequest`) on the control socket carrying one
    fd, the run's reply socket, which gets ``{"pid"}`` at once, ``{"status"}`` (the raw
    wait status) when the child is reaped, and its output as `outputs` drains it.
    The server exits when aexec closes the control socket or dies (PR_SET_PDEATHSIG).
    """
    import selectors
    import socket

    kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
    ctrl = socket.socket(fileno=fd)
    if os.getppid() != supervisor_pid:
        os._exit(wire.BOX_FAILED)
    try:
        # What a cold driver imports anyway before the candidate's code runs.
        import subprocess  # noqa: F401

        for name in runners.FIRST_USE_IMPORTS:
            __import__(name)

        how = preload_pytest(startup_dir) if mode == "pytest" else "none"
    except BaseException as e:
        ctrl.send(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}).encode())
        os._exit(1)
    contain.keep_path()
    send_ready(ctrl, how)
    # No gc.freeze(): a frozen heap hides the server's objects from gc.get_referrers
    # and gc.get_objects, so a forked run would not see the heap a cold one does
    # (hypothesis's register_random check warned, and filterwarnings = error failed it).
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(ctrl, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    runs = outputs.Outputs(sel)
    inits: set[int] = set()
    draining = False
    while True:
        for key, _ in sel.select(runs.due()):
            if key.data is not None:
                runs.readable(key.fd, key.data)
            elif key.fileobj is ctrl:
                msg, fds = _recv_fds(ctrl, 1 << 20, 1)
                if not msg:  # aexec is done, or gone, or retired this server (stale):
                    if not runs.runs:
                        os._exit(0)
                    # its runs still going end as they would have, reported as ever
                    sel.unregister(ctrl)
                    draining = True
                    continue
                request = json.loads(msg)
                (reply,) = fds
                as_init = bool(request.get("box")) and kernel.SYS_CLONE is not None
                spec, tree = boxed(request)
                set_environ(request["env"])  # here, not in each child: see set_environ
                (out_r, out_w), (err_r, err_w) = runs.pipes()
                try:
                    pid = kernel.fork_init() if as_init else os.fork()
                except OSError:  # clone refused (a seccomp filter, say): the outer way
                    as_init = False
                    pid = os.fork()
                if pid == 0:
                    # Nothing of the server survives into the run: its sockets are
                    # detached (not closed later by the GC, on fds the run may reuse),
                    # and `become` closes every fd of the server's. Its objects are
                    # held, not freed: freeing them (the selector's map, the runs' state,
                    # this frame's locals) would write, and so copy, their pages.
                    for sock in (ctrl, *runs.sockets()):
                        sock.detach()
                    _HELD.append(locals())
                    signal.set_wakeup_fd(-1)
                    # _signal's own call: signal.signal's enum conversions (and the
                    # ValueError it raises and catches for a Python handler) cost a
                    # forked child ~0.15 ms of copied pages.
                    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
                    become(request, out_w, err_w, as_init=as_init, keep=tree)
                    template.templates.clear()  # their fds are closed but this run's
                    return str(request["spec"]), as_init, spec, tree
                os.close(out_w)
                os.close(err_w)
                sock = socket.socket(fileno=reply)
                runs.add(pid, sock, (out_r, err_r), int(request["cap"]))
                if as_init:
                    inits.add(pid)
                with contextlib.suppress(OSError):
                    sock.send(json.dumps({"pid": pid, "init": as_init}).encode())
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
                    if pid in inits:
                        inits.discard(pid)
                        if os.WIFSIGNALED(status):  # as the outer process reports it
                            status = (128 + os.WTERMSIG(status)) << 8
                    runs.reaped(pid, status)
        if draining and not runs.runs:
            os._exit(0)


def send_ready(ctrl: Any, how: str) -> None:
    """The ready datagram (`wire.ServerReady`), then the stamps of the files behind every
    module imported so far, in datagrams of at most `wire.FILES_DATAGRAM_BYTES`: aexec
    uses this server only while they are unchanged (a forked run runs the code imported
    here, a cold run the files' code)."""
    chunks: list[str] = []
    part: list[str] = []
    size = 0
    for stamp in startup.stamps(startup.module_files(list(sys.modules.values()))):
        item = json.dumps(stamp)
        if part and size + len(item) > wire.FILES_DATAGRAM_BYTES:
            chunks.append("[" + ",".join(part) + "]")
            part, size = [], 0
        part.append(item)
        size += len(item) + 1
    if part:
        chunks.append("[" + ",".join(part) + "]")
    modules = sorted({m.split(".")[0] for m in sys.modules})
    ready: ServerReady = {"ok": True, "modules": modules, "startup": how, "files": len(chunks)}
    ctrl.send(json.dumps(ready).encode())
    for chunk in chunks:
        ctrl.send(chunk.encode())


def boxed(request: SpawnRequest) -> tuple[Instructions | None, int | None]:
    """A boxed run's spec, and the template of its view (made on first use); (None,
    None) for a run without a box, or whose spec this server cannot read (the run reads
    it itself, and fails as a cold run would)."""
    if not request.get("box"):
        return None, None
    try:
        with open(request["spec"], "rb") as f:
            spec: Instructions = json.loads(f.read())
        box = spec["box"]
        return spec, template.template(box) if box else None
    except (OSError, ValueError, KeyError, TypeError):
        return None, None


#: In a forked run, what the server's loop held (`serve`): never freed there.
_HELD: list[Any] = []
#: The environment the last request asked for (`set_environ`).
_LAST_ENV: dict[str, str] = {}


def set_environ(env: dict[str, str]) -> None:
    """Make this process's environment ``env``, in its order, as ``os.environ.clear()``
    then ``update(env)`` would: the server does it before each fork, so its child
    inherits it. A server's runs share its environment but for HOME and TMPDIR
    (``PER_RUN_ENV``): only what differs from the last run's is set, where each forked
    child rebuilt the whole environment (half a millisecond per run, most of it copied
    pages), compared with the last request's (`_LAST_ENV`: nothing else changes the
    server's environment) rather than with ``os.environ``, whose every read decodes.
    What the server reads of its environment once it serves (``AEXEC_VIEW_TEMPLATE``)
    is the same in every run's."""
    if list(_LAST_ENV) != list(env):  # the first request, other names, or another order
        os.environ.clear()
        os.environ.update(env)
    else:
        for name, value in env.items():
            if _LAST_ENV[name] != value:
                os.environ[name] = value
    _LAST_ENV.clear()
    _LAST_ENV.update(env)


def become(
    request: SpawnRequest,
    out: int,
    err: int,
    *,
    as_init: bool = False,
    go: int | None = None,
    keep: int | None = None,
) -> None:
    """What a fresh ``Popen(argv, stdin=DEVNULL, cwd, env, start_new_session)`` gives
    (``keep``: an fd left open, the view's template, which the init closes), the
    environment set already (`set_environ`, in the server).

    An init forked into its namespaces starts no session of its own: a cold run's
    session is its outer process's, outside the PID namespace, and so is the server's.
    """
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    top = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if keep is None:
        os.closerange(3, top)
    else:
        os.closerange(3, keep)
        os.closerange(keep + 1, top)
    if not as_init:
        os.setsid()
    # hypothesis (a plugin `preload_pytest` imports) keeps the cwd it was imported in
    # as its database's default home: the run's, as a cold run's import would have it
    # (the server's: an unusable ``/.hypothesis``, whose warning is an error under
    # ``filterwarnings = error``, and no example database).
    configuration = sys.modules.get("hypothesis.configuration")
    home = getattr(configuration, HYPOTHESIS_HOME, None)
    if home is not None and str(home) != os.path.join(os.getcwd(), ".hypothesis"):
        home = None  # not the server's: left alone
    os.chdir(request["cwd"])
    if home is not None:
        setattr(configuration, HYPOTHESIS_HOME, type(home)(os.path.join(os.getcwd(), ".hypothesis")))
    # The environment is the request's already: the server set it before the fork.
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile.tempdir = None  # type: ignore[attr-defined]  # read from TMPDIR afresh
