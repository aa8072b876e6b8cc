"""The command line's files: reading a JSONL request file, checking where output goes.

Every rule here answers bad input with one `RequestError` line naming the file, the
line and the field, before anything runs (the contract's rejection rules,
``docs/contract.md``):

* lines are split on ``\\n`` only (a raw U+2028 or U+0085 inside a JSON string is
  valid JSON and stays in its line); a trailing ``\\r`` and a UTF-8 BOM at the start
  are dropped; blank lines are ignored;
* each line is decoded as strict UTF-8 (a bad byte is reported by line and column),
  parsed as JSON (nesting too deep is reported, not raised), and made into a
  `Candidate`, whose fields check themselves (types, bounds, valid Unicode);
* the output path must be creatable and writable, not a directory, not a device
  (``/dev/null`` and terminals excepted), and not one of the inputs (by inode, so a
  symlink or hard link to the input is caught); ``-`` means standard output;
* a cache dir must be a directory aexec can create files in.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from collections import Counter

import attrs

from ._api import validate
from ._errors import RequestError
from ._records import Candidate
from ._serde import candidate as candidate_from_json

STDIO = "-"


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/aexec`` (``~/.cache/aexec``): the command line's default."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "aexec")


def _read_bytes(path: str) -> bytes:
    if path == STDIO:
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise RequestError(f"{path}: cannot read: {e.strerror or e}") from None


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(f"{where}: not valid UTF-8 (byte {e.start + 1} of the line)") from None


def lines(data: bytes) -> list[tuple[int, bytes]]:
    """(line number, content) of every non-blank line: split on ``\\n`` only."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    out = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if raw.decode("utf-8", "replace").strip():  # blank, in Unicode's sense too
            out.append((number, raw))
    return out


def parse_line(raw: bytes, where: str) -> tuple[Candidate, list[str]]:
    """One request line → a `Candidate` (and the fields it ignored); `RequestError` if bad."""
    text = _decode(raw, where)
    try:
        data = json.loads(text)
    except RecursionError:
        raise RequestError(f"{where}: bad JSON: nested too deeply") from None
    except ValueError as e:
        raise RequestError(f"{where}: bad JSON: {str(e).splitlines()[0]}") from None
    try:
        return candidate_from_json(data)
    except RequestError as e:
        raise RequestError(f"{where}: {e}") from None


def read_cases(path: str, *, quiet: bool = False) -> list[Candidate]:
    """Parse and check every line; raises `RequestError` naming the first bad line.

    A relative ``repo`` is resolved against the file's directory (the working directory
    for standard input).
    """
    cases, _ = read_numbered(path, quiet=quiet)
    return cases


def read_numbered(path: str, *, quiet: bool = False) -> tuple[list[Candidate], list[int]]:
    """`read_cases`, with each candidate's line number."""
    base = os.getcwd() if path == STDIO else os.path.dirname(os.path.abspath(path))
    name = "<stdin>" if path == STDIO else path
    out: list[Candidate] = []
    numbers: list[int] = []
    errors: list[str] = []
    ignored: Counter[str] = Counter()
    for number, raw in lines(_read_bytes(path)):
        where = f"{name}:{number}"
        try:
            cand, extra = parse_line(raw, where)
            ignored.update(extra)
            if cand.repo is not None:
                cand = attrs.evolve(cand, repo=os.path.normpath(os.path.join(base, cand.repo)))
            try:
                validate(cand)
            except RequestError as e:
                raise RequestError(f"{where}: {e}") from None
            out.append(cand)
            numbers.append(number)
        except RequestError as e:
            errors.append(str(e).splitlines()[0])
    if errors:
        more = f" (and {len(errors) - 1} more malformed lines)" if len(errors) > 1 else ""
        raise RequestError(errors[0] + more)
    if ignored and not quiet:
        names = ", ".join(f"{k} ({n}×)" for k, n in sorted(ignored.items()))
        print(f"aexec: ignoring fields the contract does not define: {names}", file=sys.stderr)
    return out, numbers


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_target(path: str, inputs: list[str], flag: str) -> None:
    for given in inputs:
        if given != STDIO and _same_file(path, given):
            raise RequestError(f"{flag} {path}: is the input file {given}; refusing to overwrite it")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise RequestError(f"{flag} {path}: {e.strerror or e}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise RequestError(f"{flag} {path}: is a directory")
        device = stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
        if device and os.path.realpath(path) != os.devnull and not _is_tty(path):
            raise RequestError(f"{flag} {path}: is a device, not a file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise RequestError(f"{flag} {path}: directory {parent} does not exist")


def open_output(path: str, inputs: list[str], *, flag: str = "-o") -> int:
    """An fd to write observations to, checked and opened (truncated) before anything runs."""
    if path == STDIO:
        return os.dup(sys.stdout.fileno())
    _check_target(path, inputs, flag)
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise RequestError(f"{flag} {path}: cannot write: {e.strerror or e}") from None


def check_output(path: str, inputs: list[str], *, flag: str = "-o") -> None:
    """Every check of `open_output`, for a command that writes its output only when it
    has it (``discriminate``, ``swebench``, ``ab``): call it after every other check and
    before anything runs. An existing file is opened for writing but neither truncated
    nor changed; a missing one is created to show it can be, then removed."""
    if path == STDIO:
        return
    _check_target(path, inputs, flag)
    existed = os.path.lexists(path)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOCTTY, 0o644))
    except OSError as e:
        raise RequestError(f"{flag} {path}: cannot write: {e.strerror or e}") from None
    if not existed:
        os.unlink(path)


def _is_tty(path: str) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)


def check_cache_dir(path: str, *, flag: str = "--cache-dir") -> str:
    """``path`` made absolute, created if missing, and shown to be writable."""
    full = os.path.abspath(path)
    try:
        os.makedirs(full, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=full, prefix=".tmp-probe-")
        os.close(fd)
        os.unlink(probe)
    except FileExistsError:
        raise RequestError(f"{flag} {path}: exists and is not a directory") from None
    except OSError as e:
        raise RequestError(f"{flag} {path}: not a writable directory ({e.strerror or e})") from None
    return full
