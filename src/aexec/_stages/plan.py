"""Planning a run: the driver's instructions, from facts gathered beforehand. Pure.

The shell (``aexec._pipeline.run``) makes the scratch root, lays out the view, and
gathers what only I/O can tell (import roots, the uid, the cut /etc, cgroup files); `plan`
then decides everything else — argv, environment, rlimits, the kernel boundary, what
pytest is asked — and returns it frozen, to be written as the wire's `Instructions`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from .. import _languages as langs
from .. import _runners as runners
from .._driver.wire import REPO_VIEW, Box, Instructions, Runner, StepSpec
from .._languages.canary import SuiteCanary
from .._records import Environment
from .policy import Limits, limits

#: How pytest is run for every candidate: no colour, and (`pytest_args`) the cache
#: provider's directory in the run's own tmp — empty, as a fresh copy's is, and nothing
#: written into the repo view. The cache provider stays loaded, as plain pytest has it:
#: its options (``--cache-clear``, ``--lf``) may stand in a repo's ``addopts``. The repo's
#: own configuration (ini files, addopts, conftest) and the interpreter's plugins load
#: as in a plain ``python -m pytest`` — plugins are auto-loaded unless the request says
#: ``pytest_plugins: "none"`` (PYTEST_DISABLE_PLUGIN_AUTOLOAD).
PYTEST_ARGS = ("--color=no", "-q")

#: Inside the boundary these are the scratch root's tmp, not the host's.
TMP_TARGETS = ("/tmp", "/var/tmp", "/dev/shm")


@attrs.frozen
class Scratch:
    """The paths of one run's scratch root (made by ``aexec._boundary.scratch``)."""

    root: str
    # Joined once: a run asks for them ~30 times.
    work: str = attrs.field(init=False, eq=False, repr=False)
    private: str = attrs.field(init=False, eq=False, repr=False)
    home: str = attrs.field(init=False, eq=False, repr=False)
    tmp: str = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        for name, leaf in (("work", "work"), ("private", ".aexec"), ("home", "home"), ("tmp", "tmp")):
            object.__setattr__(self, name, os.path.join(self.root, leaf))

    def private_file(self, name: str) -> str:
        return os.path.join(self.private, name)


@attrs.frozen
class BoxFacts:
    """What the kernel boundary needs that only the shell can find out."""

    uid: int
    supervisor_pids: tuple[int, ...]
    #: The syscall filter can be installed here (`aexec._boundary.isolation`).
    seccomp: bool = False
    #: The host's /etc cut to what programs read (``aexec._boundary.scratch.make_etc``).
    etc: str | None = None
    #: The original repo (real path), kept out of the view.
    repo: str | None = None


@attrs.frozen
class RunFacts:
    """One run, as laid out by the shell before planning."""

    runner: Runner
    scratch: Scratch
    python: str
    #: Directories the interpreter reads (made reachable inside the boundary).
    toolchain_paths: tuple[str, ...]
    #: sys.path entries of the view (its root, ``src/`` in a src layout).
    import_roots: tuple[str, ...]
    #: The snippet's path in the private dir, if the candidate has one.
    snippet: str | None
    argv: tuple[str, ...]
    #: pytest selectors (None: the whole suite).
    tests: tuple[str, ...] | None
    #: Non-test ``.py`` files the patch touches that exist in the view (repo-relative).
    touched_sources: tuple[str, ...]
    #: ``cgroup.procs`` files of the run's cgroups (none without cgroups).
    cgroup_procs: tuple[str, ...]
    box: BoxFacts | None
    #: The run's memory cgroup caps its tree: no RLIMIT_AS then (`plan`).
    memory_cgroup: bool = False
    #: A language beyond Python (the ``steps`` runner): its name, request type and tools.
    language: str = "python"
    request_type: str = ""
    lang_tools: tuple[tuple[str, str], ...] = ()
    #: pytest auto-loads the interpreter's plugins (entry points), as plain pytest does.
    autoload: bool = True
    #: The request's ``stdin``, written in the private dir: the candidate's standard input.
    stdin_file: str | None = None
    #: What finds the environment's Debian packages (`candidate_env`'s ``system``).
    system: tuple[tuple[str, str], ...] = ()
    #: The canary's argument (`aexec._stages.canary.Canary.arg`), after the selection,
    #: and its file (repo-relative); a language suite's: its test ids (`Canary.ids`).
    canary: tuple[str, ...] = ()
    canary_file: str | None = None


