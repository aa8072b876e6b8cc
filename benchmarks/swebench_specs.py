"""``aexec swebench --specs swebench`` over SWE-bench's own spec table (issue 30's held-out set).

1. Every Python (repo, version) of swebench 4.1.0's ``MAP_REPO_VERSION_TO_SPECS``, read
   as ``--specs swebench`` reads it: supported, or the one-line reason it is not (a
   Python the machine lacks included).
2. Real environments built through ``--specs swebench`` from PyPI sdists standing in for
   checkouts (their tests ship in them), at the SWE-bench ``version`` of their release;
   each graded end to end with two predictions: *gold* (defines the function the
   instance's ``test_patch`` tests) and *wrong* (defines it wrong). The test patch adds
   a FAIL_TO_PASS test and a PASS_TO_PASS test that uses the environment (Django's
   templates and its test requirements, a sphinx HTML build with its Jinja2, pytest's
   own ``src/`` imported, sympy's runner).

Run (needs ``swebench`` installed: ``pip install 'aexec[swebench]'``):
``python benchmarks/swebench_specs.py [WORKDIR]``; writes ``benchmarks/swebench_specs.json``
and prints the tables of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from _sdists import GOLD, WRONG, aexec, checkout, diff, help_asked
from aexec._environments.interpreters import find_interpreters
from aexec._environments.spec import pick_interpreter
from aexec._environments.swebench import load_table, lookup

HERE = Path(__file__).resolve().parent

PYTEST_TEST = """\
from {module} import aexec_answer


def test_gold():
    assert aexec_answer() == 42


def test_env():
{env}
"""
DJANGO_TEST = """\
from django.template import Context, Template
from django.test import SimpleTestCase
from django.utils.text import aexec_answer, slugify


class AexecGoldTests(SimpleTestCase):
    def test_gold(self):
        self.assertEqual(aexec_answer(), 42)

    def test_env(self):
        import sqlparse, yaml  # tests/requirements/py3.txt
        self.assertEqual(Template("{{ x|upper }}").render(Context({"x": "é"})), "É")
        self.assertEqual(slugify("Hello World"), "hello-world")
        self.assertTrue(sqlparse.format("select 1") and yaml.safe_load("a: 1") == {"a": 1})
"""
SPHINX_ENV = """\
    from sphinx.testing.util import SphinxTestApp
    from sphinx.testing.path import path
    import tempfile, shutil, os
    src = path(tempfile.mkdtemp())
    (src / "conf.py").write_text("project = 'x'\\n")
    (src / "index.rst").write_text("Title\\n=====\\n\\nHello *world*.\\n")
    app = SphinxTestApp("html", srcdir=src)
    app.build()
    assert "Hello" in (app.outdir / "index.html").read_text()
    app.cleanup()
