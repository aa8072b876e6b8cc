"""Records ⇄ the contract's JSON, through one cattrs converter configured once."""

from __future__ import annotations

import json
from typing import Any

import attrs
import cattrs
from cattrs.preconf.json import make_converter

from ._errors import RequestError
from ._records import Candidate, Environment, ExecutionObservation
from ._stages.policy import with_scratch
from ._types import ARTIFACT_SHAPES, PLUGIN_LOADING, REQUEST_TYPES

_converter = make_converter()
_CANDIDATE_FIELDS = frozenset(a.name for a in attrs.fields(Candidate))


def unstructure(obs: ExecutionObservation) -> dict[str, Any]:
    out: dict[str, Any] = _converter.unstructure(obs)
    return out


def unstructure_env(env: Environment) -> dict[str, Any]:
    """The declared environment without the run's scratch path (for cache keys)."""
    out: dict[str, Any] = _converter.unstructure(with_scratch(env, ""))
    return out


def structure(data: dict[str, Any]) -> ExecutionObservation:
    return _converter.structure(data, ExecutionObservation)


def dumps(obs: ExecutionObservation) -> str:
    """One observation as one JSON line (no newline inside, none at the end)."""
    return json.dumps(unstructure(obs), ensure_ascii=False, separators=(",", ":"))


def _check_policy(policy: Any) -> None:
    if not isinstance(policy, dict):
        raise RequestError("`policy` must be an object")
    for name, value in policy.items():
        if name not in ("timeout_s", "ram_mib", "cpu_cores"):
            raise RequestError(f"policy: unknown field `{name}` (expected timeout_s, ram_mib, cpu_cores)")
        integral = name == "ram_mib"
        if isinstance(value, bool) or not isinstance(value, int if integral else int | float):
            raise RequestError(f"policy.{name} must be {'an integer' if integral else 'a number'}")
        if not value > 0:
            raise RequestError(f"policy.{name} must be > 0, got {value!r}")


def candidate(data: Any) -> tuple[Candidate, list[str]]:
    """A request object → a `Candidate`, and the names of the fields it ignored.

    Raises `RequestError` naming the field that is wrong.
    """
    if not isinstance(data, dict):
        raise RequestError(f"a request must be a JSON object, got {type(data).__name__}")
    ignored = sorted(k for k in data if k not in _CANDIDATE_FIELDS)
    fields = {k: v for k, v in data.items() if k in _CANDIDATE_FIELDS and v is not None}
    for name, allowed in (("request_type", REQUEST_TYPES), ("artifact_shape", ARTIFACT_SHAPES)):
        if name not in fields:
            raise RequestError(f"missing `{name}`")
        if fields[name] not in allowed:
            raise RequestError(f"unknown {name} {fields[name]!r} (expected one of {', '.join(allowed)})")
    ident = fields.pop("id", None)
    if ident is not None and (not isinstance(ident, str | int) or isinstance(ident, bool)):
        raise RequestError("`id` must be a string")
    if "policy" in fields:
        _check_policy(fields["policy"])
    for name in ("command", "tests"):
        value = fields.get(name)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise RequestError(f"`{name}` must be a list of strings")
    for name in ("code", "repo", "patch", "python"):
        value = fields.get(name)
        if value is not None and not isinstance(value, str):
            raise RequestError(f"`{name}` must be a string")
    plugins = fields.get("pytest_plugins")
    if plugins is not None and plugins not in PLUGIN_LOADING:
        raise RequestError(f"`pytest_plugins` must be one of {', '.join(PLUGIN_LOADING)}, got {plugins!r}")
    try:
        cand = _converter.structure(fields, Candidate)
    except (cattrs.BaseValidationError, ValueError, TypeError) as e:  # checked above; belt
        raise RequestError(str(e)) from None
    return attrs.evolve(cand, id=ident), ignored


def to_json_data(record: Any) -> Any:
    """Any aexec record (e.g. a `Discrimination`) → plain JSON data, by the same converter."""
    return _converter.unstructure(record)
