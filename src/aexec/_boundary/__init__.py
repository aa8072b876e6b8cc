"""The boundary and the process shell: everything that touches processes, mounts,
cgroups and the filesystem for a run. ``supervise`` is the only module that spawns and
kills a run; ``driver.py`` (with its parts in ``_driver/``) is what runs inside the
boundary."""

from __future__ import annotations

import os

#: The driver, run by path with the candidate's interpreter (never imported).
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver.py")
