"""Issue 30's public corpus: environments aexec builds, from PyPI sdists across eras.

Each entry is a pure-Python library's sdist (its tests ship in it) at a release of
2019-2023, with the environment its tests need declared (`EnvSpec`: the Python of its
era, the packages its tests import, resolved as of its release date). For each:

1. a cold build (``ensure``, sequential, one shared uv cache: what a real corpus costs),
2. a warm use (the cache hit), and the disk the environment alone costs (files not
   hardlinked into uv's cache),
3. two candidates graded through it: *gold*, a harmless patch (a comment added to the
   module under test: the selected tests must pass in the built environment), and
   *wrong*, a patch that breaks that module (they must fail).

Run: ``python benchmarks/env_corpus.py [WORKDIR]`` (downloads the sdists with pip once);
writes ``benchmarks/env_corpus.json`` and prints the tables of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import attrs

from aexec import Candidate, Policy, observe_many
from aexec._environments.build import Built, ensure
from aexec._environments.spec import EnvBroken, EnvSpec
from aexec._options import Options

HERE = Path(__file__).resolve().parent


@attrs.frozen
class Lib:
    name: str
    version: str
    #: Its release date: the resolution is as of this day.
    date: str
    python: str
    tests: tuple[str, ...]
    #: The module the wrong patch breaks (and the gold patch touches harmlessly).
    module: str
    packages: tuple[str, ...] = ()


CORPUS = [
    # test_six.py's dbm_ndbm case needs `_dbm`, which pyenv's 3.9 here was built without.
    Lib(
        "six",
        "1.16.0",
        "2021-05-06",
        "3.9",
        ("test_six.py::test_lazy", "test_six.py::test_with_metaclass"),
        "six.py",
    ),
    Lib("toolz", "0.10.0", "2019-07-10", "3.9", ("toolz/tests/test_itertoolz.py",), "toolz/itertoolz.py"),
    Lib(
        "more-itertools",
        "8.0.0",
        "2019-11-19",
        "3.9",
        ("tests/test_recipes.py",),
        "more_itertools/recipes.py",
    ),
    Lib("idna", "2.9", "2020-02-17", "3.9", ("tests/test_idna.py",), "idna/core.py"),
    Lib(
        "packaging",
        "20.4",
        "2020-05-20",
        "3.9",
        ("tests/test_version.py",),
        "packaging/version.py",
        ("pretend",),
    ),
    # Left alone, uv resolves pytest 3.5.1 here, older than its hypothesis needs (3.6+).
    Lib(
        "attrs",
        "19.3.0",
        "2019-10-15",
        "3.9",
        ("tests/test_funcs.py",),
        "src/attr/_funcs.py",
        ("hypothesis", "pytest>=4.6"),
    ),
    Lib("cachetools", "4.2.4", "2021-09-30", "3.10", ("tests/test_lru.py",), "src/cachetools/__init__.py"),
    Lib(
        "itsdangerous",
        "2.1.2",
        "2022-03-25",
        "3.10",
        ("tests/test_itsdangerous/test_signer.py",),
        "src/itsdangerous/signer.py",
    ),
    Lib("click", "8.1.3", "2022-04-29", "3.10", ("tests/test_parser.py",), "src/click/parser.py"),
    Lib("Jinja2", "3.1.2", "2022-04-29", "3.11", ("tests/test_lexnparse.py",), "src/jinja2/lexer.py"),
    # Its era's pytest (6.2.2) cannot rewrite asserts on Python 3.10 (fixed in 6.2.5): 3.9.
    Lib("Markdown", "3.3.4", "2021-02-24", "3.9", ("tests/test_apis.py",), "markdown/core.py", ("pyyaml",)),
    Lib("h11", "0.14.0", "2022-09-26", "3.11", ("h11/tests/test_util.py",), "h11/_util.py"),
    Lib(
        "exceptiongroup",
        "1.1.3",
        "2023-08-15",
        "3.10",
        ("tests/test_catch.py",),
        "src/exceptiongroup/_catch.py",
    ),
    Lib(
        "attrs",
        "23.1.0",
        "2023-04-17",
        "3.12",
        ("tests/test_funcs.py",),
        "src/attr/_funcs.py",
        ("hypothesis",),
    ),
    Lib("decorator", "5.1.1", "2022-01-08", "3.10", ("src/tests/test.py",), "src/decorator.py"),
    Lib("wcwidth", "0.2.6", "2023-01-12", "3.11", ("tests/test_core.py",), "wcwidth/wcwidth.py"),
    Lib(
        "typing_extensions",
        "4.7.1",
        "2023-07-02",
        "3.12",
        ("src/test_typing_extensions.py",),
        "src/typing_extensions.py",
    ),
    Lib(
        "python-dateutil",
        "2.8.2",
        "2021-07-09",
        "3.10",
        ("dateutil/test/test_relativedelta.py",),
        "dateutil/relativedelta.py",
        ("freezegun", "hypothesis"),
    ),
    Lib("sqlparse", "0.4.3", "2022-09-23", "3.11", ("tests/test_tokenize.py",), "sqlparse/lexer.py"),
    Lib("tabulate", "0.9.0", "2022-10-06", "3.12", ("test/test_output.py",), "tabulate/__init__.py"),
    Lib("colorama", "0.4.6", "2022-10-25", "3.12", ("colorama/tests/ansi_test.py",), "colorama/ansi.py"),
    # Their era's Python (before the driver ran on 3.6-3.8 these were `unsupported`).
    Lib("six", "1.16.0", "2021-05-06", "3.7", ("test_six.py",), "six.py"),
    Lib("toolz", "0.10.0", "2019-07-10", "3.8", ("toolz/tests/test_itertoolz.py",), "toolz/itertoolz.py"),
]


def _download(name: str, version: str, into: Path) -> Path:
    """The sdist of ``name==version`` from the package index's simple page (PEP 503)."""
    index = os.environ.get("UV_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    project = re.sub(r"[-_.]+", "-", name).lower()
    with urllib.request.urlopen(f"{index}/{project}/", timeout=120) as page:
        html = page.read().decode()
    stem = "[-_.]".join(map(re.escape, re.split(r"[-_.]+", name)))
    for href, file in re.findall(
        r'href="([^"]+/(' + stem + "-" + re.escape(version) + r'\.(?:tar\.gz|zip)))[#"]', html, re.I
    ):
        target = into / file
        with urllib.request.urlopen(urllib.parse.urljoin(f"{index}/{project}/", href), timeout=300) as got:
            target.write_bytes(got.read())
        return target
    raise LookupError(f"no sdist of {name} {version} on {index}")


def fetch(work: Path) -> dict[str, Path]:
    """Each library's sdist, downloaded once and unpacked: ``name-version`` -> source tree."""
    sdists, dest = work / "sdists", work / "src"
    sdists.mkdir(parents=True, exist_ok=True)
    trees: dict[str, Path] = {}
    for lib in CORPUS:
        key = f"{lib.name}-{lib.version}"
        marker = sdists / (key + ".path")
        if not marker.exists():
            marker.write_text(str(_download(lib.name, lib.version, sdists)))
        archive = Path(marker.read_text())
        with tarfile.open(archive) as tar:
            top = tar.getnames()[0].split("/")[0]
            if not (dest / top).exists():
                tar.extractall(dest, filter="data")
        trees[key] = dest / top
    return trees


def patches(tree: Path, module: str) -> tuple[str, str]:
    text = (tree / module).read_text()

    def diff(new: str) -> str:
        lines = difflib.unified_diff(
            text.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{module}", f"b/{module}"
        )
        return "".join(lines)

    end = "" if text.endswith("\n") else "\n"
    return diff(text + end + "# a harmless change\n"), diff(
        text + end + 'raise RuntimeError("a wrong patch")\n'
    )


def spec_of(lib: Lib) -> EnvSpec:
    return EnvSpec(lib.python, packages=lib.packages, exclude_newer=f"{lib.date}T23:59:59Z")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def main(work: Path) -> dict[str, Any]:
    trees = fetch(work)
    root = work / "envs"
    rows: list[dict[str, Any]] = []
    built: dict[int, Built] = {}
    for i, lib in enumerate(CORPUS):
        tree = trees[f"{lib.name}-{lib.version}"]
        row: dict[str, Any] = {"lib": f"{lib.name} {lib.version}", "python": lib.python, "date": lib.date}
        start = time.monotonic()
        try:
            b = ensure(spec_of(lib), str(tree), str(root))
        except EnvBroken as e:
            said = e.message.strip().splitlines()
            row |= {"built": False, "kind": e.kind, "cause": said[-1][:200] if said else ""}
        else:
            built[i] = b
            row |= {"built": True, "cold_s": round(time.monotonic() - start, 2), "cached": b.cached}
            row |= {"own_mib": round(b.unique_bytes / 2**20, 2), "key": b.key[:12], "lock": b.lock_hash[:12]}
            start = time.monotonic()
            again = ensure(spec_of(lib), str(tree), str(root))
            row["warm_s"] = round(time.monotonic() - start, 4)
            assert again.cached and again.key == b.key
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    cands = []
    for i in built:
        lib = CORPUS[i]
        tree = trees[f"{lib.name}-{lib.version}"]
        gold, wrong = patches(tree, lib.module)
        for label, patch in (("gold", gold), ("wrong", wrong)):
            cands.append(
                Candidate(
                    "run_suite",
                    "patch",
                    id=f"{i}:{label}",
                    repo=str(tree),
                    patch=patch,
                    tests=lib.tests,
                    environment=spec_of(lib),
                    policy=Policy(timeout_s=600),  # the default 30 s is short on a loaded machine
                )
            )
    observed = anyio.run(lambda: observe_many(cands, options=Options(env_dir=str(root))))
    for obs in observed:
        i, label = str(obs.id).split(":")
        rows[int(i)][label] = obs.verdict
        if (label == "gold") != (obs.verdict == "pass"):
            rows[int(i)][f"{label}_said"] = (obs.error or (obs.failure.message if obs.failure else ""))[:200]
    # A fresh process's cache hit (no interpreter versions known yet).
    first = next(iter(built))
    lib = CORPUS[first]
    code = (
        "import sys, time; from aexec._environments.build import ensure; from aexec._environments.spec import EnvSpec;"
        f"t = time.monotonic(); ensure(EnvSpec({lib.python!r}, packages={lib.packages!r},"
        f" exclude_newer={lib.date + 'T23:59:59Z'!r}), sys.argv[1], sys.argv[2]); print(time.monotonic() - t)"
    )
    fresh = subprocess.run(
        [sys.executable, "-c", code, str(trees[f"{lib.name}-{lib.version}"]), str(root)],
        capture_output=True,
        text=True,
        check=True,
    )
    cold = [r["cold_s"] for r in rows if r.get("built")]
    du = subprocess.run(
        ["du", "-sm", str(root / "uv-cache"), str(root / "envs")], capture_output=True, text=True
    )
    summary = {
        "environments": len(CORPUS),
        "built": len(cold),
        "cold_p50_s": round(statistics.median(cold), 2),
        "cold_p95_s": round(pct(cold, 0.95), 2),
        "warm_max_s": max(r["warm_s"] for r in rows if r.get("built")),
        "warm_fresh_process_s": round(float(fresh.stdout.strip()), 3),
        "own_mib_median": round(statistics.median(r["own_mib"] for r in rows if r.get("built")), 2),
        "du_mib": du.stdout.strip().replace("\t", " ").splitlines(),
        "graded_right": sum(r.get("gold") == "pass" and r.get("wrong") == "fail" for r in rows),
        "load_average": os.getloadavg(),
    }
    return {"summary": summary, "rows": rows}


if __name__ == "__main__":
    work = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/aexec-env-corpus")
    result = main(work)
    (HERE / "env_corpus.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
