"""What a pytest fork server imported through pytest's assertion-rewriting hook, and
whether a run it forked, configured as the repo configures pytest, would have imported
those modules so (rewritten or not): a run that would not is run cold.

The server imports the plugins, and what they import when pytest configures, through a
hook built from an empty ini (`serve.preload_pytest`): the default ``python_files`` and
``--assert=rewrite``. A cold run imports them through its own pytest's hook, under the
repo's configuration: ``python_files = *.py`` rewrites them all, ``--assert=plain``
none. The server records what it imported (`preloaded`), each forked run inherits it,
and the run's pytest asks its own hook about each module (`unlike_cold`) once it has
read the configuration.

A module of the driver's package (see `aexec._driver`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: The modules the server's hook imported whose rewriting a configuration may decide
#: otherwise (source files, but for the plugins' own, rewritten as marked), sorted: a
#: module's name -> whether that hook rewrote it. Empty in a cold run.
PRELOADED: dict[str, bool] = {}
#: Every module the server's hook rewrote, sorted.
REWRITTEN: list[str] = []
#: That hook's ``python_files`` (the default: its Config had read no ini file); empty in
#: a cold run.
PATTERNS: list[str] = []
#: What was marked for rewriting on that hook: the plugins' distributions, as a run's
#: pytest marks them, and what their imports asked for (``register_assert_rewrite``).
MARKS: set[str] = set()


def _marked(name: str) -> bool:
    parts = name.split(".")
    return any(".".join(parts[:i]) in MARKS for i in range(1, len(parts) + 1))


def preloaded(hook: Any, before: set[str]) -> None:
    """In the fork server: record the modules imported since ``before`` through ``hook``,
    pytest's assertion-rewriting import hook, with its patterns and marks."""
    from importlib.machinery import SourceFileLoader

    PATTERNS[:] = list(hook.fnpats)
    MARKS.update(getattr(hook, "_must_rewrite", ()))
    for name in sorted(set(sys.modules) - before):
        try:
            loader = getattr(getattr(sys.modules[name], "__spec__", None), "loader", None)
        except Exception:  # a module object of a kind of its own
            continue
        if loader is hook:
            REWRITTEN.append(name)
            if _marked(name):
                continue  # a plugin's: marked on every run's hook, rewritten cold too
        elif not isinstance(loader, SourceFileLoader):
            continue  # no source file (an extension, a namespace): never rewritten
        PRELOADED[name] = loader is hook


def unlike_cold(config: Any) -> str | None:
    """In a forked run, once its pytest has read the repo's configuration (``config``):
    why the modules the server imported ahead are not as this run's pytest would have
    imported them, rewritten or not, as its own hook decides each (``find_spec``); or None.

    First this run's hook gets the marks the plugins' imports made on the server's
    (their ``register_assert_rewrite`` ran there): a module so marked that a test
    imports later is rewritten, as cold. Only a configuration whose rewriting differs
    from the server's is looked at module by module: ``--assert=plain`` (no hook),
    ``enable_assertion_pass_hook`` (asserts rewritten otherwise), another
    ``python_files``; a configuration like the server's costs a comparison."""
    hook: Any = next(
        (
            f
            for f in sys.meta_path
            if type(f).__name__ == "AssertionRewritingHook" and getattr(f, "config", None) is config
        ),
        None,
    )
    if hook is None:  # --assert=plain: a cold run rewrites nothing
        return f"--assert=plain: {REWRITTEN[0]} was rewritten, imported ahead" if REWRITTEN else None
    missing = MARKS - set(getattr(hook, "_must_rewrite", MARKS))
    if missing:
        hook.mark_rewrite(*sorted(missing))  # warns of one imported unrewritten, as cold
    try:
        pass_hook = config.getini("enable_assertion_pass_hook")
    except (ValueError, KeyError):  # a pytest without it
        pass_hook = False
    if pass_hook and REWRITTEN:
        return f"enable_assertion_pass_hook: {REWRITTEN[0]} was rewritten without it, imported ahead"
    patterns = list(hook.fnpats)
    if patterns == PATTERNS:
        return None  # every module decided as the server's hook decided it
    import fnmatch

    by_name = not any(os.path.dirname(p) for p in patterns)  # as the hook's early bail-out
    for name, was in PRELOADED.items():
        last = name.rpartition(".")[2]
        if (
            by_name
            and not was
            and last != "conftest"
            and not any(fnmatch.fnmatch(last + ".py", p) for p in patterns)
            and not _marked(name)
        ):
            continue  # the hook bails out on its name: not rewritten cold either
        parent = name.rpartition(".")[0]
        path = getattr(sys.modules.get(parent), "__path__", None) if parent else None
        try:
            spec = hook.find_spec(name, path)
        except Exception:
            spec = None
        if (spec is not None and spec.loader is hook) != was:
            return f"python_files = {patterns}: {name} was {'' if was else 'not '}rewritten, imported ahead"
    return None
