"""SWE-bench's ``pre_install`` / ``eval_commands`` read as data (issue 30): the ``sed``
edits of setup files parsed and applied as GNU sed does, and real spec entries
(copied from swebench 4.1.0's ``MAP_REPO_VERSION_TO_SPECS``) classified."""

from __future__ import annotations

from typing import Any

import pytest

from aexec._environments.edits import EditError, apply, included, parse, repinned, without_pins
from aexec._environments.spec import EnvSpec, from_json
from aexec._environments.swebench import Table, build_notes, from_spec, lookup
from aexec._errors import RequestError

SPHINX_SETUP = """install_requires = [
    'sphinxcontrib-applehelp',
    'sphinxcontrib-htmlhelp>=2.0.0',
    'Jinja2>=2.3',
    'alabaster>=0.7,<0.8',
    'packaging',
]
"""
SPHINX_41 = {
    "install": "python -m pip install -e .[test]",
    "pip_packages": ["tox==4.16.0", "tox-current-env==0.0.11", "Jinja2==3.0.3"],
    "pre_install": [
        "sed -i 's/pytest/pytest -rA/' tox.ini",
        "sed -i 's/Jinja2>=2.3/Jinja2<3.0/' setup.py",
        "sed -i 's/sphinxcontrib-applehelp/sphinxcontrib-applehelp<=1.0.7/' setup.py",
        "sed -i 's/sphinxcontrib-devhelp/sphinxcontrib-devhelp<=1.0.5/' setup.py",
        "sed -i 's/sphinxcontrib-qthelp/sphinxcontrib-qthelp<=1.0.6/' setup.py",
        "sed -i 's/alabaster>=0.7,<0.8/alabaster>=0.7,<0.7.12/' setup.py",
        "sed -i \"s/'packaging',/'packaging', 'markupsafe<=2.0.1',/\" setup.py",
        "grep -q 'sphinxcontrib-htmlhelp>=2.0.0' setup.py && sed -i "
        "'s/sphinxcontrib-htmlhelp>=2.0.0/sphinxcontrib-htmlhelp>=2.0.0,<=2.0.4/' setup.py || sed "
        "-i 's/sphinxcontrib-htmlhelp/sphinxcontrib-htmlhelp<=2.0.4/' setup.py",
    ],
    "python": "3.9",
    "test_cmd": "tox --current-env -epy39 -v --",
}
SPHINX_72 = {
    **SPHINX_41,
    "pre_install": ["sed -i 's/pytest/pytest -rA/' tox.ini", "apt-get update && apt-get install -y graphviz"],
}
PYTEST_63 = {
    "install": "python -m pip install -e .",
    "pip_packages": ["attrs==23.1.0", "iniconfig==2.0.0", "packaging==23.1", "pluggy==0.13.1"],
    "pre_install": ["sed -i 's/>=>=/>=/' setup.cfg"],
    "python": "3.9",
    "test_cmd": "pytest -rA",
}
DJANGO_30 = {
    "eval_commands": [
        "sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen",
        "export LANG=en_US.UTF-8",
        "export LANGUAGE=en_US:en",
        "export LC_ALL=en_US.UTF-8",
    ],
    "install": "python -m pip install -e .",
    "packages": "requirements.txt",
    "python": "3.6",
    "test_cmd": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
}
DJANGO_22 = {
    "eval_commands": [
        "export LANG=en_US.UTF-8",
        "export LC_ALL=en_US.UTF-8",
        "export PYTHONIOENCODING=utf8",
        "export LANGUAGE=en_US:en",
    ],
    "install": "python setup.py install",
    "packages": "requirements.txt",
    "pip_packages": ["setuptools"],
    "pre_install": [
        "apt-get update && apt-get install -y locales",
        "echo 'en_US UTF-8' > /etc/locale.gen",
        "locale-gen en_US.UTF-8",
    ],
    "python": "3.5",
    "test_cmd": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
}
MATPLOTLIB_35 = {
    "install": "python -m pip install -e .",
    "packages": "environment.yml",
    "pre_install": [
        "apt-get -y update && apt-get -y upgrade && DEBIAN_FRONTEND=noninteractive apt-get install "
        "-y imagemagick ffmpeg texlive dvipng",
        'QHULL_URL="http://www.qhull.org/download/qhull-2020-src-8.0.2.tgz"',
        'QHULL_TAR="/tmp/qhull-2020-src-8.0.2.tgz"',
        'wget -O "$QHULL_TAR" "$QHULL_URL"',
    ],
    "python": "3.11",
    "test_cmd": "pytest -rA",
}
ASTROPY_SED = 'sed -i \'s/requires = \\["setuptools",/requires = \\["setuptools==68.0.0",/\' pyproject.toml'


