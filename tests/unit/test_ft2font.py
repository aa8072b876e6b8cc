"""The decisions of `aexec._environments.ft2font`: which files decide, which releases are
tried in which order, which wheel fits, what matches, what a run is told."""

from __future__ import annotations

from aexec._environments import ft2font

SETUPEXT = """
TESTING_VERSION_OF_FREETYPE = '2.6.1'
LOCAL_FREETYPE_VERSION = TESTING_VERSION_OF_FREETYPE

class Matplotlib:
    def get_extensions(self):
        ext = Extension("matplotlib._path", ["src/_path_wrapper.cpp", "src/py_converters.cpp"])
        yield ext
        ext = Extension(
            "matplotlib.ft2font", [
                "src/ft2font.cpp",
                "src/ft2font_wrapper.cpp",
                "src/py_converters.cpp",
            ])
        yield ext
"""


def test_the_sources_setupext_lists_for_ft2font_and_its_local_freetype() -> None:
    assert ft2font.extension_sources(SETUPEXT) == [
        "src/ft2font.cpp",
        "src/ft2font_wrapper.cpp",
        "src/py_converters.cpp",
    ]
    assert ft2font.freetype_version(SETUPEXT) == "2.6.1"
    # matplotlib 3.3's spelling of it.
    assert ft2font.freetype_version("LOCAL_FREETYPE_VERSION = '2.6.1'\n") == "2.6.1"
    # Sources made at run time cannot be compared: nothing is.
    assert ft2font.extension_sources('Extension("matplotlib.ft2font", [*srcs, "a.cpp"])') == []
    assert ft2font.extension_sources("def (:") == []


def test_the_files_compared_are_the_sources_and_what_they_include() -> None:
    files = {
        "src/ft2font.cpp": '#include "ft2font.h"\n#include <ft2build.h>\n#include "agg_basics.h"\n',
        "src/ft2font.h": '#include "mplutils.h"\n',
        "src/mplutils.h": '#include "ft2font.h"\n',  # a cycle
        "extern/agg/include/agg_basics.h": '#include "agg_config.h"\n#include "missing.h"\n',
        "extern/agg/include/agg_config.h": "",
        "src/unrelated.h": "",
    }
    got = ft2font.closure(["src/ft2font.cpp"], files.get, ["src", "extern/agg/include"])
    assert got == [
        "extern/agg/include/agg_basics.h",
        "extern/agg/include/agg_config.h",
        "src/ft2font.cpp",
        "src/ft2font.h",
        "src/mplutils.h",
    ]


def test_a_release_matches_only_with_every_file_and_the_same_freetype() -> None:
    ours = {"src/ft2font.cpp": "a", "src/ft2font.h": "b"}
    theirs = {"freetype": "2.6.1", "files": {"src/ft2font.cpp": "a", "src/ft2font.h": "b", "x.c": "c"}}
    assert ft2font.matches(ours, "2.6.1", theirs)
    assert not ft2font.matches(ours, "2.11.1", theirs)
    assert not ft2font.matches({**ours, "src/ft2font.h": "B"}, "2.6.1", theirs)
    assert not ft2font.matches({**ours, "src/new.h": "d"}, "2.6.1", theirs)
    assert not ft2font.matches({}, "2.6.1", theirs)


RELEASES = ["3.5.3", "3.6.0", "3.6.3", "3.7.0", "3.7.0rc1", "3.7.1", "3.7.5", "3.8.0", "3.8.1", "3.9.0"]


