"""Stage (b): the isolation policy (spec §3.2). Pure: no I/O.

The policy is a fixed declaration per mode, with the request's declared overrides, and
is recorded in the observation. The scratch root is filled in when the run has one.
"""

from __future__ import annotations

import math

import attrs

from .._errors import RequestError
from .._records import Environment, FsBoundary, Policy
from .._types import (
    CPU_BACKSTOP_MARGIN_S,
    DEFAULT_CPU_CORES,
    DEFAULT_TIMEOUT_S,
    MAX_RAM_MIB,
    MAX_TIMEOUT_S,
    MIN_RAM_MIB,
    STREAM_CAP_BYTES,
    Mode,
    default_ram_mib,
)


def declare(
    mode: Mode,
    overrides: Policy,
    *,
    toolchain: str,
    toolchain_version: str,
    enforced: dict[str, str],
    repo_view: str,
    max_cores: float,
    repo_ro: bool = False,
    request_type: str = "run_entry",
) -> Environment:
    """The boundary a run in ``mode`` is held to (a ``run_suite`` gets the suites' RAM
    default, `default_ram_mib`). Raises `RequestError` on a bad override."""
    timeout = DEFAULT_TIMEOUT_S[mode] if overrides.timeout_s is None else float(overrides.timeout_s)
    ram = default_ram_mib(request_type) if overrides.ram_mib is None else overrides.ram_mib
    cores = DEFAULT_CPU_CORES if overrides.cpu_cores is None else float(overrides.cpu_cores)
    output_kib = STREAM_CAP_BYTES // 1024 if overrides.output_kib is None else overrides.output_kib
    if not 0 < timeout <= MAX_TIMEOUT_S:
        raise RequestError(f"policy.timeout_s must be in (0, {MAX_TIMEOUT_S:g}], got {timeout:g}")
    if not isinstance(ram, int) or not MIN_RAM_MIB <= ram <= MAX_RAM_MIB:
        raise RequestError(f"policy.ram_mib must be an integer in [{MIN_RAM_MIB}, {MAX_RAM_MIB}]")
    if not 0 < cores <= max_cores:
        raise RequestError(f"policy.cpu_cores must be in (0, {max_cores:g}], got {cores:g}")
    return Environment(
        toolchain=toolchain,
        toolchain_version=toolchain_version,
        cpu_cap_cores=cores,
        ram_cap_mib=ram,
        timeout_s=timeout,
        fs_boundary=FsBoundary(scratch_root="", repo_ro=repo_ro, repo_view=repo_view),
        network="deny_by_default",
        stdout_cap_kib=output_kib,
        stderr_cap_kib=output_kib,
        enforced=dict(enforced),
    )


def with_scratch(env: Environment, scratch_root: str) -> Environment:
    return attrs.evolve(env, fs_boundary=attrs.evolve(env.fs_boundary, scratch_root=scratch_root))


@attrs.frozen
class Limits:
    """The kernel limits that realize a declared environment inside the candidate."""

    #: RLIMIT_AS, the RAM cap's fallback: set only where no memory cgroup holds (an
    #: address-space cap counts every thread's stack reservation as used).
    address_space_bytes: int
    cpu_seconds: int
    file_size_bytes: int
    open_files: int
    processes: int
    #: The run cgroup's memory cap: the RAM cap, for the whole tree, its tmpfs files
    #: included (as Docker's ``--memory`` with ``--tmpfs``).
    tree_memory_bytes: int
    disk_bytes: int


#: No single file a candidate writes may exceed this (RLIMIT_FSIZE).
FILE_SIZE_CAP_BYTES = 1 << 30


def limits(env: Environment) -> Limits:
    # RLIMIT_CPU counts CPU seconds of the whole process; a backstop above the deadline
    # so the wall clock always decides first (the contract's timeout rule).
    cpu = math.ceil(env.timeout_s * max(env.cpu_cap_cores, 1.0) + CPU_BACKSTOP_MARGIN_S)
    return Limits(
        address_space_bytes=env.ram_cap_mib * 1024 * 1024,
        cpu_seconds=cpu,
        file_size_bytes=min(FILE_SIZE_CAP_BYTES, env.disk_cap_mib << 20),
        open_files=env.open_files_cap,
        processes=env.pids_cap,
        tree_memory_bytes=env.ram_cap_mib << 20,
        disk_bytes=env.disk_cap_mib << 20,
    )