"""
#: (SWE-bench repo, version, sdist, module that gets the function, new test file, runner kind)
CASES: list[tuple[str, str, str, str, str, str]] = [
    (
        "django/django",
        "3.0",
        "Django==3.0.14",
        "django/utils/text.py",
        "tests/utils_tests/test_aexec.py",
        "django",
    ),
    (
        "django/django",
        "3.2",
        "Django==3.2.25",
        "django/utils/text.py",
        "tests/utils_tests/test_aexec.py",
        "django",
    ),
    (
        "django/django",
        "4.0",
        "Django==4.0.10",
        "django/utils/text.py",
        "tests/utils_tests/test_aexec.py",
        "django",
    ),
    ("sphinx-doc/sphinx", "3.5", "Sphinx==3.5.4", "sphinx/util/rst.py", "tests/test_aexec.py", "sphinx"),
    ("sphinx-doc/sphinx", "4.1", "Sphinx==4.1.2", "sphinx/util/rst.py", "tests/test_aexec.py", "sphinx"),
    ("sphinx-doc/sphinx", "4.2", "Sphinx==4.2.0", "sphinx/util/rst.py", "tests/test_aexec.py", "sphinx"),
    ("sphinx-doc/sphinx", "5.0", "Sphinx==5.0.2", "sphinx/util/rst.py", "tests/test_aexec.py", "sphinx"),
    ("sphinx-doc/sphinx", "7.1", "Sphinx==7.1.2", "sphinx/util/rst.py", "tests/test_aexec.py", "sphinx"),
    ("pytest-dev/pytest", "5.4", "pytest==5.4.3", "src/_pytest/compat.py", "testing/test_aexec.py", "pytest"),
    ("pytest-dev/pytest", "6.2", "pytest==6.2.5", "src/_pytest/compat.py", "testing/test_aexec.py", "pytest"),
    ("pytest-dev/pytest", "7.1", "pytest==7.1.3", "src/_pytest/compat.py", "testing/test_aexec.py", "pytest"),
    ("psf/requests", "2.26", "requests==2.26.0", "requests/utils.py", "tests/test_aexec.py", "plain"),
    ("pallets/flask", "2.0", "Flask==2.0.3", "src/flask/helpers.py", "tests/test_aexec.py", "plain"),
    (
        "sympy/sympy",
        "1.12",
        "sympy==1.12",
        "sympy/utilities/misc.py",
        "sympy/utilities/tests/test_aexec.py",
        "sympy",
    ),
]


def classify() -> list[dict[str, Any]]:
    """Every Python (repo, version) of the table: supported, or why not."""
    from swebench.harness.constants.python import MAP_REPO_VERSION_TO_SPECS_PY

    table, found = load_table(), find_interpreters()
    rows = []
    for repo, versions in MAP_REPO_VERSION_TO_SPECS_PY.items():
        for version in versions:
            env = lookup(table, repo, version).environment
            reason = env.unsupported()
            if reason is None and pick_interpreter(env.python, found) is None:
                reason = f"Python {env.python}: not on this machine"
            rows.append({"repo": repo, "version": version, "python": env.python, "unsupported": reason})
    return rows


def _instance(
    repo: Path, case: tuple[str, str, str, str, str, str], n: int
) -> tuple[dict[str, Any], dict[str, str]]:
    name, version, _, module, test, kind = case
    ident = f"{name.replace('/', '__')}-{n}"
    dotted = module.removeprefix("src/").removesuffix(".py").replace("/", ".")
    if kind == "django":
        body = DJANGO_TEST
        label = test.removeprefix("tests/").removesuffix(".py").replace("/", ".")
        f2p = [f"test_gold ({label}.AexecGoldTests)"]
        p2p = [f"test_env ({label}.AexecGoldTests)"]
    elif kind == "sympy":
        body = PYTEST_TEST.format(
            module=dotted,
            env="    from sympy import symbols, expand\n    x = symbols('x')\n    assert expand((x + 1) ** 2) == x**2 + 2*x + 1\n",
        )
        f2p, p2p = ["test_gold"], ["test_env"]
    else:
        env = {
            "sphinx": SPHINX_ENV,
            "pytest": "    import _pytest, os\n    assert 'site-packages' not in os.path.abspath(_pytest.__file__)\n",
            "plain": f"    import {dotted.split('.')[0]} as m, os\n    assert 'site-packages' not in os.path.abspath(m.__file__)\n",
        }[kind]
        body = PYTEST_TEST.format(module=dotted, env=env)
        f2p, p2p = [f"{test}::test_gold"], [f"{test}::test_env"]
    text = (repo / module).read_text()
    instance = {
        "instance_id": ident,
        "repo": str(repo),
        "version": version,
        "test_patch": diff(test, None, body),
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "timeout_s": 600,
    }
    patches = {"gold": diff(module, text, text + GOLD), "wrong": diff(module, text, text + WRONG)}
    return instance, patches


def measure(work: Path) -> list[dict[str, Any]]:
    work.mkdir(parents=True, exist_ok=True)
    instances, preds = [], []
    for n, case in enumerate(CASES, 1):
        repo = Path(checkout(str(work), case[2]))
        inst, patches = _instance(repo, case, n)
        for which, patch in patches.items():
            ident = f"{inst['instance_id']}{'0' if which == 'gold' else '1'}"
            instances.append({**inst, "instance_id": ident})
            preds.append({"instance_id": ident, "model_name_or_path": which, "model_patch": patch})
    (work / "instances.json").write_text(json.dumps(instances, indent=1))
    (work / "preds.json").write_text(json.dumps(preds, indent=1))
    root = work / "envs"
    build_s, built = aexec(
        "env",
        "build",
        str(work / "instances.json"),
        "--specs",
        "swebench",
        "--env-dir",
        str(root),
        "--jobs",
        "1",
        root=str(root),
    )
    (work / "build.log").write_text(built.stderr)
    grade_s, graded = aexec(
        "swebench",
        str(work / "preds.json"),
        str(work / "instances.json"),
        "-o",
        str(work / "report.json"),
        "--specs",
        "swebench",
        "--no-cache",
        root=str(root),
    )
    (work / "grade.log").write_text(graded.stderr)
    report = json.loads((work / "report.json").read_text())
    rows = []
    for case, n in zip(CASES, range(1, len(CASES) + 1), strict=True):
        dirname = Path(checkout(str(work), case[2])).name
        line = next((ln for ln in built.stderr.splitlines() if f": {dirname} (Python" in ln), "")
        m = re.search(r"built in ([0-9.]+) s", line)
        ident = f"{case[0].replace('/', '__')}-{n}"
        detail = {w: report["instances"].get(f"{ident}{i}", {}) for i, w in enumerate(("gold", "wrong"))}
        rows.append(
            {
                "repo": case[0],
                "version": case[1],
                "sdist": dirname,
                "build": line.split(": ", 1)[-1].strip() if line else "?",
                "cold_s": float(m.group(1)) if m else None,
                "gold": detail["gold"].get("verdict"),
                "gold_error": detail["gold"].get("error"),
                "gold_resolved": detail["gold"].get("resolved"),
                "wrong": detail["wrong"].get("verdict"),
                "wrong_error": detail["wrong"].get("error"),
                "wrong_resolved": detail["wrong"].get("resolved"),
                "runner_reason": detail["gold"].get("runner_reason"),
            }
        )
    print(f"build {build_s:.0f} s, grade {grade_s:.0f} s", file=sys.stderr)
    return rows


def main() -> None:
    if help_asked(__doc__, sys.argv[1:]):
        return
    work = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/aexec-swebench-specs")
    rows = classify()
    measured = measure(work)
    (HERE / "swebench_specs.json").write_text(
        json.dumps({"specs": rows, "measured": measured}, indent=1) + "\n"
    )
    by_repo: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        by_repo.setdefault(r["repo"], {}).setdefault(r["unsupported"] or "supported", []).append(r["version"])
    print("| repo | versions | supported, or why not |\n|---|---|---|")
    for repo, reasons in by_repo.items():
        for reason, versions in reasons.items():
            print(f"| {repo} | {', '.join(versions)} | {reason} |")
    ok = sum(1 for r in rows if r["unsupported"] is None)
    print(f"\n{ok} of {len(rows)} Python specs supported\n")
    print(
        "| SWE-bench spec | sdist | Python | cold s | own MiB | gold | wrong |\n|---|---|---|---|---|---|---|"
    )
    for m in measured:
        python = re.search(r"\(Python ([0-9.]+)\)", m["build"])
        own = re.search(r"([0-9.]+) MiB of its own", m["build"])
        cold = (
            f"{m['cold_s']:.1f}" if m["cold_s"] is not None else ("cached" if "cached" in m["build"] else "–")
        )
        said = [
            f"{m[w]}, {'resolved' if m[w + '_resolved'] else 'unresolved'}"
            + (f" ({m[w + '_error'][:80]})" if m[w + "_error"] else "")
            for w in ("gold", "wrong")
        ]
        print(
            f"| {m['repo']} {m['version']} | {m['sdist']} | {python.group(1) if python else '?'} | {cold}"
            f" | {own.group(1) if own else '–'} | {said[0]} | {said[1]} |"
        )


if __name__ == "__main__":
    main()
