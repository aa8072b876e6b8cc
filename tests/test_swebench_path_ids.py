"""Issue 39, defect 4: SWE-bench's names for parametrized tests whose parameter is a path.

SWE-bench grades pylint, requests and pydicom with ``parse_log_pytest_options``, which
names ``test_stdin[/tmp/x/mymodule.py]`` ``test_stdin[/mymodule.py]``; their
FAIL_TO_PASS and PASS_TO_PASS lists carry those names (pylint-6528's
``tests/test_self.py::TestRunTC::test_stdin[/mymodule.py]``). aexec resolves an expected
id by the instance's repo's own parser rule.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from aexec import Candidate
from aexec._records import ExpectedFailures
from aexec._records import TestResult as Result
from aexec._runners import ids_of_instance
from aexec._serde import candidate as from_json
from aexec._stages.grade import grade, matches, swebench_id, unmatched

from .test_swebench import diff_of, make_git_repo, run_swebench


@pytest.mark.parametrize(
    ("pytest_id", "name"),
    [
        ("t.py::C::test_stdin[/tmp/aexec-1/work/tests/mymodule.py]", "t.py::C::test_stdin[/mymodule.py]"),
        ("t.py::f[/tmp/x/a.py-b-3]", "t.py::f[/a.py-b-3]"),  # the whole parameter string
        ("t.py::f[/tmp/x/]", "t.py::f[/]"),
        ("t.py::f[mymodule.py]", "t.py::f[mymodule.py]"),  # not absolute
        ("t.py::f[//host/share/a]", "t.py::f[//host/share/a]"),  # two slashes: kept
        ("t.py::f[/tmp/*.py]", "t.py::f[/tmp/*.py]"),  # a glob: kept
        ("t.py::f[a-/tmp/x.py]", "t.py::f[a-/tmp/x.py]"),  # the path is not first
        ("t.py::f", "t.py::f"),
        ("t.py::f[/a/b", "t.py::f[/a/b"),  # cut short: no closing bracket
    ],
)
def test_the_pytest_options_name_of_an_id(pytest_id: str, name: str) -> None:
    assert swebench_id(pytest_id, "pytest_options") == name
    assert swebench_id(pytest_id, "pytest") == pytest_id


def test_the_matplotlib_name_of_an_id() -> None:
    """``parse_log_matplotlib`` writes ``MouseButton.LEFT`` as ``1``, ``.RIGHT`` as ``3``."""
    ran = "lib/matplotlib/tests/test_widgets.py::test_x[MouseButton.LEFT-MouseButton.RIGHT]"
    name = "lib/matplotlib/tests/test_widgets.py::test_x[1-3]"
    assert swebench_id(ran, "matplotlib") == name and swebench_id(ran, "pytest") == ran
    assert matches(name, [ran], "matplotlib") == [ran] and matches(name, [ran], "pytest") == []
    assert ids_of_instance("matplotlib__matplotlib-25311") == "matplotlib"


def test_each_repo_gets_its_own_parsers_names() -> None:
    for ident in ("pylint-dev__pylint-6528", "psf__requests-2317", "pydicom__pydicom-1694"):
        assert ids_of_instance(ident) == "pytest_options"
    for ident in ("pytest-dev__pytest-8399", "django__django-11099", "pylint-dev__astroid-1", "calc"):
        assert ids_of_instance(ident) == "pytest"


def test_an_id_resolves_by_its_repos_rule_only() -> None:
    ran = [
        Result("tests/test_self.py::C::test_stdin[/tmp/s/tests/mymodule.py]", "passed"),
        Result("tests/test_self.py::C::test_stdin[mymodule.py]", "passed"),
    ]
    expected = [
        "tests/test_self.py::C::test_stdin[/mymodule.py]",
        "tests/test_self.py::C::test_stdin[mymodule.py]",
    ]

    def graded(rule: str) -> Candidate:
        c, _ = from_json(
            {
                "request_type": "run_suite",
                "artifact_shape": "patch",
                "repo": "/r",
                "fail_to_pass": [],
                "pass_to_pass": expected,
                "test_ids": rule,
            }
        )
        return c

    assert grade(graded("pytest_options"), ran, tampered=False, error=False) == (True, ExpectedFailures())
    assert unmatched(graded("pytest_options"), ran) == ()
    # pytest's own names: the id names no test that ran
    assert grade(graded("pytest"), ran, tampered=False, error=False) == (
        False,
        ExpectedFailures((), tuple(expected[:1])),
    )
    # every test the name stands for must pass
    two = [*ran, Result("tests/test_self.py::C::test_stdin[/tmp/other/mymodule.py]", "failed")]
    assert grade(graded("pytest_options"), two, tampered=False, error=False)[0] is False
    with pytest.raises(ValueError, match="test_ids must be one of"):
        graded("pylint")


TEST_SELF = """\
import os

