"""The command line's other commands: ``discriminate``, ``ab``, ``swebench``, ``gc``, ``serve``, ``env``.

Each parser is here with its short main; the work lives in the optional parts
(``_discrimination``, ``_ab``, ``_swebench``, ``_boundary.leftovers``), imported when the
command runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from ._errors import RequestError
from ._jsonl import check_cache_dir, check_output, default_cache_dir, open_output, read_numbered
from ._options import Options
from ._records import ExecutionObservation


def unobserved(observations: Sequence[ExecutionObservation]) -> list[ExecutionObservation]:
    """The observations aexec could not make: ``verdict: "error"`` for a reason of
    aexec's own. An ``env_broken`` one (also ``error``) is not among them: the request was
    observed, and what was seen is that the environment cannot run it (a result)."""
    return [o for o in observations if o.verdict == "error" and not o.flags.env_broken]


def run_options(p: argparse.ArgumentParser, *, jobs_help: str | None = None) -> None:
    """``--jobs``, ``--cache-dir`` | ``--no-cache`` and ``-v``, as every observing command has."""
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help=jobs_help or "runs under way at once (default: 4 per core, one per core while busy)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--cache-dir", default=None, help=f"behavioural cache (default: {default_cache_dir()})")
    g.add_argument(
        "--no-cache",
        action="store_true",
        help="no disk cache: nothing is served from or stored to disk (identical requests in"
        " one run still run once and share their observation, spec §3.6)",
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="log stage events to stderr")


def add_commands(sub: Any) -> None:
    from ._ab.harness import MECHANISMS
    from ._environments.command import add_parser as add_env

    d = sub.add_parser("discriminate", help="group 2+ candidates of one task by observed behaviour")
    d.add_argument("cases", help="the candidates, one request per line; lines of one repo+tests form a task")
    d.add_argument("-o", "--output", required=True, help="one JSON line per task (JSONL)")
    d.add_argument(
        "--property", default=None, help="the behaviour the suite leaves open (for the probe prompt)"
    )
    run_options(d)
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
    s.add_argument(
        "--specs",
        choices=["swebench"],
        default=None,
        help="build each instance without `python` the environment of SWE-bench's spec for"
        " its repo and `version` (needs aexec[swebench])",
    )
    run_options(s)
    v = sub.add_parser("serve", help="an HTTP service: SandboxFusion's /run_code, /observe, /observe_many")
    v.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    v.add_argument(
        "--port", type=int, default=8080, help="port (default: 8080, SandboxFusion's; 0: any free)"
    )
    v.add_argument(
        "--token-file",
        default=None,
        help="a file whose first line is the bearer token (required off loopback)",
    )
    v.add_argument(
        "--queue",
        type=int,
        default=None,
        help="requests waiting beyond --jobs before 429 (default: 32 per job)",
    )
    v.add_argument("--sessions", type=int, default=4, help="sessions open at once at most (default: 4)")
    v.add_argument("--max-body-mib", type=float, default=16.0, help="largest request body (default: 16 MiB)")
    v.add_argument(
        "--grace", type=float, default=5.0, help="seconds runs in flight get after SIGTERM (default: 5)"
    )
    v.add_argument(
        "--recheck-s",
        type=float,
        default=None,
        help="seconds a recheck of the interpreter, its editable sources and the fork servers'"
        " files holds for later requests (default: 0.5; 0: every request rechecks)",
    )
    v.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio", help="anyio backend")
    g = v.add_mutually_exclusive_group()
    g.add_argument(
        "--python",
        default=None,
        help="the interpreter /run_code's Python programs run in (default: the server's own)",
    )
    g.add_argument(
        "--environment",
        default=None,
        help="a declared environment (JSON, or @FILE) /run_code's Python programs run in,"
        ' built once: {"python": "3.12", "packages": ["numpy"]} (docs/environments.md)',
    )
    run_options(v, jobs_help="runs under way at once (default: 4 per core)")
    add_env(sub)


def _serve_main(args: argparse.Namespace) -> int:
    from ._serve.server import RECHECK_S, ServeConfig, read_environment, read_token, serve

    if _bad_jobs(args):
        return 2
    jobs = args.jobs or 4 * (os.cpu_count() or 1)
    try:
        cache_dir = None if args.no_cache else check_cache_dir(args.cache_dir or default_cache_dir())
        config = ServeConfig(
            host=args.host,
            port=args.port,
            jobs=jobs,
            queue=args.queue if args.queue is not None else 32 * jobs,
            max_body=int(args.max_body_mib * 1024 * 1024),
            token=read_token(args.token_file) if args.token_file else None,
            grace=args.grace,
            sessions=args.sessions,
            python=args.python,
            environment=read_environment(args.environment) if args.environment else None,
            recheck_s=RECHECK_S if args.recheck_s is None else args.recheck_s,
        )
        options = Options.from_env(limit=jobs, cache_dir=cache_dir)

        def ready(url: str) -> None:
            print(f"aexec serve: listening on {url} ({jobs} jobs)", file=sys.stderr, flush=True)

        anyio.run(functools.partial(serve, config, options, on_ready=ready), backend=args.backend)
    except RequestError as e:
        print(f"aexec: {e}", file=sys.stderr)
        return 2
    print("aexec serve: stopped", file=sys.stderr)
    return 0


def _env_main(args: argparse.Namespace) -> int:
    from ._environments.command import main

    return main(args)


def _swebench_main(args: argparse.Namespace) -> int:
    from ._swebench import main as swebench

    if _bad_jobs(args):
        return 2
    cache_dir = None
    if not args.no_cache:
        try:
            cache_dir = check_cache_dir(args.cache_dir or default_cache_dir())
        except RequestError as e:
            print(f"aexec: {e}", file=sys.stderr)
            return 2
    options = Options.from_env(limit=args.jobs, cache_dir=cache_dir)
    return swebench(args.predictions, args.instances, args.output, options=options, specs=args.specs)


def _bad_jobs(args: argparse.Namespace) -> bool:
    if args.jobs is not None and args.jobs < 1:
        print(f"aexec: --jobs must be >= 1, got {args.jobs}", file=sys.stderr)
        return True
    return False


def _discriminate_main(args: argparse.Namespace) -> int:
    from ._discrimination.discriminate import discriminate, task_key
    from ._discrimination.probe import prober_from_options
    from ._serde import to_json_data

    if _bad_jobs(args):
        return 2
    tasks: dict[Any, list[int]] = {}
    # Everything is checked before the output is touched, as by `observe`: a rejected
    # input leaves an existing -o file as it was.
    try:
        cases, numbers = read_numbered(args.cases)
        prober = prober_from_options(Options.from_env())
        for i, c in enumerate(cases):
            tasks.setdefault(task_key(c), []).append(i)
        for members in tasks.values():
            if len(members) < 2:
                raise RequestError(
                    f"{args.cases}:{numbers[members[0]]}: a task needs 2 or more candidates"
                    " (candidates of one task share repo and tests)"
                )
        if not args.no_cache:
            args.cache_dir = check_cache_dir(args.cache_dir or default_cache_dir())
        check_output(args.output, [args.cases])
    except RequestError as e:
        print(f"aexec: {e}", file=sys.stderr)
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
    try:
        fd = open_output(args.output, [args.cases])
    except RequestError as e:  # it changed while the candidates ran
        print(f"aexec: {e}", file=sys.stderr)
        return 1
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        for n, ((repo, tests), r) in enumerate(zip(tasks, results, strict=True)):
            line = {
                "task": n,
                "repo": repo,
                "tests": tests,
                "discriminated": r.discriminated,
                **to_json_data(r),
            }
            out.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
            errors += len(unobserved(r.observations))
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

    from ._ab.corpus import load_corpus
    from ._ab.harness import MECHANISMS, run_ab
    from ._ab.report import render
    from ._discrimination.probe import prober_from_options

    if _bad_jobs(args):
        return 2
    options = Options.from_env()
    try:
        corpus = load_corpus(args.corpus, args.labels)
        prober = prober_from_options(options)
        # Where the report goes is checked before the runs, not after them.
        out_dir = check_cache_dir(args.out or os.path.join(os.path.dirname(corpus.path), "ab"), flag="--out")
        check_output(os.path.join(out_dir, "ab.json"), [corpus.path], flag="--out")
    except RequestError as e:
        print(f"aexec: {e}", file=sys.stderr)
        return 2
    ablate = list(MECHANISMS) if "all" in args.ablate else list(dict.fromkeys(args.ablate))
    run = functools.partial(
        run_ab,
        corpus,
        jobs=args.jobs,
        options=options,
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


COMMANDS = {
    "discriminate": _discriminate_main,
    "ab": _ab_main,
    "swebench": _swebench_main,
    "gc": _gc_main,
    "serve": _serve_main,
    "env": _env_main,
}
