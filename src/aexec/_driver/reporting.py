"""The run's report, as the driver writes it: one JSON record per line, flushed line
by line, so that whatever was reported before a kill survives it.

A module of the driver's package (see `aexec._driver`).
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from . import wire


class Report:
    """The report file as a bare descriptor, written a whole line per record.

    Not a Python file object: one left open is finalized with the interpreter, and its
    ``ResourceWarning`` ("unclosed file ... report.jsonl") would reach the candidate's
    warning filters (``-W error``, ``filterwarnings = error``) and stderr. A descriptor is
    no object of theirs to see; the kernel closes it when the run's process ends.
    """

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)

    def write(self, kind: str, **fields: Any) -> None:
        try:
            data = (wire.encode(kind, fields) + "\n").encode("utf-8")
            while data:
                data = data[os.write(self._fd, data) :]
        except (OSError, ValueError):
            pass  # the candidate closed or broke our file; the exit code still speaks


def qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def describe(exc: BaseException) -> dict[str, Any]:
    """An exception as plain data: type, MRO, message, innermost frames."""
    if isinstance(exc, SyntaxError) and exc.filename:
        frames = [[exc.filename, exc.lineno or 0, "<module>"]]
    else:
        tb = traceback.extract_tb(exc.__traceback__)[-wire.FRAME_CAP :]
        frames = [[f.filename, f.lineno or 0, f.name] for f in tb]
    try:
        message = str(exc)
    except Exception:  # a hostile __str__
        message = "<unprintable>"
    return {
        "type": qualname(type(exc)),
        "bases": [qualname(c) for c in type(exc).__mro__],
        "message": message[: wire.MESSAGE_CAP],
        "errno": getattr(exc, "errno", None) if isinstance(exc, OSError) else None,
        "frames": frames,
    }