def test_sed_edits_of_setup_files_are_applied_as_gnu_sed_does() -> None:
    commands = [c for c in SPHINX_41["pre_install"] if "setup.py" in c]
    got = apply(commands, "setup.py", SPHINX_SETUP.encode()).decode()
    assert got == (
        "install_requires = [\n"
        "    'sphinxcontrib-applehelp<=1.0.7',\n"
        "    'sphinxcontrib-htmlhelp>=2.0.0,<=2.0.4',\n"
        "    'Jinja2<3.0',\n"
        "    'alabaster>=0.7,<0.7.12',\n"
        "    'packaging', 'markupsafe<=2.0.1',\n"
        "]\n"
    )
    # The grep -q guard fails: the `||` branch runs instead.
    older = apply(commands[-1:], "setup.py", b"    'sphinxcontrib-htmlhelp',\n").decode()
    assert older == "    'sphinxcontrib-htmlhelp<=2.0.4',\n"
    assert apply(commands, "tox.ini", b"pytest\n") == b"pytest\n"  # another file: untouched
    cfg = b"install_requires =\n\tpluggy>=>=0.12\n\tpy>=1.8.2\n"
    assert (
        apply(PYTEST_63["pre_install"], "setup.cfg", cfg)
        == b"install_requires =\n\tpluggy>=0.12\n\tpy>=1.8.2\n"
    )
    toml = b'[build-system]\nrequires = ["setuptools",\n            "wheel"]\n'
    assert apply([ASTROPY_SED], "pyproject.toml", toml).startswith(
        b'[build-system]\nrequires = ["setuptools==68.0.0",'
    )


def test_sed_regex_groups_ampersand_first_match_and_g() -> None:
    assert (
        apply(["sed -i 's/a\\(b*\\)c/<&|\\1>/' setup.py"], "setup.py", b"xabbc abc\n") == b"x<abbc|bb> abc\n"
    )
    assert apply(["sed -i 's/a.c/X/g' setup.py"], "setup.py", b"abc a-c\nadc\n") == b"X X\nX\n"
    assert (
        apply(["sed -i 's|^v = 1$|v = 2|' setup.cfg"], "setup.cfg", b"v = 1\nv = 10\n") == b"v = 2\nv = 10\n"
    )
    assert apply(["sed -i 's/x+[0-9]/y/' setup.py"], "setup.py", b"xx+1 x1\n") == b"xy x1\n"


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("apt-get update && apt-get install -y graphviz", "not `grep -q X FILE && sed"),
        ("sed -i 's/a/b/' setup.py; rm -rf /", "not a plain sed edit"),
        ("sed -i 's/a/b/' $(echo setup.py)", "not a plain sed edit"),
        ("sed -i 's/a/b/' /etc/locale.gen", "outside the repo"),
        ("sed -i 's/a/b/' ../setup.py", "outside the repo"),
        ("sed -i '/en_US/s/^# //g' setup.py", "is not one s/pattern/replacement/"),
        ("sed -i 's/a/b/2' setup.py", "only s/pattern/replacement/ and its g flag"),
        ("sed -i 's/[[:alpha:]]/b/' setup.py", "a bracket expression that is not read"),
        ("sed 's/a/b/' setup.py", "not `sed -i 's/A/B/' FILE`"),
    ],
)
def test_anything_but_a_sed_edit_is_refused_saying_why(command: str, message: str) -> None:
    with pytest.raises(EditError, match=None) as e:
        parse(command)
    assert message in str(e.value)


