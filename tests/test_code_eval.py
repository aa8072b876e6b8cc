"""``aexec.code_eval`` (issue 41): HF ``evaluate``'s ``code_eval`` arguments and shapes,
each program run under the boundary. The expected strings are ``evaluate``'s wording
(``"passed"``, ``"timed out"``, ``"failed: " + str(exception)``)."""

from __future__ import annotations

import math
from pathlib import Path

import aexec

TEST_ADD = "def check(f):\n    assert f(1, 2) == 3\n    assert f(-1, 1) == 0\n\ncheck(add)"
TEST_NEG = "assert neg(3) == -3"


def _closed_form(n: int, c: int, k: int) -> float:
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_code_eval_has_evaluates_shapes_and_words(tmp_path: Path) -> None:
    escaped = tmp_path / "escaped"
    predictions = [
        [
            "def add(a, b):\n    return a + b",
            "def add(a, b):\n    return a - b",
            "def add(a, b):\n    while True:\n        pass",
            "import sys\nsys.exit(0)\ndef add(a, b):\n    return 0",
            "def add(a, b):\n    raise ValueError('nope')",
            f"open({str(escaped)!r}, 'w').write('x')\ndef add(a, b):\n    return a + b",
            # a thread left allocating a MiB at a time without end: killed at the run's
            # memory cap (512 MiB) well before the deadline, however loaded the machine
            "import threading\nthreading.Thread(target=lambda: [b'x' * (1 << 20) for _ in iter(int, 1)]).start()\n"
            "def add(a, b):\n    return a + b",
            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
        ],
        [
            "def neg(x):\n    return -x",
            "def neg(x):\n    return x",
            "def neg(x):\n    return 0 - x",
            "neg = abs",
        ],
    ]
    pass_at_k, results = aexec.code_eval(
        predictions=predictions, references=[TEST_ADD, TEST_NEG], k=[1, 2, 5], num_workers=2, timeout=2.0
    )
    words = {t: [r["result"] for _, r in rows] for t, rows in results.items()}
    assert words[0][:5] == ["passed", "failed: ", "timed out", "failed: 0", "failed: nope"]
    assert words[0][5].startswith("failed: ") and not escaped.exists()  # the host is not the program's
    assert words[0][6] == "failed: a process was killed by the run's memory cap (cgroup OOM)", words[0][6]
    assert words[0][7].startswith("failed: ") and "SIGKILL" in words[0][7], words[0][7]
    assert words[1] == ["passed", "failed: ", "passed", "failed: "]
    for t, rows in results.items():
        assert [cid for cid, _ in rows] == list(range(len(predictions[t])))
        assert all(r["task_id"] == t and r["completion_id"] == cid for cid, r in rows)
        assert all(r["passed"] == (r["result"] == "passed") for _, r in rows)
    # pass@5 needs 5 samples of every task: task 1 has 4, so it is left out, as evaluate does.
    assert set(pass_at_k) == {"pass@1", "pass@2"}
    for k in (1, 2):
        want = (_closed_form(8, 1, k) + _closed_form(4, 2, k)) / 2
        assert math.isclose(pass_at_k[f"pass@{k}"], want)
