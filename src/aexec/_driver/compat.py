"""The driver's files as an interpreter older than the one they are typed for can run them.

The driver runs in the candidate's interpreter, which may be as old as CPython 3.6 (the
interpreters SWE-bench's specs name). Its files are typed for mypy with modern
annotations (``from __future__ import annotations``, ``X | None``, ``list[int]``,
``Literal``, ``TypedDict``), which 3.6 to 3.8 cannot run. On those, the driver's loader
compiles each file through `compile_for_old`, which rewrites its syntax tree:

* ``from __future__ import annotations`` goes (3.6 has no such feature);
* every annotation goes (parameters, returns, annotated assignments), so none is
  evaluated: ``ast`` of 3.6 parses them, being plain expressions;
* a name ``from typing`` that this interpreter's ``typing`` lacks (``Literal``,
  ``TypedDict``, ``Protocol``, ``Final``) is bound to `Anything`, which any subscript
  of leaves as it is; a class based on ``TypedDict`` is a plain ``dict``.

What the files do at run time is written for 3.6 (no walrus, no positional-only
parameters, fallbacks for newer stdlib calls); this module only takes the types away.
This file itself is loaded as it is, so it is written for 3.6 as it stands.
"""

import ast
import importlib.util
import marshal
import os
import sys
import typing

_BASES = {"TypedDict": "dict", "Protocol": "object"}


class Anything:
    """A typing name this interpreter lacks: subscripted, called or or-ed, still itself."""

    def __getitem__(self, item: "object") -> "Anything":
        return self

    def __call__(self, *args: "object", **kwargs: "object") -> "Anything":
        return self

    def __or__(self, other: "object") -> "Anything":
        return self

    __ror__ = __or__


class _Strip(ast.NodeTransformer):
    def visit_ImportFrom(self, node: "ast.ImportFrom") -> "object":
        if node.module == "__future__":
            node.names = [a for a in node.names if a.name != "annotations"]
            return node if node.names else ast.Pass()
        if node.module != "typing" or node.level:
            return node
        have = [a for a in node.names if hasattr(typing, a.name)]
        out: list[ast.stmt] = [ast.ImportFrom(module="typing", names=have, level=0)] if have else []
        for a in node.names:
            if not hasattr(typing, a.name):
                out.append(
                    ast.Assign(
                        targets=[ast.Name(id=a.asname or a.name, ctx=ast.Store())],
                        value=ast.Call(
                            func=ast.Name(id="_aexec_anything", ctx=ast.Load()), args=[], keywords=[]
                        ),
                    )
                )
        return out or ast.Pass()

    def visit_ClassDef(self, node: "ast.ClassDef") -> "ast.ClassDef":
        self.generic_visit(node)
        if any(isinstance(b, ast.Name) and b.id in _BASES for b in node.bases):
            node.bases = [
                ast.Name(id=_BASES[b.id], ctx=ast.Load()) if isinstance(b, ast.Name) and b.id in _BASES else b
                for b in node.bases
            ]
            node.keywords = [k for k in node.keywords if k.arg != "total"]
        return node

    def _function(self, node: "typing.Any") -> "typing.Any":
        self.generic_visit(node)
        a = node.args
        for arg in a.args + a.kwonlyargs + getattr(a, "posonlyargs", []) + [a.vararg, a.kwarg]:
            if arg is not None:
                arg.annotation = None
        node.returns = None
        return node

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_AnnAssign(self, node: "ast.AnnAssign") -> "ast.stmt":
        if node.value is None:
            return ast.Pass()
        return ast.Assign(targets=[node.target], value=node.value)


def compile_for_old(path: "str") -> "typing.Any":
    """The code of the Python file ``path``, its types taken away (see the module doc).

    Kept, as a pyc is, in ``__pycache__`` beside the file (``NAME.aexec-compat-TAG.bin``,
    keyed by this interpreter's magic number and both files' mtime and size), where the
    driver can write: parsing and compiling the driver's files again costs a cold run
    about 80 ms. The fork server, which runs outside the boundary, writes it; a run, as
    the run's uid on a read-only view, only reads it."""
    key = _key(path)
    name = os.path.basename(path)[:-3] + ".aexec-compat-" + str(sys.implementation.cache_tag) + ".bin"
    cache = os.path.join(os.path.dirname(path), "__pycache__", name)
    try:
        with open(cache, "rb") as f:
            data = f.read()
        if data[: len(key)] == key:
            return marshal.loads(data[len(key) :])
    except (OSError, ValueError, EOFError, TypeError):
        pass
    with open(path, "rb") as f:
        source = f.read()
    tree = ast.fix_missing_locations(_Strip().visit(ast.parse(source, path)))
    code = compile(tree, path, "exec", dont_inherit=True)
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        tmp = f"{cache}.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(key + marshal.dumps(code))
        os.replace(tmp, cache)
    except OSError:
        pass
    return code


def _key(path: "str") -> "bytes":
    stats = [os.stat(p) for p in (path, __file__)]
    stamp = ";".join(f"{st.st_mtime_ns}:{st.st_size}" for st in stats)
    return importlib.util.MAGIC_NUMBER + stamp.encode() + b"\n"


def anything() -> "Anything":
    return Anything()
