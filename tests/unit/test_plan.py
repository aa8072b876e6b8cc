"""Goal 2: `plan` is a pure stage, unit-tested synchronously (issue 17).

Every path below is made up (``/nonexistent/...`` where it matters): `plan` decides from
the facts it is given and touches nothing, so none of them has to exist.
"""

from __future__ import annotations

import math

import attrs
import pytest

from aexec import Policy
from aexec._driver.wire import Runner
from aexec._records import Environment
from aexec._stages.plan import (
    HUNGRY_ADDRESS_SPACE_BYTES,
    PYTEST_ARGS,
    SYSTEM_PATHS,
    TMP_TARGETS,
    BoxFacts,
    Plan,
    RunFacts,
    Scratch,
    candidate_env,
    modules,
    plan,
    selection_args,
    view_readonly,
)
from aexec._stages.policy import FILE_SIZE_CAP_BYTES, declare, limits
from aexec._types import CPU_BACKSTOP_MARGIN_S, DEFAULT_DISK_MIB, DEFAULT_OPEN_FILES, DEFAULT_PIDS

ROOT = "/nonexistent/scratch/aexec-1-abc"
WORK = f"{ROOT}/work"
PYTHON = "/nonexistent/venv/bin/python3"


def environment(policy: Policy | None = None, mode: str = "targeted_execution") -> Environment:
    return declare(
        mode,  # type: ignore[arg-type]
        policy or Policy(),
        toolchain="python",
        toolchain_version="3.11",
        enforced={},
        repo_view="copy",
        max_cores=8,
    )


def facts(
    *,
    root: str = ROOT,
    runner: Runner = "snippet",
    box: BoxFacts | None = None,
    toolchain_paths: tuple[str, ...] = ("/nonexistent/venv",),
    tests: tuple[str, ...] | None = None,
    touched: tuple[str, ...] = (),
    roots: tuple[str, ...] | None = None,
) -> RunFacts:
    scratch = Scratch(root)
    return RunFacts(
        runner=runner,
        scratch=scratch,
        python=PYTHON,
        toolchain_paths=toolchain_paths,
        import_roots=roots if roots is not None else (scratch.work,),
        snippet=scratch.private_file("snippet.py") if runner == "snippet" else None,
        argv=("make", "check") if runner == "command" else (),
        tests=tests,
        touched_sources=touched,
        cgroup_procs=("/nonexistent/cgroup/run/cgroup.procs",),
        box=box,
    )


def box_facts(repo: str | None = None) -> BoxFacts:
    return BoxFacts(uid=(1 << 20) + 7, supervisor_pids=(100, 200), etc="/nonexistent/etc", repo=repo)


def test_without_a_box_there_is_no_box_and_no_process_limit() -> None:
    p = plan(facts(), environment())
    i = p.instructions
    assert i["box"] is None
    assert "RLIMIT_NPROC" not in i["rlimits"], "without its own uid, NPROC would count the host's processes"
    assert i["runner"] == "snippet"
    assert i["cwd"] == WORK
    assert i["report"] == p.report == f"{ROOT}/.aexec/report.jsonl"
    assert i["snippet"] == f"{ROOT}/.aexec/snippet.py"
    assert i["sys_path"] == [WORK]
    assert i["cgroups"] == ["/nonexistent/cgroup/run/cgroup.procs"]
    assert i["argv"] == [] and i["import_modules"] == []


def test_a_command_keeps_its_argv() -> None:
    i = plan(facts(runner="command"), environment()).instructions
    assert i["argv"] == ["make", "check"] and i["snippet"] is None


def test_with_a_box_the_boundary_is_planned_from_the_facts() -> None:
    env = environment()
    p = plan(facts(box=box_facts()), env)
    box = p.instructions["box"]
    assert box is not None
    assert box["uid"] == box["gid"] == (1 << 20) + 7
    assert box["supervisor_pids"] == [100, 200]
    assert box["scratch_root"] == ROOT
    assert box["etc"] == "/nonexistent/etc"
    assert box["tmp"] == f"{ROOT}/tmp"
    assert box["tmp_targets"] == list(TMP_TARGETS) == ["/tmp", "/var/tmp", "/dev/shm"]
    assert box["hidden"] == []
    # the system directories and the toolchain's own tree, nothing else of the host
    assert box["readonly"] == sorted([*SYSTEM_PATHS, "/nonexistent/venv"])
    assert p.instructions["rlimits"]["RLIMIT_NPROC"] == limits(env).processes == DEFAULT_PIDS


