"""The architecture as a test: imports point one way; one public surface."""

from __future__ import annotations

import ast
from pathlib import Path

import aexec

SRC = Path(aexec.__file__).parent

LAYER = {
    "_types": 0,
    "_errors": 0,
    "_records": 1,
    # pure stages, in pipeline order: each may use the ones before it
    "_classify": 2.0,
    "_policy": 2.1,
    "_parse": 2.2,
    "_normalize": 2.3,
    "_assemble": 2.4,
    "_workspace": 3,
    # the warm fork server behind stage (c): execute starts runs through it
    "_forkserver": 2.9,
    "_execute": 3,
    "_cache": 3,
    "_serde": 3,
    "_probe": 3,
    "_api": 4,
    # scale-out: runs _api's pipeline inside Ray tasks (imports ray only inside functions)
    "_ray": 4.5,
    "_discriminate": 4.5,
    "_ab": 4.6,
    "_cli": 5,
    "__main__": 5,
    "__init__": 5,
}
PURE = {"_classify", "_policy", "_parse", "_normalize", "_assemble"}
IO_MODULES = {"anyio", "subprocess", "shutil", "tempfile", "socket", "asyncio", "trio"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out.add(("." * node.level) + (node.module or ""))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_every_module_has_a_layer() -> None:
    names = {p.stem for p in SRC.glob("*.py")} - {"_driver"}
    assert names == set(LAYER)


def test_imports_point_downward_only() -> None:
    for name, layer in LAYER.items():
        for imp in _imports(SRC / f"{name}.py"):
            if imp.startswith("."):
                target = imp.lstrip(".").split(".")[0]
                if target:
                    assert LAYER[target] < layer or (LAYER[target] == layer and layer >= 5), (
                        f"{name} imports {target}"
                    )


def test_pure_stages_do_no_io_and_nothing_imports_an_event_loop() -> None:
    for name in LAYER:
        roots = {i.split(".")[0] for i in _imports(SRC / f"{name}.py")}
        assert not roots & {"asyncio", "trio"}, name
        if name in PURE:
            assert not roots & IO_MODULES, f"pure stage {name} imports {roots & IO_MODULES}"


def test_driver_uses_only_the_standard_library() -> None:
    import sys

    for imp in _imports(SRC / "_driver.py"):
        root = imp.split(".")[0]
        assert root in sys.stdlib_module_names or root in ("__future__", "pytest", "_pytest"), imp


def test_public_surface() -> None:
    assert aexec.__all__ == sorted(set(aexec.__all__))
    public = {n for n in dir(aexec) if not n.startswith("_")} - {"annotations"}
    modules = {n for n in public if type(getattr(aexec, n)).__name__ == "module"}
    assert public - modules <= set(aexec.__all__)
    for name in aexec.__all__:
        assert hasattr(aexec, name)
    assert aexec.__version__ == "0.1.0"
