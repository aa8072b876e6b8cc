"""Issue 30 goal 3 through SWE-bench's own specs: scikit-learn and astropy, end to end.

    python benchmarks/inplace_swebench.py WORKDIR [CASE ...]

Each case is a PyPI sdist standing in for a checkout at SWE-bench's ``version`` (the
sdist unpacked and committed), graded as ``aexec swebench --specs swebench`` grades a
real instance with no ``python``: ``aexec env build INSTANCES --specs swebench`` (cold,
then again: warm), then ``aexec swebench PREDS INSTANCES --specs swebench``. The
``test_patch`` adds a test module: ``test_gold`` (FAIL_TO_PASS) imports the answer the
gold patch defines, ``test_env`` (PASS_TO_PASS) runs a compiled extension from the copy.
Predictions: *gold* and *wrong* (a ``.py`` module: the base's build carried, no rebuild)
and, for ``pyx`` cases, *gold* and *wrong* in a Cython ``.pyx`` (rebuilt in the
candidate's copy under the boundary). Prints one JSON line per case.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from _sdists import GOLD, WRONG, aexec, checkout, diff, run_cases

TEST = """\
import os


def test_gold():
    from {module} import aexec_answer

    assert aexec_answer() == 42


def test_env():
    import {top} as m
{env}
    assert "site-packages" not in os.path.abspath(m.__file__)
"""

SKLEARN_ENV = """\
    from sklearn.utils.murmurhash import murmurhash3_32
    from sklearn.svm import LinearSVC

    assert murmurhash3_32("foo", 0) == -156908512
    assert LinearSVC().fit([[0.0], [1.0]], [0, 1]).predict([[1.0]])[0] == 1
"""
ASTROPY_ENV = """\
    import numpy as np
    from astropy.convolution import convolve

    assert np.allclose(convolve([0.0, 1.0, 0.0], [1.0, 1.0, 1.0]), [1 / 3, 1 / 3, 1 / 3])
"""

#: name -> (SWE-bench repo, version, sdist, .py module, test module, .pyx module or None)
CASES: dict[str, tuple[str, str, str, str, str, str | None]] = {
    "sklearn-0.22": (
        "scikit-learn/scikit-learn",
        "0.22",
        "scikit-learn==0.22.2.post1",
        "sklearn/utils/validation.py",
        "sklearn/tests/test_aexec.py",
        "sklearn/utils/murmurhash.pyx",
    ),
    "sklearn-1.3": (
        "scikit-learn/scikit-learn",
        "1.3",
        "scikit-learn==1.3.2",
        "sklearn/utils/validation.py",
        "sklearn/tests/test_aexec.py",
        "sklearn/utils/murmurhash.pyx",
    ),
    "astropy-5.0": (
        "astropy/astropy",
        "5.0",
        "astropy==5.0.6",
        "astropy/convolution/utils.py",
        "astropy/convolution/tests/test_aexec.py",
        None,
    ),
    "astropy-5.2": (
        "astropy/astropy",
        "5.2",
        "astropy==5.2.2",
        "astropy/convolution/utils.py",
        "astropy/convolution/tests/test_aexec.py",
        None,
    ),
    "astropy-4.3": (
        "astropy/astropy",
        "4.3",
        "astropy==4.3.1",
        "astropy/convolution/utils.py",
        "astropy/convolution/tests/test_aexec.py",
        None,
    ),
}


def _as_checkout(repo: str) -> None:
    """astropy 4.3.1's sdist (its 2021 release branch) pins ``jinja2==2.10.3`` in its build
    requires but not MarkupSafe, whose 2.1 broke that Jinja2: its build cannot even give
    its metadata. astropy 5.0 pins ``markupsafe==2.0.1`` beside its Jinja2: the stand-in
    does too (whether the checkouts of SWE-bench's 4.3 instances do is not checked)."""
    path = os.path.join(repo, "pyproject.toml")
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if '"jinja2==2.10.3"' in text and "markupsafe" not in text.lower():
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace('"jinja2==2.10.3"', '"markupsafe==2.0.1", "jinja2==2.10.3"'))