def test_the_releases_tried_nearest_first() -> None:
    # SWE-bench's version of an untagged checkout (main between 3.7 and 3.8): 3.7's first
    # release, the next one, 3.7's last, the rest of 3.7, then outwards.
    got = ft2font.candidates(RELEASES, "3.7", limit=6)
    assert got == ["3.7.0", "3.8.0", "3.7.5", "3.7.1", "3.6.3", "3.8.1"]
    three_six = ["3.6.0", "3.6.1", "3.6.2", "3.6.3", "3.7.0", "3.7.1"]
    assert ft2font.candidates(three_six, "3.6") == ["3.6.0", "3.7.0", "3.6.3", "3.6.1", "3.6.2"]
    # A tagged checkout's next release: it, then later before earlier as far away.
    assert ft2font.candidates(RELEASES, "3.8.0.dev120+gabc", limit=4) == ["3.8.0", "3.8.1", "3.7.5", "3.9.0"]
    assert ft2font.candidates(RELEASES, "3.7.1", limit=3) == ["3.7.1", "3.7.5", "3.7.0"]
    # Pre-releases are never tried; setuptools-scm's version of an untagged checkout
    # (``0.1.devN``) says nothing: no release is tried.
    assert "3.7.0rc1" not in ft2font.candidates(RELEASES, "3.7", limit=99)
    assert ft2font.candidates(RELEASES, "0.1.dev1+g1234") == []
    assert ft2font.candidates(RELEASES, "") == []
    assert len(ft2font.candidates(RELEASES, "3.7")) == ft2font.MAX_CANDIDATES


def test_a_wheel_fits_the_environments_python_machine_and_glibc() -> None:
    name = "matplotlib-3.7.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    assert ft2font.wheel_fits(name, (3, 11), "x86_64", (2, 36))
    assert not ft2font.wheel_fits(name, (3, 12), "x86_64", (2, 36))
    assert not ft2font.wheel_fits(name, (3, 11), "aarch64", (2, 36))
    assert not ft2font.wheel_fits(name, (3, 11), "x86_64", (2, 12))
    assert ft2font.wheel_fits("matplotlib-3.3.4-cp38-cp38-manylinux1_x86_64.whl", (3, 8), "x86_64", (2, 5))
    assert not ft2font.wheel_fits(
        "matplotlib-3.7.1-cp311-cp311-musllinux_1_1_x86_64.whl", (3, 11), "x86_64", (2, 36)
    )
    assert not ft2font.wheel_fits("matplotlib-3.7.1-cp311-cp311-win_amd64.whl", (3, 11), "x86_64", (2, 36))
    assert not ft2font.wheel_fits("matplotlib-3.7.1.tar.gz", (3, 11), "x86_64", (2, 36))


def test_what_a_run_is_told_when_its_patches_rebuild() -> None:
    adopted = "ft2font from matplotlib 3.7.0's wheel: ..."
    rels = ["src/ft2font.cpp", "src/ft2font.h"]
    assert ft2font.rebuilt_note(adopted, rels, ["lib/matplotlib/text.py"], False) == adopted
    # Another extension's source: build_ext relinks that one only, the wheel's stays.
    assert ft2font.rebuilt_note(adopted, rels, ["src/_path.cpp"], False) == adopted
    assert "rebuilt against the environment's FreeType" in str(
        ft2font.rebuilt_note(adopted, rels, ["./src/ft2font.cpp"], False)
    )
    assert "rebuilt" in str(ft2font.rebuilt_note(adopted, rels, ["src/_path.h"], True))
    kept = "ft2font built against FreeType 2.12.1 (system): ..."
    assert ft2font.rebuilt_note(kept, rels, ["src/ft2font.cpp"], True) == kept
    assert ft2font.rebuilt_note(None, rels, ["src/ft2font.cpp"], True) is None


def test_the_marker_read_back_and_the_index_named() -> None:
    marker = {"ft2font": {"note": "n", "release": "3.7.0", "compared": ["a", "b"]}}
    assert ft2font.recorded(marker) == ("n", ("a", "b"))
    assert ft2font.recorded({}) == (None, ())
    assert ft2font.index_url({}) == "https://pypi.org/simple"
    assert ft2font.index_url({"PIP_INDEX_URL": "https://m/simple", "UV_INDEX_URL": "https://u/simple"}) == (
        "https://u/simple"
    )
