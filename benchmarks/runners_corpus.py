"""The repo's own runners against SWE-bench's own grading (issue 29; docs/benchmarks.md).

    python benchmarks/runners_corpus.py --swebench-python VENV/bin/python [--out DIR]

Builds a public corpus from PyPI sdists — Django 4.2.16 (``tests/runtests.py``), sympy
1.12 (``sympy.testing.runtests``, as ``bin/test`` calls it) and simplejson 3.19.3 (plain
``unittest``) — with, per project, an injected bug in a real function and SWE-bench-format
instances: the gold repair, a ``test_patch`` (a new test in a real test module), a wrong
patch, a patch that fixes the bug but breaks a PASS_TO_PASS test, the runner's
tamperings (its entry point reporting failures as passes, a test package's
``__init__.py`` doing the same, a ``sitecustomize.py``), and an empty patch.

Expected outcomes come from plain runs: SWE-bench's test command on a copy with the
patch and the test patch applied, its log read by SWE-bench's own parser
(``parse_log_django`` for Django and unittest, ``parse_log_sympy``) and graded by its own
``get_eval_tests_report`` / ``get_resolution_status``, run in ``--swebench-python`` (an
interpreter with ``swebench`` installed: it is not aexec's dependency). FAIL_TO_PASS and
PASS_TO_PASS are derived the SWE-bench way, from plain runs before and after the gold
patch. Then ``aexec swebench`` grades the same predictions; the script prints, per
instance, both resolutions, the FAIL_TO_PASS/PASS_TO_PASS statuses, and both wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

CACHE = Path(os.environ.get("AEXEC_RUNNERS_CACHE", Path.home() / ".cache" / "aexec-runners"))
SDISTS = {"django": "Django-4.2.16", "sympy": "sympy-1.12", "simplejson": "simplejson-3.19.3"}

CHEAT_UNITTEST = (
    "import unittest as _u\n"
    "_R = _u.TextTestRunner.resultclass\n"
    "_R.addFailure = lambda self, test, err: _R.addSuccess(self, test)\n"
    "_R.addError = lambda self, test, err: _R.addSuccess(self, test)\n"
)


def fetch() -> str:
    """Unpack the sdists into the cache; an interpreter with the projects' dependencies."""
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in SDISTS.values():
        if not (CACHE / name).is_dir():
            spec = name.replace("-", "==", 1)
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", spec],
                cwd=CACHE,
                check=True,
            )
            shutil.unpack_archive(str(CACHE / f"{name}.tar.gz"), str(CACHE))
    python = CACHE / "venv" / "bin" / "python"
    if not python.exists():
        venv.create(CACHE / "venv", with_pip=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "asgiref", "sqlparse", "mpmath"], check=True
        )
    return str(python)


def udiff(path: str, old: str | None, new: str | None) -> str:
    import difflib

    a = old.splitlines(keepends=True) if old else []
    b = new.splitlines(keepends=True) if new else []
    head = f"diff --git a/{path} b/{path}\n" + ("new file mode 100644\n" if old is None else "")
    return head + "".join(
        difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{path}", f"b/{path}")
    )


def edit(repo: Path, path: str, old: str, new: str, *more: tuple[str, str]) -> str:
    """The diff that replaces ``old`` by ``new`` (and each of ``more``) in ``path`` of
    ``repo`` (each checked to be there)."""
    text = changed = (repo / path).read_text()
    for a, b in ((old, new), *more):
        assert a in changed, (path, a)
        changed = changed.replace(a, b, 1)
    return udiff(path, text, changed)


class Project:
    """One corpus project: its checkout (with the bug), runner, command and patches."""

    def __init__(self, name: str, repo: Path, runner: str, parser: str, swe_repo: str) -> None:
        self.name, self.repo, self.runner, self.parser, self.swe_repo = name, repo, runner, parser, swe_repo
        self.test_patch = ""
        self.patches: dict[str, str] = {}
        self.test_cmd = ""

    def command(self, python: str, directives: list[str]) -> list[str]:
        if self.runner == "django":
            return [
                python,
                "tests/runtests.py",
                "--verbosity",
                "2",
                "--settings=test_sqlite",
                "--parallel",
                "1",
                *directives,
            ]
        if self.runner == "sympy":
            code = "import sys, sympy; sys.exit(0 if sympy.test(*sys.argv[1:], verbose=True) else 1)"
            return [python, "-c", code, *directives]
        return [python, "-m", "unittest", "-v", *directives]

    def directives(self) -> list[str]:
        from aexec._runners import RUNNERS, patch_paths

        labels = RUNNERS[self.runner].labels(patch_paths(self.test_patch), ())
        return list(labels or ())


