"""The package-index proxy a confined build reaches the network through (I/O).

A build runs in a network namespace of its own (`confine`): its one way out is this
proxy, which aexec runs outside it on a Unix socket in a private directory (the build's
init forwards ``127.0.0.1:<port>`` in the namespace to it; uv and what it spawns are
given ``HTTPS_PROXY``/``HTTP_PROXY``). It honours only

* ``CONNECT host:port`` to an https index origin (``pypi.org:443``,
  ``files.pythonhosted.org:443``, and the https origins the build's index settings name):
  TLS runs end to end through the tunnel;
* a plain ``GET`` in absolute form to an http index origin the settings name (a local
  find-links page): one request per connection, sent on as ``Connection: close``;

and refuses everything else with ``403``. Every decision is a line of `events`, which the
build's log carries (``aexec proxy: refused CONNECT example.com:443 ...``).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import socket
import tempfile
import threading
import urllib.parse
from collections.abc import Iterable, Mapping

#: The package index every build may reach.
PYPI = frozenset({("https", "pypi.org", 443), ("https", "files.pythonhosted.org", 443)})
#: The settings whose URLs name index origins (uv's; pip's, for setup code that runs pip).
URL_VARS = (
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
)
_HEAD_MAX = 64 * 1024
_REQUEST = re.compile(r"^([A-Z]+) (\S+) HTTP/1\.[01]$")

Origin = tuple[str, str, int]


def index_settings(env: Mapping[str, str]) -> tuple[frozenset[Origin], list[str]]:
    """The http(s) origins and the local directories ``env``'s index settings name
    (``name=url`` entries of ``UV_INDEX`` included; lists split on spaces and commas)."""
    origins: set[Origin] = set(PYPI)
    local: list[str] = []
    for var in URL_VARS:
        for item in re.split(r"[\s,]+", env.get(var, "").strip()):
            url = item.split("=", 1)[1] if re.match(r"^[\w.-]+=", item) else item
            if not url:
                continue
            parts = urllib.parse.urlsplit(url)
            if parts.scheme in ("http", "https") and parts.hostname:
                port = parts.port or (443 if parts.scheme == "https" else 80)
                origins.add((parts.scheme, parts.hostname.lower(), port))
            elif parts.scheme == "file":
                local.append(urllib.parse.unquote(parts.path))
            elif not parts.scheme and os.path.isabs(url):
                local.append(url)
    return frozenset(origins), local


class IndexProxy:
    """The allow-list proxy of one build, serving on `socket_path` until `close`."""

    def __init__(self, origins: Iterable[Origin]) -> None:
        self.origins = frozenset(origins)
        self.events: list[str] = []
        self._lock = threading.Lock()
        #: Private: only root may traverse it (the build's init connects; uv cannot).
        self.dir = tempfile.mkdtemp(prefix="aexec-proxy-")
        self.socket_path = os.path.join(self.dir, "proxy.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.socket_path)
        self._server.listen(64)
        self._thread = threading.Thread(target=self._serve, name="aexec-index-proxy", daemon=True)
        self._thread.start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self._thread.join(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _note(self, line: str) -> None:
        with self._lock:
            if len(self.events) < 10_000:
                self.events.append(f"aexec proxy: {line}")

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(60)
            head = b""
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in head and len(head) < _HEAD_MAX:
                    chunk = conn.recv(8192)
                    if not chunk:
                        break
                    head += chunk
            if b"\r\n\r\n" not in head:
                return self._refuse(conn, "an incomplete request")
            raw, _, rest = head.partition(b"\r\n\r\n")
            lines = raw.decode("latin-1").split("\r\n")
            found = _REQUEST.match(lines[0])
            if found is None:
                return self._refuse(conn, f"{lines[0][:200]!r}")
            method, target = found.groups()
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                origin = ("https", host.strip("[]").lower(), int(port) if port.isdigit() else -1)
                if origin not in self.origins:
                    return self._refuse(conn, f"CONNECT {target} (not a package index origin)")
                upstream = self._dial(conn, origin, f"CONNECT {target}")
                if upstream is not None:
                    # closed now, not at GC, if the client is gone (a killed or cancelled build)
                    with upstream, contextlib.suppress(OSError):
                        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        _relay(conn, upstream, rest, both_ways=True)
                return None
            parts = urllib.parse.urlsplit(target)
            origin = ("http", (parts.hostname or "").lower(), parts.port or 80)
            if method not in ("GET", "HEAD") or parts.scheme != "http" or origin not in self.origins:
                return self._refuse(conn, f"{method} {target[:200]} (not a package index origin)")
            upstream = self._dial(conn, origin, f"{method} {target[:200]}")
            if upstream is not None:
                path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
                keep = [h for h in lines[1:] if not re.match(r"(?i)^(proxy-)?connection:", h)]
                request = "\r\n".join([f"{method} {path} HTTP/1.1", *keep, "Connection: close", "", ""])
                with upstream, contextlib.suppress(OSError):
                    upstream.sendall(request.encode("latin-1"))
                    _relay(conn, upstream, b"", both_ways=False)
            return None

    def _dial(self, conn: socket.socket, origin: Origin, what: str) -> socket.socket | None:
        try:
            upstream = socket.create_connection(origin[1:], timeout=30)
        except OSError as e:
            self._note(f"allowed {what}, but it failed: {e}")
            with contextlib.suppress(OSError):
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return None
        self._note(f"allowed {what}")
        return upstream

    def _refuse(self, conn: socket.socket, what: str) -> None:
        self._note(f"refused {what}")
        with contextlib.suppress(OSError):
            conn.sendall(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
                b"aexec: a build reaches its package index and nothing else\n"
            )


def _relay(client: socket.socket, upstream: socket.socket, first: bytes, *, both_ways: bool) -> None:
    """Copy bytes between the two until either side closes (client to upstream only if
    ``both_ways``: a plain request is sent once, whatever else the client says)."""
    with upstream:
        client.settimeout(None)
        upstream.settimeout(None)
        if first and both_ways:
            upstream.sendall(first)
        pair = {client: upstream, upstream: client}
        watch = [client, upstream] if both_ways else [upstream]
        while True:
            ready, _, _ = select.select(watch, [], [], 600)
            if not ready:
                return
            for src in ready:
                try:
                    data = src.recv(65536)
                    if not data:
                        return
                    pair[src].sendall(data)
                except OSError:
                    return
