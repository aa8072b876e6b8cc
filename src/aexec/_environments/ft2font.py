"""matplotlib's ``ft2font`` as SWE-bench's build has it: FreeType 2.6.1 (I/O).

matplotlib is built in place against Debian's FreeType (`inplace.MPLSETUP`: its build's
download of FreeType 2.6.1 is unreachable), but its baseline images with text are 2.6.1's.
Its release wheels are built by the same ``setupext.py`` with FreeType 2.6.1, linked
statically into ``matplotlib/ft2font.<EXT_SUFFIX>``. `adopt` takes that extension from the release
nearest the checkout's version (`candidates`) whose sdist holds the checkout's ft2font
sources byte for byte (`compared`: the sources ``setupext.py`` lists for
``matplotlib.ft2font`` and what they include, and the local FreeType's version), and
whose wheel fits the environment's Python and machine (`wheel_fits`); else the build's
own (Debian's FreeType) stays. Either way it says which (`Adopted.note`).

Downloads come from the package index (``UV_DEFAULT_INDEX``, ``UV_INDEX_URL``,
``PIP_INDEX_URL`` or PyPI; its simple API, PEP 691 JSON or PEP 503 HTML), checked
against the index's SHA-256, and are kept under the environments' root by that hash:
``pypi/<sha256>.json`` an sdist's source hashes (the sdist itself is not kept),
``pypi/<sha256>/ft2font.*.so`` a wheel's extension.
"""

from __future__ import annotations

import ast
import bisect
import glob
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Mapping
from http.client import HTTPException
from pathlib import Path

import attrs

from .._log import get_logger
from .store import read_json, write_json

log = get_logger(__name__)

EXTENSION = "matplotlib.ft2font"
#: What the in-place key names for a matplotlib build (a build made before `adopt` is
#: not served for one made with it).
KEY_TAG = "ft2font: a release wheel's where its sources are the checkout's"
#: Releases whose sdist is looked at, nearest first: each sdist is ~40 MB.
MAX_CANDIDATES = 5
DOWNLOAD_TIMEOUT_S = 120.0
_PYPI = "https://pypi.org/simple"
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
_FREETYPE = re.compile(
    r"""^(?:TESTING_VERSION_OF_FREETYPE|LOCAL_FREETYPE_VERSION)\s*=\s*['"]([\d.]+)['"]""", re.M
)
_RELEASE = re.compile(r"^\d+(\.\d+)*$")
_SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".hxx")
#: Run in the build's copy: what the built (or adopted) extension says it is.
_CHECK = (
    "import sys; sys.path.insert(0, 'lib'); import matplotlib.ft2font as f;"
    " print('FT2FONT', f.__freetype_version__, f.__freetype_build_type__)"
)
_SAID = re.compile(r"^FT2FONT (\S+) (\S+)$", re.M)

Check = Callable[[list[str], Mapping[str, str]], tuple[int | None, str]]


@attrs.frozen
class Adopted:
    """What `adopt` did: the note an environment carries, and the files compared."""

    note: str
    #: The release whose extension is used (None: the build's own stays).
    release: str | None
    compared: tuple[str, ...] = ()


