"""The exception tree (layer 0).

Exceptions are for misuse of the library; a candidate's failure is data and is returned
in its observation, never raised::

    AexecError
    ├── RequestError      a request that cannot be observed as written (names the field)
    ├── ProbeCallError    the one probe call (spec §4) failed: transport, HTTP status, body
    └── PatchError        a patch cannot be read or applied (data in the observation, but
                          raised when one that applied a moment ago no longer does)
"""

from __future__ import annotations


class AexecError(Exception):
    """Base of every error aexec raises."""


class RequestError(AexecError, ValueError):
    """A request is malformed: the message names the field and what is wrong with it."""


class ProbeCallError(AexecError):
    """The probe model could not be asked or did not answer; the message says which and why.

    `discriminate` never raises it: a failed call means "no probe", never a second call.
    """


class PatchError(AexecError):
    """The patch cannot be applied; the message says why. Becomes a failure observation
    (the pipeline carries it as data); raised only when a patch that applied a moment
    ago no longer does (the host changed under aexec)."""
