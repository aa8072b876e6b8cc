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
    ("0 wire and facts", ["_wire", "_types", "_errors", "_log"]),
    ("1 records and options", ["_records", "_options"]),
    (
        "2 pure stages",
        [
            "_languages._common",
            "_languages.suite",
            "_languages.cfamily",
            "_languages.ctest",
            "_languages.java",
            "_languages.javascript",
            "_languages.nodetest",
            "_languages.rust",
            "_languages.cargo",
            "_languages.sql",
            "_languages",
            "_runners",
            "_stages",
            "_stages.classify",
            "_stages.policy",
            "_stages.keys",
            "_stages.plan",
            "_stages.parse",
            "_stages.normalize",
            "_stages.grade",
            "_stages.assemble",
            "_stages.envfault",
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
        ],
    ),
    (
        "4 pipeline",
        [
            "_pipeline",
            "_pipeline.cache",
            "_pipeline.toolchain",
            "_pipeline.session",
            "_pipeline.run",
            "_pipeline.witness",
            "_pipeline.observer",
        ],
    ),
    ("5 front door", ["_api", "_jsonl"]),
    (
        "6 optional parts (lazy)",
        [
            "_discrimination",
            "_discrimination.probe",
            "_discrimination.discriminate",
            "_scaleout",
            "_scaleout.ray",
            "_ab",
            "_ab.corpus",
            "_ab.naive",
            "_ab.metrics",
            "_ab.report",
            "_ab.harness",
            "_swebench",
        ],
    ),
    ("7 entry points", ["_commands", "_cli", "__main__", "__init__"]),
]
ORDER = {m: (i, j) for i, (_, mods) in enumerate(LAYERS) for j, m in enumerate(mods)}
PURE = {
    m
    for m in ORDER
    if m.startswith(("_stages", "_languages", "_runners")) or m in ("_wire", "_types", "_errors", "_records")
}
IO_MODULES = {"anyio", "subprocess", "shutil", "tempfile", "socket", "asyncio", "trio"}
OPTIONAL = {m for m in ORDER if ORDER[m][0] == 6}
#: Not imported at all: run by path inside the boundary, and its parts, loaded by path.
DRIVER = "_boundary.driver"
DRIVER_PARTS = "_boundary._driver"


def _is_driver(name: str) -> bool:
    return name in (DRIVER, DRIVER_PARTS) or name.startswith(DRIVER_PARTS + ".")


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
    assert {m for m in _modules() if not _is_driver(m)} | {"__init__"} == set(ORDER) | {"__init__"}


def test_imports_point_downward_only() -> None:
    for name, path in _modules().items():
        if _is_driver(name):
            continue
        for imp in _imports(path, "" if name == "__init__" else name):
            if not imp.startswith("."):
                continue
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


def test_the_driver_and_the_wire_use_only_the_standard_library() -> None:
    mods = _modules()
    names = [n for n in mods if _is_driver(n)] + ["_wire"]
    assert len(names) > 3
    for name in names:
        for imp in _imports(mods[name], name):
            if imp.startswith("."):
                # Under TYPE_CHECKING only: at run time the driver loads these by path.
                assert _is_driver(name) and (imp.startswith("._wire") or _is_driver(imp[1:])), (
                    f"{name} imports {imp}"
                )
                continue
            root = imp.split(".")[0]
            assert root in sys.stdlib_module_names or root in ("__future__", "pytest", "_pytest"), imp


def test_the_driver_imports_aexec_only_for_the_type_checker() -> None:
    """Every import of an aexec module in the driver's files sits under ``if TYPE_CHECKING:``."""
    for name, path in _modules().items():
        if not _is_driver(name):
            continue
        tree = ast.parse(path.read_text())
        guarded = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
            for stmt in node.body
            for n in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert id(node) in guarded, f"{name} line {node.lineno} imports from aexec at run time"


def test_no_module_is_long_without_a_reason() -> None:
    for name, path in _modules().items():
        text = path.read_text()
        if text.count("\n") > 400:
            assert "Longer than 400 lines because" in text, (
                f"{name} has {text.count(chr(10))} lines and no reason"
            )


def test_public_surface() -> None:
    assert aexec.__all__ == sorted(set(aexec.__all__))
    public = {n for n in dir(aexec) if not n.startswith("_")} - {"annotations", "TYPE_CHECKING", "Any"}
    modules = {n for n in public if type(getattr(aexec, n)).__name__ == "module"}
    assert public - modules <= set(aexec.__all__)
    for name in aexec.__all__:
        assert hasattr(aexec, name)
    assert aexec.__version__ == importlib.metadata.version("aexec")  # one place: _api.VERSION
