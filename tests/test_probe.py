"""The one learned entry (spec §4): the real HTTP client against a real chat-completions
server on 127.0.0.1 (no mock objects). The schema check and the config, pure, are
tests/unit/test_probe.py."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from aexec import Candidate, OpenAIProber, ProbeCallError, discriminate

from .unit.test_probe import probe, probes

# --------------------------------------------------------------------------------------
# The real client against a real server on loopback
# --------------------------------------------------------------------------------------


class ModelServer:
    """A chat-completions endpoint on 127.0.0.1 that answers from a script and records
    every request it gets."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: list[tuple[int, bytes]] = []
        self.url = ""

    def answer(self, content: str) -> None:
        body = {
            "id": "x",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        }
        self.replies.append((200, json.dumps(body).encode()))

    def raw(self, status: int, body: bytes) -> None:
        self.replies.append((status, body))


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    state = ModelServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.requests.append(
                {"path": self.path, "headers": dict(self.headers), "json": json.loads(body)}
            )
            status, payload = (
                state.replies.pop(0) if state.replies else (500, b'{"error": "no reply scripted"}')
            )
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.anyio
async def test_the_client_sends_one_capped_request_and_returns_the_content(model_server: ModelServer) -> None:
    model_server.answer('{"probes": []}')
    client = OpenAIProber(model_server.url, "weak-model", api_key="k-123")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    got = await client.complete(messages, temperature=0.0, max_completion_tokens=2048)
    assert got == '{"probes": []}'
    [req] = model_server.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == "Bearer k-123"
    body = req["json"]
    assert body["model"] == "weak-model" and body["messages"] == messages
    assert body["temperature"] == 0 and body["max_completion_tokens"] == 2048
    assert body["n"] == 1 and body["stream"] is False
    assert body["response_format"] == {"type": "json_object"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "body", "words"),
    [
        (500, b'{"error": "overloaded"}', "HTTP 500"),
        (200, b"<html>not json</html>", r"no choices\[0\]\.message\.content"),
        (200, b'{"choices": []}', r"no choices\[0\]\.message\.content"),
        (200, b'{"choices": [{"message": {"content": null}}]}', "not a string"),
    ],
)
async def test_a_bad_answer_is_a_probe_call_error_after_one_request(
    model_server: ModelServer, status: int, body: bytes, words: str
) -> None:
    model_server.raw(status, body)
    client = OpenAIProber(model_server.url, "m")
    with pytest.raises(ProbeCallError, match=words):
        await client.complete([{"role": "user", "content": "u"}], temperature=0.0, max_completion_tokens=2048)
    assert len(model_server.requests) == 1
    assert "Authorization" not in model_server.requests[0]["headers"]


@pytest.mark.anyio
async def test_nothing_listening_is_a_probe_call_error() -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = OpenAIProber(f"http://127.0.0.1:{port}/v1", "m", timeout_s=5)
    with pytest.raises(ProbeCallError, match="ConnectError"):
        await client.complete([{"role": "user", "content": "u"}], temperature=0.0, max_completion_tokens=2048)


def snippet_pair() -> list[Candidate]:
    """Two candidates with no suite at all: both define ``f``; they differ on negatives."""
    return [
        Candidate("discriminate", "snippet", id="abs", code="def f(x):\n    return abs(x)\n"),
        Candidate(
            "discriminate", "snippet", id="ident", code="def f(x):\n    return x if x > 0 else -x + 0\n"
        ),
        Candidate("discriminate", "snippet", id="clip", code="def f(x):\n    return max(x, 0)\n"),
    ]


@pytest.mark.anyio
async def test_discriminate_through_the_real_client_end_to_end(model_server: ModelServer) -> None:
    model_server.answer(
        probes(probe("neg", "print(f(-3))", "prints 3"), probe("pos", "assert f(2) == 2", "f(2) is 2"))
    )
    client = OpenAIProber(model_server.url, "m")
    result = await discriminate(snippet_pair(), property="f of a negative number", prober=client)
    assert len(model_server.requests) == 1, "exactly one model call"
    sent = model_server.requests[0]["json"]
    user = json.loads(sent["messages"][1]["content"])
    assert [c["candidate"] for c in user["candidates"]] == ["abs", "ident", "clip"]
    assert user["property"] == "f of a negative number" and user["existing_tests"] == []
    assert result.probe.fired and result.probe.oracle == "no_suite" and result.probe.calls == 1
    outputs = [
        [(e["probe_id"], e["outcome"], e["stdout"]) for e in o.probe_evidence] for o in result.observations
    ]
    assert outputs == [
        [("neg", "ok", "3\n"), ("pos", "ok", "")],
        [("neg", "ok", "3\n"), ("pos", "ok", "")],
        [("neg", "ok", "0\n"), ("pos", "ok", "")],
    ]
    assert [g.ids for g in result.groups] == [("abs", "ident"), ("clip",)]
    assert all(o.verdict == "empty_success" and o.test_results == () for o in result.observations)


@pytest.mark.anyio
async def test_a_malformed_answer_from_the_server_means_no_probe_and_no_second_request(
    model_server: ModelServer,
) -> None:
    model_server.answer("I think you should test negatives.")
    model_server.answer(probes(probe()))  # would be accepted: it must never be asked for
    result = await discriminate(snippet_pair(), prober=OpenAIProber(model_server.url, "m"))
    assert len(model_server.requests) == 1
    assert result.probe.fired and result.probe.probes == () and "not JSON" in result.probe.outcome
    assert all(o.probe_evidence == () for o in result.observations)
    assert len(result.groups) == 1
