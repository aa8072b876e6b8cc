"""``aexec env build CASES|INSTANCES``, ``aexec env ls``, ``aexec env gc``: the
environments aexec builds, from the command line (``docs/environments.md``).

``build`` pre-builds every distinct (repo, environment) of a cases file (``aexec
observe``'s) or an instances file (``aexec swebench``'s, with ``--specs swebench``), a
few at a time, with progress: a rich bar on a terminal, else a line every 10 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .._errors import RequestError
from .._progress import terminal_bar
from .._version import VERSION
from .build import MARKER, Built, default_root, ensure, exclude_newer_of, uv_binary
from .inplace import MARKER as INPLACE_MARKER
from .inplace import ensure_inplace, gc_inplace
from .spec import EnvBroken, EnvSpec
from .store import read_json, unique_bytes

#: A line of progress this often on a stderr that is not a terminal.
PROGRESS_EVERY_S = 10.0


def targets(path: str, specs: str | None) -> list[tuple[str, EnvSpec]]:
    """The distinct ``(repo, environment)`` of a cases or an instances file."""
    from .._jsonl import read_cases

    try:
        pairs = [(c.repo, c.environment) for c in read_cases(path, quiet=True)]
    except RequestError as as_cases:
        from .._swebench import load_instances

        try:
            instances = load_instances(path, specs=specs)
        except RequestError:
            raise as_cases from None
        pairs = [(i.repo, i.environment) for i in instances.values()]
    out = {
        (repo, json.dumps(env.as_json(), sort_keys=True)): (repo, env) for repo, env in pairs if repo and env
    }
    return list(out.values())


def _root(args: Any) -> str:
    """As ``aexec observe`` finds it: ``--env-dir``, ``$AEXEC_ENV_DIR`` (read by
    `Options.from_env`, the one reader of aexec's variables), ``<cache dir>/envs``."""
    from .._jsonl import default_cache_dir
    from .._options import Options

    options = Options.from_env(cache_dir=args.cache_dir or default_cache_dir())
    return os.path.abspath(args.env_dir or options.env_dir or default_root(options.cache_dir))


def build_main(args: Any) -> int:
    try:
        todo = targets(args.cases, args.specs)
    except RequestError as e:
        print(f"aexec: {e}", file=sys.stderr)
        return 2
    root = _root(args)
    done: list[tuple[str, EnvSpec, Built | EnvBroken]] = []
    lock = threading.Lock()
    start = time.monotonic()

    def one(item: tuple[str, EnvSpec]) -> None:
        repo, spec = item
        try:
            built = ensure(spec, repo, root)
            if spec.inplace:  # the repo's C extensions too, built in place once per base
                exclude = exclude_newer_of(spec, repo)
                ensure_inplace(built, repo, root, exclude_newer=exclude, repo_version=spec.repo_version)
            result: Built | EnvBroken = built
        except EnvBroken as e:
            result = e
        with lock:
            done.append((repo, spec, result))
        print(_line(repo, spec, result), file=sys.stderr, flush=True)

    def progress() -> str:
        broken = sum(isinstance(r, EnvBroken) for _, _, r in done)
        return (
            f"aexec env: {len(done)} of {len(todo)} environments ready or broken"
            f" ({broken} broken), {time.monotonic() - start:.0f} s"
        )

    _with_progress(lambda: _run_all(one, todo, args.jobs or 2), len(todo), lambda: len(done), progress)
    broken = [r for _, _, r in done if isinstance(r, EnvBroken)]
    print(f"{progress()}; root {root}", file=sys.stderr)
    return 1 if broken else 0


def _run_all(one: Callable[[tuple[str, EnvSpec]], None], todo: list[tuple[str, EnvSpec]], jobs: int) -> None:
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, todo))


