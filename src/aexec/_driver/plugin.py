"""The pytest plugin of a pytest run: per-test verdicts and exceptions from pytest's own
hooks and objects, written to the run's report, not read from its terminal text.

A module of the driver's package (see `aexec._driver`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from . import reporting, rewriting, wire

if TYPE_CHECKING:
    from .reporting import Report


class Reporter:
    """A pytest plugin: per-test verdicts from pytest's own hooks, not its terminal text.

    In a run a fork server forked, with ``hookimpl`` (pytest's marker), it also ends the
    run as soon as pytest has read the repo's configuration if the modules the server
    imported ahead are not as this run's pytest would have imported them
    (`rewriting.unlike_cold`): a `wire.GoColdRecord` tells the library to run it cold.
    A graded run's ``canary`` file (`aexec._stages.canary`): its tests are run last (first
    under ``-x``, its failure not counted: `Uncounted`)."""

    def __init__(self, report: Report, hookimpl: Any = None, canary: str | None = None) -> None:
        self.report = report
        #: The plugins pytest is given: this one, and the canary's `Uncounted`.
        self.plugins: list[Any] = [self]
        self.session: Any = None
        if canary and hookimpl is not None:

            def last(session: Any, config: Any, items: list[Any]) -> None:
                # after every hook that reorders: the canary's tests run last, the rest as they
                # were; first under ``-x``/``--maxfail`` (the repo's first failure ends the
                # session, and the canary must still be reached), its failure then not counted
                self.session = session
                ours = [i for i in items if str(i.nodeid).startswith(canary + "::")]
                if ours:
                    ids = {id(i) for i in ours}
                    rest = [i for i in items if id(i) not in ids]
                    items[:] = ours + rest if getattr(config.option, "maxfail", 0) else rest + ours

            self.pytest_collection_modifyitems: Any = hookimpl(trylast=True)(last)
            finish = self.pytest_sessionfinish

            def mine(nodeid: Any) -> bool:
                return str(nodeid) == canary or str(nodeid).startswith(canary + "::")

            def forget(session: Any) -> None:
                # before the cache provider writes: the canary's node ids are never kept
                # (``lastfailed``, ``nodeids``), so what the run leaves is the repo's own
                plugins = session.config.pluginmanager
                lf, nf = plugins.get_plugin("lfplugin"), plugins.get_plugin("nfplugin")
                if isinstance(getattr(lf, "lastfailed", None), dict):
                    lf.lastfailed = {k: v for k, v in lf.lastfailed.items() if not mine(k)}
                seen = getattr(nf, "cached_nodeids", None)
                if isinstance(seen, (list, set)):
                    nf.cached_nodeids = type(seen)(n for n in seen if not mine(n))
                finish(session)

            setattr(self, "pytest_sessionfinish", hookimpl(tryfirst=True)(forget))  # noqa: B010
            self.plugins.append(Uncounted(self, mine, hookimpl))
        if rewriting.PATTERNS and hookimpl is not None:

            def served(early_config: Any) -> Any:
                # a wrapper: before any plugin's own hook (conftests, Django's set-up)
                why = rewriting.unlike_cold(early_config)
                if why is not None:
                    report.write("go_cold", reason=why)
                    os._exit(wire.GO_COLD)  # nothing of the run's own has run yet: no exit hooks
                yield

            self.pytest_load_initial_conftests: Any = hookimpl(hookwrapper=True)(served)
        self.verdicts: dict[str, str] = {}
        #: Tests that raised in a phase whose report a hook rewrote into a pass or skip.
        self.rewritten: dict[str, str] = {}
        #: A running test's exceptions, written when it finishes: a failed attempt that a
        #: rerun plugin retries is not the test's failure.
        self.pending: dict[str, list[dict[str, Any]]] = {}

    def pytest_collection_finish(self, session: Any) -> None:
        self.report.write("collected", count=len(session.items))

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.report.write(
                "collect_error", nodeid=report.nodeid, text=str(report.longrepr)[: wire.MESSAGE_CAP]
            )

    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        exc = call.excinfo.value
        phase = getattr(report, "when", None) or "collect"
        if phase == "collect" and exc.__cause__ is not None:
            exc = exc.__cause__  # pytest wraps SyntaxError/ImportError in CollectError
        record = dict(phase=phase, nodeid=node.nodeid, **reporting.describe(exc))
        if phase not in ("setup", "call", "teardown"):
            self.report.write("exception", **record)
            marker = unknown_marker(exc) if phase == "collect" else None
            if marker is not None:
                self.report.write("missing", nodeid=node.nodeid, what="marker", name=marker)
            return
        self.pending.setdefault(node.nodeid, []).append(record)
        if not report.failed:
            # pytest calls this for no skip and no expected failure, and hands it the report
            # of this very attempt (a plugin's rerun marks its reports only later): the test
            # raised, yet its report says it passed. A hook rewrote it; the test did not pass.
            self.rewritten[node.nodeid] = phase

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.report.write("start", nodeid=nodeid)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.outcome == "rerun":
            # pytest-rerunfailures' (or flaky's) failed attempt: the next attempt decides.
            for attempt in (self.verdicts, self.rewritten, self.pending):
                attempt.pop(report.nodeid, None)
            return
        prior = self.verdicts.get(report.nodeid)
        if report.when == "setup":
            verdict = "errored" if report.failed else "skipped" if report.skipped else None
        elif report.when == "call":
            verdict = "passed" if report.passed else "skipped" if report.skipped else "failed"
            if prior == "failed":
                verdict = prior  # a failed subtest report is not undone by the test's own pass
        else:  # teardown
            verdict = "errored" if report.failed and prior in (None, "passed") else prior
        if verdict is not None:
            self.verdicts[report.nodeid] = verdict
        if report.when == "setup" and report.failed:
            fixture = missing_fixture(report.longrepr)
            if fixture is not None:
                self.report.write("missing", nodeid=report.nodeid, what="fixture", name=fixture)
        if report.failed and getattr(report, "node", None) is not None:
            self.relay(report)  # a pytest-xdist worker's: its exception never reaches this process

    def relay(self, report: Any) -> None:
        """The exception of a worker's failed report, from its crash line (``Type: message``,
        or a rewritten assert's ``assert ...``): its type's MRO is known for builtins only."""
        import builtins
        import re

        crash: Any = getattr(report.longrepr, "reprcrash", None)
        text = str(getattr(crash, "message", "") or "")
        name, sep, message = text.partition(": ")
        if text.startswith("assert ") or text == "assert":
            name, message = "AssertionError", text
        elif not re.fullmatch(r"[A-Za-z_][\w.]*", name) or not (sep or name == text):
            return
        cls = getattr(builtins, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            bases = [reporting.qualname(c) for c in cls.__mro__]
        else:
            bases = [name if "." in name else f"builtins.{name}"]  # pytest's Failed is "builtins"
        frames = [[str(crash.path), int(crash.lineno or 0), ""]] if getattr(crash, "path", None) else []
        self.report.write(
            "exception",
            phase=report.when,
            nodeid=report.nodeid,
            type=bases[0],
            bases=bases,
            message=message[: wire.MESSAGE_CAP],
            errno=None,
            frames=frames,
        )

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        verdict = self.verdicts.get(nodeid, "errored")
        if nodeid in self.rewritten:
            verdict = "failed" if self.rewritten[nodeid] == "call" else "errored"
        for record in self.pending.pop(nodeid, []):
            self.report.write("exception", **record)
        self.report.write("test", nodeid=nodeid, verdict=verdict)

    def pytest_sessionfinish(self, session: Any) -> None:
        for records in self.pending.values():  # a test that never finished
            for record in records:
                self.report.write("exception", **record)
        self.pending.clear()


class Uncounted:
    """The canary's failure is not one of the repo's: around the session's own count of
    failures, it never brings ``-x``/``--maxfail`` to stop the repo's tests."""

    def __init__(self, reporter: Reporter, mine: Any, hookimpl: Any) -> None:
        def logreport(report: Any) -> Any:
            # the session counts it, under a limit one higher (pytest 8 refuses to unset a
            # ``shouldfail`` once set); then the count and the limit are as they were
            session: Any = reporter.session if report.failed and mine(report.nodeid) else None
            option: Any = getattr(getattr(session, "config", None), "option", None)
            maxfail, count = getattr(option, "maxfail", 0), getattr(session, "testsfailed", None)
            if maxfail:
                option.maxfail = maxfail + 1
            yield
            if maxfail:
                option.maxfail = maxfail
            if count is not None:
                session.testsfailed = count

        self.pytest_runtest_logreport: Any = hookimpl(hookwrapper=True)(logreport)


