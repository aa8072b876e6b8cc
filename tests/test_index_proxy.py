"""The build's index proxy when its client goes away: real sockets, a real upstream.

A build killed at its deadline or cancelled, or a uv that drops a connection it no longer
needs, closes its end while the proxy is still dialling the index. The proxy then ends
that connection quietly: the upstream one it opened is closed at once (not left to the
garbage collector, whose ``ResourceWarning`` failed whichever test came next), and its
thread raises nothing (a ``BrokenPipeError`` there failed the next test's setup).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from aexec._environments.proxy import IndexProxy


def _handlers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if "_handle" in t.name]


@pytest.mark.parametrize("method", ["CONNECT", "GET"])
def test_a_client_gone_before_the_answer_closes_the_upstream_and_raises_nothing(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    index = socket.create_server(("127.0.0.1", 0))
    port = index.getsockname()[1]
    scheme = "https" if method == "CONNECT" else "http"
    proxy = IndexProxy({(scheme, "127.0.0.1", port)})
    accepted: list[socket.socket] = []
    try:
        before = set(_handlers())
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(proxy.socket_path)
        target = f"127.0.0.1:{port}" if method == "CONNECT" else f"http://127.0.0.1:{port}/simple/"
        client.sendall(f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        client.close()  # gone before the answer: the proxy's next write to it fails (EPIPE)
        index.settimeout(10)
        conn, _ = index.accept()
        accepted.append(conn)
        conn.settimeout(10)
        if method == "GET":  # the request went on; its answer finds the client gone
            assert conn.recv(65536).startswith(b"GET /simple/ HTTP/1.1")
            time.sleep(0.2)
            with contextlib.suppress(ConnectionResetError):  # closed while it is sent: fine
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n" + b"x" * 70000)
        # the proxy's end of the upstream connection is closed: EOF (or a reset), not a wait
        try:
            assert conn.recv(65536) == b"", "the upstream connection was left open"
        except ConnectionResetError:
            pass
        for t in set(_handlers()) - before:
            t.join(10)
        assert raised == [], raised
    finally:
        for c in accepted:
            c.close()
        proxy.close()
        index.close()