def _with_progress(
    work: Callable[[], None], total: int, count: Callable[[], int], line: Callable[[], str]
) -> None:
    """Run ``work`` in a thread; meanwhile a rich bar on a terminal, else ``line()`` every 10 s."""
    worker = threading.Thread(target=work)
    worker.start()
    bar = terminal_bar()
    if bar is not None:
        with bar:
            task = bar.add_task("building environments", total=total)
            while worker.is_alive():
                worker.join(0.2)
                bar.update(task, completed=count())
    else:
        while worker.is_alive():
            worker.join(PROGRESS_EVERY_S)
            if worker.is_alive():
                print(line(), file=sys.stderr, flush=True)


def _line(repo: str, spec: EnvSpec, result: Built | EnvBroken) -> str:
    where = f"{os.path.basename(repo)} (Python {spec.python})"
    if isinstance(result, EnvBroken):
        return f"aexec env: {where}: env_broken {result.kind}: {result.message}"
    how = "cached" if result.cached else f"built in {result.seconds:.1f} s"
    return (
        f"aexec env: {where}: {result.key[:12]} {how}, Python {result.interpreter_version},"
        f" lock {result.lock_hash[:12]}, {result.unique_bytes / 2**20:.1f} MiB of its own"
    )


def _markers(root: str) -> list[dict[str, Any]]:
    out = []
    envs = os.path.join(root, "envs")
    for key in sorted(os.listdir(envs)) if os.path.isdir(envs) else []:
        try:
            with open(os.path.join(envs, key, MARKER), encoding="utf-8") as f:
                marker = dict(json.load(f))
            marker["used"] = os.path.getmtime(os.path.join(envs, key, MARKER))
        except (OSError, ValueError):
            marker = {"key": key, "partial": True}
        out.append(marker)
    return out


def ls_main(args: Any) -> int:
    root = _root(args)
    markers = _markers(root)
    for m in markers:
        if m.get("partial"):
            print(f"{m['key'][:12]}  partial (a build that did not finish; `aexec env gc` removes it)")
            continue
        spec = m.get("spec", {})
        extra = " ".join(f"{k}={v}" for k, v in spec.items() if v and k != "python")
        print(
            f"{m['key'][:12]}  Python {m.get('python_version')}  lock {str(m.get('lock_hash'))[:12]}"
            f"  {int(m.get('unique_bytes', 0)) / 2**20:7.1f} MiB own"
            f"  used {time.strftime('%Y-%m-%d %H:%M', time.localtime(m['used']))}  {extra}"
        )
        if isinstance(debs := m.get("system"), dict):  # its Debian packages (`system`)
            names = " ".join(map(str, debs.get("packages") or ()))
            print(f"{'':12}  Debian packages, {int(debs.get('bytes', 0)) / 2**20:.1f} MiB: {names}")
    builds = _inplace_markers(root)
    for m in builds:
        if m.get("partial"):
            print(
                f"{m['key'][:12]}  in-place, partial (a build that did not finish; `aexec env gc` removes it)"
            )
            continue
        print(
            f"{m['key'][:12]}  in-place build of environment {str(m.get('environment'))[:12]}"
            f"  {len(m.get('files') or [])} files carried  {int(m['unique_bytes']) / 2**20:7.1f} MiB own"
            f"  built in {float(m.get('seconds', 0)):.1f} s"
            f"  used {time.strftime('%Y-%m-%d %H:%M', time.localtime(m['used']))}"
        )
    failed = os.path.join(root, "failed")
    for name in sorted(os.listdir(failed)) if os.path.isdir(failed) else []:
        record = read_json(os.path.join(failed, name)) or {}
        said = str(record.get("message", "")).splitlines() or [""]
        message = said[0] + (f" … {said[-1].strip()}" if len(said) > 1 else "")
        was = record.get("aexec_version")
        stale = (
            ""
            if was == VERSION
            else f" (recorded by {f'aexec {was}' if was else 'an older aexec'}: ignored, built again)"
        )
        print(f"{name[:12]}  env_broken {record.get('kind')}: {message}{stale}")
    print(f"aexec env: {len(markers)} environments, {len(builds)} in-place builds in {root}", file=sys.stderr)
    return 0


