"""The labelled corpus of `aexec ab` (spec §7) and the §7.5.3 selection corpus.

A corpus is a cases JSONL in the contract's request format (or a directory holding
``cases.jsonl``); each line's ``label`` (or a ``--labels`` file) says what the case is
known, by construction, to be. Every problem is a `RequestError` naming the file and line.
"""

from __future__ import annotations

import json
import os
from typing import Any, Final

import attrs

from .._api import validate
from .._errors import RequestError
from .._records import Candidate
from .._serde import candidate as candidate_from_json
from .._types import FAILURE_CLASSES

__all__ = [
    "CLASSES",
    "Case",
    "Corpus",
    "Label",
    "SelectionTask",
    "load_corpus",
    "load_selection",
    "parse_label",
]

#: The failure-class vocabulary in the order the tables print it (one source: `aexec._types`).
CLASSES: Final[tuple[str, ...]] = FAILURE_CLASSES
VERDICTS: Final = ("pass", "fail", "empty_success", "tampered", "error")


# --------------------------------------------------------------------------------------
# The labelled corpus
# --------------------------------------------------------------------------------------


@attrs.frozen
class Label:
    """What a case is known (by construction) to be."""

    verdict: str
    failure_class: str | None
    f2p: tuple[str, ...] | None = None
    p2p: tuple[str, ...] | None = None


@attrs.frozen
class Case:
    line: int
    #: The request as written (without ``label``); the baselines run it from this.
    request: dict[str, Any]
    candidate: Candidate
    label: Label


@attrs.frozen
class Corpus:
    path: str
    #: Where relative ``repo`` paths point from: the cases file's directory.
    base: str
    cases: tuple[Case, ...]
    labels_from: str


def _tests(value: Any, where: str, name: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequestError(f"{where}: label `{name}` must be a list of test ids or null")
    return tuple(sorted(value))


def parse_label(data: Any, where: str) -> Label:
    """A label object → `Label`; raises `RequestError` naming ``where`` and the field."""
    if not isinstance(data, dict):
        raise RequestError(f"{where}: a label must be an object, got {type(data).__name__}")
    verdict = data.get("verdict")
    if verdict not in VERDICTS:
        raise RequestError(f"{where}: label verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    cls = data.get("failure_class")
    if verdict == "fail" and cls not in CLASSES:
        raise RequestError(
            f"{where}: a `fail` label needs failure_class in {', '.join(CLASSES)}, got {cls!r}"
        )
    if verdict != "fail" and cls is not None:
        raise RequestError(f"{where}: a {verdict!r} label must have failure_class null, got {cls!r}")
    return Label(verdict, cls, _tests(data.get("f2p"), where, "f2p"), _tests(data.get("p2p"), where, "p2p"))


def _read_jsonl(path: str) -> list[tuple[int, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise RequestError(f"{path}: cannot read: {e}") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((number, json.loads(line)))
        except ValueError as e:
            raise RequestError(f"{path}:{number}: bad JSON: {e}") from None
    return out


def _labels_file(path: str) -> dict[str, Label]:
    """``--labels``: JSONL, one ``{"id": ..., "verdict": ..., "failure_class": ..., "f2p": ...}``
    (or ``{"id": ..., "label": {...}}``) per line."""
    out: dict[str, Label] = {}
    for number, data in _read_jsonl(path):
        where = f"{path}:{number}"
        if not isinstance(data, dict) or not isinstance(data.get("id"), str | int):
            raise RequestError(f"{where}: a label line needs an `id`")
        key = str(data["id"])
        if key in out:
            raise RequestError(f"{where}: a second label for id {key!r}")
        body = data["label"] if "label" in data else {k: v for k, v in data.items() if k != "id"}
        out[key] = parse_label(body, where)
    return out


def _request_candidate(request: dict[str, Any], base: str, where: str) -> Candidate:
    """A request line as a checked candidate, its repo relative to the corpus dir."""
    try:
        cand, _ = candidate_from_json(request)
        if cand.repo is not None:
            cand = attrs.evolve(cand, repo=os.path.normpath(os.path.join(base, cand.repo)))
        validate(cand)
    except RequestError as e:
        raise RequestError(f"{where}: {e}") from None
    return cand


def load_corpus(path: str, labels: str | None = None) -> Corpus:
    """A labelled corpus: ``path`` is a cases JSONL (the contract's requests) or a directory
    holding ``cases.jsonl``. Labels come from each line's ``label`` or from ``labels``.
    Raises `RequestError` naming the file and line of the first problem."""
    cases_path = os.path.join(path, "cases.jsonl") if os.path.isdir(path) else path
    base = os.path.dirname(os.path.abspath(cases_path))
    from_file = None if labels is None else _labels_file(labels)
    out: list[Case] = []
    seen: set[str] = set()
    for number, data in _read_jsonl(cases_path):
        where = f"{cases_path}:{number}"
        if not isinstance(data, dict):
            raise RequestError(f"{where}: a request must be a JSON object")
        request = {k: v for k, v in data.items() if k != "label"}
        ident = request.get("id")
        key = None if ident is None else str(ident)
        if key is not None and key in seen:
            raise RequestError(f"{where}: duplicate id {key!r}")
        if key is not None:
            seen.add(key)
        if from_file is not None:
            if key is None or key not in from_file:
                raise RequestError(f"{where}: no label for id {ident!r} in {labels}")
            label = from_file[key]
        elif "label" in data:
            label = parse_label(data["label"], where)
        else:
            raise RequestError(f"{where}: no `label` on the line (give one, or --labels FILE)")
        cand = _request_candidate(request, base, where)
        out.append(Case(number, request, cand, label))
    if not out:
        raise RequestError(f"{cases_path}: no cases")
    return Corpus(cases_path, base, tuple(out), labels or "inline `label` fields")


# --------------------------------------------------------------------------------------
# The §7.5.3 selection corpus
# --------------------------------------------------------------------------------------


@attrs.frozen
class SelectionTask:
    task: str
    question: str | None
    candidates: tuple[Candidate, ...]
    correct: frozenset[int]


def load_selection(path: str) -> tuple[SelectionTask, ...]:
    """A discrimination corpus: request lines (``request_type: discriminate``) with
    ``task`` (str), ``correct`` (bool) and optionally ``property``; lines of one task
    share repo and tests. Raises `RequestError` naming the line."""
    base = os.path.dirname(os.path.abspath(path))
    tasks: dict[str, list[tuple[int, Candidate, bool, str | None]]] = {}
    for number, data in _read_jsonl(path):
        where = f"{path}:{number}"
        if not isinstance(data, dict) or not isinstance(data.get("task"), str):
            raise RequestError(f"{where}: a selection line needs a string `task`")
        if not isinstance(data.get("correct"), bool):
            raise RequestError(f"{where}: a selection line needs a boolean `correct`")
        request = {k: v for k, v in data.items() if k not in ("task", "correct", "property")}
        cand = _request_candidate(request, base, where)
        prop = data.get("property")
        tasks.setdefault(data["task"], []).append(
            (number, cand, data["correct"], prop if isinstance(prop, str) else None)
        )
    out = []
    for name, rows in tasks.items():
        if len(rows) < 2 or not any(r[2] for r in rows) or all(r[2] for r in rows):
            raise RequestError(
                f"{path}:{rows[0][0]}: task {name!r} needs 2+ candidates, some correct and some not"
            )
        question = next((r[3] for r in rows if r[3]), None)
        out.append(
            SelectionTask(
                name, question, tuple(r[1] for r in rows), frozenset(i for i, r in enumerate(rows) if r[2])
            )
        )
    return tuple(out)
