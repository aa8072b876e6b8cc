"""Edits of a repo's setup files a declared environment makes before it is resolved,
written as the ``sed`` commands SWE-bench's ``pre_install`` runs, read into data. Pure.

Two forms are read, and nothing else (no shell ever runs them)::

    sed -i 's/Jinja2>=2.3/Jinja2<3.0/' setup.py
    grep -q 'X' setup.py && sed -i 's/A/B/' setup.py || sed -i 's/C/D/' setup.py

A ``s`` script is applied as GNU sed does: to each line, its pattern a POSIX basic regular
expression (``\\(…\\)`` groups, ``.``, ``*``, ``[…]``, ``^``/``$``), the replacement's ``&``
the match and ``\\1``… its groups, the first match of each line (``g``: every one). The
``grep -q`` form applies the first ``sed`` when a line of the file matches ``X``, else the
second. The edits change only the copy of the setup files the environment's build reads
(and so its key); the candidate's copy of the repo is the checkout as it is.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

import attrs

__all__ = ["Edit", "Subst", "apply", "parse"]


class EditError(ValueError):
    """A command that is not one of the edits read here (the message says why)."""


@attrs.frozen
class Subst:
    """One ``s/pattern/replacement/flags`` of sed, compiled."""

    pattern: str
    replacement: str
    every: bool

    def run(self, text: str) -> str:
        regex = re.compile(_bre(self.pattern))
        parts = _replacement(self.replacement)

        def repl(m: re.Match[str]) -> str:
            return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in parts)

        lines = text.split("\n")
        return "\n".join(regex.sub(repl, ln, count=0 if self.every else 1) for ln in lines)


@attrs.frozen
class Edit:
    """One file's edit: ``subst`` applied to ``path`` (when ``guard`` is None or a line of
    the file matches it; else ``otherwise``, if any)."""

    path: str
    subst: Subst
    guard: str | None = None
    otherwise: Subst | None = None

    def run(self, text: str) -> str:
        if self.guard is not None and not any(re.search(_bre(self.guard), ln) for ln in text.split("\n")):
            return text if self.otherwise is None else self.otherwise.run(text)
        return self.subst.run(text)


def _bre(pattern: str) -> str:
    """A POSIX basic regular expression as Python's ``re``; `EditError` on what is not read."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            d = pattern[i + 1]
            i += 2
            if d in "(){}|+?":
                out.append(d)
            elif d.isdigit():
                out.append("\\" + d)
            elif d in "nt":
                out.append("\n" if d == "n" else "\t")
            elif d.isalnum():
                raise EditError(f"sed pattern {pattern!r}: \\{d} is not read")
            else:
                out.append(re.escape(d))
            continue
        if c == "[":
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            end = pattern.find("]", j)
            body = pattern[i + 1 : end] if end > 0 else ""
            if end < 0 or "[:" in body or "[." in body or "[=" in body:
                raise EditError(f"sed pattern {pattern!r}: a bracket expression that is not read")
            neg = body.startswith("^")
            items = body[1:] if neg else body
            out.append("[" + ("^" if neg else "") + items.replace("\\", "\\\\").replace("[", "\\[") + "]")
            i = end + 1
            continue
        start = not out or out[-1] in ("^", "(")
        if c == "*" and start:
            out.append("\\*")
        elif c == "^" and not out:
            out.append("^")
        elif c == "$" and i == n - 1:
            out.append("$")
        elif c in ".*":
            out.append(c)
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _replacement(text: str) -> list[str | int]:
    """sed's replacement as literal strings and group numbers (``&`` is 0)."""
    parts: list[str | int] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "&":
            parts.append(0)
        elif c == "\\" and i + 1 < len(text):
            d = text[i + 1]
            i += 1
            parts.append(int(d) if d.isdigit() else "\n" if d == "n" else "\t" if d == "t" else d)
        else:
            parts.append(c)
        i += 1
    return parts


def _script(script: str) -> Subst:
    """``s<d>pattern<d>replacement<d>[g]`` → `Subst`."""
    if len(script) < 4 or script[0] != "s" or script[1] in "\\\n" or script[1].isalnum():
        raise EditError(f"sed script {script!r} is not one s/pattern/replacement/")
    delim = script[1]
    fields, cur, i = [], "", 2
    while i < len(script):
        c = script[i]
        if c == "\\" and i + 1 < len(script):
            nxt = script[i + 1]
            cur += nxt if nxt == delim else c + nxt
            i += 2
            continue
        if c == delim:
            fields.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    fields.append(cur)
    if len(fields) != 3 or fields[2] not in ("", "g"):
        raise EditError(f"sed script {script!r}: only s/pattern/replacement/ and its g flag are read")
    pattern, replacement, flags = fields
    if not pattern:
        raise EditError(f"sed script {script!r}: an empty pattern is not read")
    _bre(pattern)  # checked now: a bad pattern is the spec's error, not the build's
    return Subst(pattern, replacement, flags == "g")