import pytest

from mylint import lint

HERE = os.path.abspath(os.path.dirname(__file__))
TMP = os.path.join("/tmp", "lint-input")


@pytest.mark.parametrize(
    "path", [os.path.join(HERE, "mymodule.py"), os.path.join(TMP, "input.py"), "mymodule.py"]
)
def test_stdin(path):
    assert lint(path) == os.path.basename(path) + ": ok"


def test_fixed():
    assert lint("") == "nothing"
"""

LINT = """\
import os


def lint(path):
    return "%s: ok" % os.path.basename(path)
"""


def test_swebench_resolves_a_path_parameter_by_pylints_names(tmp_path: Path) -> None:
    """``aexec swebench`` on a real repo whose test is parametrized by absolute paths (a
    tmp path; as pylint's, a path of the checkout: the same in a run and its confirming
    re-run, since the run works at one path of its view), graded with the names
    SWE-bench's pylint lists carry."""
    repo = make_git_repo(
        tmp_path / "mylint",
        {"mylint/__init__.py": LINT, "tests/test_self.py": TEST_SELF, "tests/mymodule.py": ""},
    )
    gold = diff_of(
        repo,
        {
            "mylint/__init__.py": LINT.replace(
                "    return", '    if not path:\n        return "nothing"\n    return'
            )
        },
    )
    p2p = [f"tests/test_self.py::test_stdin[{p}]" for p in ("/mymodule.py", "/input.py", "mymodule.py")]
    instances = [
        {
            "instance_id": ident,
            "repo": str(repo),
            "python": sys.executable,
            "FAIL_TO_PASS": json.dumps(["tests/test_self.py::test_fixed"]),
            "PASS_TO_PASS": json.dumps(p2p),
        }
        for ident in ("pylint-dev__pylint-1", "other__mylint-1")
    ]
    (tmp_path / "instances.json").write_text(json.dumps(instances))
    preds = [
        {"instance_id": i["instance_id"], "model_name_or_path": "m", "model_patch": gold} for i in instances
    ]
    (tmp_path / "preds.json").write_text(json.dumps(preds))
    out = tmp_path / "report.json"
    run_swebench(tmp_path / "preds.json", tmp_path / "instances.json", out)
    report = json.loads(out.read_text())
    pylint = report["instances"]["pylint-dev__pylint-1"]
    assert report["resolved_ids"] == ["pylint-dev__pylint-1"], pylint
    assert pylint["tests_status"]["PASS_TO_PASS"] == {"success": p2p, "failure": []}
    assert pylint["expected_unmatched"] == []
    # a repo SWE-bench parses with pytest's own names: the shortened name is no test's
    other = report["instances"]["other__mylint-1"]
    assert other["tests_status"]["PASS_TO_PASS"] == {"success": p2p[2:], "failure": p2p[:2]}
    assert [u["test"] for u in other["expected_unmatched"]] == p2p[:2]