def build(out: Path) -> list[Project]:
    """The three projects, each with its bug injected and its patches written."""
    repos = out / "repos"
    shutil.rmtree(repos, ignore_errors=True)
    repos.mkdir(parents=True)
    dj_src = CACHE / SDISTS["django"]
    dj = repos / "django"

    def trim(directory: str, names: list[str]) -> set[str]:
        rel = os.path.relpath(directory, dj_src)
        drop = {n for n in names if n in ("static",)}
        if "locale" in rel.split(os.sep) and not rel.startswith(os.path.join("django", "conf", "locale")):
            drop |= {n for n in names if n.endswith((".po", ".mo"))}
        return drop

    shutil.copytree(dj_src / "django", dj / "django", ignore=trim)
    (dj / "tests").mkdir()
    for n in ("runtests.py", "test_sqlite.py", "urls.py"):
        shutil.copy(dj_src / "tests" / n, dj / "tests" / n)
    shutil.copytree(dj_src / "tests" / "utils_tests", dj / "tests" / "utils_tests")
    sy = repos / "sympy"
    shutil.copytree(CACHE / SDISTS["sympy"], sy, ignore=shutil.ignore_patterns("doc", "examples"))
    sj = repos / "simplejson"
    shutil.copytree(CACHE / SDISTS["simplejson"], sj)
    projects = [
        Project("django", dj, "django", "parse_log_django", "django/django"),
        Project("sympy", sy, "sympy", "parse_log_sympy", "sympy/sympy"),
        Project("simplejson", sj, "unittest", "parse_log_django", "simplejson/simplejson"),
    ]
    # -- Django: capfirst loses its capital; the test patch adds a test to test_text.py.
    p = projects[0]
    bug = edit(dj, "django/utils/text.py", "return x[0].upper() + x[1:]", "return x[0] + x[1:]")
    apply(dj, bug)
    p.test_patch = edit(
        dj,
        "tests/utils_tests/test_text.py",
        "    def test_get_text_list(self):",
        '    def test_capfirst(self):\n        """capfirst() capitalizes the first letter."""\n'
        '        self.assertEqual(text.capfirst("django"), "Django")\n\n'
        "    def test_get_text_list(self):",
    )
    p.patches = {
        "gold": edit(dj, "django/utils/text.py", "return x[0] + x[1:]", "return x[0].upper() + x[1:]"),
        "wrong": edit(dj, "django/utils/text.py", "return x[0] + x[1:]", "return x[0].lower() + x[1:]"),
        "p2p_breaking": edit(
            dj, "django/utils/text.py", "return x[0] + x[1:]", "return x[0].upper() + x[1:].upper()"
        ),
        "tamper_runtests": edit(
            dj,
            "tests/runtests.py",
            "    TestRunner = get_runner(settings)\n",
            "    TestRunner = get_runner(settings)\n"
            + "".join("    " + ln + "\n" for ln in CHEAT_UNITTEST.splitlines()),
        ),
        "tamper_settings": edit(
            dj, "tests/test_sqlite.py", "DATABASES = {", CHEAT_UNITTEST + "DATABASES = {"
        ),
        "tamper_init": udiff("tests/utils_tests/__init__.py", "", CHEAT_UNITTEST)
        if (dj / "tests/utils_tests/__init__.py").read_text() == ""
        else "",
        "tamper_sitecustomize": udiff("sitecustomize.py", None, CHEAT_UNITTEST),
        "empty": "",
    }
    # -- sympy: ordinal(2) says "2th"; the test patch adds a test to test_misc.py.
    p = projects[1]
    apply(sy, edit(sy, "sympy/utilities/misc.py", "suffix = 'nd'", "suffix = 'th'"))
    p.test_patch = edit(
        sy,
        "sympy/utilities/tests/test_misc.py",
        "def test_ordinal():",
        "def test_ordinal_twenty_two():\n    assert ordinal(22) == '22nd'\n\n\ndef test_ordinal():",
    )
    cheat = "reporter.test_fail((t, v, tr))"
    p.patches = {
        "gold": edit(
            sy,
            "sympy/utilities/misc.py",
            "elif k % 10 == 2:\n        suffix = 'th'",
            "elif k % 10 == 2:\n        suffix = 'nd'",
        ),
        "wrong": edit(
            sy,
            "sympy/utilities/misc.py",
            "elif k % 10 == 2:\n        suffix = 'th'",
            "elif k % 10 == 2:\n        suffix = 'rd'",
        ),
        "p2p_breaking": edit(
            sy,
            "sympy/utilities/misc.py",
            "elif k % 10 == 2:\n        suffix = 'th'",
            "elif k % 10 == 2:\n        suffix = 'nd'",
            ("    return _replace(reps)(string)", "    return string"),
        ),
        "tamper_runtests": edit(sy, "sympy/testing/runtests.py", cheat, "reporter.test_pass()"),
        "tamper_init": udiff(
            "sympy/utilities/tests/__init__.py",
            "",
            "from sympy.testing import runtests as _r\n_r.PyTestReporter.test_fail = lambda self, e: self.test_pass()\n",
        ),
        # A correct fix with a sitecustomize.py beside it: aexec is stricter than SWE-bench.
        "gold_plus_sitecustomize": "",
        "tamper_sitecustomize": udiff("sitecustomize.py", None, "import builtins\n"),
        "empty": "",
    }
    # -- simplejson: True as a key dumps as "True"; the test patch adds a test to test_dump.py.
    p = projects[2]
    p.test_cmd = "python -m unittest -v"
    apply(sj, edit(sj, "simplejson/encoder.py", "key = 'true'", "key = 'True'"))
    p.test_patch = edit(
        sj,
        "simplejson/tests/test_dump.py",
        "    def test_encode_truefalse(self):",
        "    def test_true_key(self):\n        self.assertEqual(json.dumps({True: 1}), '{\"true\": 1}')\n\n"
        "    def test_encode_truefalse(self):",
    )
    p.patches = {
        "gold": edit(sj, "simplejson/encoder.py", "key = 'True'", "key = 'true'"),
        "wrong": edit(sj, "simplejson/encoder.py", "key = 'True'", "key = 'TRUE'"),
        "p2p_breaking": edit(
            sj,
            "simplejson/encoder.py",
            "key = 'True'\n        elif key is False:\n            key = 'false'",
            "key = 'true'\n        elif key is False:\n            key = 'False'",
        ),
        "tamper_init": edit(
            sj, "simplejson/tests/__init__.py", "import unittest\n", "import unittest\n" + CHEAT_UNITTEST
        ),
        "tamper_sitecustomize": udiff("sitecustomize.py", None, CHEAT_UNITTEST),
        "empty": "",
    }
    sympy = projects[1].patches
    sympy["gold_plus_sitecustomize"] = sympy["gold"] + sympy.pop("tamper_sitecustomize")
    return projects


