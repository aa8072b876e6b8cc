"""The run's raw result (layer 1): what the runtime returned, before any stage read it."""

from __future__ import annotations

import attrs

from ._driver.wire import Record


@attrs.frozen
class RawRun:
    """What the runtime returned, uninterpreted."""

    exit_code: int | None
    signal: int | None
    timed_out: bool
    duration: float
    stdout: str
    stderr: str
    records: tuple[Record, ...]
    #: Lines of the report that were not records (the driver never writes one).
    bad_records: int
    cpu_s: float | None
    peak_ram_mib: int | None
    #: The run's memory cgroup killed a process of it.
    oom_killed: bool = False
