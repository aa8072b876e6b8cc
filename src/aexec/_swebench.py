"""``aexec swebench PREDICTIONS INSTANCES -o report.json``: SWE-bench-style grading of
model patches on local checkouts, with SWE-bench's own report layout (issue 18, goal 4).

Reads SWE-bench-format predictions (``instance_id``, ``model_name_or_path``,
``model_patch``) and instances (``instance_id``, ``repo``: a local checkout at its base
commit, ``python``: the interpreter, ``test_patch``, ``FAIL_TO_PASS``,
``PASS_TO_PASS``), observes every prediction that has a patch as one graded
``run_suite`` request through the public front door (`observe_many`), and writes the
report SWE-bench's ``make_run_report`` writes (schema 2), plus per-instance detail.
``docs/swebench.md`` says how each instance lands in which list.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import attrs

from . import _runners as runners
from ._api import observe_many, validate
from ._environments.spec import EnvSpec, from_json
from ._errors import RequestError
from ._jsonl import check_output, open_output
from ._options import Options
from ._records import Candidate, ExecutionObservation, Policy
from ._types import RunnerName

#: The deadline of one graded run without the instance's ``timeout_s``: SWE-bench's
#: harness default (``run_evaluation --timeout 1800``). A repo's own suite (Django's,
#: sympy's without its cache) outlasts a run's default 30 s on a loaded machine.
TIMEOUT_S = 1800.0

__all__ = ["Instance", "Prediction", "load_instances", "load_predictions", "main", "make_report"]


@attrs.frozen
class Instance:
    instance_id: str
    repo: str
    test_patch: str | None
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    python: str | None = None
    #: The environment aexec builds for it (``environment``, or ``--specs swebench``).
    environment: EnvSpec | None = None
    #: SWE-bench's test command for it, as data (``test_cmd``, or the spec's).
    test_cmd: str | None = None
    #: The test runner (`_runners.choose_runner`) and why it was chosen.
    runner: RunnerName = "pytest"
    runner_reason: str | None = None
    #: The run's deadline (the instance's ``timeout_s``, else `TIMEOUT_S`).
    timeout_s: float = 0.0


@attrs.frozen
class Prediction:
    instance_id: str
    model_name_or_path: str | None
    model_patch: str | None


def _records(path: str) -> list[tuple[str, Any]]:
    """(where, object) of each record: a JSON list (or a dict of records by id), or
    JSONL. ``where`` is ``path:line`` for JSONL and ``path: item N`` for JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise RequestError(f"{path}: cannot read: {e}") from None
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    else:
        if isinstance(whole, list):
            return [(f"{path}: item {i}", r) for i, r in enumerate(whole)]
        if isinstance(whole, dict) and "instance_id" not in whole:
            return [(f"{path}: item {k!r}", r) for k, r in whole.items()]
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((f"{path}:{number}", json.loads(line)))
        except ValueError as e:
            raise RequestError(f"{path}:{number}: bad JSON: {e}") from None
    return out


def _field(where: str, record: Any, name: str, *, required: bool = True) -> Any:
    if not isinstance(record, dict):
        raise RequestError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
    if name not in record or record[name] is None:
        if required:
            raise RequestError(f"{where}: missing `{name}`")
        return None
    return record[name]


def _string(where: str, record: Any, name: str, *, required: bool = True) -> str | None:
    value = _field(where, record, name, required=required)
    if value is not None and not isinstance(value, str):
        raise RequestError(f"{where}: `{name}` must be a string")
    return value


def _node_ids(where: str, record: Any, name: str) -> tuple[str, ...]:
    """A list of node ids, given as a JSON list or a JSON-encoded string (as SWE-bench ships)."""
    value = _field(where, record, name)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise RequestError(f"{where}: `{name}` is a string but not a JSON-encoded list") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequestError(f"{where}: `{name}` must be a list of pytest node ids (strings)")
    return tuple(value)


def _unique(where: str, ident: str, seen: Mapping[str, Any], what: str) -> None:
    if ident in seen:
        raise RequestError(f"{where}: {what} {ident!r} appears twice")