def extension_sources(setupext: str) -> list[str]:
    """The sources ``setupext.py`` lists for ``matplotlib.ft2font`` (``Extension(name,
    [sources])``), or [] when it lists none that can be read."""
    try:
        tree = ast.parse(setupext)
    except SyntaxError:
        return []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and len(node.args) >= 2):
            continue
        name, listed = node.args[0], node.args[1]
        if isinstance(name, ast.Constant) and name.value == EXTENSION and isinstance(listed, ast.List):
            got = [e.value for e in listed.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            return got if len(got) == len(listed.elts) else []
    return []


def freetype_version(setupext: str) -> str | None:
    """The FreeType ``setupext.py`` builds locally (``LOCAL_FREETYPE_VERSION``)."""
    m = _FREETYPE.search(setupext)
    return m.group(1) if m else None


def closure(
    sources: Iterable[str], read: Callable[[str], str | None], include_dirs: Iterable[str]
) -> list[str]:
    """``sources`` and every file they include (``#include "…"``, transitively), found in
    the including file's directory or ``include_dirs`` (relative paths; ``read`` gives a
    path's text or None where there is no such file). An include found nowhere (a system
    header) is not compared."""
    dirs, seen, todo = list(include_dirs), dict[str, None](), list(sources)
    while todo:
        path = os.path.normpath(todo.pop())
        if path in seen:
            continue
        text = read(path)
        seen[path] = None
        if text is None:
            continue
        for name in _INCLUDE.findall(text):
            for d in [os.path.dirname(path), *dirs]:
                found = os.path.normpath(os.path.join(d, name))
                if read(found) is not None:
                    todo.append(found)
                    break
    return sorted(seen)


def _text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def compared(repo: str) -> tuple[list[str], str | None]:
    """The checkout's files the ft2font extension compiles from (`closure` of what
    ``setupext.py`` lists, ``src`` and the vendored ``extern/*/include`` searched), and its
    local FreeType version; ([], None) for a checkout that does not say."""
    setupext = _text(os.path.join(repo, "setupext.py")) or ""
    sources = extension_sources(setupext)
    extern = glob.glob(os.path.join(repo, "extern", "*", "include"))
    dirs = ["src", *sorted(os.path.relpath(d, repo) for d in extern)]
    rels = closure(sources, lambda rel: _text(os.path.join(repo, rel)), dirs)
    return (rels, freetype_version(setupext)) if sources else ([], None)


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def matches(files: Mapping[str, str], freetype: str | None, manifest: Mapping[str, object]) -> bool:
    """Are the checkout's ``files`` (path -> SHA-256) and local FreeType a release's (its
    sdist's `manifest`)? Every file must be there, byte for byte."""
    theirs = manifest.get("files")
    if not files or freetype is None or not isinstance(theirs, dict) or manifest.get("freetype") != freetype:
        return False
    return all(theirs.get(p) == h for p, h in files.items())


def _release(version: str) -> tuple[int, ...]:
    m = re.match(r"^\d+(\.\d+)*", version)
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def candidates(releases: Iterable[str], hint: str, limit: int = MAX_CANDIDATES) -> list[str]:
    """The final ``releases`` to try for a checkout whose version is ``hint`` (``3.7``,
    ``3.7.1``, ``3.8.0.dev12+g…``), likeliest first: the first release ``hint`` is a prefix
    of (a branch's start), the next after those (main's next), their last (backports), the
    rest of them, then the others by their distance from ``hint`` in release order (a
    later one before an earlier one as far away); at most ``limit``."""
    want = _release(hint)
    finals = sorted({r for r in releases if _RELEASE.match(r)}, key=_release)
    if not want or want[0] == 0:  # setuptools-scm's version of an untagged checkout
        return []
    same = [r for r in finals if _release(r)[: len(want)] == want]
    others = [r for r in finals if r not in same]
    at = bisect.bisect_left([_release(r) for r in others], want)
    # Later before earlier as far away.
    ranked = [others[i] for i in sorted(range(len(others)), key=lambda i: (abs(i - at + 0.5), i < at))]
    order = [*same[:1], *ranked[:1], *same[-1:], *same[1:-1], *ranked[1:]]
    return list(dict.fromkeys(order))[:limit]


def glibc() -> tuple[int, int]:
    """The C library's version (a manylinux wheel's floor), (0, 0) where not glibc."""
    m = re.search(r"(\d+)\.(\d+)", os.confstr("CS_GNU_LIBC_VERSION") or "")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def wheel_fits(filename: str, python: tuple[int, ...], machine: str, libc: tuple[int, int]) -> bool:
    """Does wheel ``filename`` load in CPython ``python`` on ``machine`` (``x86_64``) with
    glibc ``libc``? Its own ``cpXY`` ABI and a manylinux platform no newer than ``libc``."""
    parts = filename.removesuffix(".whl").split("-")
    if len(parts) < 5 or not filename.endswith(".whl"):
        return False
    tag = f"cp{python[0]}{python[1]}"
    if tag not in parts[-3].split(".") or tag not in parts[-2].split("."):
        return False
    for plat in parts[-1].split("."):
        m = re.match(r"^(manylinux1|manylinux2010|manylinux2014|manylinux_(\d+)_(\d+))_(.+)$", plat)
        if m is None or m.group(4) != machine:
            continue
        floor = _LEGACY.get(m.group(1)) or (int(m.group(2)), int(m.group(3)))
        if floor <= libc:
            return True
    return False


@attrs.frozen
class _File:
    filename: str
    url: str
    sha256: str


def index_url(env: Mapping[str, str]) -> str:
    """The simple API aexec's builds use (uv's and pip's settings), or PyPI's."""
    for var in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"):
        if env.get(var, "").strip():
            return env[var].strip().split()[0]
    return _PYPI


def _listing(index: str, project: str) -> list[_File]:
    """The project's files on the index (not yanked, with a SHA-256)."""
    url = index.rstrip("/") + f"/{project}/"
    accept = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT_S) as r:
        kind, body = r.headers.get("Content-Type", ""), r.read().decode("utf-8", "replace")
    out: list[_File] = []
    if "json" in kind:
        for f in json.loads(body).get("files", []):
            sha = (f.get("hashes") or {}).get("sha256")
            if sha and not f.get("yanked"):
                out.append(_File(f["filename"], urllib.parse.urljoin(url, f["url"]), sha))
        return out
    for href, attrs_ in re.findall(r'<a\s+[^>]*?href="([^"]+)"([^>]*)>', body):
        link, _, fragment = href.partition("#sha256=")
        if fragment and "data-yanked" not in attrs_:
            name = urllib.parse.unquote(link.rsplit("/", 1)[-1])
            out.append(_File(name, urllib.parse.urljoin(url, link), fragment))
    return out


