"""``aexec observe CASES.jsonl -o OBS.jsonl`` — the contract's command line.

The only place that configures structlog and prints progress.
Longer than 400 lines because it holds every command's parser and its short main; the
commands' work lives in their own modules (``_discrimination``, ``_ab``, ``_swebench``).
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
import structlog

from ._api import VERSION, observe_many
from ._errors import RequestError
from ._jsonl import check_cache_dir, open_output, read_cases, read_numbered
from ._options import Options
from ._records import Candidate, ExecutionObservation
from ._serde import dumps

__all__ = ["main", "read_cases"]

#: On a stderr that is not a terminal, a progress line at most this often.
PROGRESS_EVERY_S = 10.0


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
            # A plain traceback (no locals, no frames of rich's), only at -vv and above.
            structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


class _OrderedWriter:
    """Writes observations to ``fd`` in input order, each line whole; counts what it saw.

    A write that fails (a full disk) is remembered, not raised: the run goes on, and the
    command ends with one line saying how many observations were written.
    """

    def __init__(self, fd: int, count: int) -> None:
        self.fd = fd
        self.pending: dict[int, ExecutionObservation] = {}
        self.next = 0
        self.count = count
        self.seen: Counter[str] = Counter()
        self.error: OSError | None = None

    def put(self, index: int, obs: ExecutionObservation) -> None:
        self.seen[obs.verdict] += 1
        self.pending[index] = obs
        while self.next in self.pending:
            data = (dumps(self.pending.pop(self.next)) + "\n").encode("utf-8")
            if self.error is None:
                try:
                    while data:
                        data = data[os.write(self.fd, data) :]
                except OSError as e:
                    self.error = e
            if self.error is None:
                self.next += 1
            else:
                self.pending.clear()
                return

    def progress(self, wall: float) -> str:
        parts = ", ".join(f"{n} {v}" for v, n in sorted(self.seen.items()))
        return f"aexec: {sum(self.seen.values())}/{self.count} observed ({parts or 'none yet'}) after {wall:.0f} s"


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
    args: argparse.Namespace, cases: list[Candidate], writer: _OrderedWriter, interrupted: _Interrupted
) -> list[ExecutionObservation]:
    """Observe ``cases`` into the writer; SIGINT or SIGTERM cancels the whole run, which
    kills every running candidate and removes every scratch root before returning."""
    results: list[ExecutionObservation] = []
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    interrupted.signal = signum
                    tg.cancel_scope.cancel()
                    return

        async def report_progress() -> None:
            start = anyio.current_time()
            while True:
                await anyio.sleep(PROGRESS_EVERY_S)
                print(writer.progress(anyio.current_time() - start), file=sys.stderr, flush=True)

        tg.start_soon(stop_on_signal)
        if not sys.stderr.isatty():
            tg.start_soon(report_progress)
        results = await _observe_all(args, cases, writer)
        tg.cancel_scope.cancel()
    return results


async def _observe_all(
    args: argparse.Namespace, cases: list[Candidate], writer: _OrderedWriter
) -> list[ExecutionObservation]:
    cache_dir = args.cache_dir
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
    if progress is None:
        return await observe_many(cases, options=options, on_observation=writer.put, executor=executor)
    with progress:
        task = progress.add_task("observing", total=len(cases))

        def seen(i: int, obs: ExecutionObservation) -> None:
            writer.put(i, obs)
            progress.advance(task)

        return await observe_many(cases, options=options, on_observation=seen, executor=executor)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aexec", description="Run candidate code; observe what it does.")
    p.add_argument("--version", action="version", version=f"aexec {VERSION}")
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("observe", help="observe every request of a JSONL file")
    o.add_argument("cases", help="the requests, one JSON object per line (- for stdin)")
    o.add_argument("-o", "--output", required=True, help="where the observations go (JSONL; - for stdout)")
    o.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs under way at once (default: 4 per core, one per core while busy)",
    )
    g = o.add_mutually_exclusive_group()
    g.add_argument("--cache-dir", default=None, help=f"behavioural cache (default: {default_cache_dir()})")
    g.add_argument(
        "--no-cache",
        action="store_true",
        help="no disk cache: nothing is served from or stored to disk (identical requests in"
        " one run still run once and share their observation, spec §3.6)",
    )
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
        # Everything that could lose the work is checked before the first run.
        if not args.no_cache:
            args.cache_dir = check_cache_dir(args.cache_dir or default_cache_dir())
        fd = open_output(args.output, [args.cases])
    except RequestError as e:
        print(f"aexec: {e}", file=sys.stderr)
        return 2
    start = time.monotonic()
    interrupted = _Interrupted()
    writer = _OrderedWriter(fd, len(cases))
    try:
        observations = anyio.run(_observe, args, cases, writer, interrupted)
    finally:
        os.close(fd)
    if interrupted.signal is not None:
        name = signal.Signals(interrupted.signal).name
        print(f"aexec: interrupted by {name}; the lines written so far are complete", file=sys.stderr)
        return 128 + interrupted.signal
    _summary(observations, time.monotonic() - start, sys.stderr)
    if writer.error is not None:
        print(
            f"aexec: could not write to {args.output} ({writer.error.strerror or writer.error});"
            f" {writer.next} of {len(cases)} observations written",
            file=sys.stderr,
        )
        return 1
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
    gc = sub.add_parser("gc", help="remove what killed aexec processes left (scratch roots, mounts, cgroups)")
    gc.add_argument(
        "--scratch-dir", action="append", default=[], help="a scratch base to sweep (default: the TMPDIR)"
    )
    gc.add_argument(
        "--registry", default=None, help="the registry of aexec processes (default: /run/aexec as root)"
    )
    gc.add_argument("-v", "--verbose", action="count", default=0, help=argparse.SUPPRESS)
    a.add_argument("-v", "--verbose", action="count", default=0, help="log stage events to stderr")
    s = sub.add_parser("swebench", help="grade SWE-bench-format predictions on local checkouts")
    s.add_argument("predictions", help="JSON or JSONL: instance_id, model_name_or_path, model_patch")
    s.add_argument(
        "instances", help="JSON or JSONL: instance_id, repo, python, test_patch, FAIL_TO_PASS, PASS_TO_PASS"
    )
    s.add_argument("-o", "--output", required=True, help="the report (SWE-bench's layout, JSON)")
    s.add_argument("--jobs", type=int, default=None, help="runs under way at once (default: 4 per core)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--cache-dir", default=None, help=f"behavioural cache (default: {default_cache_dir()})")
    g.add_argument("--no-cache", action="store_true", help="observe everything afresh, store nothing")
    s.add_argument("-v", "--verbose", action="count", default=0, help="log stage events to stderr")


def _swebench_main(args: argparse.Namespace) -> int:
    from ._swebench import main as swebench

    if _bad_jobs(args):
        return 2
    cache_dir = None if args.no_cache else (args.cache_dir or default_cache_dir())
    options = Options.from_env(limit=args.jobs, cache_dir=cache_dir)
    return swebench(args.predictions, args.instances, args.output, options=options)


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
        cases, numbers = read_numbered(args.cases)
        prober = prober_from_env()
        if not args.no_cache:
            args.cache_dir = check_cache_dir(args.cache_dir or default_cache_dir())
        os.close(open_output(args.output, [args.cases]))  # checked (and created) before anything runs
    except RequestError as e:
        print(f"aexec: {e}", file=sys.stderr)
        return 2
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
    cache_dir = None if args.no_cache else args.cache_dir

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
    with open(
        sys.stdout.fileno() if args.output == "-" else args.output,
        "w",
        encoding="utf-8",
        closefd=args.output != "-",
    ) as out:
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


def _gc_main(args: argparse.Namespace) -> int:
    """Remove what dead aexec processes left: mounts, registered scratch roots, cgroups."""
    import tempfile

    from ._boundary.cgroups import own_cgroups
    from ._boundary.leftovers import default_registry, sweep_cgroups, sweep_leftovers

    bases = [os.path.abspath(d) for d in args.scratch_dir] or [tempfile.gettempdir()]
    swept = sweep_leftovers(args.registry or default_registry(), *bases)
    cgroups = own_cgroups()
    if cgroups is not None:
        swept += sweep_cgroups(cgroups)
    for path in swept:
        print(f"aexec gc: removed {path}", file=sys.stderr)
    print(f"aexec gc: {len(swept)} leftovers of dead aexec processes removed", file=sys.stderr)
    return 0


_COMMANDS = {
    "discriminate": _discriminate_main,
    "ab": _ab_main,
    "swebench": _swebench_main,
    "gc": _gc_main,
}
