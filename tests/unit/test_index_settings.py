"""What a confined build's proxy lets through (issue 30, goal 6): PyPI, and the origins
uv's and pip's index settings name; their local directories are bound read-only."""

from __future__ import annotations

from aexec._environments.proxy import PYPI, index_settings


def test_the_index_settings_name_the_origins_and_local_dirs() -> None:
    origins, local = index_settings(
        {
            "UV_INDEX_URL": "https://mirror.example.org/simple",
            "UV_INDEX": "internal=https://pkgs.example.com:8443/simple other=http://10.0.0.5/simple",
            "UV_FIND_LINKS": "http://127.0.0.1:8080/,/opt/wheels",
            "PIP_EXTRA_INDEX_URL": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
            "HOME": "https://not.an.index.example",
        }
    )
    assert origins == PYPI | {
        ("https", "mirror.example.org", 443),
        ("https", "pkgs.example.com", 8443),
        ("http", "10.0.0.5", 80),
        ("http", "127.0.0.1", 8080),
    }
    assert local == ["/opt/wheels", "/opt/pypi/simple", "/opt/pypi-more/simple"]


def test_without_settings_only_pypi() -> None:
    assert index_settings({}) == (PYPI, [])
