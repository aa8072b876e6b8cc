"""The boundary and the process shell: everything that touches processes, mounts,
cgroups and the filesystem for a run. ``supervise`` is the only module that spawns and
kills a run; the driver (the package ``aexec/_driver/``) is what runs inside the
boundary."""

from __future__ import annotations

import os

#: The driver's entry, run by path with the candidate's interpreter (the driver is never
#: imported as ``aexec._driver``, but its wire).
DRIVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_driver", "__main__.py")
