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

    def end(self, status: int, cpu_s: float, maxrss_kib: int) -> int:
        """The init's two last records, ``main`` (the candidate's wait ``status``) and
        ``usage`` (the tree's), as `write` would write them (`wire.encode`'s JSON, made
        here without the json module: the init writes them after forking, where each
        object it touches costs a copied page), in one write; returns the run's exit
        status (128 + the signal that killed the candidate)."""
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            code, main = 128 + sig, b'{"exit": null, "signal": %d, "kind": "main"}\n' % sig
        else:
            code = os.WEXITSTATUS(status)  # exited: WIFSIGNALED is not
            main = b'{"exit": %d, "signal": null, "kind": "main"}\n' % code
        data = main + b'{"cpu_s": %s, "maxrss_kib": %d, "kind": "usage"}\n' % (
            repr(cpu_s).encode(),
            maxrss_kib,
        )
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError:
            pass
        return code


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
