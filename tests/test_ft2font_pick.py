"""`aexec._environments.ft2font` against a real package index: sdists and wheels made on the
fly (real tar and zip files), served over HTTP by a local simple index (PEP 503 HTML and
PEP 691 JSON), a checkout on disk, and the swap checked by a real interpreter."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from aexec._environments import ft2font

SO = "ft2font.cpython-311-x86_64-linux-gnu.so"
WHEEL_TAG = "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64"
SETUPEXT = """TESTING_VERSION_OF_FREETYPE = '2.6.1'
ext = Extension("matplotlib.ft2font", ["src/ft2font.cpp", "src/ft2font_wrapper.cpp"])
"""
SOURCES = {
    "setupext.py": SETUPEXT,
    "src/ft2font.cpp": '#include "ft2font.h"\n#include "agg_basics.h"\nint f() { return 1; }\n',
    "src/ft2font_wrapper.cpp": '#include "ft2font.h"\n',
    "src/ft2font.h": "int f();\n",
    "src/_path.cpp": "int p();\n",
    "extern/agg24-svn/include/agg_basics.h": "// agg\n",
}


def _sdist(version: str, files: Mapping[str, str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as t:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"matplotlib-{version}/{rel}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _wheel(so: bytes) -> bytes:
    """The same bytes every time: the entries carry a fixed date, not the clock's, so a hash
    taken again later (as a test does) is the index's."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(zipfile.ZipInfo(f"matplotlib/{SO}", (2023, 1, 1, 0, 0, 0)), so)
        z.writestr(zipfile.ZipInfo("matplotlib/__init__.py", (2023, 1, 1, 0, 0, 0)), "")
    return out.getvalue()