def load_instances(path: str, *, specs: str | None = None) -> dict[str, Instance]:
    """The instances file, by id; raises `RequestError` naming the record and field.
    ``specs="swebench"``: an instance naming neither ``python`` nor ``environment`` gets
    the environment and test command of SWE-bench's spec for its (repo, ``version``)."""
    base = os.path.dirname(os.path.abspath(path))
    out: dict[str, Instance] = {}
    table = None
    if specs is not None:
        from ._environments.swebench import load_table

        table = load_table()
    for where, r in _records(path):
        ident = _string(where, r, "instance_id")
        assert ident is not None
        _unique(where, ident, out, "instance")
        where = f"{where} ({ident})"
        repo = _string(where, r, "repo")
        assert repo is not None
        python = _string(where, r, "python", required=False)
        checkout = os.path.normpath(os.path.join(base, repo))
        environment, test_cmd, note = None, _string(where, r, "test_cmd", required=False), None
        if _field(where, r, "environment", required=False) is not None:
            try:
                environment = from_json(r["environment"])
            except RequestError as e:
                raise RequestError(f"{where}: {e}") from None
        elif table is not None and python is None:
            environment, spec_cmd, note = _from_specs(where, r, ident, checkout, table)
            test_cmd = test_cmd or spec_cmd
        f2p, p2p = _node_ids(where, r, "FAIL_TO_PASS"), _node_ids(where, r, "PASS_TO_PASS")
        exists = functools.partial(_exists, checkout)
        runner, reason = runners.choose_runner(ident, exists, test_cmd, (*f2p, *p2p))
        out[ident] = Instance(
            instance_id=ident,
            repo=checkout,
            test_patch=_string(where, r, "test_patch", required=False) or None,
            fail_to_pass=f2p,
            pass_to_pass=p2p,
            python=python,
            environment=environment,
            test_cmd=test_cmd,
            runner=runner,
            runner_reason=reason if note is None else f"{reason}; {note}",
            timeout_s=_timeout(where, r),
        )
    return out


def _from_specs(where: str, r: Any, ident: str, checkout: str, table: Any) -> tuple[EnvSpec, str, str | None]:
    """The environment, test command and note (`lookup`) of SWE-bench's spec for an instance:
    its repo (``repo_name``, else from the id ``owner__name-N``) at its ``version``."""
    from ._environments.commits import Files
    from ._environments.swebench import lookup, repo_of

    version = _field(where, r, "version")
    name = _string(where, r, "repo_name", required=False) or repo_of(ident)
    if name is None:
        raise RequestError(f"{where}: no `repo_name`, and the id is not SWE-bench's owner__name-N")
    files = Files.at(checkout, _string(where, r, "environment_setup_commit", required=False))
    entry = lookup(table, name, str(version), functools.partial(_exists, checkout), files=files)
    return entry.environment, entry.test_cmd, entry.note


def _timeout(where: str, record: Any) -> float:
    value = _field(where, record, "timeout_s", required=False)
    if value is None:
        return TIMEOUT_S
    try:
        return float(Policy(timeout_s=value).timeout_s or TIMEOUT_S)
    except RequestError as e:
        raise RequestError(f"{where}: `timeout_s`: {e}") from None


def _exists(checkout: str, path: str) -> bool:
    return os.path.isfile(os.path.join(checkout, path))


def load_predictions(path: str) -> dict[str, Prediction]:
    """The predictions file, by instance id; raises `RequestError` naming the record and field."""
    out: dict[str, Prediction] = {}
    for where, r in _records(path):
        ident = _string(where, r, "instance_id")
        assert ident is not None
        _unique(where, ident, out, "a prediction for instance")
        where = f"{where} ({ident})"
        out[ident] = Prediction(
            instance_id=ident,
            model_name_or_path=_string(where, r, "model_name_or_path", required=False),
            model_patch=_string(where, r, "model_patch", required=False),
        )
    return out


def candidate(instance: Instance, prediction: Prediction) -> Candidate:
    """The graded ``run_suite`` request of one prediction."""
    return Candidate(
        "run_suite",
        "patch",
        id=instance.instance_id,
        repo=instance.repo,
        patch=prediction.model_patch,
        python=instance.python,
        environment=instance.environment,
        test_patch=instance.test_patch,
        fail_to_pass=instance.fail_to_pass,
        pass_to_pass=instance.pass_to_pass,
        runner=instance.runner,
        runner_reason=instance.runner_reason,
        test_ids=runners.ids_of_instance(instance.instance_id),
        policy=Policy(timeout_s=instance.timeout_s or TIMEOUT_S),
    )


#: What an instance's ``environment`` says in the report: what it ran in (else None).
PROVENANCE: tuple[str, ...] = ("toolchain", "toolchain_version", "environment_key", "lock_hash")
PROVENANCE += ("inplace_key", "inplace_rebuilt", "inplace_note")


def _detail(instance: Instance, prediction: Prediction, obs: ExecutionObservation | None) -> dict[str, Any]:
    """One instance's entry, in the layout of SWE-bench's per-instance ``report.json``
    plus aexec's verdict, flags, failure and error."""
    entry: dict[str, Any] = {
        "model_name_or_path": prediction.model_name_or_path,
        "patch_is_None": prediction.model_patch is None,
        "patch_exists": bool(prediction.model_patch),
    }
    if obs is None:
        return entry | {"patch_successfully_applied": False, "resolved": False}
    missing = obs.expected_failures
    refused = obs.failure is not None and obs.failure.location == "patch"
    status = {}
    for key, attr in (("FAIL_TO_PASS", "fail_to_pass"), ("PASS_TO_PASS", "pass_to_pass")):
        failed = list(getattr(missing, attr)) if missing is not None else []
        status[key] = {"success": [t for t in getattr(instance, attr) if t not in failed], "failure": failed}
    return entry | {
        "patch_successfully_applied": obs.verdict != "error" and not refused,
        "resolved": obs.resolved is True,
        "tests_status": status,
        "expected_unmatched": [attrs.asdict(u) for u in obs.expected_unmatched or ()],
        "verdict": obs.verdict,
        "runner": obs.runner,
        "runner_reason": obs.runner_reason,
        "flags": attrs.asdict(obs.flags),
        "environment": {k: getattr(obs.environment, k) for k in PROVENANCE},
        "failure": None if obs.failure is None else attrs.asdict(obs.failure),
        "error": obs.error,
    }


