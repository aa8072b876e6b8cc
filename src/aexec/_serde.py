"""Records ⇄ the contract's JSON, through one cattrs converter configured once."""

from __future__ import annotations

import json
from typing import Any

import attrs
from cattrs.preconf.json import make_converter

from ._environments.spec import from_json
from ._errors import RequestError
from ._records import Candidate, Environment, ExecutionObservation, Policy
from ._stages.policy import with_scratch
from ._types import LANGUAGE_NAMES, PLUGIN_LOADING, TEST_IDS

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


def _policy(policy: Any) -> Policy:
    if not isinstance(policy, dict):
        raise RequestError("policy must be an object")
    for name in policy:
        if name not in attrs.fields_dict(Policy):
            known = ", ".join(attrs.fields_dict(Policy))
            raise RequestError(f"policy: unknown field {name!r} (expected {known})")
    return Policy(**policy)  # each value checked against its bounds (`policy_bounds`)


def _check_grading(fields: dict[str, Any]) -> None:
    """The SWE-bench-style grading fields: lists of node ids, and the oracle diff."""
    for name in ("fail_to_pass", "pass_to_pass"):
        value = fields.get(name)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise RequestError(f"`{name}` must be a list of pytest node ids (strings)")
    if fields.get("test_patch") is not None and not isinstance(fields["test_patch"], str):
        raise RequestError("`test_patch` must be a string")


def candidate(data: Any) -> tuple[Candidate, list[str]]:
    """A request object → a `Candidate`, and the names of the fields it ignored.

    Raises `RequestError` naming the field that is wrong.
    """
    if not isinstance(data, dict):
        raise RequestError(f"a request must be a JSON object, got {type(data).__name__}")
    ignored = sorted(k for k in data if k not in _CANDIDATE_FIELDS)
    fields = {k: v for k, v in data.items() if k in _CANDIDATE_FIELDS and v is not None}
    for name in ("request_type", "artifact_shape"):
        if name not in fields:
            raise RequestError(f"missing {name}")
    for name in ("command", "tests"):
        value = fields.get(name)
        if value is not None and not isinstance(value, list):
            raise RequestError(f"{name} must be a list of strings, got {type(value).__name__}")
    if "policy" in fields:
        fields["policy"] = _policy(fields["policy"])
    if "environment" in fields:
        fields["environment"] = from_json(fields["environment"])
    language = fields.get("language")
    if language is not None and language not in LANGUAGE_NAMES:
        raise RequestError(f"unknown language {language!r} (expected one of {', '.join(LANGUAGE_NAMES)})")
    _check_grading(fields)
    plugins = fields.get("pytest_plugins")
    if plugins is not None and plugins not in PLUGIN_LOADING:
        raise RequestError(f"pytest_plugins must be one of {', '.join(PLUGIN_LOADING)}, got {plugins!r}")
    if fields.get("test_ids", "pytest") not in TEST_IDS:
        raise RequestError(f"test_ids must be one of {', '.join(TEST_IDS)}, got {fields['test_ids']!r}")
    try:
        return Candidate(**fields), ignored  # every field checked by the record itself
    except TypeError as e:  # a field the record does not take in this form
        raise RequestError(str(e).splitlines()[0]) from None


def to_json_data(record: Any) -> Any:
    """Any aexec record (e.g. a `Discrimination`) → plain JSON data, by the same converter."""
    return _converter.unstructure(record)
