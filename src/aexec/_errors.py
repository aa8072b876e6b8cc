"""The exception tree (layer 0).

Exceptions are for misuse of the library; a candidate's failure is data and is returned
in its observation, never raised::

    AexecError
    └── RequestError      a request that cannot be observed as written (names the field)
"""

from __future__ import annotations


class AexecError(Exception):
    """Base of every error aexec raises."""


class RequestError(AexecError, ValueError):
    """A request is malformed: the message names the field and what is wrong with it."""
