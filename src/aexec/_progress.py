"""The progress bar of a command that waits (rich's, on stderr), only when stderr is a
terminal: elsewhere the command prints what it has to say as lines."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["terminal_bar"]


def terminal_bar() -> Progress | None:
    """A transient bar (description, bar, done of total, time taken), or None off a terminal."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
