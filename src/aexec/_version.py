"""The version of aexec, in one place (layer 0).

Hatch reads it for the package's metadata, ``aexec.__version__`` and ``aexec --version``
show it, every observation carries it (``aexec_version``), and it is part of every cache
key: a new aexec never serves an older one's verdicts. A Ray worker refuses a driver of
another version.
"""

from __future__ import annotations

VERSION = "0.6.1"
