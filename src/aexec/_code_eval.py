"""A drop-in for HF ``evaluate``'s ``code_eval`` metric, each program run under the
boundary: ``aexec.code_eval`` (blocking, as ``evaluate``'s is) and ``aexec.code_eval_async``.

``code_eval(predictions, references, k=[1, 10, 100], num_workers=4, timeout=3.0)`` takes
what ``evaluate.load("code_eval").compute`` takes (the candidates of each task, its
test program) and returns the same shapes: ``({"pass@k": mean, ...}, results)``, where
``results[task_id]`` lists ``(completion_id, {"task_id", "passed", "result",
"completion_id"})`` in completion order and ``result`` is ``"passed"``, ``"timed out"``
or ``"failed: <the exception's message>"``, as ``evaluate`` words them (a program
killed, at its memory cap or by a signal, fails with what killed it). Each program
(candidate, a newline, its test) is one ``run_entry`` snippet observed by aexec: in its
own scratch root and boundary, killed at ``timeout`` seconds of wall clock, at most
``num_workers`` at once. It needs no ``HF_ALLOW_CODE_EVAL``: nothing runs unisolated.

A program passes when it ran to its end: ``sys.exit()`` or ``exit(0)`` before the test
is a failure, as in ``evaluate`` (its ``exec`` sees the ``SystemExit``); the end is
marked by a line with a fresh random token, printed after the test.
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Sequence
from typing import Any

import anyio

from ._pipeline.observer import Observer
from ._records import Candidate, ExecutionObservation, Policy


def estimate_pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of ``n`` samples with ``c`` correct (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def _result(obs: ExecutionObservation, token: str) -> str:
    if obs.timed_out:
        return "timed out"
    if obs.exit_code == 0 and obs.stdout.rstrip("\n").endswith(token):
        return "passed"
    if obs.exception is not None:  # "Type: message" or "Type": evaluate says the message
        _, _, message = obs.exception.partition(": ")
        return f"failed: {message}"
    if obs.exit_code is None and obs.failure is not None:  # killed: its memory cap, a signal
        return f"failed: {obs.failure.message}"
    return f"failed: {obs.exit_code}"  # a SystemExit's code, as str(SystemExit(code))


Results = dict[int, list[tuple[int, dict[str, Any]]]]


def code_eval(
    predictions: Sequence[Sequence[str]],
    references: Sequence[str],
    k: int | Sequence[int] = (1, 10, 100),
    num_workers: int = 4,
    timeout: float = 3.0,
) -> tuple[dict[str, float], Results]:
    """`code_eval_async` on an event loop of its own (call it outside one)."""
    call = functools.partial(code_eval_async, predictions, references, k, num_workers, timeout)
    return anyio.run(call)


async def code_eval_async(
    predictions: Sequence[Sequence[str]],
    references: Sequence[str],
    k: int | Sequence[int] = (1, 10, 100),
    num_workers: int = 4,
    timeout: float = 3.0,  # noqa: ASYNC109 (each program's, as evaluate names it)
) -> tuple[dict[str, float], Results]:
    """``(pass_at_k, results)``, as ``evaluate``'s ``code_eval`` returns them; see the
    module docstring. A pass@k is given only when every task has at least k samples."""
    if len(predictions) != len(references):
        raise ValueError("predictions and references must have the same length")
    token = secrets.token_hex(16)
    keys: list[tuple[int, int]] = []
    candidates: list[Candidate] = []
    for task_id, (cands, test) in enumerate(zip(predictions, references, strict=True)):
        for completion_id, cand in enumerate(cands):
            program = f"{cand}\n{test}\nprint({token!r})\n"
            keys.append((task_id, completion_id))
            candidates.append(
                Candidate("run_entry", "snippet", code=program, policy=Policy(timeout_s=timeout))
            )
    async with Observer() as observer:  # its fork servers end with the call
        observed = await observer.observe_many(candidates, limit=max(1, num_workers))
    results: Results = {}
    for (task_id, completion_id), obs in zip(keys, observed, strict=True):
        result = _result(obs, token)
        row = {
            "task_id": task_id,
            "passed": result == "passed",
            "result": result,
            "completion_id": completion_id,
        }
        results.setdefault(task_id, []).append((completion_id, row))
    totals = [len(rows) for rows in results.values()]
    corrects = [sum(r["passed"] for _, r in rows) for rows in results.values()]
    ks = [k] if isinstance(k, int) else list(k)
    pass_at_k = {
        f"pass@{n}": sum(estimate_pass_at_k(t, c, n) for t, c in zip(totals, corrects, strict=True))
        / len(totals)
        for n in ks
        if totals and all(t >= n for t in totals)
    }
    return pass_at_k, results
