"""Stage (a): action classification (spec §3.1). Pure: no I/O, no model.

``classify`` is the spec's table over ``request_type`` × ``artifact_shape``; ``plan``
then says which runner executes the request, from the fields it carries.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from .. import _languages as langs
from .._driver.wire import Runner
from .._errors import RequestError
from .._records import Candidate
from .._types import ArtifactShape, Mode, RequestType

__all__ = ["Classification", "Runner", "classify", "plan", "pytest_command", "route"]

#: A bare interpreter name, resolved on the run's PATH (the declared interpreter's first).
_PYTHON_NAME = re.compile(r"python(3(\.\d+)?)?")


@attrs.frozen
class Classification:
    mode: Mode
    request_type: RequestType
    artifact: str
    #: True only for ``discriminate``: arms (never fires) the one probe step of §4.
    probe_gated: bool


def classify(request_type: RequestType, artifact_shape: ArtifactShape, artifact: str = "") -> Classification:
    """The §3.1 table, first match wins; anything else is ``targeted_execution``."""
    mode: Mode = "targeted_execution"
    if request_type == "build_check" and artifact_shape in ("patch", "snippet", "command"):
        mode = "compile_parse"
    elif request_type == "run_entry" and artifact_shape in ("snippet", "command"):
        mode = "targeted_execution"
    elif request_type == "run_suite" and artifact_shape == "test_subset":
        mode = "test_execution"
    elif (request_type == "probe" and artifact_shape == "probe_program") or request_type == "discriminate":
        mode = "diagnostic_probe"
    return Classification(
        mode=mode,
        request_type=request_type,
        artifact=artifact,
        probe_gated=request_type == "discriminate",
    )


def pytest_command(argv: Sequence[str] | None, python: str | None = None) -> list[str] | None:
    """pytest's own arguments, if ``argv`` runs pytest in the declared interpreter, else None.

    ``pytest …``, ``py.test …``, ``python -m pytest …`` (``python3``, ``python3.N``: the
    run's PATH finds the declared interpreter's first) and ``PYTHON -m pytest …`` with the
    request's own ``python`` are pytest runs: they get the pytest runner, so per-test
    verdicts, the before-run and every guard of ``run_suite``. Anything else (another
    interpreter's path, options before ``-m``) stays a command, judged by its exit.
    """
    if not argv:
        return None
    head = argv[0]
    if head in ("pytest", "py.test"):
        return list(argv[1:])
    if (_PYTHON_NAME.fullmatch(head) or (python is not None and head == python)) and list(argv[1:3]) == [
        "-m",
        "pytest",
    ]:
        return list(argv[3:])
    return None


def plan(candidate: Candidate, mode: Mode) -> Runner:
    """Which runner witnesses ``candidate`` in ``mode``; raises `RequestError` if none can."""
    if mode == "test_execution":
        if candidate.repo is None:
            raise RequestError("run_suite needs `repo`")
        return candidate.runner
    if mode == "compile_parse":
        if candidate.code is not None:
            return "compile_snippet"
        if candidate.command is not None:
            return "pytest" if pytest_command(candidate.command, candidate.python) is not None else "command"
        if candidate.repo is not None:
            return "compile_tree"
        raise RequestError("build_check needs `code`, `command` or `repo`")
    if candidate.code is not None:
        return "snippet"
    if candidate.command is not None:
        return "pytest" if pytest_command(candidate.command, candidate.python) is not None else "command"
    if candidate.repo is not None and candidate.tests:
        return candidate.runner
    raise RequestError(f"{candidate.request_type} ({mode}) needs `code` or `command`")


def check_language(candidate: Candidate) -> None:
    """A language beyond Python answers a ``snippet``'s ``build_check`` or ``run_entry``,
    and, for the languages with a suite runner, ``run_suite`` of a ``repo``."""
    lang = candidate.language
    if candidate.runner != "pytest" and (lang != "python" or candidate.request_type != "run_suite"):
        raise RequestError(
            f"runner {candidate.runner!r} is for a Python run_suite, not {lang} {candidate.request_type}"
        )
    if lang == "python":
        return
    if candidate.request_type == "run_suite" and candidate.repo is not None:
        if langs.language(lang).suite is None:
            raise RequestError(
                f"language {lang!r}: run_suite runs {', '.join(langs.SUITE_LANGUAGES)} suites, not {lang}"
            )
        if candidate.artifact_shape not in ("test_subset", "patch"):
            raise RequestError(f"language {lang!r}: run_suite takes a test_subset or a patch")
        for name in ("code", "command", "python"):
            if getattr(candidate, name) is not None:
                raise RequestError(f"language {lang!r}: run_suite of a repo takes no `{name}`")
        return
    if candidate.request_type not in ("build_check", "run_entry") or candidate.artifact_shape != "snippet":
        raise RequestError(
            f"language {lang!r} answers build_check and run_entry of a snippet"
            + (" and run_suite of a repo" if lang in langs.SUITE_LANGUAGES else "")
            + f", not {candidate.request_type} of a {candidate.artifact_shape}"
        )
    if candidate.code is None:
        raise RequestError(f"language {lang!r}: a snippet needs `code` (one whole source file)")
    for name in ("command", "repo", "patch", "tests", "python"):
        if getattr(candidate, name) is not None:
            raise RequestError(f"language {lang!r}: `{name}` is for Python requests only")


def route(candidate: Candidate) -> tuple[Classification, Runner]:
    """Where ``candidate`` goes: its classification and its runner, checking the fields
    that runner needs (no I/O)."""
    c = classify(candidate.request_type, candidate.artifact_shape, str(candidate.id or ""))
    check_language(candidate)
    runner = "steps" if candidate.language != "python" else plan(candidate, c.mode)
    if candidate.command is not None and (
        not candidate.command or not all(isinstance(a, str) for a in candidate.command)
    ):
        raise RequestError("`command` must be a non-empty list of strings")
    if candidate.patch is not None and candidate.repo is None:
        raise RequestError("`patch` needs `repo`")
    if candidate.code is not None and "\x00" in candidate.code:
        raise RequestError("`code` contains a NUL byte")
    for i, sel in enumerate(candidate.tests or ()):
        path = sel.split("::", 1)[0]
        if not sel or path.startswith("/") or ".." in path.split("/") or sel.startswith("-"):
            raise RequestError(f"tests[{i}]: {sel!r} is not a selector relative to the repo")
    return c, runner
