"""``aexec serve``'s session routes (issue 41): a workspace over HTTP, on a real server."""

from __future__ import annotations

import glob
import json
import os
import tempfile
import uuid

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("hypercorn")

from .test_serve_app import running

pytestmark = pytest.mark.anyio


async def test_a_session_over_http() -> None:
    async with (
        running(token="s3cret") as url,
        httpx.AsyncClient(base_url=url, timeout=60, headers={"Authorization": "Bearer s3cret"}) as client,
    ):
        async with httpx.AsyncClient(base_url=url) as anonymous:
            assert (await anonymous.post("/sessions", content=b"{}")).status_code == 401
        r = await client.post("/sessions", content=b"{}")
        assert r.status_code == 200, r.text
        sid = r.json()["id"]
        base = f"/sessions/{sid}"

        assert (await client.put(f"{base}/files/d/f", content=b"one\n")).status_code == 204
        r = await client.post(
            f"{base}/exec", content=json.dumps({"argv": ["sh", "-c", "cat f; echo more >> f"], "cwd": "d"})
        )
        assert r.status_code == 200, r.text
        obs = r.json()
        assert (obs["exit_code"], obs["stdout"]) == (0, "one\n")
        r = await client.get(f"{base}/files/d/f")
        assert (r.status_code, r.content) == (200, b"one\nmore\n")
        r = await client.post(f"{base}/exec", content=json.dumps({"argv": ["cat", "d/f"], "input": "x"}))
        assert r.json()["stdout"] == "one\nmore\n"  # a later command sees the earlier one's writes
        assert "+more" in (await client.get(f"{base}/diff")).text

        r = await client.get(f"{base}/files/d/%2E%2E/%2E%2E/etc/passwd")
        assert r.status_code == 403, r.text
        assert (await client.get(f"{base}/files/absent")).status_code == 404
        r = await client.post(f"{base}/exec", content=b'{"argv": []}')
        assert (r.status_code, r.json()) == (400, {"error": "argv must be a non-empty list of strings"})

        assert (await client.delete(base)).status_code == 204
        r = await client.post(f"{base}/exec", content=json.dumps({"argv": ["true"]}))
        assert r.status_code == 404
        assert (await client.delete(base)).status_code == 404
        assert "/sessions/{id}/exec" in (await client.get("/openapi.json")).json()["paths"]


async def test_sessions_are_bounded_and_closed_when_the_server_stops() -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    where = os.path.join(tempfile.gettempdir(), "aexec-*", "work", marker)
    async with running(sessions=1) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        sid = (await client.post("/sessions", content=b"{}")).json()["id"]
        assert (await client.put(f"/sessions/{sid}/files/{marker}", content=b"x")).status_code == 204
        assert len(glob.glob(where)) == 1
        r = await client.post("/sessions", content=b"{}")
        assert (r.status_code, r.headers["retry-after"]) == (429, "5")
        assert (await client.post("/sessions", content=b'{"repo": 1}')).json() == {
            "error": "repo must be a string"
        }
        r = await client.post("/sessions", content=b'{"repo": "/nonexistent-aexec"}')
        assert (r.status_code, r.json()) == (400, {"error": "repo: '/nonexistent-aexec' is not a directory"})
        r = await client.post("/sessions", content=b'{"policy": {"nope": 1}}')
        assert r.status_code == 400 and r.json()["error"].startswith("policy: unknown field 'nope'")
    assert glob.glob(where) == []  # the server closed the session it left open