def test_the_view_binds_each_tree_once_and_never_the_repo_or_what_holds_it() -> None:
    toolchain = (
        "/tmp/venv",
        "/tmp/venv/lib/python3.11/site-packages",  # inside a bound path: bound with it
        "/usr/lib/python3.11",  # under /usr
        "/tmpfoo/bin",  # a prefix of the name, not a path under /tmp
        "/srv",  # holds the repo: left out
        "/srv/repo/src",  # an editable install of the repo: left out
        "/srv/repo/.venv",  # the interpreter's venv inside the repo: kept
        "/scratch",  # holds the scratch root (and other runs'): left out
        "/",
    )
    bound, hidden = view_readonly(
        toolchain, "/srv/repo/.venv/bin/python", repo="/srv/repo", scratch_root="/scratch/aexec-1-a"
    )
    assert bound == sorted([*SYSTEM_PATHS, "/tmp/venv", "/tmpfoo/bin", "/srv/repo/.venv"])
    assert hidden == []
    # a repo inside a bound tree is covered there
    bound, hidden = view_readonly((), "/usr/bin/python3", repo="/usr/src/repo")
    assert "/usr" in bound and hidden == ["/usr/src/repo"]


@pytest.mark.parametrize(
    ("tests", "tail"),
    [
        (None, []),  # the whole suite
        ((), ["--ignore-glob=*"]),  # nothing selected: pytest collects nothing
        (("tests/test_a.py::test_x", "tests/test_b.py"), ["tests/test_a.py::test_x", "tests/test_b.py"]),
    ],
)
def test_pytest_args_for_a_selection(tests: tuple[str, ...] | None, tail: list[str]) -> None:
    i = plan(facts(runner="pytest", tests=tests), environment(mode="test_execution")).instructions
    cache = i["pytest_args"][len(PYTEST_ARGS) : len(PYTEST_ARGS) + 2]
    assert cache[0] == "-o" and cache[1].startswith(f"cache_dir={ROOT}/tmp/")  # the run's own, empty
    assert i["pytest_args"] == [*PYTEST_ARGS, *cache, f"--rootdir={WORK}", *tail]
    assert selection_args(None if tests is None else list(tests)) == tail


def test_import_modules_from_the_touched_sources() -> None:
    touched = (
        "pkg/mod.py",
        "pkg/__init__.py",
        "pkg/sub/__init__.py",
        "src/lib/core.py",  # src layout: under the longest root that holds it
        "setup.py",
        "__init__.py",  # the root itself is no module
        "tests/test_mod.py",
        "pkg/mod_test.py",
        "conftest.py",
        "pkg/conftest.py",
        "README.md",
        "bad-name/mod.py",  # not importable by that name
        "pkg/mod.py",  # twice: once
    )
    roots = (WORK, f"{WORK}/src")
    i = plan(facts(runner="compile_tree", touched=touched, roots=roots), environment()).instructions
    assert i["import_modules"] == ["pkg.mod", "pkg", "pkg.sub", "lib.core", "setup"]
    assert i["sys_path"] == [WORK, f"{WORK}/src"]
    # a file under no import root is not imported
    assert modules(["scripts/tool.py", "src/lib/core.py"], [f"{WORK}/src"], WORK) == ["lib.core"]
    # a root that is a prefix of a name, not a directory above it, holds nothing
    assert modules(["srcx/a.py"], [f"{WORK}/src"], WORK) == []


