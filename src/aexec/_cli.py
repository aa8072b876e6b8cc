"""``aexec observe CASES.jsonl -o OBS.jsonl`` — the contract's command line.

The only place that configures structlog and prints progress.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

import anyio
import attrs
import structlog

from ._api import VERSION, observe_many, validate
from ._errors import RequestError
from ._options import Options
from ._records import Candidate, ExecutionObservation
from ._serde import candidate as candidate_from_json
from ._serde import dumps


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "aexec")


def _configure_logging(verbosity: int) -> None:
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S"),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def read_cases(path: str) -> list[Candidate]:
    """Parse and check every line; raises `RequestError` naming the first bad line."""
    base = os.path.dirname(os.path.abspath(path))
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise RequestError(f"{path}: cannot read: {e}") from None
    out: list[Candidate] = []
    errors: list[str] = []
    ignored: Counter[str] = Counter()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            try:
                data = json.loads(line)
            except ValueError as e:
                raise RequestError(f"bad JSON: {e}") from None
            cand, extra = candidate_from_json(data)
            ignored.update(extra)
            if cand.repo is not None:
                cand = attrs.evolve(cand, repo=os.path.normpath(os.path.join(base, cand.repo)))
            validate(cand)
            out.append(cand)
        except RequestError as e:
            errors.append(f"{path}:{number}: {e}")
    if errors:
        more = f" (and {len(errors) - 1} more malformed lines)" if len(errors) > 1 else ""
        raise RequestError(errors[0] + more)
    if ignored:
        names = ", ".join(f"{k} ({n}×)" for k, n in sorted(ignored.items()))
        print(f"aexec: ignoring fields the contract does not define: {names}", file=sys.stderr)
    return out


class _OrderedWriter:
    """Writes observations to ``fd`` in input order, each line in one write()."""

    def __init__(self, fd: int, count: int) -> None:
        self.fd = fd
        self.pending: dict[int, ExecutionObservation] = {}
        self.next = 0
        self.count = count

    def put(self, index: int, obs: ExecutionObservation) -> None:
        self.pending[index] = obs
        while self.next in self.pending:
            data = (dumps(self.pending.pop(self.next)) + "\n").encode("utf-8")
            while data:
                data = data[os.write(self.fd, data) :]
            self.next += 1


def _summary(observations: Sequence[ExecutionObservation], wall: float, out: TextIO) -> None:
    verdicts = Counter(o.verdict for o in observations)
    classes = Counter(o.failure.failure_class for o in observations if o.failure is not None)
    hits = sum(o.cache_hit for o in observations)
    parts = ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items()))
    cls = ", ".join(f"{c} {n}" for c, n in sorted(classes.items()))
    print(
        f"aexec: observed {len(observations)} requests in {wall:.1f} s: {parts or 'none'}"
        + (f" | failure classes: {cls}" if cls else "")
        + f" | cache hits: {hits}",
        file=out,
    )


class _Interrupted:
    signal: int | None = None


async def _observe(
    args: argparse.Namespace, cases: list[Candidate], interrupted: _Interrupted
) -> list[ExecutionObservation]:
    """Observe ``cases`` into the output file; SIGINT or SIGTERM cancels the whole run,
    which kills every running candidate and removes every scratch root before returning."""
    results: list[ExecutionObservation] = []
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    interrupted.signal = signum
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop_on_signal)
        results = await _observe_all(args, cases)
        tg.cancel_scope.cancel()
    return results


async def _observe_all(args: argparse.Namespace, cases: list[Candidate]) -> list[ExecutionObservation]:
    cache_dir = None if args.no_cache else (args.cache_dir or default_cache_dir())
    fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    writer = _OrderedWriter(fd, len(cases))
    progress = None
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        progress = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
    executor = None
    if args.ray is not None:
        from ._scaleout.ray import NODE_CACHE_ENV, RayExecutor

        executor = RayExecutor(address=args.ray, node_cache=os.environ.get(NODE_CACHE_ENV) or None)
    options = Options.from_env(limit=args.jobs, cache_dir=cache_dir)
    try:
        if progress is None:
            return await observe_many(cases, options=options, on_observation=writer.put, executor=executor)
        with progress:
            task = progress.add_task("observing", total=len(cases))

            def seen(i: int, obs: ExecutionObservation) -> None:
                writer.put(i, obs)
                progress.advance(task)

            return await observe_many(cases, options=options, on_observation=seen, executor=executor)
    finally:
        os.close(fd)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aexec", description="Run candidate code; observe what it does.")
    p.add_argument("--version", action="version", version=f"aexec {VERSION}")
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("observe", help="observe every request of a JSONL file")
    o.add_argument("cases", help="the requests, one JSON object per line")
    o.add_argument("-o", "--output", required=True, help="where the observations go (JSONL)")
    o.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs under way at once (default: 4 per core, one per core while busy)",
    )
    g = o.add_mutually_exclusive_group()
    g.add_argument("--cache-dir", default=None, help=f"behavioural cache (default: {default_cache_dir()})")
    g.add_argument("--no-cache", action="store_true", help="observe everything afresh, store nothing")
    o.add_argument("-v", "--verbose", action="count", default=0, help="log stage events to stderr")
    o.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="observe on a Ray cluster (needs aexec[ray]): local (start one here), auto, HOST:PORT or ray://HOST:10001;"
        " each node unpacks repositories into $AEXEC_RAY_NODE_CACHE (default <tmp>/aexec-ray-repos)",
    )
    _more_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _configure_logging(args.verbose)
    if args.command in _COMMANDS:
        return _COMMANDS[args.command](args)
    if args.jobs is not None and args.jobs < 1:
        print(f"aexec: --jobs must be >= 1, got {args.jobs}", file=sys.stderr)
        return 2
    try:
        cases = read_cases(args.cases)
    except RequestError as e:
        print(f"aexec: {e}", file=sys.stderr)
        return 2
    start = time.monotonic()
    interrupted = _Interrupted()
    observations = anyio.run(_observe, args, cases, interrupted)
    if interrupted.signal is not None:
        name = signal.Signals(interrupted.signal).name
        print(f"aexec: interrupted by {name}; the lines written so far are complete", file=sys.stderr)
        return 128 + interrupted.signal
    _summary(observations, time.monotonic() - start, sys.stderr)
    errors = [o for o in observations if o.verdict == "error"]
    for o in errors:
        print(f"aexec: could not observe {o.id!r}: {o.error}", file=sys.stderr)
    return 1 if errors or len(observations) != len(cases) else 0


# --------------------------------------------------------------------------------------
# aexec discriminate / aexec ab (issue 6)
# --------------------------------------------------------------------------------------


def _more_commands(sub: Any) -> None:
    from ._ab.harness import MECHANISMS

    d = sub.add_parser("discriminate", help="group 2+ candidates of one task by observed behaviour")
    d.add_argument("cases", help="the candidates, one request per line; lines of one repo+tests form a task")
    d.add_argument("-o", "--output", required=True, help="one JSON line per task (JSONL)")
    d.add_argument(
        "--property", default=None, help="the behaviour the suite leaves open (for the probe prompt)"
    )
    d.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs under way at once (default: 4 per core, one per core while busy)",
    )
    g = d.add_mutually_exclusive_group()
    g.add_argument("--cache-dir", default=None, help=f"behavioural cache (default: {default_cache_dir()})")
    g.add_argument("--no-cache", action="store_true", help="observe everything afresh, store nothing")
    d.add_argument("-v", "--verbose", action="count", default=0, help="log stage events to stderr")
    a = sub.add_parser("ab", help="the spec §7 A/B: pipeline vs naive baselines, and ablations")
    a.add_argument("corpus", help="a labelled cases JSONL, or a directory holding cases.jsonl")
    a.add_argument(
        "--labels", default=None, help="labels JSONL ({id, verdict, failure_class, f2p}) if not inline"
    )
    a.add_argument(
        "--ablate",
        action="append",
        default=[],
        choices=[*MECHANISMS, "all"],
        help="re-measure with this mechanism removed (repeatable; `all` for every one)",
    )
    a.add_argument("--selection", default=None, help="discrimination corpus for the probe ablation (§7.5.3)")
    a.add_argument(
        "--out", default=None, help="where ab.json and the confusion PNGs go (default: CORPUS_DIR/ab)"
    )
    a.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs under way at once (default: 4 per core, one per core while busy)",
    )
    a.add_argument("--check", action="store_true", help="exit 1 unless the pipeline wins")
    a.add_argument("-v", "--verbose", action="count", default=0, help="log stage events to stderr")


def _bad_jobs(args: argparse.Namespace) -> bool:
    if args.jobs is not None and args.jobs < 1:
        print(f"aexec: --jobs must be >= 1, got {args.jobs}", file=sys.stderr)
        return True
    return False


def _discriminate_main(args: argparse.Namespace) -> int:
    from ._discrimination.discriminate import discriminate, task_key
    from ._discrimination.probe import prober_from_env
    from ._serde import to_json_data

    if _bad_jobs(args):
        return 2
    try:
        cases = read_cases(args.cases)
        prober = prober_from_env()
    except RequestError as e:
        print(f"aexec: {e}", file=sys.stderr)
        return 2
    with open(args.cases, encoding="utf-8") as f:
        numbers = [n for n, line in enumerate(f.read().splitlines(), start=1) if line.strip()]
    tasks: dict[Any, list[int]] = {}
    for i, c in enumerate(cases):
        tasks.setdefault(task_key(c), []).append(i)
    for members in tasks.values():
        if len(members) < 2:
            print(
                f"aexec: {args.cases}:{numbers[members[0]]}: a task needs 2 or more candidates"
                " (candidates of one task share repo and tests)",
                file=sys.stderr,
            )
            return 2
    cache_dir = None if args.no_cache else (args.cache_dir or default_cache_dir())

    async def run_all() -> list[Any]:
        return [
            await discriminate(
                [cases[i] for i in members],
                property=args.property,
                prober=prober,
                cache_dir=cache_dir,
                limit=args.jobs,
            )
            for members in tasks.values()
        ]

    results = anyio.run(run_all)
    errors = 0
    with open(args.output, "w", encoding="utf-8") as out:
        for n, ((repo, tests), r) in enumerate(zip(tasks, results, strict=True)):
            line = {
                "task": n,
                "repo": repo,
                "tests": tests,
                "discriminated": r.discriminated,
                **to_json_data(r),
            }
            out.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
            errors += sum(o.verdict == "error" for o in r.observations)
            groups = " | ".join(
                "["
                + ", ".join(str(i) for i in g.ids)
                + f"] {g.verdict}"
                + (f" {g.failure_class}" if g.failure_class else "")
                for g in r.groups
            )
            print(
                f"aexec: task {n} ({len(r.observations)} candidates): {len(r.groups)} groups: {groups}",
                file=sys.stderr,
            )
            print(f"aexec: task {n} probe: {r.probe.outcome}", file=sys.stderr)
    return 1 if errors else 0


def _ab_main(args: argparse.Namespace) -> int:
    import functools

    from ._ab.corpus import load_corpus
    from ._ab.harness import MECHANISMS, run_ab
    from ._ab.report import render
    from ._discrimination.probe import prober_from_env

    if _bad_jobs(args):
        return 2
    try:
        corpus = load_corpus(args.corpus, args.labels)
        prober = prober_from_env()
    except RequestError as e:
        print(f"aexec: {e}", file=sys.stderr)
        return 2
    ablate = list(MECHANISMS) if "all" in args.ablate else list(dict.fromkeys(args.ablate))
    out_dir = args.out or os.path.join(os.path.dirname(corpus.path), "ab")
    run = functools.partial(
        run_ab,
        corpus,
        jobs=args.jobs,
        options=Options.from_env(),
        ablate=ablate,
        out_dir=out_dir,
        prober=prober,
        selection=args.selection,
    )
    try:
        report = anyio.run(run)
    except RequestError as e:
        print(f"aexec: {e}", file=sys.stderr)
        return 2
    print(render(report))
    print(f"\nwrote {os.path.join(out_dir, 'ab.json')}", file=sys.stderr)
    return 1 if args.check and not report.wins else 0


_COMMANDS = {"discriminate": _discriminate_main, "ab": _ab_main}
