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
``python benchmarks/swebench_specs.py [WORKDIR] [--xarray CLONE] [--table-only]``; writes
``benchmarks/swebench_specs.json`` and prints the tables of ``docs/benchmarks.md``.
``--xarray CLONE`` (a clone of pydata/xarray with its history): each xarray version's
``environment.yml`` is read at the ``environment_setup_commit`` the dataset's instances
of that version name (`XARRAY_SETUP`), as ``--specs swebench`` reads it for an
instance; a version no instance names here (2023.07, 2024.05) at its release's tag.
``--table-only``: step 1 alone (step 2's rows are kept from the JSON).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from _sdists import GOLD, WRONG, aexec, checkout, diff, help_asked
from aexec._environments.commits import Files
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
#: SWE-bench's ``environment_setup_commit`` of each xarray version (every instance of a
#: version names the same one; from the dataset's rows).
XARRAY_SETUP = {
    "0.12": "1c198a191127c601d091213c4b3292a8bb3054e1",
    "0.18": "4f1e2d37b662079e830c9672400fabc19b44a376",
    "0.19": "df7646182b17d829fe9b2199aebf649ddb2ed480",
    "0.20": "8f42bfd3a5fd0b1a351b535be207ed4771b02c8b",
    "2022.03": "d7931f9014a26e712ff5f30c4082cf0261f045d3",
    "2022.06": "50ea159bfd0872635ebf4281e741f3c87f0bef6b",
    "2022.09": "087ebbb78668bdf5d2d41c3b2553e3f29ce75be1",
}
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


def classify(xarray: str | None = None) -> list[dict[str, Any]]:
    """Every Python (repo, version) of the table: supported, or why not (xarray's
    ``environment.yml`` read from the clone ``xarray``, where given)."""
    from swebench.harness.constants.python import MAP_REPO_VERSION_TO_SPECS_PY

    table, found = load_table(), find_interpreters()
    rows = []
    for repo, versions in MAP_REPO_VERSION_TO_SPECS_PY.items():
        for version in versions:
            files = None
            if repo == "pydata/xarray" and xarray is not None:
                tag = ["git", "-C", xarray, "rev-parse", f"v{version}.0^{{commit}}"]
                at = (
                    XARRAY_SETUP.get(version)
                    or subprocess.run(tag, capture_output=True, text=True).stdout.strip()
                )
                files = Files.at(xarray, at)
            entry = lookup(table, repo, version, files=files)
            env = entry.environment
            reason = env.unsupported()
            if reason is None and pick_interpreter(env.python, found) is None:
                reason = f"Python {env.python}: not on this machine"
            row = {"repo": repo, "version": version, "python": env.python, "unsupported": reason}
            if files is not None:
                row["read"] = f"at {files.commit[:12]}" if files.commit else "the clone's work tree"
                row["read"] += (
                    "" if version in XARRAY_SETUP else f" (tag v{version}.0: no setup commit known)"
                )
                row["packages"] = len(env.packages)
            rows.append(row)
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
    args = sys.argv[1:]
    xarray = args.pop(args.index("--xarray") + 1) if "--xarray" in args else None
    args = [a for a in args if a != "--xarray"]
    table_only = "--table-only" in args
    args = [a for a in args if a != "--table-only"]
    work = Path(args[0] if args else "/tmp/aexec-swebench-specs")
    rows = classify(xarray)
    if table_only:
        measured = json.loads((HERE / "swebench_specs.json").read_text())["measured"]
    else:
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