def _sed(words: list[str]) -> tuple[Subst, str]:
    """``sed -i [-e] SCRIPT FILE`` → (its substitution, its file)."""
    if len(words) not in (4, 5) or words[:2] != ["sed", "-i"] or (len(words) == 5 and words[2] != "-e"):
        raise EditError(f"not `sed -i 's/A/B/' FILE`: {shlex.join(words)!r}")
    return _script(words[-2]), _path(words[-1])


def _path(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    if not path or path.startswith("/") or ".." in parts or "$" in path:
        raise EditError(f"sed edits a file outside the repo: {path!r}")
    return path.removeprefix("./")


def parse(command: str) -> Edit:
    """The `Edit` of one ``sed -i`` (or ``grep -q … && sed … || sed …``) command;
    `EditError`, saying why, for any other command."""
    if any(c in command for c in "`\n") or "$(" in command:
        raise EditError(f"not a plain sed edit: {command!r}")
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars="&|;<>()")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError as e:
        raise EditError(f"unreadable command {command!r}: {e}") from None
    if "&&" not in words:
        if any(w and w[0] in "&|;<>()" and w.strip("&|;<>()") == "" for w in words):
            raise EditError(f"not a plain sed edit: {command!r}")
        subst, path = _sed(words)
        return Edit(path, subst)
    a = words.index("&&")
    b = words.index("||") if "||" in words else len(words)
    grep, first, second = words[:a], words[a + 1 : b], words[b + 1 :]
    if len(grep) != 4 or grep[:2] != ["grep", "-q"] or not (a < b):
        raise EditError(f"not `grep -q X FILE && sed … || sed …`: {command!r}")
    subst, path = _sed(first)
    otherwise = None
    if b < len(words):
        otherwise, other = _sed(second)
        if other != path:
            raise EditError(f"the two seds of {command!r} edit different files")
    if _path(grep[3]) != path:
        raise EditError(f"grep and sed of {command!r} read different files")
    _bre(grep[2])
    return Edit(path, subst, grep[2], otherwise)


def apply(commands: Iterable[str], path: str, data: bytes) -> bytes:
    """``data`` (the file ``path`` of the repo) after the edits ``commands`` make to it, in order."""
    edits = [e for e in map(parse, commands) if e.path == path]
    if not edits:
        return data
    text = data.decode("utf-8", errors="surrogateescape")
    for edit in edits:
        text = edit.run(text)
    return text.encode("utf-8", errors="surrogateescape")


def paths(commands: Iterable[str]) -> tuple[str, ...]:
    """The files ``commands`` edit."""
    return tuple(dict.fromkeys(parse(c).path for c in commands))


_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(?:[<>=!~;@]|$)")


def norm(name: str) -> str:
    """A distribution's name as PyPI compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def repinned(packages: Iterable[str]) -> set[str]:
    """The names ``packages`` pin with a version (``name==1.0``, ``name<2``): installed
    after the requirement files, they replace those files' lines for the same names."""
    out = set()
    for p in packages:
        m = _REQ_NAME.match(p)
        if m is not None and re.search(r"[<>=!~]", p[m.end(1) :].split(";")[0]):
            out.add(norm(m.group(1)))
    return out


def without_pins(text: str, names: set[str]) -> str:
    """A requirements file's text with the lines requiring one of ``names`` commented out."""
    lines = []
    for line in text.split("\n"):
        m = _REQ_NAME.match(line)
        drop = m is not None and not line.lstrip().startswith("-") and norm(m.group(1)) in names
        lines.append(f"# (aexec: `packages` pins it) {line}" if drop else line)
    return "\n".join(lines)


def included(text: str) -> list[str]:
    """The files a requirements file includes (``-r X``, ``-c X``), as written."""
    out = []
    for line in text.split("\n"):
        m = re.match(r"^\s*(?:-r|-c|--requirement|--constraint)\s*=?\s*(\S+)", line)
        if m is not None:
            out.append(m.group(1))
    return out