def make_report(
    instances: Mapping[str, Instance],
    predictions: Mapping[str, Prediction],
    observations: Mapping[str, ExecutionObservation],
) -> dict[str, Any]:
    """SWE-bench's run report (``make_run_report``, schema 2) from the observations, with
    aexec's additions: ``unknown_prediction_ids`` and per-``instances`` detail."""
    submitted = {i: p for i, p in predictions.items() if i in instances}
    incomplete, empty, completed, resolved, unresolved, errors = (set[str]() for _ in range(6))
    for ident in instances:
        prediction = submitted.get(ident)
        if prediction is None:
            incomplete.add(ident)
        elif not prediction.model_patch:
            empty.add(ident)
        elif observations[ident].verdict == "error":
            errors.add(ident)
        else:
            completed.add(ident)
            (resolved if observations[ident].resolved else unresolved).add(ident)
    return {
        "total_instances": len(instances),
        "submitted_instances": len(submitted),
        "completed_instances": len(completed),
        "resolved_instances": len(resolved),
        "unresolved_instances": len(unresolved),
        "empty_patch_instances": len(empty),
        "error_instances": len(errors),
        "completed_ids": sorted(completed),
        "incomplete_ids": sorted(incomplete),
        "empty_patch_ids": sorted(empty),
        "submitted_ids": sorted(submitted),
        "resolved_ids": sorted(resolved),
        "unresolved_ids": sorted(unresolved),
        "error_ids": sorted(errors),
        "schema_version": 2,
        "unknown_prediction_ids": sorted(set(predictions) - set(instances)),
        "instances": {
            ident: _detail(instances[ident], p, observations.get(ident))
            for ident, p in sorted(submitted.items())
        },
    }


async def _observe(cands: Sequence[Candidate], options: Options) -> list[ExecutionObservation]:
    """Observe ``cands``; SIGINT or SIGTERM cancels the whole run (every candidate's process
    tree killed, every scratch root removed) and raises `KeyboardInterrupt`."""
    interrupted: list[int] = []
    results: list[ExecutionObservation] = []
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    interrupted.append(signum)
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop_on_signal)
        results = await observe_many(cands, options=options)
        tg.cancel_scope.cancel()
    if interrupted:
        raise KeyboardInterrupt(interrupted[0])
    return results


def main(
    predictions_path: str, instances_path: str, output: str, *, options: Options, specs: str | None = None
) -> int:
    """The command: 0 when the report is written, 2 for bad input (one line on stderr)."""
    try:
        instances = load_instances(instances_path, specs=specs)
        predictions = load_predictions(predictions_path)
        todo: list[Candidate] = []
        for ident, p in predictions.items():
            if ident in instances and p.model_patch:
                c = candidate(instances[ident], p)
                try:
                    validate(c)
                except RequestError as e:
                    raise RequestError(f"{instances_path}: instance {ident!r}: {e}") from None
                todo.append(c)
        # Checked now, not after the runs: a report that cannot be written, or that
        # would overwrite an input, is refused before anything runs.
        check_output(output, [predictions_path, instances_path])
    except RequestError as e:
        print(f"aexec: {e}", file=sys.stderr)
        return 2
    for ident in sorted(set(predictions) - set(instances)):
        print(f"aexec: {predictions_path}: no instance {ident!r} in {instances_path}", file=sys.stderr)
    try:
        observed = anyio.run(_observe, todo, options)
    except KeyboardInterrupt as e:
        signum = e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT
        print(f"aexec: interrupted by {signal.Signals(signum).name}; no report written", file=sys.stderr)
        return 128 + signum
    by_id = {str(o.id): o for o in observed}
    report = make_report(instances, predictions, by_id)
    try:
        fd = open_output(output, [predictions_path, instances_path])
    except RequestError as e:  # it changed while the candidates ran
        print(f"aexec: {e}; no report written", file=sys.stderr)
        return 1
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=4, ensure_ascii=False)
        f.write("\n")
    print(
        f"aexec: {report['total_instances']} instances, {report['submitted_instances']} submitted:"
        f" {report['resolved_instances']} resolved, {report['unresolved_instances']} unresolved,"
        f" {report['empty_patch_instances']} empty patches, {report['error_instances']} errors;"
        f" wrote {output}",
        file=sys.stderr,
    )
    return 0
