"""The architecture as a test: where each module sits, and imports point one way.

The layers (``docs/architecture.md`` draws them). A module may import only from its own
layer's earlier modules and from lower layers; ``__init__`` and the CLI sit on top and
import the optional parts lazily (inside functions, or through ``__getattr__``).
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
from pathlib import Path

import aexec

SRC = Path(aexec.__file__).parent

#: module (dotted, under aexec) -> layer. Within a layer, a module may import those
#: listed before it.
LAYERS: list[tuple[str, list[str]]] = [
    ("0 wire and facts", ["_version", "_driver.wire", "_types", "_errors", "_log"]),
    (
        "1 records and options",
        [
            "_environments",
            "_environments.edits",
            "_environments.setup_files",
            "_environments.spec",
            "_inputs",
            "_records",
            "_raw",
            "_options",
        ],
    ),
    (
        "2 pure stages",
        [
            "_languages._common",
            "_languages.canary",
            "_languages.suite",
            "_languages._language",
            "_languages.cfamily",
            "_languages.ctest",
            "_languages.java",
            "_languages.javascript",
            "_languages.nodetest",
            "_languages.rust",
            "_languages.cargo",
            "_languages.sql",
            "_languages.bash",
            "_languages",
            "_runners",
            "_stages",
            "_stages.classify",
            "_stages.policy",
            "_stages.plan",
            "_stages.parse",
            "_stages.normalize",
            "_stages.grade",
            "_stages.keys",
            "_stages.assemble",
            "_stages.canary",
            "_stages.envfault",
            "_stages.judge",
            "_serde",
        ],
    ),
    (
        "3 boundary and process shell",
        [
            "_boundary",
            "_boundary.trees",
            "_boundary.scratch",
            "_boundary.patch",
            "_boundary.bytecode",
            "_boundary.cgroups",
            "_boundary.leftovers",
            "_boundary.isolation",
            "_boundary.admission",
            "_boundary.forkserver",
            "_boundary.supervise",
            "_environments.interpreters",
            "_environments.proxy",
            "_environments.jail",
            "_environments.confine",
            "_environments.store",
            "_environments.uv",
            "_environments.versions",
            "_environments.commits",
            "_environments.system",
            "_environments.build",
            "_environments.ft2font",
            "_environments.inplace",
        ],
    ),
    (
        "4 pipeline",
        [
            "_pipeline",
            "_pipeline.cache",
            "_pipeline.remover",
            "_pipeline.toolchain",
            "_pipeline.request",
            "_pipeline.warm",
            "_pipeline.session",
            "_pipeline.small",
            "_pipeline.invoke",
            "_pipeline.rebuild",
            "_pipeline.canary",
            "_pipeline.run",
            "_pipeline.witness",
            "_pipeline.observer",
            "_pipeline.workspace",
        ],
    ),
    ("5 front door", ["_api", "_jsonl", "_progress"]),
    (
        "6 optional parts (lazy)",
        [
            "_discrimination",
            "_discrimination.probe",
            "_discrimination.discriminate",
            "_scaleout",
            "_scaleout.archive",
            "_scaleout.worker",
            "_scaleout.submission",
            "_scaleout.ray",
            "_ab",
            "_ab.corpus",
            "_ab.naive",
            "_ab.metrics",
            "_ab.report",
            "_ab.harness",
            "_environments.conda",
            "_environments.preinstall",
            "_environments.swebench",
            "_swebench",
            "_serve",
            "_serve.sandboxfusion",
            "_serve.openapi",
            "_serve.gate",
            "_serve.sessions",
            "_serve.app",
            "_serve.server",
            "_environments.command",
            "_inspect",
            "_code_eval",
            "testing",
        ],
    ),
    ("7 entry points", ["_commands", "_cli", "__main__", "__init__"]),
]
ORDER = {m: (i, j) for i, (_, mods) in enumerate(LAYERS) for j, m in enumerate(mods)}
PURE = {
    m
    for m in ORDER
    if m.startswith(("_stages", "_languages", "_runners"))
    or m in ("_version", "_driver.wire", "_types", "_errors", "_records", "_raw")
}
IO_MODULES = {"anyio", "subprocess", "shutil", "tempfile", "socket", "asyncio", "trio"}
OPTIONAL = {m for m in ORDER if ORDER[m][0] == 6}
#: The driver: one package, run by path inside the boundary (its entry loads it under a
#: private name). Of it the library imports its wire only, which sits in layer 0.
DRIVER = "_driver"
WIRE = "_driver.wire"


def _is_driver(name: str) -> bool:
    return name == DRIVER or name.startswith(DRIVER + ".")


def _name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_name(p): p for p in SRC.rglob("*.py")}


def _imports(path: Path, module: str, *, top_level_only: bool = False) -> set[str]:
    """What ``path`` imports, as dotted names under aexec for relative imports."""
    tree = ast.parse(path.read_text())
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1] if node.level > 1 else package
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
                names = [target] if node.module else [".".join([*base, a.name]) for a in node.names]
                out.update("." + n for n in names)
            else:
                out.add(node.module or "")
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _resolve(target: str) -> str:
    """The longest module of ``ORDER`` that ``target`` names (a name imported from it)."""
    parts = target.split(".")
    while parts and ".".join(parts) not in ORDER:
        parts.pop()
    return ".".join(parts)


def test_every_module_has_a_layer() -> None:
    assert {m for m in _modules() if not _is_driver(m) or m == WIRE} | {"__init__"} == set(ORDER) | {
        "__init__"
    }


def test_imports_point_downward_only() -> None:
    for name, path in _modules().items():
        if _is_driver(name):
            continue
        for imp in _imports(path, "" if name == "__init__" else name):
            if not imp.startswith("."):
                continue
            assert not _is_driver(imp[1:]) or imp[1:] == WIRE, f"{name} imports the driver's {imp[1:]}"
            target = _resolve(imp.lstrip("."))
            if not target or target == name:
                continue
            assert ORDER[target] < ORDER[name] or name in ("__init__", "_cli", "_commands"), (
                f"{name} imports {target}"
            )


def test_optional_parts_are_imported_lazily() -> None:
    """``import aexec`` (and the CLI's start) imports no optional part at module level."""
    for name in ("__init__", "_cli", "_commands", "_api"):
        path = _modules()[name]
        top = {
            _resolve(i.lstrip("."))
            for i in _imports(path, "" if name == "__init__" else name, top_level_only=True)
        }
        assert not top & OPTIONAL, f"{name} imports {top & OPTIONAL} at import time"


def test_pure_stages_do_no_io_and_nothing_imports_an_event_loop() -> None:
    for name, path in _modules().items():
        roots = {i.split(".")[0] for i in _imports(path, name) if not i.startswith(".")}
        assert not roots & {"asyncio", "trio"}, name
        if name in PURE:
            assert not roots & IO_MODULES, f"pure stage {name} imports {roots & IO_MODULES}"


def test_the_driver_is_one_stdlib_only_package() -> None:
    """The driver's modules import the standard library (and pytest, for pytest runs) and
    each other, relatively: nothing of aexec outside its folder (the wire is inside)."""
    mods = _modules()
    names = [n for n in mods if _is_driver(n)]
    assert {"_driver.__main__", "_driver.main", "_driver.contain", WIRE} <= set(names)
    for name in names:
        for imp in _imports(mods[name], name):
            if imp.startswith("."):
                assert _is_driver(imp[1:]), f"{name} imports {imp[1:]}, outside the driver"
                continue
            root = imp.split(".")[0]
            assert root in sys.stdlib_module_names or root in ("__future__", "pytest", "_pytest"), imp


def test_the_drivers_modules_import_each_other_as_they_load() -> None:
    """Every relative import in the driver sits at a module's top level (or under its
    top-level ``if TYPE_CHECKING:``) and names the package itself: once loaded, the
    entry takes the package out of ``sys.modules``, where an import in a function
    would look for it while the candidate runs."""
    for name, path in _modules().items():
        if not _is_driver(name):
            continue
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        top |= {
            id(stmt)
            for node in tree.body
            if isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
            for stmt in node.body
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert id(node) in top and node.level == 1, (
                    f"{name} line {node.lineno}: a relative import below the module's top level"
                )


def test_no_module_is_over_400_lines() -> None:
    """Issue 28: no exemptions (``_scaleout/ray.py`` was one: now archive, worker,
    submission and the door)."""
    for name, path in _modules().items():
        lines = path.read_text().count("\n")
        assert lines <= 400, f"{name} has {lines} lines"


#: Where an ``AEXEC_*`` variable may be read: `Options.from_env`, and the command line
#: (the Ray node cache it hands `RayExecutor`). The driver runs in its own process, so
#: its ablation switch comes through that process's environment.
ENV_READERS = {"_options", "_cli"}


def _reads_aexec_variable(node: ast.AST) -> bool:
    """``os.environ.get("AEXEC_…")``, ``os.getenv("AEXEC_…")``, ``os.environ["AEXEC_…"]``."""

    def aexec_name(arg: ast.AST | None) -> bool:
        return isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("AEXEC_")

    if isinstance(node, ast.Subscript):
        return "environ" in ast.unparse(node.value) and aexec_name(node.slice)
    if isinstance(node, ast.Call) and node.args:
        callee = ast.unparse(node.func)
        return callee.endswith(("environ.get", "getenv")) and aexec_name(node.args[0])
    return False


def test_only_options_reads_aexecs_variables() -> None:
    """Issue 39: configuration is passed in; deep inside, nothing reads ``AEXEC_*``."""
    for name, path in _modules().items():
        if name in ENV_READERS or _is_driver(name):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            assert not _reads_aexec_variable(node), f"{name} line {node.lineno}: reads {ast.unparse(node)}"  # type: ignore[attr-defined]


#: The modules that hash content (a tree, /etc, a compiled repo, a cache entry's value,
#: a repository archive) and, in ``_stages/keys.py``, every key aexec makes.
HASHERS = {
    "_stages.keys",
    "_boundary.trees",
    "_boundary.scratch",
    "_boundary.bytecode",
    "_pipeline.cache",
    "_scaleout.archive",
    "_environments.build",  # content hashes of setup files and locks (the keys: keys.py)
    "_environments.inplace",  # content hashes of compiled sources (the key: keys.py)
    "_environments.ft2font",  # a checkout's sources compared with a release's (no key)
}


def test_every_key_is_made_in_keys() -> None:
    """Issue 28: a cache key (an observation's, a before-run's, a compiled repo's, a probed
    toolchain's, a fork server's, a Ray submission's) is a pure function in
    ``_stages/keys.py``; elsewhere nothing calls ``cache_key`` or hashes to make one."""
    for name, path in _modules().items():
        if _is_driver(name):
            continue
        tree = ast.parse(path.read_text())
        if name not in HASHERS:
            assert "hashlib" not in {i.split(".")[0] for i in _imports(path, name)}, f"{name} hashes"
        if name == "_stages.keys":
            continue
        calls = {
            n.func.id if isinstance(n.func, ast.Name) else n.func.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name | ast.Attribute)
        }
        assert "cache_key" not in calls, f"{name} makes a key of its own"


def test_the_version_is_written_once() -> None:
    """One place: ``_version.py``, which hatch reads; every other module imports it."""
    holders = [n for n, p in _modules().items() if f'"{aexec.__version__}"' in p.read_text()]
    assert holders == ["_version"]
    pyproject = (SRC.parent.parent / "pyproject.toml").read_text()
    assert 'path = "src/aexec/_version.py"' in pyproject


def test_public_surface() -> None:
    assert aexec.__all__ == sorted(set(aexec.__all__))
    public = {n for n in dir(aexec) if not n.startswith("_")} - {"annotations", "TYPE_CHECKING", "Any"}
    modules = {n for n in public if type(getattr(aexec, n)).__name__ == "module"}
    assert public - modules <= set(aexec.__all__)
    for name in aexec.__all__:
        assert hasattr(aexec, name)
    assert aexec.__version__ == importlib.metadata.version("aexec")  # one place: _version.VERSION


def test_one_name_per_idea() -> None:
    """Issue 28: ``check`` (a request's rules; it also named classify-and-route),
    ``selection`` (what a run selects; it also named pytest's arguments for it) and
    ``verdict_of`` (an observation's verdict; it also named an ablation's KEEP/DELETE)
    each name one function now."""
    defined: dict[str, list[str]] = {}
    for name, path in _modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                defined.setdefault(node.name, []).append(name)
    assert defined["check"] == ["_stages.grade"]
    assert defined["selection"] == ["_stages.grade"]
    assert defined["verdict_of"] == ["_stages.assemble"]
