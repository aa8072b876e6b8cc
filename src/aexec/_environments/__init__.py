"""Environments aexec builds (issue 30): a request's declared ``environment`` (its
Python version, the repo's requirement files, pinned packages, extras, how the repo
itself is installed) made into a cached virtual environment with uv.

    spec          the declared environment (`EnvSpec`), checked as it is made; pure
    build         resolve with uv, build, cache by content, one builder per key (I/O)
    swebench      SWE-bench's own spec table (``MAP_REPO_VERSION_TO_SPECS``) as `EnvSpec`
    command       ``aexec env build | ls | gc``
"""