@attrs.frozen
class Plan:
    """What the driver is told (`instructions`) and the environment it runs in."""

    instructions: Instructions
    env: tuple[tuple[str, str], ...]
    #: Files the candidate's uid must be able to write (the report).
    report: str
    #: The kernel limits of the environment (`limits`), for the shell's cgroup and disk caps.
    limits: Limits

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


def selection_args(tests: Sequence[str] | None) -> list[str]:
    """pytest's arguments for a selection: all of the suite, these selectors, or nothing."""
    if tests is None:
        return []
    return list(tests) if tests else ["--ignore-glob=*"]


def modules(paths: Iterable[str], roots: Sequence[str], work: str) -> list[str]:
    """Importable module names of the non-test Python files among ``paths`` (repo-relative,
    existing in the view ``work``), under the longest import root that holds each."""
    out: list[str] = []
    for p in paths:
        base = os.path.basename(p)
        if (
            not p.endswith(".py")
            or base.startswith("test_")
            or base.endswith("_test.py")
            or base == "conftest.py"
        ):
            continue
        full = os.path.join(work, p)
        for root in sorted(roots, key=len, reverse=True):
            if full.startswith(root + os.sep):
                parts = os.path.relpath(full, root)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                if parts and all(x.isidentifier() for x in parts):
                    out.append(".".join(parts))
                break
    return list(dict.fromkeys(out))


