"""Languages beyond Python (contract: "Added: languages beyond Python"). Pure: no I/O.

The registry: each language's module exports one :class:`Language` object (C and C++
share `cfamily`), each suite runner one :class:`Suite` (`cargo`, `nodetest`, `ctest`),
and ``LANGUAGES`` keeps every language by name, joined to its runner. The pipeline asks
``language(name)`` for the object and calls its methods; Python is aexec's default path
and not an entry here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import attrs

from . import bash, cargo, cfamily, ctest, java, javascript, nodetest, rust, sql
from ._common import (
    LANG_REQUEST_TYPES,
    LangFinding,
    LangName,
    LangRequestType,
    LanguageEvidence,
    Step,
    StepOutput,
)
from ._language import OWN_PREFIX, Census, Language
from .suite import Suite, SuiteEvidence, split

__all__ = [
    "LANGUAGES",
    "LANG_REQUEST_TYPES",
    "OWN_PREFIX",
    "SUITE_LANGUAGES",
    "Census",
    "LangFinding",
    "LangName",
    "LangRequestType",
    "Language",
    "LanguageEvidence",
    "Step",
    "StepOutput",
    "Suite",
    "SuiteEvidence",
    "language",
    "split",
]

#: Every language beyond Python, by name, each with its suite runner where it has one
#: (a runner reads its language's readers, so the two are joined here, not in the
#: language's module).
LANGUAGES: Final[Mapping[str, Language]] = MappingProxyType(
    {
        lang.name: lang
        for lang in (
            attrs.evolve(cfamily.C, suite=ctest.C_SUITE),
            attrs.evolve(cfamily.CPP, suite=ctest.CPP_SUITE),
            attrs.evolve(rust.LANGUAGE, suite=cargo.SUITE),
            java.LANGUAGE,
            attrs.evolve(javascript.LANGUAGE, suite=nodetest.SUITE),
            sql.LANGUAGE,
            bash.LANGUAGE,
        )
    }
)
#: The languages whose test suites ``run_suite`` runs.
SUITE_LANGUAGES: Final = tuple(name for name, lang in LANGUAGES.items() if lang.suite is not None)


def language(name: str) -> Language:
    """The object of the language ``name``; ValueError naming the known ones if there is none."""
    try:
        return LANGUAGES[name]
    except KeyError:
        raise ValueError(f"unknown language {name!r}; expected one of {', '.join(LANGUAGES)}") from None
