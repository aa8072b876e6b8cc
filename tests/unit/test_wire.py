"""The wire's pure half (issue 17): the one reader of the driver's report refuses what
is not a record, and the plan's instructions are plain JSON with exactly the typed keys.
(The driver writing through it, in a subprocess of its own, is tests/test_wire.py.)"""

from __future__ import annotations

import json

import pytest

from aexec import Policy
from aexec._driver.wire import Box, Instructions, decode, decode_report
from aexec._stages.plan import BoxFacts, RunFacts, Scratch, plan
from aexec._stages.policy import declare

DEEP = '{"kind": "end", "exitstatus": 0, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"

MALFORMED = [
    b'{"kind": "end", "exitstatus": 0',  # torn by a kill
    b"not json at all",
    b'{"kind": "end", "exitstatus": 0}}',
    b'"end"',
    b"[1, 2]",
    b"null",
    b"{}",
    b'{"exitstatus": 0}',  # no kind
    b'{"kind": "nope"}',  # unknown kind
    b'{"kind": ["end"], "exitstatus": 0}',  # a kind that is not even hashable
    b'{"kind": {"a": 1}, "exitstatus": 0}',
    b'{"kind": 3}',
    b'{"kind": "end", "exitstatus": "0"}',  # wrong types
    b'{"kind": "end", "exitstatus": 0.0}',
    b'{"kind": "end"}',  # missing field
    b'{"kind": "exit", "code": 1}',
    b'{"kind": "child", "exit": "1", "signal": null}',
    b'{"kind": "main", "exit": 0}',
    b'{"kind": "test", "nodeid": 1, "verdict": "passed"}',
    b'{"kind": "usage", "cpu_s": "1", "maxrss_kib": 1}',
    b'{"kind": "usage", "cpu_s": 1.5, "maxrss_kib": 1.5}',
    b'{"kind": "end", "exitstatus": true}',  # a bool where an int is needed
    b'{"kind": "collected", "count": false}',
    b'{"kind": "main", "exit": true, "signal": null}',
    b'{"kind": "child", "exit": null, "signal": false}',
    b'{"kind": "usage", "cpu_s": true, "maxrss_kib": 1}',
    b'{"kind": "usage", "cpu_s": NaN, "maxrss_kib": 1}',  # not JSON (RFC 8259)
    b'{"kind": "usage", "cpu_s": Infinity, "maxrss_kib": 1}',
    b'{"kind": "end", "exitstatus": 0, "x": "\xff\xfe"}',  # not UTF-8
    DEEP.encode(),  # deep nesting
]


@pytest.mark.parametrize("line", MALFORMED, ids=lambda b: b[:40].decode("utf-8", "replace"))
def test_a_malformed_line_is_bad_not_a_record(line: bytes) -> None:
    assert decode(line) is None
    good = b'{"kind": "end", "exitstatus": 1}'
    assert decode_report(b"\n".join([good, line, b"", b"   ", good]) + b"\n") == (
        ({"kind": "end", "exitstatus": 1}, {"kind": "end", "exitstatus": 1}),
        1,
    )


# -- the instructions: plain JSON, exactly the TypedDict's keys -------------------------


def test_plans_instructions_survive_json_and_have_exactly_the_typed_keys() -> None:
    env = declare("test_execution", Policy(), toolchain="python", toolchain_version="3",
                  enforced={}, repo_view="copy", max_cores=2)  # fmt: skip
    for box in (None, BoxFacts(uid=1 << 20, supervisor_pids=(10, 11), etc="/tmp/aexec-1-etc",
                               repo="/srv/repo")):  # fmt: skip
        facts = RunFacts(
            runner="pytest",
            scratch=Scratch("/tmp/aexec-1-abc"),
            python="/root/.venv/bin/python",
            toolchain_paths=("/root/.venv", "/tmp/toolchain"),
            import_roots=("/tmp/aexec-1-abc/work", "/tmp/aexec-1-abc/work/src"),
            snippet=None,
            argv=(),
            tests=("tests/test_a.py::test_x",),
            touched_sources=("src/pkg/mod.py",),
            cgroup_procs=("/sys/fs/cgroup/aexec/run/cgroup.procs",),
            box=box,
        )
        instructions = plan(facts, env).instructions
        assert json.loads(json.dumps(instructions)) == instructions
        assert set(instructions) == set(Instructions.__required_keys__) | set(Instructions.__optional_keys__)
        assert set(Instructions.__optional_keys__) == set()
        if box is not None:
            assert instructions["box"] is not None
            assert set(instructions["box"]) == set(Box.__required_keys__)
