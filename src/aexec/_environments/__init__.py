"""Environments aexec builds (issue 30): a request's declared ``environment`` (its
Python version, the repo's requirement files, pinned packages, extras, how the repo
itself is installed) made into a cached virtual environment with uv.

    spec          the declared environment (`EnvSpec`), checked as it is made; pure
    proxy         the package-index allow-list proxy a build's only network goes through (I/O)
    jail          a build step's own process: namespaces, new root, uid (stdlib; run by path)
    confine       one uv step confined: only the cache writable, the index the only network,
                  its own uid, a cgroup killed at the deadline (I/O)
    build         resolve with uv, build, cache by content, one builder per key (I/O)
    swebench      SWE-bench's own spec table (``MAP_REPO_VERSION_TO_SPECS``) as `EnvSpec`
    command       ``aexec env build | ls | gc``

A build runs the repo's setup code at its base (a copy of the checkout the request names,
never a candidate's patch), confined (`confine`, as root with namespaces and cgroups; else
unconfined, logged): it reaches the package index and nothing else, and writes only into
the environments' cache, as its own uid.
"""
