"""Stage (b): the declared boundary per mode, and declared overrides."""

from __future__ import annotations

import pytest

from aexec import Policy, RequestError
from aexec._stages.policy import declare, limits
from aexec._types import DEFAULT_SUITE_RAM_MIB, default_ram_mib


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


def test_a_suite_gets_the_suites_ram_default() -> None:
    """A test suite (``run_suite``) defaults to 4 GiB, a snippet keeps 512 MiB (issue 26);
    a declared ``ram_mib`` wins either way."""
    suite = declare(
        "test_execution",
        Policy(),
        toolchain="/usr/bin/python3",
        toolchain_version="CPython 3.11",
        enforced={},
        repo_view="copy",
        max_cores=2.0,
        request_type="run_suite",
    )
    assert suite.ram_cap_mib == DEFAULT_SUITE_RAM_MIB == 4096
    assert default_ram_mib("run_suite") == 4096 and default_ram_mib("run_entry") == 512
    declared = declare(
        "test_execution",
        Policy(ram_mib=256),
        toolchain="/usr/bin/python3",
        toolchain_version="CPython 3.11",
        enforced={},
        repo_view="copy",
        max_cores=2.0,
        request_type="run_suite",
    )
    assert declared.ram_cap_mib == 256


def test_overrides_are_recorded_and_realized() -> None:
    env = _declare("targeted_execution", Policy(timeout_s=5, ram_mib=256, cpu_cores=0.5))
    assert (env.timeout_s, env.ram_cap_mib, env.cpu_cap_cores) == (5, 256, 0.5)
    lim = limits(env)
    assert lim.address_space_bytes == 256 * 1024 * 1024
    # The CPU-time backstop sits above the wall-clock deadline.
    assert lim.cpu_seconds > env.timeout_s
    # the stream caps: 64 KiB each by default (the spec's), or the declared output_kib
    assert (env.stdout_cap_kib, env.stderr_cap_kib) == (64, 64)
    big = _declare("targeted_execution", Policy(output_kib=1024))
    assert (big.stdout_cap_kib, big.stderr_cap_kib) == (1024, 1024)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timeout_s", 10_000),
        ("timeout_s", 0),
        ("timeout_s", -1),
        ("timeout_s", float("inf")),
        ("timeout_s", float("nan")),
        ("timeout_s", True),
        ("cpu_cores", 4096),
        ("cpu_cores", 0),
        ("ram_mib", 1),
        ("ram_mib", 1e27),
        ("ram_mib", 256.0),
        ("output_kib", 0),
        ("output_kib", 1 << 30),
        ("output_kib", 1.5),
    ],
)
def test_out_of_range_overrides_are_refused_when_the_policy_is_made(field: str, value: object) -> None:
    # the same bounds for the CLI (which makes a Policy from each line) and the API
    with pytest.raises(RequestError, match=rf"policy\.{field}"):
        Policy(**{field: value})  # type: ignore[arg-type]


def test_declare_still_refuses_more_cores_than_the_machine_it_runs_on() -> None:
    with pytest.raises(RequestError, match=r"policy\.cpu_cores"):
        declare(
            "test_execution",  # type: ignore[arg-type]
            Policy(cpu_cores=2.0),
            toolchain="/usr/bin/python3",
            toolchain_version="CPython 3.11",
            enforced={},
            repo_view="copy",
            max_cores=1.0,
        )
