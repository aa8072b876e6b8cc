"""What a SWE-bench spec's ``pre_install`` and ``eval_commands`` are to aexec (issue 43):
each command read as data, never run. Pure: no I/O.

A locale setup or export aexec's ``C.UTF-8`` runs stand for (`run_note`), an
``apt-get install`` (the environment's ``apt``; TeX Live left out, `left_out`), an edit of
a setup file the build reads, matplotlib's download of Qhull's sources (Debian's Qhull
and FreeType, `QHULL_APT`), or one line saying what else it needs (`pre_install`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .edits import EditError, parse
from .spec import SETUP_FILES

#: matplotlib's ``pre_install`` downloads Qhull 2020.2's sources (``QHULL_…=``, ``wget``,
#: ``mkdir``, ``tar``) for its build, which downloads FreeType's too: Debian's Qhull 2020.2
#: and FreeType stand for them (the build links them: `aexec._environments.inplace`).
_QHULL_DOWNLOAD = re.compile(
    r'^(QHULL_\w+=\S+|wget -O "\$QHULL_TAR" .*|mkdir -p "\$QHULL_BUILD_DIR"|tar -xv?zf "\$QHULL_TAR" .*)$'
)
QHULL_APT = ("libqhull-dev", "libfreetype-dev", "pkg-config")
#: What SWE-bench's ``apt-get install -y`` brings that aexec's resolution
#: (``--no-install-recommends``) does not, and tests need: imagemagick's Ghostscript
#: (matplotlib compares PDF and EPS output through ``gs``; without it they skip).
RECOMMENDED = {"imagemagick": ("ghostscript",)}
#: Why TeX Live's apt packages (``texlive*``, ``cm-super``, ``dvipng``) are left out.
TEX_LEFT_OUT = (
    "TeX Live unpacked outside / has no formats (fmtutil is a maintainer script):"
    " left out with cm-super and dvipng, so matplotlib's usetex tests skip (an expected one is"
    " then unresolved)"
)

#: Django's locale setup (``pre_install`` of 1.7-2.2, ``eval_commands`` of 3.0-3.2).
LOCALE_SETUP = frozenset(
    {
        "apt-get update && apt-get install -y locales",
        "echo 'en_US UTF-8' > /etc/locale.gen",
        "locale-gen en_US.UTF-8",
        "sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen",
    }
)
_EXPORT = re.compile(r"^export ([A-Za-z_][A-Za-z0-9_]*)=(\S*)$")
_LOCALE_VARS = frozenset({"LANG", "LC_ALL", "LANGUAGE", "LC_CTYPE", "LC_MESSAGES"})

_APT = re.compile(r"apt-get (?:-y )?install (?:-y )?(.*)$")


def pre_install(command: str, requirements: list[str]) -> tuple[str, str]:
    """What one ``pre_install`` command is to aexec: ``edit`` (of a setup file the build
    reads), ``noop`` (tox.ini's ``-rA``, the locale setup), ``apt`` (its packages), or
    ``other`` (one line saying what it needs)."""
    if command in LOCALE_SETUP:
        return "noop", "the run's locale is C.UTF-8"
    if _QHULL_DOWNLOAD.match(command.strip()):
        return "qhull", "Debian's Qhull 2020.2 (libqhull-dev)"
    apt = _APT.search(command)
    if apt is not None and command.startswith("apt-get"):
        return "apt", " ".join(w for w in apt.group(1).split() if not w.startswith("-"))
    try:
        edit = parse(command)
    except EditError:
        return "other", f"pre_install runs {command[:120]!r}"
    if edit.path in (*SETUP_FILES, *requirements):
        return "edit", command
    subst = edit.subst
    if edit.path == "tox.ini" and edit.guard is None and subst.replacement == subst.pattern + " -rA":
        return "noop", "pytest's -rA only changes its text report, which aexec does not read"
    return "other", f"pre_install edits {edit.path} ({command[:120]!r}), a file the build does not read"


def left_out(package: str) -> str | None:
    """Why an apt package is left out of the environment (`TEX_LEFT_OUT`), or None."""
    return TEX_LEFT_OUT if package.startswith("texlive") or package in ("cm-super", "dvipng") else None


def replacements(command: str) -> str:
    edit = parse(command)
    return " ".join(s.replacement for s in (edit.subst, edit.otherwise) if s is not None)


def exported_var(command: str) -> tuple[str, str] | None:
    m = _EXPORT.match(command.strip())
    return None if m is None else (m.group(1), m.group(2).strip("'\""))


def utf8_locale(name: str, value: str) -> bool:
    """An exported variable aexec's ``C.UTF-8`` runs stand in for: a UTF-8 locale (or
    ``LANGUAGE=en_US:en``: C's messages are English), ``PYTHONIOENCODING=utf8``."""
    if name == "PYTHONIOENCODING":
        return value.lower().replace("-", "") == "utf8"
    if name == "LANGUAGE":
        return all(p.split("_")[0] in ("en", "C") for p in value.split(":"))
    return name in _LOCALE_VARS and value.lower().replace("-", "").endswith(".utf8")


def run_note(spec: Mapping[str, Any]) -> str | None:
    """What aexec runs in place of a spec's locale setup and exports, or None."""
    exported = [e for c in spec.get("eval_commands") or () if (e := exported_var(str(c))) is not None]
    if not exported:
        return None
    said = ", ".join(f"{n}={v}" for n, v in exported)
    return f"SWE-bench's eval_commands export {said}: aexec runs under LANG=LC_ALL=C.UTF-8 (UTF-8, as theirs)"


def build_notes(spec: Mapping[str, Any]) -> list[str]:
    """What aexec's environment has in place of SWE-bench's (apt packages left out, the
    libraries matplotlib's build links in place of its downloads), one line each."""
    notes: list[str] = []
    for command in map(str, spec.get("pre_install") or ()):
        kind, what = pre_install(command, [])
        if kind == "apt":
            notes += [r for a in what.split() if (r := left_out(a)) is not None]
        elif kind == "qhull":
            notes.append(
                "matplotlib is built against Debian's Qhull 2020.2 and FreeType, its ft2font a release"
                " wheel's (FreeType 2.6.1, as SWE-bench's build) where that has the checkout's sources"
                " (environment.inplace_note says which; with Debian's, text in image comparisons differs)"
            )
    return list(dict.fromkeys(notes))
