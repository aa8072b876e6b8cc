"""``python -I _driver/__main__.py --bytecode < JOB.json``: not a run. It compiles a pristine repo's
modules once for all of its runs (`aexec._boundary.bytecode.compile_bytecode`),
executing none of the repo's code: only the interpreter's compiler and pytest's
assertion rewriter over its source.

A module of the driver's package (see `aexec._driver`).
"""

from __future__ import annotations

import contextlib
import os
import resource
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .wire import BytecodeJob


def write_bytecode(job: BytecodeJob) -> None:
    """Write the ``__pycache__`` files a run of ``job["root"]`` would compile, under ``job["out"]``.

    Each of ``job["files"]`` gets a checked-hash pyc (PEP 552: the importer verifies the
    source's hash, so a patched module is never run from a stale pyc); with a pytest whose
    rewritten pycs are checked by hash and relocatable (its ``_fix_code_filename``), those
    of ``job["rewrite"]`` also get the pyc pytest's assertion rewriter would write. A file
    that does not compile, or whose compiling warns (a run must see that warning), gets none.
    """
    import ast
    import importlib
    import importlib.util
    import py_compile
    import warnings

    if not hasattr(py_compile, "PycInvalidationMode"):
        return  # before 3.7 no pyc is checked by hash (a stale one could run): write none
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (120, 120))
    rewrite: Any = None
    with contextlib.suppress(ImportError):
        rewrite = importlib.import_module("_pytest.assertion.rewrite")
    if not (hasattr(rewrite, "_fix_code_filename") and hasattr(rewrite, "_write_pyc_fp")):
        rewrite = None  # an older pytest: its pycs would carry the path they were made at
    root, out, rewritten = job["root"], job["out"], set(job["rewrite"])
    for rel in job["files"]:
        source_path = os.path.join(root, rel)
        pyc = importlib.util.cache_from_source(os.path.join(out, rel))
        base = os.path.basename(rel)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                py_compile.compile(
                    source_path,
                    cfile=pyc,
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
                )
            except (py_compile.PyCompileError, OSError, ValueError, RecursionError, MemoryError):
                continue
            if caught:
                os.unlink(pyc)
                continue
            if rewrite is None or rel not in rewritten:
                continue
            with open(source_path, "rb") as f:
                source = f.read()
            try:  # as pytest's own _rewrite_test does
                tree = ast.parse(source, filename=source_path)
                rewrite.rewrite_asserts(tree, source, source_path, None)
                code = compile(tree, source_path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            if caught:
                continue
            with open(os.path.join(os.path.dirname(pyc), base[:-3] + rewrite.PYC_TAIL), "wb") as fp:
                rewrite._write_pyc_fp(fp, importlib.util.source_hash(source), code)