def candidate_env(
    scratch: Scratch, python: str, *, autoload: bool = True, system: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The whole environment a candidate sees: declared, minimal, none of the host's.

    ``autoload=False`` (a request's ``pytest_plugins: "none"``) keeps pytest from loading
    the interpreter's plugins by their entry points. ``system``: what finds the
    environment's Debian packages (`aexec._environments.system.run_env`), its ``PATH``
    after the interpreter's directory, ``XDG_DATA_DIRS`` before the system's."""
    bindir = os.path.dirname(python)
    extra = dict(system or {})
    bins = [bindir, *extra.pop("PATH", "").split(os.pathsep), "/usr/local/bin", "/usr/bin", "/bin"]
    if "XDG_DATA_DIRS" in extra:
        extra["XDG_DATA_DIRS"] += os.pathsep + "/usr/local/share:/usr/share"
    env = {
        **extra,
        "PATH": os.pathsep.join(dict.fromkeys(b for b in bins if b)),
        "HOME": scratch.home,
        "USER": "aexec",
        "LOGNAME": "aexec",
        "TMPDIR": scratch.tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "NO_COLOR": "1",
        # glibc reserves 64 MiB of address space per thread arena; under the RLIMIT_AS
        # fallback a few threads would otherwise look like a memory cap being hit.
        "MALLOC_ARENA_MAX": "2",
    }
    if not autoload:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def pytest_args(facts: RunFacts, rootdir: str | None = None) -> list[str]:
    """What pytest is asked: aexec's fixed options, then the request's selection — or, for
    a ``command`` that runs pytest (`pytest_command` chose the pytest runner), its own
    pytest arguments."""
    chosen = [*selection_args(facts.tests), *facts.canary]
    if facts.runner == "pytest" and facts.argv:
        chosen = list(facts.argv[1:] if facts.argv[0] in ("pytest", "py.test") else facts.argv[3:])
    cache = f"cache_dir={os.path.join(facts.scratch.tmp, 'pytest-cache')}"
    return [*PYTEST_ARGS, "-o", cache, f"--rootdir={rootdir or facts.scratch.work}", *chosen]


def in_view(facts: RunFacts) -> Callable[[str], str]:
    """A path of the run's copy of the repo as the run sees it: a Python run with a repo
    under the boundary works at `REPO_VIEW` (one path for every run, as SWE-bench's
    ``/testbed``: a test id or a message holding a path of the repo is the same in a run
    and its re-run); elsewhere at its scratch path."""
    work = facts.scratch.work
    moved = facts.box is not None and facts.box.repo is not None and facts.runner != "steps"

    def seen(path: str) -> str:
        if moved and (path == work or path.startswith(work + os.sep)):
            return REPO_VIEW + path[len(work) :]
        return path

    return seen


def under(path: str, dirs: Iterable[str]) -> bool:
    return any(path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)


#: The system directories a program needs to start, bound read-only into every view (on a
#: merged /usr the others are links into it, made as such; absent ones are skipped).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def inside(path: str, root: str) -> bool:
    """``path`` is ``root`` or under it."""
    return path == root or under(path, [root])


def view_readonly(
    toolchain_paths: Iterable[str], python: str, *, repo: str | None = None, scratch_root: str | None = None
) -> tuple[list[str], list[str]]:
    """What a run's view binds read-only, one bind per tree (a path under another is
    covered by it): the system directories and the toolchain's prefixes; and what is
    hidden under them (the original repo, if a bound tree holds it).

    A toolchain path that is the repo, holds it, or holds the scratch root (whose
    siblings are other runs') is left out; under the repo only the interpreter's own
    prefix (a venv inside the repo) is kept. A scratch root holds no toolchain path but
    in a contrived layout: the answer without it is made once per toolchain (`_bound`).
    """
    paths, exact, holders = _normalized(tuple(toolchain_paths))
    held = scratch_root is not None and (scratch_root in exact or scratch_root.startswith(holders))
    made = _bound.__wrapped__ if held else _bound  # a held scratch root: its own answer, not kept
    bound, hidden = made(paths, python, repo, scratch_root if held else None)
    return list(bound), list(hidden)


@functools.lru_cache(maxsize=64)
def _normalized(paths: tuple[str, ...]) -> tuple[tuple[str, ...], frozenset[str], tuple[str, ...]]:
    """``paths`` normalized; but the root, they and what `inside` tests a path against."""
    normed = tuple(map(os.path.normpath, paths))
    kept = [p for p in normed if p != os.sep]
    return normed, frozenset(kept), tuple(p.rstrip(os.sep) + os.sep for p in kept)


@functools.lru_cache(maxsize=64)
def _bound(
    paths: tuple[str, ...], python: str, repo: str | None, scratch_root: str | None = None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`view_readonly` of normalized ``paths``, as tuples."""
    venv = os.path.dirname(os.path.dirname(python))
    wanted = list(SYSTEM_PATHS)
    for p in paths:
        if p == os.sep or (scratch_root is not None and inside(scratch_root, p)):
            continue
        if repo is not None and (inside(repo, p) or (inside(p, repo) and not inside(p, venv))):
            continue
        wanted.append(p)
    unique = sorted(set(wanted))
    bound = tuple(p for p in unique if not under(p, unique))
    hidden = (repo,) if repo is not None and under(repo, bound) else ()
    return bound, hidden


#: Without the memory cgroup, a lifted RLIMIT_AS is this backstop (javac asks ~4 GiB);
#: the heap flags sized from the RAM cap (``-Xmx``, ``--max-old-space-size``) bound a
#: JVM's or V8's heap.
HUNGRY_ADDRESS_SPACE_BYTES = 8 << 30


def lang_steps(
    facts: RunFacts, env: Environment, address_space: int | None
) -> tuple[list[StepSpec], int | None]:
    """The ``steps`` runner's steps, and the RLIMIT_AS of the driver's child over them.

    With the memory cgroup on (``address_space`` None) no step has RLIMIT_AS: the
    cgroup's cap (RAM + disk, the whole tree) holds the line. Without it, a build step
    and a JVM's or V8's program get RLIMIT_AS lifted to `HUNGRY_ADDRESS_SPACE_BYTES`; a
    native program keeps the declared cap. The child keeps the highest limit any step
    needs; a step lowers its own from there. A language whose runtime reserves far more
    address space than it uses (`aexec._languages.Language.reserves_address_space`: the
    JVM, V8) has it lifted for its program too; every build step (a compiler: rustc maps
    LLVM, javac is a JVM) gets it lifted.
    """
    language = langs.language(facts.language)
    planned = language.plan(
        facts.request_type,
        facts.scratch.work,
        tools=dict(facts.lang_tools),
        ram_mib=env.ram_cap_mib,
        home=facts.scratch.home,
        tests=facts.tests,
        canary=SuiteCanary(facts.canary_file, facts.canary) if facts.canary and facts.canary_file else None,
    )
    # A suite's runner (cargo, node --test, ctest) starts compilers, test binaries and
    # runtimes alike: every step is a build tool's, the memory cgroup holds the line.
    hungry = language.reserves_address_space or facts.request_type == "run_suite"
    lifted = None if address_space is None else max(address_space, HUNGRY_ADDRESS_SPACE_BYTES)
    child = lifted if planned else address_space
    out: list[StepSpec] = []
    for step in planned:
        own = lifted if hungry or not step.runs_candidate else address_space
        out.append(
            {
                "name": step.name,
                "argv": list(step.argv),
                "cwd": step.cwd,
                "env": dict(step.env),
                "evidence_file": step.evidence_file,
                "stdin_file": step.stdin_file or (facts.stdin_file if step.runs_candidate else None),
                "rlimits": {} if own == child or own is None else {"RLIMIT_AS": own},
                "stdout_is_program": step.runs_candidate,
            }
        )
    return out, child


def plan(facts: RunFacts, env: Environment) -> Plan:
    """The driver's instructions for one run of ``facts`` held to ``env``.

    RLIMIT_AS is the RAM cap's fallback: planned only where no memory cgroup holds."""
    scratch = facts.scratch
    lim = limits(env)
    report = scratch.private_file("report.jsonl")
    address_space = None if facts.memory_cgroup else lim.address_space_bytes
    rlimits = {
        "RLIMIT_CPU": lim.cpu_seconds,
        "RLIMIT_FSIZE": lim.file_size_bytes,
        "RLIMIT_NOFILE": lim.open_files,
        "RLIMIT_CORE": 0,
    }
    if address_space is not None:
        rlimits["RLIMIT_AS"] = address_space
    box: Box | None = None
    seen = in_view(facts)
    if facts.box is not None:
        rlimits["RLIMIT_NPROC"] = lim.processes  # the uid is the run's alone
        readonly, hidden = view_readonly(
            facts.toolchain_paths, facts.python, repo=facts.box.repo, scratch_root=scratch.root
        )
        box = {
            "supervisor_pids": list(facts.box.supervisor_pids),
            "uid": facts.box.uid,
            "gid": facts.box.uid,
            "scratch_root": scratch.root,
            "readonly": readonly,
            "hidden": hidden,
            "etc": facts.box.etc,
            "tmp": scratch.tmp,
            "tmp_targets": list(TMP_TARGETS),
            "repo_view": scratch.work if facts.box.repo is not None else None,
            "seccomp": facts.box.seccomp,
        }
    instructions: Instructions = {
        "runner": facts.runner,
        "report": report,
        "cwd": seen(scratch.work),
        "sys_path": [seen(root) for root in facts.import_roots],
        "rlimits": rlimits,
        "box": box,
        "cgroups": list(facts.cgroup_procs),
        "snippet": facts.snippet,
        "argv": [*runners.get(facts.runner).argv(facts.tests), *facts.canary]
        if facts.runner in runners.OWN_RUNNERS
        else list(facts.argv),
        "pytest_args": pytest_args(facts, seen(scratch.work)),
        "import_modules": modules(facts.touched_sources, facts.import_roots, scratch.work),
        "steps": [],
        "stdin_file": facts.stdin_file,
        "command_env": {},
        "canary": facts.canary_file,
    }
    if facts.runner == "steps":
        instructions["steps"], child = lang_steps(facts, env, address_space)
        if child is not None:
            rlimits["RLIMIT_AS"] = child
    env_vars = candidate_env(scratch, facts.python, autoload=facts.autoload, system=dict(facts.system))
    return Plan(instructions=instructions, env=tuple(sorted(env_vars.items())), report=report, limits=lim)
