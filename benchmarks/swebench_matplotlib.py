# ruff: noqa: W293  (the diffs below keep their context lines, a space on a blank line)
"""A real SWE-bench Verified matplotlib instance (issue 43), ``matplotlib__matplotlib-25311``
(spec 3.7: Python 3.11, ``environment.yml``, apt packages, Qhull's download, an in-place
build), built and graded as a new user would: ``--specs swebench``, gold, no-op, empty.

    python benchmarks/swebench_matplotlib.py WORKDIR

The dataset's row (its ``patch``, ``test_patch``, FAIL_TO_PASS and PASS_TO_PASS) is
below. Its base commit (``430fb1db``, on main before 3.8) is not in a checkout here; the
checkout stands in for it: matplotlib 3.7.1's sdist (which has the fix, backported) with
``PKG-INFO`` and the generated ``_version.py`` removed, the row's ``patch`` and
``test_patch`` reverted, and ``mpl_toolkits`` an implicit namespace package, as main had
it (its ``__init__.py`` and ``setup.py``'s ``namespace_packages`` removed: 3.7.x's
``pkg_resources`` namespace declaration warns under SWE-bench's setuptools 68.1.2, and
matplotlib's tests turn warnings into errors). Then ``swebench_dev.measure``:
the environment cold and warm, the three predictions graded (``WORKDIR/report-*.json``).

Then `text`: the row again with image comparisons that render text among its
PASS_TO_PASS (`TEXT`: their baselines are FreeType 2.6.1's), graded with the gold patch
(the environment's ft2font: a release wheel's, FreeType 2.6.1), with the gold patch
plus a comment in ``src/ft2font.cpp`` (the run rebuilds ft2font against Debian's
FreeType 2.12.1: they fail), and plus one in ``src/_path_wrapper.cpp`` (the run
rebuilds ``_path`` alone: the wheel's ft2font stays), and what
``environment.inplace_note`` says of each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from _sdists import aexec, checkout, help_asked
from swebench_dev import _noop, measure

ID = "matplotlib__matplotlib-25311"
PATCH = """\
diff --git a/lib/matplotlib/offsetbox.py b/lib/matplotlib/offsetbox.py
--- a/lib/matplotlib/offsetbox.py
+++ b/lib/matplotlib/offsetbox.py
@@ -1505,7 +1505,6 @@ def __init__(self, ref_artist, use_blit=False):
         if not ref_artist.pickable():
             ref_artist.set_picker(True)
         self.got_artist = False
-        self.canvas = self.ref_artist.figure.canvas
         self._use_blit = use_blit and self.canvas.supports_blit
         self.cids = [
             self.canvas.callbacks._connect_picklable(
@@ -1514,6 +1513,9 @@ def __init__(self, ref_artist, use_blit=False):
                 'button_release_event', self.on_release),
         ]
 
+    # A property, not an attribute, to maintain picklability.
+    canvas = property(lambda self: self.ref_artist.figure.canvas)
+
     def on_motion(self, evt):
         if self._check_still_parented() and self.got_artist:
             dx = evt.x - self.mouse_x
"""
TEST_PATCH = """\
diff --git a/lib/matplotlib/tests/test_pickle.py b/lib/matplotlib/tests/test_pickle.py
--- a/lib/matplotlib/tests/test_pickle.py
+++ b/lib/matplotlib/tests/test_pickle.py
@@ -1,6 +1,7 @@
 from io import BytesIO
 import ast
 import pickle
+import pickletools
 
 import numpy as np
 import pytest
@@ -88,6 +89,7 @@ def _generate_complete_test_figure(fig_ref):
 
     plt.subplot(3, 3, 9)
     plt.errorbar(x, x * -0.5, xerr=0.2, yerr=0.4)
+    plt.legend(draggable=True)
 
 
 @mpl.style.context("default")
@@ -95,9 +97,13 @@ def _generate_complete_test_figure(fig_ref):
 def test_complete(fig_test, fig_ref):
     _generate_complete_test_figure(fig_ref)
     # plotting is done, now test its pickle-ability
-    pkl = BytesIO()
-    pickle.dump(fig_ref, pkl, pickle.HIGHEST_PROTOCOL)
-    loaded = pickle.loads(pkl.getbuffer())
+    pkl = pickle.dumps(fig_ref, pickle.HIGHEST_PROTOCOL)
+    # FigureCanvasAgg is picklable and GUI canvases are generally not, but there should
+    # be no reference to the canvas in the pickle stream in either case.  In order to
+    # keep the test independent of GUI toolkits, run it with Agg and check that there's
+    # no reference to FigureCanvasAgg in the pickle stream.
+    assert "FigureCanvasAgg" not in [arg for op, arg, pos in pickletools.genops(pkl)]
+    loaded = pickle.loads(pkl)
     loaded.canvas.draw()
 
     fig_test.set_size_inches(loaded.get_size_inches())
