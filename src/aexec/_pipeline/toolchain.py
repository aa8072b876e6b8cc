"""The candidate's interpreter: resolved, probed, and known by what it has installed.

An interpreter's version and its distributions' fingerprint are part of every cache key;
the directories it reads are made reachable inside the boundary. Probing starts the
interpreter, so it is done once per `Toolchains` (one per `Observer`) while the
interpreter and its import directories are unchanged, and with a cache dir once until
they change. Whether they changed is rechecked once per call, or with
`Options.recheck_s` once per that many seconds (`Rechecked`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterable, Iterator

import anyio
import attrs

from .._errors import RequestError
from .._stages.keys import lang_fingerprint, sources_key, toolchain_identity, toolchain_key
from .cache import DiskCache, Inflight, Rechecked, in_thread

#: How long asking an interpreter for its version and packages may take.
PROBE_TIMEOUT_S = 60.0
_PROBE = (
    "import os, sys, json, platform, hashlib\n"
    "try:\n"
    " import importlib.metadata as m\n"
    " dists = sorted({f'{d.metadata[\"Name\"]}=={d.version}' for d in m.distributions()})\n"
    # Before 3.8 (no importlib.metadata): the installed distributions' directory names.
    "except ImportError:\n"
    " dists = sorted({'=='.join(e.rsplit('.', 1)[0].split('-')[:2]) for p in sys.path if os.path.isdir(p)"
    " for e in os.listdir(p) if e.endswith(('.dist-info', '.egg-info'))})\n"
    "pt = [d for d in dists if d.lower().startswith('pytest==')]\n"
    # Sources outside the install, which an edit changes without installing anything: a
    # sys.path directory no prefix holds (a ``.pth``'s, as most editable installs lay
    # out), and the packages a setuptools editable finder maps (``MAPPING``).
    "pre = [os.path.realpath(x) for x in (sys.prefix, sys.base_prefix, sys.exec_prefix)]\n"
    "out = lambda p: not any(p == x or p.startswith(x + os.sep) for x in pre)\n"
    "dirs = [os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)]\n"
    "ed = {p for p in dirs if out(p)}\n"
    "for p in dirs:\n"
    " for e in [e for e in os.listdir(p) if e.startswith('__editable__') and e.endswith('_finder.py')]:\n"
    "  try:\n"
    "   import ast\n"
    "   with open(os.path.join(p, e)) as f:\n"
    "    for n in ast.parse(f.read()).body:\n"
    "     t = getattr(n, 'targets', None) or [getattr(n, 'target', None)]\n"
    "     if getattr(t[0], 'id', '') == 'MAPPING':\n"
    "      ed.update(os.path.realpath(v if os.path.isdir(v) else os.path.dirname(v))"
    " for v in ast.literal_eval(n.value).values())\n"
    "  except Exception:\n"
    "   pass\n"
    "print(json.dumps({'version': platform.python_implementation() + ' ' + platform.python_version()"
    " + ('; ' + pt[0].replace('==', ' ') if pt else '; no pytest'),"
    " 'fingerprint': hashlib.sha256('\\n'.join(dists).encode()).hexdigest(),"
    " 'editable': sorted(ed),"
    " 'paths': sorted({p for p in [*sys.path, sys.prefix, sys.base_prefix, sys.exec_prefix,"
    " os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable)), *ed]"
    " if p and os.path.isdir(p)})}))\n"
)


@attrs.frozen
class Toolchain:
    path: str
    version: str
    fingerprint: str
    #: What the interpreter reads: made reachable to the run's uid inside the boundary.
    paths: tuple[str, ...]
    #: `stamp` of the interpreter and ``paths`` when probed: the answer holds while equal.
    stamp: tuple[tuple[int, int], ...]
    #: The sources it imports from outside its install (editable installs: a ``.pth``'s
    #: directory, a setuptools finder's packages), which an edit changes in place.
    editable: tuple[str, ...] = ()
    #: `sources_stamp` of ``editable`` this call ("" without any).
    sources: str = ""

    @property
    def identity(self) -> str:
        """What an observation of it rests on, for the cache keys: its distributions and,
        with editable installs, their sources as they are this call."""
        return toolchain_identity(self.fingerprint, self.sources)


def stamp(paths: Iterable[str]) -> tuple[tuple[int, int], ...]:
    """What a probe's answer rests on: (mtime, size) of the interpreter and its import dirs.

    Installing or removing a distribution changes its site directory's mtime.
    """
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((-1, -1))
    return tuple(out)


#: Directories `sources_stamp` does not enter: a VCS's, caches, another environment's.
NOT_SOURCES = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "node_modules",
    }
)


def sources_stamp(roots: Iterable[str]) -> str:
    """`sources_key` of every file's path, mtime and size under ``roots`` (not under
    `NOT_SOURCES` or a venv): it moves when a source there is edited, added or removed."""

    def files() -> Iterator[tuple[str, int, int]]:
        todo = list(roots)
        while todo:
            try:
                entries = sorted(os.scandir(todo.pop()), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in NOT_SOURCES and not os.path.exists(
                        os.path.join(entry.path, "pyvenv.cfg")
                    ):
                        todo.append(entry.path)
                    continue
                try:
                    st = entry.stat()  # a link's target (a link to a directory: its own stat)
                except OSError:
                    continue
                yield entry.path, st.st_mtime_ns, st.st_size

    return sources_key(files())


def resolve_python(python: str | None) -> str:
    """The interpreter a candidate names (default: the one running aexec), as an absolute
    path; raises `RequestError` if it is not an executable file."""
    if python is None:
        return sys.executable
    found = shutil.which(python) if os.sep not in python else python
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise RequestError(f"python: {python!r} is not an executable file")
    return os.path.abspath(found)


async def probe_toolchain(python: str) -> Toolchain:
    """Ask ``python`` itself; raises `RequestError` if it does not answer as a Python would."""
    with anyio.fail_after(PROBE_TIMEOUT_S):
        done = await anyio.run_process(
            [python, "-s", "-c", _PROBE],
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            check=False,
        )
    try:
        info = json.loads(done.stdout)
        paths = tuple(map(str, info["paths"]))
        return Toolchain(
            python,
            str(info["version"]),
            str(info["fingerprint"]),
            paths,
            await in_thread(stamp, [python, *paths]),
            editable=tuple(map(str, info.get("editable", ()))),
        )
    except (ValueError, KeyError, TypeError, RecursionError):
        msg = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no answer"]
        raise RequestError(f"python: {python!r} is not a usable interpreter ({msg[0]})") from None


def _from_disk(hit: object) -> Toolchain | None:
    if not isinstance(hit, dict):
        return None
    try:
        return Toolchain(
            path=str(hit["path"]),
            version=str(hit["version"]),
            fingerprint=str(hit["fingerprint"]),
            paths=tuple(map(str, hit["paths"])),
            stamp=tuple((int(a), int(b)) for a, b in hit["stamp"]),
            editable=tuple(map(str, hit.get("editable", ()))),
        )
    except (TypeError, KeyError, ValueError):
        return None  # a foreign entry: probe afresh


class Toolchains:
    """Interpreters probed so far (by an `Observer`), each valid while its stamp holds."""

    def __init__(self, aexec_version: str, recheck_s: float = 0.0) -> None:
        self._known: dict[str, Toolchain] = {}
        self._version = aexec_version
        #: Each interpreter's last recheck (its stamp and editable sources).
        self._rechecked: Rechecked[Toolchain] = Rechecked(recheck_s)

    async def get(self, python: str, inflight: Inflight[Toolchain], disk: DiskCache | None) -> Toolchain:
        """``python``'s toolchain, probed once per ``inflight`` (a call) and change; its
        editable sources stamped once per call (`Toolchain.sources`) — or both rechecked
        once per `Options.recheck_s` (`Rechecked`)."""
        try:
            os.stat(python)
        except OSError as e:
            raise RequestError(f"python: {python!r} does not exist") from e

        async def probe() -> Toolchain:  # once per call: its key made here, not per job
            known = self._known.get(python)
            if known is not None and known.stamp == await in_thread(stamp, [python, *known.paths]):
                return known
            disk_key = toolchain_key(python, aexec=self._version)
            if disk is not None:
                tool = _from_disk(await in_thread(disk.get, disk_key))
                if tool is not None and tool.stamp == await in_thread(stamp, [python, *tool.paths]):
                    self._known[python] = tool
                    return tool
            tool = await probe_toolchain(python)
            self._known[python] = tool
            if disk is not None:
                try:
                    await in_thread(disk.put, disk_key, attrs.asdict(tool))
                except OSError:
                    pass  # a read-only cache: probed again next time
            return tool

        async def this_call() -> Toolchain:
            tool = await probe()
            if tool.editable:
                tool = attrs.evolve(tool, sources=await in_thread(sources_stamp, tool.editable))
            return tool

        tool, _ = await inflight.run(python, lambda: self._rechecked.run(python, this_call))
        return tool


# -- languages beyond Python (aexec._languages) ------------------------------------------


@attrs.frozen
class LangToolchain:
    """A language's toolchain: its executables resolved, its version, what it reads."""

    language: str
    #: ``(name, absolute path)`` of each of the language's ``tools`` (`aexec._languages.Language`).
    tools: tuple[tuple[str, str], ...]
    version: str
    #: SHA-256 of the version output and the resolved executables (path, size, mtime).
    fingerprint: str
    #: Install prefixes the tools read: made reachable inside the boundary.
    paths: tuple[str, ...]
    stamp: tuple[tuple[int, int], ...]

    @property
    def tool_map(self) -> dict[str, str]:
        return dict(self.tools)


