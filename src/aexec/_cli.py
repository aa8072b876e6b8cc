"""``aexec observe CASES.jsonl -o OBS.jsonl`` — the contract's command line.

The only place that configures structlog and prints progress. The other commands
(``discriminate``, ``ab``, ``swebench``, ``gc``) are in ``_commands``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import NoReturn, TextIO

import anyio
import structlog

from ._api import VERSION, observe_many, observer
from ._commands import COMMANDS, add_commands, run_options, unobserved
from ._errors import RequestError
from ._jsonl import check_cache_dir, default_cache_dir, open_output, read_cases
from ._options import Options
from ._progress import terminal_bar
from ._records import Candidate, ExecutionObservation
from ._serde import dumps

__all__ = ["main", "read_cases"]

#: On a stderr that is not a terminal, a progress line at most this often.
PROGRESS_EVERY_S = 10.0


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
    broken = sum(o.flags.env_broken for o in observations)
    parts = ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items()))
    cls = ", ".join(f"{c} {n}" for c, n in sorted(classes.items()))
    print(
        f"aexec: observed {len(observations)} requests in {wall:.1f} s: {parts or 'none'}"
        + (f" | failure classes: {cls}" if cls else "")
        + (f" | environment broken: {broken}" if broken else "")
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
    progress = terminal_bar()
    executor = None
    if args.ray is not None:
        from ._scaleout.ray import NODE_CACHE_ENV, RayExecutor

        executor = RayExecutor(address=args.ray, node_cache=os.environ.get(NODE_CACHE_ENV) or None)
    options = Options.from_env(limit=args.jobs, cache_dir=cache_dir)
    # An observer of the command's own: whatever ends the run (a signal included), its
    # fork servers and bytecode store go with it.
    async with observer(options) as own:
        if progress is None:
            return await observe_many(cases, on_observation=writer.put, executor=executor, observer=own)
        with progress:
            task = progress.add_task("observing", total=len(cases))

            def seen(i: int, obs: ExecutionObservation) -> None:
                writer.put(i, obs)
                progress.advance(task)

            return await observe_many(cases, on_observation=seen, executor=executor, observer=own)


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error in one line (exit status 2), not a usage block."""

    def error(self, message: str) -> NoReturn:
        print(
            f"aexec: {self.prog.removeprefix('aexec ')}: {message} (see {self.prog} --help)", file=sys.stderr
        )
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="aexec", description="Run candidate code; observe what it does.")
    p.add_argument("--version", action="version", version=f"aexec {VERSION}")
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("observe", help="observe every request of a JSONL file")
    o.add_argument("cases", help="the requests, one JSON object per line (- for stdin)")
    o.add_argument("-o", "--output", required=True, help="where the observations go (JSONL; - for stdout)")
    run_options(o)
    o.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="observe on a Ray cluster (needs aexec[ray]): local (start one here), auto, HOST:PORT or ray://HOST:10001;"
        " each node unpacks repositories into $AEXEC_RAY_NODE_CACHE (default <tmp>/aexec-ray-repos)",
    )
    add_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _configure_logging(args.verbose)
    if args.command in COMMANDS:
        return COMMANDS[args.command](args)
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
    errors = unobserved(observations)
    for o in errors:
        print(f"aexec: could not observe {o.id!r}: {o.error}", file=sys.stderr)
    return 1 if errors or len(observations) != len(cases) else 0