def _inplace_markers(root: str) -> list[dict[str, Any]]:
    """The in-place builds (`aexec._environments.inplace`): each one's marker, with its
    last use and the bytes it alone holds; ``partial`` for one with no marker."""
    out: list[dict[str, Any]] = []
    base = os.path.join(root, "inplace")
    for key in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        path = os.path.join(base, key, INPLACE_MARKER)
        marker = read_json(path)
        if marker is None:
            out.append({"key": key, "partial": True})
            continue
        used = os.path.getmtime(path)
        out.append(
            {**marker, "key": key, "used": used, "unique_bytes": unique_bytes(os.path.join(base, key))}
        )
    return out


def gc_main(args: Any) -> int:
    """Remove what no key uses: partial builds, resolution copies, in-place builds whose
    environment is gone, failures another aexec version recorded (ignored), and with
    ``--unused-days N`` environments not used for N days; ``--failures`` forgets the
    recorded failures (tried again next time); then ``uv cache prune``."""
    root = _root(args)
    removed: list[str] = []
    now = time.time()
    for m in _markers(root):
        old = args.unused_days is not None and now - float(m.get("used", now)) > args.unused_days * 86400
        if m.get("partial") or old:
            path = os.path.join(root, "envs", str(m["key"]))
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    removed += gc_inplace(root)  # builds of C extensions whose environment is gone
    tmp = os.path.join(root, "tmp")
    for name in os.listdir(tmp) if os.path.isdir(tmp) else []:
        shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
        removed.append(os.path.join(tmp, name))
    failed = os.path.join(root, "failed")
    if args.failures and os.path.isdir(failed):
        removed += [os.path.join(failed, n) for n in os.listdir(failed)]
        shutil.rmtree(failed, ignore_errors=True)
    for name in sorted(os.listdir(failed)) if os.path.isdir(failed) else []:
        record = read_json(os.path.join(failed, name))
        if record is not None and record.get("aexec_version") != VERSION:  # ignored: another version's
            os.unlink(os.path.join(failed, name))
            removed.append(os.path.join(failed, name))
    if os.path.isdir(os.path.join(root, "uv-cache")):
        env = {**os.environ, "UV_CACHE_DIR": os.path.join(root, "uv-cache")}
        subprocess.run([uv_binary(), "cache", "prune", "--quiet"], env=env, check=False)
    for path in removed:
        print(f"aexec env gc: removed {path}", file=sys.stderr)
    print(f"aexec env gc: {len(removed)} removed from {root}", file=sys.stderr)
    return 0


def add_parser(sub: Any) -> None:
    e = sub.add_parser("env", help="the environments aexec builds: build, ls, gc")
    cmds = e.add_subparsers(dest="env_command", required=True)
    b = cmds.add_parser("build", help="pre-build the environments of a cases or instances file")
    b.add_argument("cases", help="requests (JSONL, as `aexec observe` reads) or SWE-bench instances")
    b.add_argument("--specs", choices=["swebench"], default=None, help="as `aexec swebench --specs`")
    b.add_argument("--jobs", type=int, default=None, help="builds at once (default: 2)")
    ls = cmds.add_parser("ls", help="list the built environments and the recorded failures")
    gc = cmds.add_parser("gc", help="remove partial builds, copies, unused environments")
    gc.add_argument("--unused-days", type=float, default=None, help="also environments unused this long")
    gc.add_argument(
        "--failures", action="store_true", help="forget recorded failures (built again next time)"
    )
    for p in (b, ls, gc):
        p.add_argument(
            "--env-dir", default=None, help="the environments' root (default: $AEXEC_ENV_DIR or <cache>/envs)"
        )
        p.add_argument(
            "--cache-dir", default=None, help="the behavioural cache (its envs/ is the default root)"
        )
        p.add_argument("-v", "--verbose", action="count", default=0, help="log build events to stderr")


def main(args: Any) -> int:
    if args.env_command == "build" and args.jobs is not None and args.jobs < 1:
        print(f"aexec: --jobs must be >= 1, got {args.jobs}", file=sys.stderr)
        return 2
    return {"build": build_main, "ls": ls_main, "gc": gc_main}[args.env_command](args)
