"""The OpenAPI description of ``aexec serve`` (``GET /openapi.json``): plain data."""

from __future__ import annotations

from typing import Any

from .._api import VERSION
from .sandboxfusion import LANGUAGES, OTHER_LANGUAGES

_COMMAND = {
    "type": "object",
    "nullable": True,
    "properties": {
        "status": {"type": "string", "enum": ["Finished", "Error", "TimeLimitExceeded"]},
        "execution_time": {"type": "number", "nullable": True},
        "return_code": {"type": "integer", "nullable": True},
        "stdout": {"type": "string", "nullable": True},
        "stderr": {"type": "string", "nullable": True},
    },
}
_ERROR = {"type": "object", "properties": {"error": {"type": "string"}}}
_REFUSALS = {
    "400": {"description": "a malformed request (one line naming what is wrong)"},
    "401": {"description": "a bearer token is required"},
    "413": {"description": "the body is over the cap"},
    "429": {"description": "busy (/observe, /observe_many): retry after the Retry-After header's seconds"},
    "504": {
        "description": "busy (/run_code): the run could not start in time to end before the client"
        " gives up (compile_timeout + run_timeout + 10 s); retry after Retry-After"
    },
}


def _post(summary: str, body: dict[str, Any], answer: dict[str, Any], media: str = "application/json") -> Any:
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": {media: {"schema": body}}},
            "responses": {
                "200": {"description": "the answer", "content": {media: {"schema": answer}}},
                **_REFUSALS,
            },
        }
    }


def _get(summary: str) -> Any:
    return {"get": {"summary": summary, "responses": {"200": {"description": "JSON"}}}}


def _in_session(operations: dict[str, Any], *names: str) -> Any:
    """Session ``operations`` with their path parameters (``id``, and ``names``)."""
    parameters = [
        {"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in ("id", *names)
    ]
    return {"parameters": parameters, **operations}


def _answer(summary: str, media: str = "application/json") -> Any:
    return {"summary": summary, "responses": {"200": {"description": media}, **_REFUSALS}}


OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "aexec serve", "version": VERSION},
    "paths": {
        "/run_code": _post(
            "Run one program, SandboxFusion's API (sandbox-fusion 0.3.7)",
            {
                "type": "object",
                "required": ["code", "language"],
                "properties": {
                    "code": {"type": "string"},
                    "language": {"type": "string", "enum": sorted(LANGUAGES.keys() | OTHER_LANGUAGES)},
                    "compile_timeout": {"type": "number", "default": 10},
                    "run_timeout": {"type": "number", "default": 10},
                    "memory_limit_MB": {"type": "integer", "default": -1},
                    "stdin": {
                        "type": "string",
                        "nullable": True,
                        "description": "the program's standard input",
                    },
                    "files": {
                        "type": "object",
                        "additionalProperties": {"type": "string", "nullable": True},
                        "description": "relative path → base64 content, written beside the source",
                    },
                    "fetch_files": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "relative paths read back after the run into the answer's files",
                    },
                },
            },
            {
                "type": "object",
                "properties": {
                    "status": {"type": "string", "enum": ["Success", "Failed", "SandboxError"]},
                    "message": {"type": "string"},
                    "compile_result": _COMMAND,
                    "run_result": _COMMAND,
                    "executor_pod_name": {"type": "string", "nullable": True},
                    "files": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
        ),
        "/observe": _post(
            "Observe one request of the JSONL contract (docs/contract.md)",
            {"type": "object", "description": "one request"},
            {"type": "object", "description": "its ExecutionObservation"},
        ),
        "/observe_many": _post(
            "Observe many requests: JSONL in, one line per request out, in input order, as they are made",
            {"type": "string", "description": "one request per line"},
            {"type": "string", "description": 'one observation (or {"line", "error"}) per line'},
            "application/x-ndjson",
        ),
        "/health": _get("Liveness and version"),
        "/metrics": _get("Runs in flight, queued, done by verdict, refused"),
        "/openapi.json": _get("This description"),
        "/sessions": _post(
            "Open a session (docs/sessions.md): a workspace that lives across commands",
            {"type": "object", "description": "repo, python, environment, policy: each optional"},
            {"type": "object", "properties": {"id": {"type": "string"}}},
        ),
        "/sessions/{id}/exec": _in_session(
            _post(
                "Run one command in the session under the whole boundary",
                {"type": "object", "description": "argv (required), input, cwd, env, timeout"},
                {"type": "object", "description": "its ExecutionObservation"},
            )
        ),
        "/sessions/{id}/files/{path}": _in_session(
            {
                "get": _answer(
                    "A file of the workspace (403: outside it, 404: missing)", "application/octet-stream"
                ),
                "put": {
                    **_answer("Write a file of the workspace (the raw body)"),
                    "requestBody": {"content": {"application/octet-stream": {}}},
                },
            },
            "path",
        ),
        "/sessions/{id}/diff": _in_session({"get": _answer("The workspace's patch", "text/x-diff")}),
        "/sessions/{id}": _in_session({"delete": _answer("Close the session (404: unknown)")}),
    },
    "components": {"schemas": {"Error": _ERROR}},
}