def instances(name: str, repo: str) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    swe, version, _, module, test, pyx = CASES[name]
    top = module.split("/")[0]
    env = SKLEARN_ENV if top == "sklearn" else ASTROPY_ENV
    out, preds = [], []
    for kind, where in (("py", module), ("pyx", pyx)):
        if where is None:
            continue
        dotted = where.rsplit(".", 1)[0].replace("/", ".")
        with open(os.path.join(repo, where), encoding="utf-8") as f:
            text = f.read()
        ident = f"{swe.replace('/', '__')}-{version.replace('.', '')}{kind}"
        path = test.replace("test_aexec", f"test_aexec_{kind}")
        base = {
            "instance_id": ident,
            "repo": repo,
            "repo_name": swe,
            "version": version,
            "test_patch": diff(path, None, TEST.format(module=dotted, top=top, env=env)),
            "FAIL_TO_PASS": [f"{path}::test_gold"],
            "PASS_TO_PASS": [f"{path}::test_env"],
            "timeout_s": 1800,
        }
        for n, (role, body) in enumerate((("gold", GOLD), ("wrong", WRONG))):
            out.append({**base, "instance_id": f"{ident}{n}"})
            preds.append(
                {
                    "instance_id": f"{ident}{n}",
                    "model_name_or_path": role,
                    "model_patch": diff(where, text, text + body),
                }
            )
    return out, preds


def measure(work: str, name: str) -> dict[str, Any]:
    repo = checkout(work, CASES[name][2], force_add=True, prepare=_as_checkout)
    insts, preds = instances(name, repo)
    here = os.path.join(work, name)
    os.makedirs(here, exist_ok=True)
    ipath, ppath = os.path.join(here, "instances.json"), os.path.join(here, "preds.json")
    with open(ipath, "w") as f:
        json.dump(insts, f, indent=1)
    with open(ppath, "w") as f:
        json.dump(preds, f, indent=1)
    root = os.path.join(work, "envs")
    out: dict[str, Any] = {"case": name, "sdist": os.path.basename(repo)}
    for phase in ("cold", "warm"):
        seconds, done = aexec("env", "build", ipath, "--specs", "swebench", "--jobs", "1", root=root)
        with open(os.path.join(here, f"build-{phase}.log"), "w") as f:
            f.write(done.stderr)
        out[f"{phase}_s"] = round(seconds, 2)
        out[f"{phase}_rc"] = done.returncode
        out[f"{phase}_line"] = next(
            (ln for ln in done.stderr.splitlines() if "(Python" in ln), done.stderr[-300:]
        )
        if done.returncode != 0:
            break
    report_path = os.path.join(here, "report.json")
    seconds, done = aexec(
        "swebench", ppath, ipath, "-o", report_path, "--specs", "swebench", "--no-cache", root=root
    )
    with open(os.path.join(here, "grade.log"), "w") as f:
        f.write(done.stderr)
    out["grade_s"] = round(seconds, 1)
    if done.returncode != 0:
        out["grade_error"] = done.stderr[-500:]
        return out
    with open(report_path) as f:
        report = json.load(f)
    for inst in insts:
        d = report["instances"].get(inst["instance_id"], {})
        role = "gold" if inst["instance_id"].endswith("0") else "wrong"
        kind = "pyx" if re.search(r"pyx\d$", inst["instance_id"]) else "py"
        out[f"{kind}_{role}"] = {
            "resolved": d.get("resolved"),
            "verdict": d.get("verdict"),
            "error": (d.get("error") or "")[:300] or None,
        }
    return out


def main() -> None:
    run_cases(__doc__, CASES, measure)


if __name__ == "__main__":
    main()
