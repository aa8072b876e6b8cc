"""The driver's entry, run by path with the candidate's interpreter (see the package's
docstring): ``python -s aexec/_driver/__main__.py SPEC.json``.

It loads the folder it is in as the package ``_aexec_driver`` (`NAME`): ordinary
modules importing each other relatively, each found by `_Finder` beside this file and,
on CPython < 3.8, compiled without its types (`compat.compile_for_old`, cached beside
it). Once ``main`` and all it imports have loaded, nothing of the driver is left in
``sys.modules``, nor its folder on ``sys.path``, nor its finder on ``sys.meta_path``:
the modules live on through the references they hold to each other, and a candidate
that imports ``wire``, ``kernel``, ``_aexec_driver`` or ``aexec`` finds nothing of the
driver's. Then ``main.main()`` runs. Written so CPython 3.6 runs it as it stands.
"""

import sys

TYPE_CHECKING = False  # typing's, without importing typing here (mypy reads the name)
if TYPE_CHECKING:
    from typing import Any

#: The package's name while the driver runs: private, never a candidate's module's.
NAME = "_aexec_driver"
#: CPython < 3.8 cannot run the modules' annotations: `compat` takes them away.
OLD = sys.version_info < (3, 8)


def load() -> "Any":
    """The driver's ``main`` module, loaded as above. A module that fails to load is
    `driver_failed` (the package's): nothing of the candidate's has run."""
    import importlib.util
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    # ``python FILE`` puts FILE's folder first on sys.path: the driver's modules are not
    # the candidate's (nor the driver's stdlib imports').
    sys.path[:] = [p for p in sys.path if not p or os.path.abspath(p) != here]
    init = os.path.join(here, "__init__.py")
    spec = importlib.util.spec_from_file_location(NAME, init, submodule_search_locations=[here])
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = package
    finder = _Finder(here)
    sys.meta_path.insert(0, finder)
    try:
        spec.loader.exec_module(package)
        if OLD:
            finder.compat = importlib.import_module(NAME + ".compat")
        return importlib.import_module(NAME + ".main")
    except Exception as e:
        failed = getattr(package, "driver_failed", None)
        if failed is None:
            raise
        failed(e)
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n == NAME or n.startswith(NAME + ".")]:
            del sys.modules[name]


class _Finder:
    """Finds the package's modules, and only those, in its folder: a candidate's path
    hooks and ``.pth`` finders never see the names."""

    def __init__(self, here: "str") -> None:
        self.here = here
        self.compat = None  # type: Any  # on CPython < 3.8, ``compat``, once loaded

    def find_spec(self, name: "str", path: "Any" = None, target: "Any" = None) -> "Any":
        if not name.startswith(NAME + "."):
            return None
        import importlib.util
        import os

        file = os.path.join(self.here, name[len(NAME) + 1 :] + ".py")
        loader = None  # type: Any  # the default: a source file's, with its pyc
        if self.compat is not None:
            loader = _OldLoader(name, file, self.compat)
        return importlib.util.spec_from_file_location(name, file, loader=loader)


class _OldLoader:
    """CPython < 3.8: the module's code compiled without its types (``compat``)."""

    def __init__(self, name: "str", path: "str", compat: "Any") -> None:
        self.name, self.path, self.compat = name, path, compat

    def create_module(self, spec: "Any") -> None:
        return None  # the default module

    def exec_module(self, module: "Any") -> None:
        module.__dict__["_aexec_anything"] = self.compat.anything
        exec(self.compat.compile_for_old(self.path), module.__dict__)


if __name__ == "__main__":
    load().main()  # bound to no name here: a pytest run's ``__main__`` (this) holds none of it