def test_a_requests_edits_are_checked_and_keyed() -> None:
    spec = from_json({"python": "3.9", "edits": ["sed -i 's/Jinja2>=2.3/Jinja2<3.0/' setup.py"]})
    assert spec.edits == ("sed -i 's/Jinja2>=2.3/Jinja2<3.0/' setup.py",)
    assert spec.as_json()["edits"] == list(spec.edits) and "edits" not in EnvSpec("3.9").as_json()
    with pytest.raises(RequestError, match=r"environment.edits\[0\] edits 'tox.ini': only the setup files"):
        EnvSpec("3.9", edits=("sed -i 's/pytest/pytest -rA/' tox.ini",))
    with pytest.raises(RequestError, match=r"environment.edits\[0\]: not a plain sed edit"):
        from_json({"python": "3.9", "edits": ["sed -i 's/a/b/' setup.py; reboot"]})


def _unsupported(repo: str, spec: dict[str, Any]) -> str | None:
    return from_spec(repo, spec).unsupported()


def test_real_spec_entries_with_harmless_pre_install_are_supported() -> None:
    sphinx = from_spec("sphinx-doc/sphinx", SPHINX_41)
    assert sphinx.unsupported() is None and sphinx.extras == ("test",)
    assert sphinx.edits == tuple(SPHINX_41["pre_install"][1:])  # tox.ini's -rA: nothing to do
    # SWE-bench installs the repo after pip_packages: setup.py's edited Jinja2<3.0 wins.
    # And setuptools with pkg_resources, as SWE-bench's conda environments have it.
    assert sphinx.packages == ("tox==4.16.0", "tox-current-env==0.0.11", "setuptools<81")
    pytest63 = from_spec("pytest-dev/pytest", PYTEST_63)
    assert pytest63.unsupported() is None and pytest63.edits == ("sed -i 's/>=>=/>=/' setup.cfg",)
    table = Table({"django/django": {"3.0": DJANGO_30}}, {"django/django": ("tests/requirements/py3.txt",)})
    django = lookup(table, "django/django", "3.0")
    assert django.environment.unsupported() is None
    assert django.environment.requirements == ("tests/requirements/py3.txt",)
    assert django.note is not None and "LANG=en_US.UTF-8" in django.note and "C.UTF-8" in django.note


def test_real_spec_entries_that_need_more_say_what_in_one_line() -> None:
    assert _unsupported("sphinx-doc/sphinx", SPHINX_72) is None  # graphviz: apt, in the env
    pylint28 = {
        **PYTEST_63,
        "pre_install": ["apt-get update && apt-get install -y libenchant-2-dev hunspell-en-us"],
    }
    assert "enchant-2 alone" in (_unsupported("pylint-dev/pylint", pylint28) or "")
    assert from_spec("sphinx-doc/sphinx", SPHINX_72).apt == ("graphviz",)
    assert _unsupported("django/django", DJANGO_22) == (
        "Python 3.5: aexec's driver runs on Python 3.6 or later"
    )
    # matplotlib (issue 43): its Qhull download is Debian's libqhull-dev, its build links
    # Debian's FreeType; TeX Live and dvipng are left out (unpacked, TeX has no formats).
    mpl = from_spec("matplotlib/matplotlib", {**MATPLOTLIB_35, "packages": "numpy"})
    assert mpl.unsupported() is None and mpl.inplace
    # imagemagick's Ghostscript: apt-get install -y brings it (a recommends) in SWE-bench's image
    assert mpl.apt == (
        "imagemagick",
        "ghostscript",
        "ffmpeg",
        "libqhull-dev",
        "libfreetype-dev",
        "pkg-config",
    )
    notes = build_notes(MATPLOTLIB_35)
    assert len(notes) == 2 and "usetex tests skip" in notes[0] and "FreeType 2.6.1" in notes[1]
    assert from_spec("matplotlib/matplotlib", MATPLOTLIB_35).system == (
        "conda: no environment.yml in the checkout",
    )
    other = {**PYTEST_63, "eval_commands": ["export DJANGO_SETTINGS=x"]}
    assert "eval_commands sets DJANGO_SETTINGS=x" in (_unsupported("pytest-dev/pytest", other) or "")
    tox = {**PYTEST_63, "pre_install": ["sed -i 's/py37/py39/' tox.ini"]}
    assert "pre_install edits tox.ini" in (_unsupported("pytest-dev/pytest", tox) or "")


