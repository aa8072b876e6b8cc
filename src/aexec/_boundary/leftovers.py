"""What a dead aexec left behind: scratch roots (and their tmpfs mounts) and run cgroups.

Both are named after the aexec process that made them (``aexec-<pid>-…``); a name whose
pid is no longer alive is stale and removed. An `Observer` sweeps its scratch base and
its cgroup tree when it starts.
"""

from __future__ import annotations

import os

from .._stages.plan import Scratch
from .cgroups import CGROUP_PREFIX, Cgroups, remove_cgroups
from .scratch import SCRATCH_PREFIX, remove_scratch


def owner_alive(name: str, prefix: str) -> bool | None:
    """Whether the aexec that named ``name`` (``<prefix><pid>-…``) still runs; None if
    ``name`` is not such a name."""
    owner = name[len(prefix) :].split("-", 1)[0]
    if not (name.startswith(prefix) and owner.isdigit()):
        return None
    try:
        os.kill(int(owner), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_scratch(base: str) -> list[str]:
    """Remove the scratch roots under ``base`` of aexec processes that died; returns them."""
    try:
        names = os.listdir(base)
    except OSError:
        return []
    swept = []
    for name in names:
        if owner_alive(name, SCRATCH_PREFIX) is False:
            remove_scratch(Scratch(os.path.join(base, name)))
            swept.append(os.path.join(base, name))
    return swept


def sweep_cgroups(cgroups: Cgroups) -> list[str]:
    """Remove the run cgroups of aexec processes that died; returns them."""
    swept = []
    for root in cgroups.roots():
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            if owner_alive(name, CGROUP_PREFIX) is False:
                remove_cgroups([os.path.join(root, name)])
                swept.append(os.path.join(root, name))
    return swept
