"""A run's inputs beside its source: ``stdin``, ``files`` and ``fetch_files`` (layer 1).

What a request may carry and the checks it gets when its `Candidate` is made: a path is
relative, normalized, without ``..``, NUL or an empty part, and not aexec's own
(``.aexec*``); a file's content is base64 (standard alphabet, padded), bytes as they are;
every size is capped (``_types``). Each failed check is a `RequestError` naming the field.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import posixpath
from collections.abc import Mapping
from typing import Any

import attrs

from ._errors import RequestError
from ._types import (
    MAX_FETCH_FILES,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_FILES_BYTES,
    MAX_INPUT_PATH,
    MAX_OUTPUT_KIB,
    MAX_RAM_MIB,
    MAX_STDIN_BYTES,
    MAX_TIMEOUT_S,
    MIN_RAM_MIB,
)

#: ``files`` as a record holds it: (path, base64) pairs, sorted by path.
Files = tuple[tuple[str, str], ...]


def to_files(value: Any) -> Any:
    """A mapping (or pairs, as ``attrs.asdict`` gives them back) → sorted pairs; anything
    else is left for `check_inputs` to refuse."""
    if isinstance(value, Mapping):
        return tuple(sorted(value.items(), key=lambda kv: str(kv[0])))
    if isinstance(value, list | tuple) and all(isinstance(p, list | tuple) and len(p) == 2 for p in value):
        return tuple(sorted((tuple(p) for p in value), key=lambda kv: str(kv[0])))
    return value


def check_path(field: str, path: Any) -> None:
    """A path relative to the run's working directory, that stays inside it."""
    if not isinstance(path, str):
        raise RequestError(f"{field}: a path must be a string, got {type(path).__name__}")
    shown = path if len(path) <= 80 else path[:80] + "…"
    if not path or len(path) > MAX_INPUT_PATH:
        raise RequestError(f"{field}: path {shown!r} must have 1 to {MAX_INPUT_PATH} characters")
    if "\0" in path or "\\" in path:
        raise RequestError(f"{field}: path {shown!r} contains a NUL or a backslash")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError(f"{field}: path {shown!r} is not valid Unicode") from None
    if path.startswith("/"):
        raise RequestError(
            f"{field}: path {shown!r} is absolute (it must be relative to the run's directory)"
        )
    parts = path.split("/")
    if ".." in parts:
        raise RequestError(f"{field}: path {shown!r} contains '..'")
    if posixpath.normpath(path) != path or "" in parts or "." in parts:
        raise RequestError(f"{field}: path {shown!r} is not normalized (no '.', '//' or trailing '/')")
    if parts[0].startswith(".aexec"):
        raise RequestError(f"{field}: path {shown!r} is aexec's own (.aexec*)")


def decode_files(files: Files) -> dict[str, bytes]:
    """``files`` (checked) → path → bytes."""
    return {path: base64.b64decode(data, validate=True) for path, data in files}


def check_inputs(stdin: Any, files: Any, fetch_files: Any) -> None:
    """The three fields of a `Candidate`, checked; raises `RequestError` naming the field."""
    if stdin is not None:
        if not isinstance(stdin, str):
            raise RequestError(f"stdin must be a string, got {type(stdin).__name__}")
        try:
            size = len(stdin.encode("utf-8"))
        except UnicodeEncodeError as e:
            raise RequestError(f"stdin is not valid Unicode (a lone surrogate at index {e.start})") from None
        if size > MAX_STDIN_BYTES:
            raise RequestError(f"stdin is {size} bytes, over the cap of {MAX_STDIN_BYTES}")
    if files is not None:
        if not isinstance(files, tuple):
            raise RequestError(
                f"files must be an object of path → base64 content, got {type(files).__name__}"
            )
        if len(files) > MAX_FILES:
            raise RequestError(f"files: {len(files)} files, over the cap of {MAX_FILES}")
        total = 0
        seen: set[str] = set()
        for path, data in files:
            check_path("files", path)
            if path in seen:
                raise RequestError(f"files: path {path!r} given twice")
            if any(other.startswith(path + "/") or path.startswith(other + "/") for other in seen):
                raise RequestError(f"files: path {path!r} is both a file and a directory")
            seen.add(path)
            if not isinstance(data, str):
                raise RequestError(f"files[{path!r}] must be base64 text, got {type(data).__name__}")
            try:
                size = len(base64.b64decode(data, validate=True))
            except (binascii.Error, ValueError):
                raise RequestError(f"files[{path!r}] is not valid base64") from None
            if size > MAX_FILE_BYTES:
                raise RequestError(f"files[{path!r}] is {size} bytes, over the cap of {MAX_FILE_BYTES}")
            total += size
        if total > MAX_FILES_BYTES:
            raise RequestError(f"files are {total} bytes in all, over the cap of {MAX_FILES_BYTES}")
    if fetch_files is not None:
        if not isinstance(fetch_files, tuple):
            raise RequestError(f"fetch_files must be a list of paths, got {type(fetch_files).__name__}")
        if len(fetch_files) > MAX_FETCH_FILES:
            raise RequestError(f"fetch_files: {len(fetch_files)} paths, over the cap of {MAX_FETCH_FILES}")
        for path in fetch_files:
            check_path("fetch_files", path)


def has_inputs(stdin: str | None, files: Files | None, fetch_files: tuple[str, ...] | None) -> bool:
    return stdin is not None or bool(files) or bool(fetch_files)


def valid_text(name: str, value: object, *, path: bool = False) -> None:
    if not isinstance(value, str):
        raise RequestError(f"{name} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RequestError(f"{name} is not valid Unicode (a lone surrogate at index {e.start})") from None
    if path and "\0" in value:
        raise RequestError(f"{name} contains a NUL character")


def bounded(instance: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    """A declared cap is None or a number within its bounds (`POLICY_BOUNDS`)."""
    if value is None:
        return
    name = attribute.name
    integral = name in ("ram_mib", "output_kib")
    if isinstance(value, bool) or not isinstance(value, int if integral else (int, float)):
        raise RequestError(f"policy.{name} must be {'an integer' if integral else 'a number'}, got {value!r}")
    low, high, low_open = policy_bounds()[name]
    if not math.isfinite(value) or value < low or (low_open and value == low) or value > high:
        span = f"({low:g}, {high:g}]" if low_open else f"[{low:g}, {high:g}]"
        raise RequestError(f"policy.{name} must be in {span}, got {value!r}")


def policy_bounds() -> dict[str, tuple[float, float, bool]]:
    """Per declared cap: (lowest, highest, lowest excluded). ``cpu_cores`` is bounded by
    this machine's cores."""
    return {
        "timeout_s": (0.0, MAX_TIMEOUT_S, True),
        "ram_mib": (float(MIN_RAM_MIB), float(MAX_RAM_MIB), False),
        "cpu_cores": (0.0, float(os.cpu_count() or 1), True),
        "output_kib": (1.0, float(MAX_OUTPUT_KIB), False),
    }
