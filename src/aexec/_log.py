"""A library is quiet (layer 0): aexec's events go where the application says.

Every module logs through `get_logger`. When the application has configured structlog
(the CLI does, once), events are structlog events under that configuration. Otherwise
they go to the standard library's ``logging`` tree under the module's name (``aexec…``),
where a `logging.NullHandler` on ``aexec`` keeps them silent until the application adds
a handler (the standard library's advice to libraries) — never to stdout, where
structlog's unconfigured default would print them.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
}


class Logger:
    """structlog's ``BoundLogger`` interface, routed at each call (see the module docstring)."""

    def __init__(self, name: str, context: dict[str, Any] | None = None) -> None:
        self.name = name
        self._context = context or {}

    def bind(self, **context: Any) -> Logger:
        return Logger(self.name, {**self._context, **context})

    def _log(self, method: str, event: str, fields: dict[str, Any]) -> None:
        fields = {**self._context, **fields}
        if structlog.is_configured():
            getattr(structlog.get_logger(self.name), method)(event, **fields)
            return
        std = logging.getLogger(self.name)
        level = _LEVELS[method]
        if std.isEnabledFor(level):
            text = " ".join([event, *(f"{k}={v!r}" for k, v in fields.items())])
            std.log(level, "%s", text, exc_info=method == "exception")

    def debug(self, event: str, **fields: Any) -> None:
        self._log("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._log("error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        self._log("exception", event, fields)


logging.getLogger("aexec").addHandler(logging.NullHandler())


def get_logger(name: str) -> Logger:
    return Logger(name)