"""
PICKLE = "lib/matplotlib/tests/test_pickle.py::"
F2P = [PICKLE + "test_complete[png]"]
P2P = [
    PICKLE + t
    for t in [
        *["test_simple", "test_gcf", "test_no_pyplot", "test_renderer", "test_image", "test_polar"],
        *["test_transform", "test_rrulewrapper", "test_shared", "test_inset_and_secondary"],
        *(f"test_cmap[cmap{i}]" for i in range(166)),
        *["test_unpickle_canvas", "test_mpl_toolkits", "test_standard_norm", "test_dynamic_norm"],
        "test_vertexselector",
    ]
]


#: Image comparisons with text (no ``remove_text``): FreeType 2.6.1's baselines.
TEXT = ["lib/matplotlib/tests/test_axes.py::test_formatter_ticker[png]"]
TEXT += ["lib/matplotlib/tests/test_text.py::test_multiline[png]"]
FT2FONT_COMMENT = """\
diff --git a/src/ft2font.cpp b/src/ft2font.cpp
--- a/src/ft2font.cpp
+++ b/src/ft2font.cpp
@@ -1,3 +1,4 @@
+// aexec: a comment, which rebuilds ft2font
 /* -*- mode: c++; c-basic-offset: 4 -*- */
 
 #define NO_IMPORT_ARRAY
"""
PATH_COMMENT = """\
diff --git a/src/_path_wrapper.cpp b/src/_path_wrapper.cpp
--- a/src/_path_wrapper.cpp
+++ b/src/_path_wrapper.cpp
@@ -1,3 +1,4 @@
+// aexec: a comment, which rebuilds _path only
 #include "numpy_cpp.h"
 
 #include "_path.h"
"""


def text(work: Path, row: dict[str, Any]) -> dict[str, Any]:
    """`TEXT` graded with the environment's ft2font and with Debian's (see the docstring)."""
    ipath = work / "instances-text.json"
    ipath.write_text(json.dumps([{**row, "PASS_TO_PASS": json.dumps([*P2P, *TEXT])}], indent=1))
    out: dict[str, Any] = {}
    cases = [("gold", PATCH), ("gold-ft2font-rebuilt", PATCH + FT2FONT_COMMENT)]
    for name, patch in [*cases, ("gold-path-rebuilt", PATCH + PATH_COMMENT)]:
        pred = {"instance_id": ID, "model_name_or_path": name, "model_patch": patch}
        (work / f"preds-text-{name}.json").write_text(json.dumps([pred], indent=1))
        report = work / f"report-text-{name}.json"
        argv = ["swebench", str(work / f"preds-text-{name}.json"), str(ipath), "-o", str(report)]
        seconds, done = aexec(*argv, "--specs", "swebench", "--no-cache", root=str(work / "envs"))
        (work / f"grade-text-{name}.log").write_text(done.stderr)
        d = json.loads(report.read_text())["instances"][ID] if done.returncode == 0 else {}
        status = d.get("tests_status") or {}
        out[name] = {
            "seconds": round(seconds, 1),
            "resolved": d.get("resolved"),
            "text": {t: t in status.get("PASS_TO_PASS", {}).get("success", []) for t in TEXT},
            "inplace_note": (d.get("environment") or {}).get("inplace_note"),
            "stderr": None if done.returncode == 0 else done.stderr[-800:],
        }
    return out


def base(repo: str) -> None:
    """3.7.1's sdist as the instance's base (see the module docstring)."""
    for path in ("PKG-INFO", "lib/matplotlib/_version.py", "lib/mpl_toolkits/__init__.py"):
        os.remove(os.path.join(repo, path))
    setup = os.path.join(repo, "setup.py")
    with open(setup) as f:
        text = f.read()
    with open(setup, "w") as f:
        f.write(text.replace('    namespace_packages=["mpl_toolkits"],\n', ""))
    for patch in (PATCH, TEST_PATCH):
        subprocess.run(["git", "apply", "-R"], input=patch, text=True, cwd=repo, check=True)


def main() -> None:
    if help_asked(__doc__, sys.argv[1:]) or len(sys.argv) < 2:
        print((__doc__ or "").strip())
        return
    work = Path(sys.argv[1]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    repo = checkout(str(work), "matplotlib==3.7.1", prepare=base)
    row = {
        "instance_id": ID,
        "repo": repo,
        "repo_name": "matplotlib/matplotlib",
        "version": "3.7",
        "base_commit": "430fb1db88843300fb4baae3edc499bbfe073b0c",
        "patch": PATCH,
        "test_patch": TEST_PATCH,
        "FAIL_TO_PASS": json.dumps(F2P),
        "PASS_TO_PASS": json.dumps(P2P),
    }
    ipath = work / "instances.json"
    ipath.write_text(json.dumps([row], indent=1))
    for name, patch in (("gold", PATCH), ("noop", _noop(Path(repo), PATCH)), ("empty", "")):
        pred = {"instance_id": ID, "model_name_or_path": name, "model_patch": patch}
        (work / f"preds-{name}.json").write_text(json.dumps([pred], indent=1))
    print(json.dumps({**measure(work, ipath, [row]), "text": text(work, row)}, indent=1))


if __name__ == "__main__":
    main()