def test_the_candidate_env_is_declared_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AEXEC_HOST_SECRET", "leak")
    monkeypatch.setenv("PYTHONPATH", "/host/path")
    monkeypatch.setenv("PYTHONHASHSEED", "random")
    p = plan(facts(), environment())
    env = p.env_dict
    assert env == candidate_env(Scratch(ROOT), PYTHON)
    assert list(p.env) == sorted(p.env), "the environment is given in one order"
    assert env["PYTHONHASHSEED"] == "0"
    assert env["HOME"] == f"{ROOT}/home" and env["TMPDIR"] == f"{ROOT}/tmp"
    assert env["PATH"].split(":")[0] == "/nonexistent/venv/bin"
    # plugins load as plain pytest loads them, unless the request opts out (issue 18)
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD" not in env
    assert candidate_env(Scratch(ROOT), PYTHON, autoload=False)["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert "AEXEC_HOST_SECRET" not in env and "PYTHONPATH" not in env
    assert set(env) == {
        "PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "LANG", "LC_ALL", "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "NO_COLOR", "MALLOC_ARENA_MAX",
    }  # fmt: skip
    # the interpreter's own directory is not repeated when it is a standard one
    assert candidate_env(Scratch(ROOT), "/usr/bin/python3")["PATH"] == "/usr/bin:/usr/local/bin:/bin"


@pytest.mark.parametrize("box", [None, box_facts()])
def test_rlimits_follow_the_declared_policy(box: BoxFacts | None) -> None:
    env = environment(Policy(timeout_s=7, ram_mib=300, cpu_cores=2))
    rl = plan(facts(box=box), env).instructions["rlimits"]
    assert rl["RLIMIT_AS"] == 300 * 1024 * 1024
    assert rl["RLIMIT_CPU"] == math.ceil(7 * 2 + CPU_BACKSTOP_MARGIN_S)
    assert rl["RLIMIT_FSIZE"] == min(FILE_SIZE_CAP_BYTES, DEFAULT_DISK_MIB << 20)
    assert rl["RLIMIT_NOFILE"] == DEFAULT_OPEN_FILES
    assert rl["RLIMIT_CORE"] == 0
    # a fractional core still gets a whole CPU-second budget above its deadline
    small = plan(facts(box=box), environment(Policy(timeout_s=0.5, cpu_cores=0.25))).instructions["rlimits"]
    assert small["RLIMIT_CPU"] == math.ceil(0.5 + CPU_BACKSTOP_MARGIN_S)
    assert small["RLIMIT_AS"] == 512 * 1024 * 1024


@pytest.mark.parametrize("box", [None, box_facts()])
def test_the_memory_cgroup_replaces_rlimit_as(box: BoxFacts | None) -> None:
    """Where the run's memory cgroup holds, no RLIMIT_AS is set at all (it counted every
    thread's 8 MiB stack reservation as used: issue 26); the other rlimits stay."""
    env = environment(Policy(ram_mib=300))
    for runner in ("snippet", "pytest", "command"):
        held = attrs.evolve(facts(box=box, runner=runner), memory_cgroup=True)  # type: ignore[arg-type]
        rl = plan(held, env).instructions["rlimits"]
        assert "RLIMIT_AS" not in rl, runner
        assert {"RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE"} <= set(rl)
    # a language's steps too: neither the child nor any step gets one
    for language, request_type in (("c", "run_entry"), ("java", "run_entry"), ("rust", "run_suite")):
        steps = attrs.evolve(
            facts(box=box, runner="steps", tests=() if request_type == "run_suite" else None),
            language=language,
            request_type=request_type,
            memory_cgroup=True,
        )
        i = plan(steps, env).instructions
        assert "RLIMIT_AS" not in i["rlimits"], language
        assert i["steps"] and all(st["rlimits"] == {} for st in i["steps"]), language
    # without it, RLIMIT_AS is the fallback: the RAM cap for a native program, the
    # backstop for a compiler (the child keeps the highest; the program lowers its own)
    c = plan(attrs.evolve(facts(box=box, runner="steps"), language="c", request_type="run_entry"), env)
    assert c.instructions["rlimits"]["RLIMIT_AS"] == HUNGRY_ADDRESS_SPACE_BYTES
    assert c.instructions["steps"][-1]["rlimits"] == {"RLIMIT_AS": 300 << 20}


def test_plan_is_a_value() -> None:
    """Frozen and repeatable: the same facts plan the same run."""
    f, env = facts(box=box_facts(), runner="pytest", tests=("t.py",)), environment()
    a, b = plan(f, env), plan(f, env)
    assert isinstance(a, Plan) and a == b
    with pytest.raises(AttributeError):
        a.report = "/elsewhere"  # type: ignore[misc]


def test_the_canary_comes_after_the_selection() -> None:
    """A graded run's canary (docs/oracle.md) is appended to the selection, whatever the
    runner; its file is told to the driver (pytest runs its items last)."""
    for runner, tests, canary in (
        ("pytest", ("tests/test_a.py::test_x",), "tests/test_3f9a.py"),
        ("django", ("admin_views.tests",), "admin_views.test_3f9a"),
    ):
        base = facts(runner=runner, tests=tests)
        with_canary = attrs.evolve(base, canary=(canary,), canary_file="tests/test_3f9a.py")
        before, after = plan(base, environment()).instructions, plan(with_canary, environment()).instructions
        key = "pytest_args" if runner == "pytest" else "argv"
        assert after[key] == [*before[key], canary]
        assert (before["canary"], after["canary"]) == (None, "tests/test_3f9a.py")