@pytest.fixture
def index(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A simple index of matplotlib 3.6.3, 3.7.0 (a header changed), 3.7.1 (the checkout's
    sources; its wheel's extension says ``2.6.1 local``), 3.8.0 (another FreeType), served
    at ``<url>/simple`` (HTML) and ``<url>/json`` (JSON)."""
    serve = tmp_path / "serve"
    (serve / "files").mkdir(parents=True)
    releases = {
        "3.6.3": {**SOURCES, "src/ft2font.cpp": "// old\n"},
        "3.7.0": {**SOURCES, "src/ft2font.h": "int f(); // changed\n"},
        "3.7.1": dict(SOURCES),
        "3.8.0": {**SOURCES, "setupext.py": SETUPEXT.replace("2.6.1", "2.11.1")},
    }
    entries = []
    for version, files in releases.items():
        for name, data in (
            (f"matplotlib-{version}.tar.gz", _sdist(version, files)),
            (f"matplotlib-{version}-{WHEEL_TAG}.whl", _wheel(f"2.6.1 local {version}".encode())),
        ):
            (serve / "files" / name).write_bytes(data)
            entries.append((name, hashlib.sha256(data).hexdigest()))
    # A wheel for another Python is never looked at.
    (serve / "files" / "matplotlib-3.7.1-cp312-cp312-manylinux2014_x86_64.whl").write_bytes(b"not a zip")
    html = "".join(f'<a href="../../files/{n}#sha256={h}">{n}</a>\n' for n, h in entries)
    (serve / "simple" / "matplotlib").mkdir(parents=True)
    (serve / "simple" / "matplotlib" / "index.html").write_text(f"<html><body>{html}</body></html>")
    listed = [{"filename": n, "url": f"../../files/{n}", "hashes": {"sha256": h}} for n, h in entries]
    (serve / "json" / "matplotlib").mkdir(parents=True)
    (serve / "json" / "matplotlib" / "index.json").write_text(json.dumps({"files": listed}))

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            self.extensions_map = {".json": "application/vnd.pypi.simple.v1+json", ".html": "text/html"}
            super().__init__(*args, directory=str(serve), **kwargs)  # type: ignore[arg-type]

        def send_head(self):  # type: ignore[no-untyped-def]
            if self.path.startswith("/json/") and self.path.endswith("/"):
                self.path += "index.json"
            return super().send_head()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", serve
    finally:
        server.shutdown()
        server.server_close()


def _checkout(tmp_path: Path) -> str:
    repo = tmp_path / "repo"
    for rel, text in SOURCES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    return str(repo)


@pytest.mark.parametrize("api", ["simple", "json"])
def test_the_nearest_release_whose_sources_are_the_checkouts(
    index: tuple[str, Path], tmp_path: Path, api: str
) -> None:
    url, serve = index
    repo, root = _checkout(tmp_path), str(tmp_path / "root")
    release, so, rels, tried = ft2font.pick(repo, root, "3.7", SO, (3, 11), f"{url}/{api}")
    assert (release, tried) == ("3.7.1", ["3.7.0", "3.8.0", "3.7.1"])
    assert rels == [
        "extern/agg24-svn/include/agg_basics.h",
        "src/ft2font.cpp",
        "src/ft2font.h",
        "src/ft2font_wrapper.cpp",
    ]
    assert so is not None and Path(so).read_bytes() == b"2.6.1 local 3.7.1"
    # Kept by content: the sdists' hashes and the wheel's extension; nothing else.
    wheel = (serve / "files" / f"matplotlib-3.7.1-{WHEEL_TAG}.whl").read_bytes()
    assert so == os.path.join(root, "pypi", hashlib.sha256(wheel).hexdigest(), SO)
    assert len(list(Path(root, "pypi").glob("*.json"))) == 3
    assert not list(Path(root, "tmp").iterdir())
    # Again, the files gone from the index: served from what is kept.
    for f in (serve / "files").glob("matplotlib-3.[78].*"):
        f.unlink()
    assert ft2font.pick(repo, root, "3.7", SO, (3, 11), f"{url}/{api}")[:2] == ("3.7.1", so)


def test_no_release_matches_a_changed_source(index: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = index
    repo, root = _checkout(tmp_path), str(tmp_path / "root")
    Path(repo, "extern/agg24-svn/include/agg_basics.h").write_text("// agg, patched\n")
    release, so, _, tried = ft2font.pick(repo, root, "3.7", SO, (3, 11), f"{url}/simple")
    assert (release, so) == (None, None)
    assert tried == ["3.7.0", "3.8.0", "3.7.1", "3.6.3"]
    # Another Python: no wheel fits, nothing is downloaded.
    assert ft2font.pick(repo, str(tmp_path / "r2"), "3.7", SO, (3, 10), f"{url}/simple")[3] == []


def _copy(tmp_path: Path) -> tuple[str, list[Path]]:
    """A build's copy: its ft2font in place and in ``build/lib*`` ("2.12.1 system")."""
    copy = tmp_path / "work" / "copy"
    built = [
        copy / "lib" / "matplotlib" / SO,
        copy / "build" / "lib.linux-x86_64-cpython-311" / "matplotlib" / SO,
    ]
    for p in built:
        p.parent.mkdir(parents=True)
        p.write_bytes(b"2.12.1 system")
        os.utime(p, ns=(1_000_000_000, 1_500_000_000))
    return str(copy), built


def _check(copy: str) -> ft2font.Check:
    """A real interpreter in the copy saying what its extension is (its bytes stand for what
    ``import matplotlib.ft2font`` would report)."""

    def check(args: list[str], env: Mapping[str, str]) -> tuple[int | None, str]:
        assert args[0] == "-c" and env["MPLCONFIGDIR"] != copy
        code = f"import sys; print('FT2FONT', open('lib/matplotlib/{SO}').read().split()[0], open('lib/matplotlib/{SO}').read().split()[1])"
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=copy, capture_output=True, text=True, check=False
        )
        return done.returncode, done.stdout + done.stderr

    return check


def test_the_wheels_extension_replaces_the_builds_its_times_kept(
    index: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = index
    monkeypatch.setenv("UV_DEFAULT_INDEX", f"{url}/simple")
    repo, root = _checkout(tmp_path), str(tmp_path / "root")
    copy, built = _copy(tmp_path)
    adopted = ft2font.adopt(copy, repo, root, "3.7", "3.11.7", _check(copy))
    assert adopted is not None and adopted.release == "3.7.1"
    assert adopted.note.startswith(
        "ft2font from matplotlib 3.7.1's wheel: its sources are the checkout's (4 files)"
    )
    assert "FreeType 2.6.1" in adopted.note
    for p in built:
        assert p.read_bytes() == b"2.6.1 local 3.7.1" and p.stat().st_mtime_ns == 1_500_000_000
    assert ft2font.recorded({"ft2font": {"note": adopted.note, "compared": list(adopted.compared)}})[1] == (
        adopted.compared
    )


def test_the_builds_own_stays_when_none_matches_or_loads(
    index: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, serve = index
    monkeypatch.setenv("UV_DEFAULT_INDEX", f"{url}/simple")
    repo, root = _checkout(tmp_path), str(tmp_path / "root")
    Path(repo, "src/ft2font.h").write_text("int f(); // the candidate's\n")
    copy, built = _copy(tmp_path)
    adopted = ft2font.adopt(copy, repo, root, "3.7", "3.11", _check(copy))
    assert adopted is not None and adopted.release is None
    assert adopted.note == (
        "ft2font built against FreeType 2.12.1 (system): no release's sources are the checkout's"
        " (tried 3.7.0, 3.8.0, 3.7.1, 3.6.3)"
    )
    assert all(p.read_bytes() == b"2.12.1 system" for p in built)
    # A wheel whose extension is not FreeType's local build: put back as it was built.
    repo2 = _checkout(tmp_path / "b")
    wheel = _wheel(b"2.6.1 system")
    name = f"matplotlib-3.7.1-{WHEEL_TAG}.whl"
    (serve / "files" / name).write_bytes(wheel)
    page = serve / "simple" / "matplotlib" / "index.html"
    old = hashlib.sha256(_wheel(b"2.6.1 local 3.7.1")).hexdigest()
    page.write_text(page.read_text().replace(old, hashlib.sha256(wheel).hexdigest()))
    adopted = ft2font.adopt(copy, repo2, str(tmp_path / "root2"), "3.7.1", "3.11", _check(copy))
    assert adopted is not None and adopted.release is None
    assert (
        "matplotlib 3.7.1's wheel's is not FreeType's local build here (FreeType 2.6.1 (system))"
        in adopted.note
    )
    for p in built:
        assert p.read_bytes() == b"2.12.1 system" and p.stat().st_mtime_ns == 1_500_000_000
    # The index unreachable: said, the build's own kept.
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://127.0.0.1:9/simple")
    adopted = ft2font.adopt(copy, repo2, str(tmp_path / "root3"), "3.7", "3.11", _check(copy))
    assert adopted is not None and "the release wheels could not be had" in adopted.note
    # No ft2font built: nothing to say.
    assert ft2font.adopt(str(tmp_path / "repo"), repo2, root, "3.7", "3.11", _check(copy)) is None