def _download(file: _File, tmp: str) -> str:
    """``file`` downloaded into ``tmp``, its SHA-256 the index's (else `OSError`)."""
    path = os.path.join(tmp, file.filename)
    with urllib.request.urlopen(file.url, timeout=DOWNLOAD_TIMEOUT_S) as r, open(path, "wb") as f:
        shutil.copyfileobj(r, f, 1 << 20)
    if _digest(path) != file.sha256:
        raise OSError(f"{file.filename}: its SHA-256 is not the index's")
    return path


def _manifest(sdist: _File, cache: str, tmp: str) -> dict[str, object]:
    """The sdist's C and C++ sources and headers (path -> SHA-256) and its local FreeType:
    from the cache, or downloaded once."""
    record = os.path.join(cache, sdist.sha256 + ".json")
    got = read_json(record)
    if got is not None:
        return got
    files: dict[str, str] = {}
    freetype = None
    with tarfile.open(_download(sdist, tmp)) as t:
        for member in t:
            rel = member.name.split("/", 1)[1] if "/" in member.name else ""
            if not member.isfile() or not (rel.endswith(_SOURCE_SUFFIXES) or rel == "setupext.py"):
                continue
            data = t.extractfile(member)
            raw = data.read() if data is not None else b""
            if rel == "setupext.py":
                freetype = freetype_version(raw.decode("utf-8", "replace"))
            else:
                files[os.path.normpath(rel)] = hashlib.sha256(raw).hexdigest()
    manifest: dict[str, object] = {"sdist": sdist.filename, "freetype": freetype, "files": files}
    write_json(record, manifest)
    return manifest