def missing_fixture(longrepr: Any) -> str | None:
    """The fixture a test's failed setup requested and pytest found nowhere: its report's
    ``longrepr`` is pytest's ``FixtureLookupErrorRepr`` of that name, "not found" (not a
    fixture it knows that failed, nor a recursive one)."""
    cls = type(longrepr)
    if cls.__name__ != "FixtureLookupErrorRepr" or cls.__module__ != "_pytest.fixtures":
        return None
    name = getattr(longrepr, "argname", None)
    said = getattr(longrepr, "errorstring", None)
    if type(name) is not str or type(said) is not str or not said.startswith(f"fixture {name!r} not found"):
        return None
    return name


def unknown_marker(exc: BaseException) -> str | None:
    """The marker a module's collection failed on under ``--strict-markers``: pytest's
    ``Failed`` raised by its ``MarkGenerator.__getattr__`` for a name no ``markers``
    configuration registers (that frame's own ``name``)."""
    if type(exc).__name__ != "Failed" or "OutcomeException" not in [c.__name__ for c in type(exc).__mro__]:
        return None  # pytest's ``Failed`` (whose ``__module__`` it sets to "builtins")
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "__getattr__" and frame.f_code.co_filename.endswith(
            os.path.join("_pytest", "mark", "structures.py")
        ):
            owner = frame.f_locals.get("self")
            name = frame.f_locals.get("name")
            if type(owner).__name__ == "MarkGenerator" and type(name) is str:
                return name
        tb = tb.tb_next
    return None