def test_a_pinned_package_replaces_the_requirement_files_line_for_it() -> None:
    """SWE-bench installs ``pip_packages`` after ``requirements.txt``: their pins win."""
    assert repinned(["MarkupSafe==2.1.3", "setuptools<81", "tox", "x[y]>=1; python_version>'3'"]) == {
        "markupsafe",
        "setuptools",
        "x",
    }
    text = "-r tests.txt\nmarkupsafe==2.0.1  # via jinja2\njinja2==3.0.1\n# markupsafe\n-c constraints.txt\n"
    assert without_pins(text, {"markupsafe"}) == (
        "-r tests.txt\n# (aexec: `packages` pins it) markupsafe==2.0.1  # via jinja2\n"
        "jinja2==3.0.1\n# markupsafe\n-c constraints.txt\n"
    )
    assert included(text) == ["tests.txt", "constraints.txt"]


def test_an_edit_of_the_build_requires_keeps_the_environments_pin() -> None:
    # astropy 4.3-5.2: pip_packages pin setuptools==68.0.0 (SWE-bench's environment has it)
    # and pre_install pins pyproject.toml's [build-system] requires to it. The edit pins the
    # build only: the environment keeps setuptools==68.0.0 (whose setuptools.dep_util
    # astropy's setup_package.py imports), not the `setuptools<81` default.
    spec = {
        "python": "3.9",
        "install": "python -m pip install -e .[test] --verbose",
        "pip_packages": ["numpy==1.25.2", "setuptools==68.0.0"],
        "pre_install": [ASTROPY_SED],
    }
    astropy = from_spec("astropy/astropy", spec)
    assert astropy.packages == ("numpy==1.25.2", "setuptools==68.0.0")
    assert astropy.edits == (ASTROPY_SED,) and astropy.inplace


def test_a_bare_conda_name_on_python_36_is_what_conda_built_for_it() -> None:
    # scikit-learn 0.20-0.22: conda's `cython` on Python 3.6 is 0.29.x (PyPI's Cython 3
    # cannot compile their .pyx); pip_packages' bare `cython` is then already satisfied.
    spec = {
        "python": "3.6",
        "packages": "numpy scipy cython pytest pandas matplotlib",
        "install": "python -m pip install -v --no-use-pep517 --no-build-isolation -e .",
        "pip_packages": ["cython", "numpy==1.19.2", "setuptools", "scipy==1.5.2"],
    }
    sklearn = from_spec("scikit-learn/scikit-learn", spec)
    assert sklearn.packages[:3] == ("numpy", "scipy", "cython<3") and sklearn.inplace
    assert "cython<3" not in from_spec("scikit-learn/scikit-learn", {**spec, "python": "3.9"}).packages


def test_a_conda_pin_with_no_wheel_for_the_python_is_its_next_patch_release() -> None:
    # scikit-learn 1.3: conda has numpy 1.19.2 and scipy 1.5.2 for Python 3.9, PyPI only
    # sdists (their 1.19.3 and 1.5.4 are the first with cp39 wheels).
    spec = {
        "python": "3.9",
        "packages": "'numpy==1.19.2' 'scipy==1.5.2' 'cython==3.0.10' pytest 'pandas<2.0.0'",
        "install": "python -m pip install -v --no-use-pep517 --no-build-isolation -e .",
        "pip_packages": ["cython", "setuptools", "numpy", "scipy"],
    }
    sklearn = from_spec("scikit-learn/scikit-learn", spec)
    assert sklearn.packages[:3] == ("numpy==1.19.3", "scipy==1.5.4", "cython==3.0.10")