def apply(repo: Path, patch: str) -> None:
    subprocess.run(["git", "apply", "-"], input=patch, text=True, cwd=repo, check=True)


def plain_run(project: Project, python: str, patch: str, swe_python: str) -> tuple[dict[str, str], float]:
    """SWE-bench's command on a copy with ``patch`` then the test patch (its files first
    reset, as SWE-bench checks them out afresh), its log read by SWE-bench's parser."""
    from aexec._runners import patch_paths

    with tempfile.TemporaryDirectory(prefix="aexec-plain-") as d:
        work = Path(d) / "repo"
        shutil.copytree(project.repo, work, symlinks=True)
        if patch:
            apply(work, patch)
        for path in patch_paths(project.test_patch):
            if (project.repo / path).exists():
                shutil.copy(project.repo / path, work / path)
        apply(work, project.test_patch)
        env = dict(os.environ, PYTHONPATH=str(work), PYTHONHASHSEED="0")
        if (work / "sitecustomize.py").exists():
            env["PYTHONPATH"] += os.pathsep  # the repo root is on the path: it is imported
        started = time.perf_counter()
        done = subprocess.run(
            project.command(python, project.directives()),
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        took = time.perf_counter() - started
    log = done.stdout + done.stderr
    code = (
        "import json, sys\nfrom swebench.harness.log_parsers.python import " + project.parser + " as parse\n"
        "print(json.dumps(parse(sys.stdin.read(), None)))\n"
    )
    parsed = subprocess.run([swe_python, "-c", code], input=log, capture_output=True, text=True, check=True)
    return json.loads(parsed.stdout), took


def swe_grade(swe_python: str, status: dict[str, str], f2p: list[str], p2p: list[str]) -> dict[str, object]:
    """SWE-bench's own grading of a parsed log (``get_eval_tests_report``, ``get_resolution_status``)."""
    code = (
        "import json, sys\nfrom swebench.harness.grading import get_eval_tests_report, get_resolution_status\n"
        "from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS\n"
        "status, f2p, p2p = json.load(sys.stdin)\n"
        "report = get_eval_tests_report(status, {FAIL_TO_PASS: f2p, PASS_TO_PASS: p2p})\n"
        "print(json.dumps({'report': report, 'resolution': get_resolution_status(report)}))\n"
    )
    done = subprocess.run(
        [swe_python, "-c", code],
        input=json.dumps([status, f2p, p2p]),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--swebench-python", required=True, help="an interpreter with swebench installed")
    parser.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "aexec-runners-corpus"))
    args = parser.parse_args()
    out = Path(args.out)
    python = fetch()
    projects = build(out)
    instances, predictions, expected = [], [], {}
    plain_total = 0.0
    for n, p in enumerate(projects):
        before, _ = plain_run(p, python, "", args.swebench_python)
        after, _ = plain_run(p, python, p.patches["gold"], args.swebench_python)
        f2p = sorted(
            t for t, s in after.items() if s == "PASSED" and before.get(t) in (None, "FAILED", "ERROR")
        )
        p2p = sorted(t for t, s in after.items() if s == "PASSED" and before.get(t) == "PASSED")
        for k, (kind, patch) in enumerate(p.patches.items()):
            ident = f"{p.swe_repo.replace('/', '__')}-{9000 + 10 * n + k}"
            instance = {
                "instance_id": ident,
                "repo": str(p.repo),
                "python": python,
                "test_patch": p.test_patch,
                "FAIL_TO_PASS": json.dumps(f2p),
                "PASS_TO_PASS": json.dumps(p2p),
            }
            if p.test_cmd:
                instance["test_cmd"] = p.test_cmd
            instances.append(instance)
            predictions.append({"instance_id": ident, "model_name_or_path": kind, "model_patch": patch})
            if not patch:
                expected[ident] = (p.name, kind, "empty", {}, 0.0)
                continue
            status, took = plain_run(p, python, patch, args.swebench_python)
            plain_total += took
            graded = swe_grade(args.swebench_python, status, f2p, p2p)
            expected[ident] = (p.name, kind, graded["resolution"], graded["report"], took)
    (out / "instances.json").write_text(json.dumps(instances, indent=1))
    (out / "predictions.json").write_text(json.dumps(predictions, indent=1))
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "aexec",
            "swebench",
            str(out / "predictions.json"),
            str(out / "instances.json"),
            "-o",
            str(out / "report.json"),
            "--no-cache",
        ],
        check=True,
    )
    aexec_total = time.perf_counter() - started
    report = json.loads((out / "report.json").read_text())
    agree = stricter = 0
    print(f"{'project':<11} {'prediction':<21} {'SWE-bench':<16} {'aexec':<11} {'tests agree':<11} plain s")
    for ident, (project, kind, resolution, swe_report, took) in expected.items():
        mine = report["instances"].get(ident, {})
        ours = (
            "empty"
            if ident in report["empty_patch_ids"]
            else "resolved"
            if mine.get("resolved")
            else "unresolved"
        )
        if mine.get("flags", {}).get("tampered"):
            ours += " (tampered)"
        theirs = {"RESOLVED_FULL": "resolved", "empty": "empty"}.get(str(resolution), "unresolved")
        same_tests = True
        if swe_report and mine.get("tests_status"):
            for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
                want = swe_report[key]  # type: ignore[index]
                got = mine["tests_status"][key]
                same_tests &= sorted(want["success"]) == sorted(got["success"])
        agree += theirs == ours.split()[0]
        stricter += theirs == "resolved" and ours == "unresolved (tampered)"
        print(f"{project:<11} {kind:<21} {theirs:<16} {ours:<11} {same_tests!s:<11} {took:.2f}")
    print(
        f"agreement on resolution: {agree}/{len(expected)}; aexec stricter (a tampering SWE-bench"
        f" resolves, aexec calls tampered): {stricter}; other disagreements: {len(expected) - agree - stricter}"
    )
    print(
        f"wall: plain runs {plain_total:.1f} s (one run each), aexec swebench {aexec_total:.1f} s (all, with before-runs and re-runs)"
    )


if __name__ == "__main__":
    main()
