"""The run's report, as the driver writes it: one JSON record per line, flushed line
by line, so that whatever was reported before a kill survives it.

Part of the driver (`aexec._boundary.driver` loads it by path, with ``wire`` given).
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ... import _wire as wire
# else: ``wire`` is given by the driver's loader (see `aexec._boundary._driver`).


class Report:
    def __init__(self, path: str) -> None:
        self._f = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def write(self, kind: str, **fields: Any) -> None:
        try:
            self._f.write(wire.encode(kind, fields) + "\n")
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