def _extension(wheel: _File, name: str, cache: str, tmp: str) -> str | None:
    """The wheel's ``matplotlib/<name>`` (the built extension's file name), kept under its
    hash; None when the wheel has no such file."""
    kept = os.path.join(cache, wheel.sha256, name)
    if os.path.isfile(kept):
        return kept
    with zipfile.ZipFile(_download(wheel, tmp)) as z:
        if f"matplotlib/{name}" not in z.namelist():
            return None
        os.makedirs(os.path.dirname(kept), exist_ok=True)
        part = os.path.join(tmp, name)  # this call's: moved into the cache whole
        with z.open(f"matplotlib/{name}") as src, open(part, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(part, kept)
    return kept


def pick(
    repo: str, root: str, hint: str, name: str, python: tuple[int, ...], index: str
) -> tuple[str | None, str | None, list[str], list[str]]:
    """The release whose sources are the checkout's and whose wheel fits: (release, its
    extension ``name``, the files compared, the releases tried)."""
    rels, freetype = compared(repo)
    if not rels:
        return None, None, [], []
    files = {p: _digest(os.path.join(repo, p)) for p in rels if os.path.isfile(os.path.join(repo, p))}
    listed = _listing(index, "matplotlib")
    sdists = {
        f.filename[len("matplotlib-") : -len(".tar.gz")]: f for f in listed if f.filename.endswith(".tar.gz")
    }
    machine, libc = os.uname().machine, glibc()
    wheels = {f.filename.split("-")[1]: f for f in listed if wheel_fits(f.filename, python, machine, libc)}
    cache = os.path.join(root, "pypi")
    os.makedirs(cache, exist_ok=True)
    os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
    tried: list[str] = []
    for release in candidates([r for r in sdists if r in wheels], hint):
        tried.append(release)
        tmp = tempfile.mkdtemp(prefix="ft2font-", dir=os.path.join(root, "tmp"))
        try:
            if matches(files, freetype, _manifest(sdists[release], cache, tmp)):
                return release, _extension(wheels[release], name, cache, tmp), rels, tried
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return None, None, rels, tried


def _said(check: Check, env: Mapping[str, str]) -> tuple[str, str] | None:
    rc, output = check(["-c", _CHECK], env)
    m = _SAID.search(output)
    return (m.group(1), m.group(2)) if rc == 0 and m else None


def recorded(marker: Mapping[str, object]) -> tuple[str | None, tuple[str, ...]]:
    """The note and the files compared an in-place build's marker keeps (`Adopted`)."""
    got = marker.get("ft2font")
    note, rels = (got.get("note"), got.get("compared")) if isinstance(got, dict) else (None, None)
    return (str(note) if note else None), (tuple(map(str, rels)) if isinstance(rels, list | tuple) else ())


def adopt(copy: str, repo: str, root: str, hint: str, interpreter: str, check: Check) -> Adopted | None:
    """In the build's ``copy`` of matplotlib checkout ``repo``: the ft2font extension (in
    place and in ``build/lib*``) replaced with the release wheel's `pick` finds, its times
    kept, when it loads there and says FreeType's ``local`` build (``check`` runs the
    environment's Python in the copy with extra arguments and variables); else the build's
    own stays. None when the copy has no ft2font extension."""
    built = sorted(glob.glob(os.path.join(copy, "lib", "matplotlib", "ft2font.*.so")))
    built += sorted(glob.glob(os.path.join(copy, "build", "lib*", "matplotlib", "ft2font.*.so")))
    if not built:
        return None
    env = {"MPLCONFIGDIR": os.path.join(os.path.dirname(copy), "mplconfig")}
    python = (_release(interpreter) + (0, 0))[:2]
    own = _said(check, env)
    own_said = f"FreeType {own[0]} ({own[1]})" if own else "the environment's FreeType"
    name = os.path.basename(built[0])
    try:
        release, so, rels, tried = pick(repo, root, hint, name, python, index_url(os.environ))
    except (OSError, ValueError, KeyError, HTTPException, tarfile.TarError, zipfile.BadZipFile) as e:
        log.info("ft2font_kept", reason=str(e))
        return Adopted(f"ft2font built against {own_said}: the release wheels could not be had ({e})", None)
    if release is None or so is None:
        why = f"no release's sources are the checkout's (tried {', '.join(tried) or 'none'})"
        return Adopted(f"ft2font built against {own_said}: {why}", None, tuple(rels))
    kept = {p: (Path(p).read_bytes(), os.stat(p)) for p in built}
    for p, (_, st) in kept.items():
        shutil.copyfile(so, p)
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # as built: build_ext sees it current
    said = _said(check, env)
    if said is None or said[1] != "local":
        for p, (data, st) in kept.items():
            Path(p).write_bytes(data)
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
        shown = f"FreeType {said[0]} ({said[1]})" if said else "no answer"
        why = f"matplotlib {release}'s wheel's is not FreeType's local build here ({shown})"
        return Adopted(f"ft2font built against {own_said}: {why}", None, tuple(rels))
    note = (
        f"ft2font from matplotlib {release}'s wheel: its sources are the checkout's"
        f" ({len(rels)} files), FreeType {said[0]} as SWE-bench's build; a patch touching them"
        " or a header rebuilds it against the environment's FreeType"
    )
    log.info("ft2font_adopted", release=release, freetype=said[0])
    return Adopted(note, release, tuple(rels))


def rebuilt_note(
    adopted: str | None, compared_files: Iterable[str], touched: Iterable[str], force: bool
) -> str | None:
    """The note of a run whose patches rebuilt the in-place build: a wheel's ft2font is
    rebuilt (the environment's FreeType) when they touch its sources, or all is (``force``)."""
    if adopted is None or not adopted.startswith("ft2font from"):
        return adopted
    rels = set(compared_files)
    if force or any(os.path.normpath(t) in rels for t in touched):
        return "ft2font rebuilt against the environment's FreeType: the patches touch its sources or a header"
    return adopted
