"""Stage (b): the declared boundary per mode, and declared overrides."""

from __future__ import annotations

import pytest

from aexec import Policy, RequestError
from aexec._stages.policy import declare, limits


def _declare(mode: str, policy: Policy | None = None):  # type: ignore[no-untyped-def]
    return declare(
        mode,  # type: ignore[arg-type]
        policy or Policy(),
        toolchain="/usr/bin/python3",
        toolchain_version="CPython 3.11",
        enforced={"network": "net_namespace"},
        repo_view="copy",
        max_cores=2.0,
    )


@pytest.mark.parametrize(
    ("mode", "timeout"),
    [
        ("compile_parse", 60),
        ("targeted_execution", 30),
        ("test_execution", 120),
        ("diagnostic_probe", 30),
    ],
)
def test_spec_defaults(mode: str, timeout: float) -> None:
    env = _declare(mode)
    assert env.timeout_s == timeout
    assert (env.cpu_cap_cores, env.ram_cap_mib) == (1.0, 512)
    assert env.network == "deny_by_default"
    assert (env.stdout_cap_kib, env.stderr_cap_kib) == (64, 64)
    assert env.enforced == {"network": "net_namespace"}


def test_overrides_are_recorded_and_realized() -> None:
    env = _declare("targeted_execution", Policy(timeout_s=5, ram_mib=256, cpu_cores=0.5))
    assert (env.timeout_s, env.ram_cap_mib, env.cpu_cap_cores) == (5, 256, 0.5)
    lim = limits(env)
    assert lim.address_space_bytes == 256 * 1024 * 1024
    # The CPU-time backstop sits above the wall-clock deadline.
    assert lim.cpu_seconds > env.timeout_s


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (Policy(timeout_s=10_000), "timeout_s"),
        (Policy(cpu_cores=3), "cpu_cores"),
        (Policy(ram_mib=1), "ram_mib"),
    ],
)
def test_out_of_range_overrides_are_refused(policy: Policy, field: str) -> None:
    with pytest.raises(RequestError, match=f"policy.{field}"):
        _declare("test_execution", policy)


def test_non_positive_override_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        Policy(timeout_s=0)