def search_path() -> list[str]:
    """Where a language's executables are looked for: PATH, then ``~/.cargo/bin``."""
    dirs = [d for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if d]
    return [*dirs, os.path.expanduser("~/.cargo/bin")]


def _prefix(real: str) -> str:
    """A tool's install prefix: ``/usr`` for ``/usr/bin/gcc``, the JDK for ``…/bin/java``."""
    bindir = os.path.dirname(real)
    return os.path.dirname(bindir) if os.path.basename(bindir) == "bin" else bindir


def _which(name: str, where: str) -> tuple[str, str] | None:
    """``(absolute path, real path)`` of an executable ``name`` on ``where`` (or a path)."""
    found = name if os.sep in name else shutil.which(name, path=where)
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        return None
    return os.path.abspath(found), os.path.realpath(found)


async def _run(argv: list[str]) -> tuple[int, str, str]:
    with anyio.fail_after(PROBE_TIMEOUT_S):
        done = await anyio.run_process(
            argv, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C"}, check=False
        )
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


async def probe_language(language: str) -> LangToolchain:
    """Resolve ``language``'s tools and ask them for the version; `RequestError` if one is missing.

    ``rustc`` on PATH is usually rustup's proxy, which reads ``~/.rustup`` (not HOME inside
    the boundary): the toolchain's own ``rustc`` under ``rustc --print sysroot`` is run instead.
    """
    from .. import _languages as langs

    lang = langs.language(language)
    where = os.pathsep.join(search_path())
    tools: dict[str, str] = {}
    paths: list[str] = []
    required = lang.tools
    for name in (*required, *(lang.suite.tools if lang.suite else ())):
        if name == "cargo" and "rustc" in tools:  # the toolchain's own, beside its rustc
            where_cargo = os.path.join(os.path.dirname(tools["rustc"]), "cargo")
            if await in_thread(_which, where_cargo, "") is not None:
                tools[name] = where_cargo
                continue
        resolved = await in_thread(_which, name, where)
        if resolved is None and name not in required:
            continue  # a suite's tool: only run_suite needs it (it then fails to start)
        if resolved is None:
            raise RequestError(
                f"language {language!r}: {name!r} is not installed (searched PATH and ~/.cargo/bin)"
            )
        found, real = resolved
        if name == "rustc":
            rc, out, err = await _run([found, "--print", "sysroot"])
            own = os.path.join(out.strip(), "bin", "rustc")
            if rc != 0 or await in_thread(_which, own, "") is None:
                raise RequestError(
                    f"language {language!r}: rustc has no usable sysroot ({err.strip()[:200]})"
                )
            found = real = own
        tools[name] = found
        paths.append(_prefix(real))
    rc, out, err = await _run(list(lang.version_argv(tools=tools)))
    version = lang.parse_version(out, err)
    if rc != 0 or not version:
        raise RequestError(f"language {language!r}: the version probe failed ({(err or out).strip()[:200]})")
    stamps = await in_thread(stamp, tools.values())
    return LangToolchain(
        language,
        tuple(sorted(tools.items())),
        version,
        lang_fingerprint(language, version, tools, stamps),
        tuple(sorted(set(paths))),
        stamps,
    )


class LangToolchains:
    """Language toolchains probed so far (by an `Observer`), each valid while its stamp holds."""

    def __init__(self, recheck_s: float = 0.0) -> None:
        self._known: dict[str, LangToolchain] = {}
        self._rechecked: Rechecked[LangToolchain] = Rechecked(recheck_s)

    async def get(self, language: str, inflight: Inflight[LangToolchain]) -> LangToolchain:
        """``language``'s toolchain, its tools' stamps rechecked once per ``inflight`` (a
        call), or once per `Options.recheck_s` (`Rechecked`)."""

        async def probe() -> LangToolchain:
            known = self._known.get(language)
            if known is not None and known.stamp == await in_thread(stamp, dict(known.tools).values()):
                return known
            found = await probe_language(language)
            self._known[language] = found
            return found

        tool, _ = await inflight.run(language, lambda: self._rechecked.run(language, probe))
        return tool
