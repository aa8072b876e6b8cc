"""`Options`: how aexec itself runs, passed in (layer 1).

The library reads no environment variable deep inside: the CLI builds an `Options`
with `Options.from_env` (the ``AEXEC_*`` switches), a library caller passes one in, and
everything below receives it. A candidate's own boundary is its `Policy`, not this.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

import attrs

from ._errors import RequestError

#: Pipeline mechanisms that may be removed for the spec's §7.5 ablations (`aexec ab`):
#: ``antigaming`` — no confirming re-run, no diff-scope (tamper) check; ``cache`` — no
#: disk cache and no in-process dedup. An observation made without them is not one to
#: trust: they exist to measure what each mechanism is worth.
#: Where `Options.from_env` reads the probe client's settings.
ENV_PROBE_BASE_URL = "AEXEC_PROBE_BASE_URL"
ENV_PROBE_MODEL = "AEXEC_PROBE_MODEL"
ENV_PROBE_API_KEY = "AEXEC_PROBE_API_KEY"

Mechanism = Literal["antigaming", "cache"]
MECHANISMS: tuple[Mechanism, ...] = ("antigaming", "cache")


def _absolute(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(path)


def _paths(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [p for p in value.split(os.pathsep) if p]
    return tuple(os.path.abspath(str(p)) for p in value)  # type: ignore[attr-defined]


def _mechanisms(instance: object, attribute: attrs.Attribute[frozenset[str]], value: frozenset[str]) -> None:
    unknown = sorted(set(value) - set(MECHANISMS))
    if unknown:
        raise RequestError(f"options.ablate: unknown mechanism(s) {unknown}; known: {list(MECHANISMS)}")


def _seconds(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise RequestError(f"{attribute.name} must be a number of seconds >= 0, got {value!r}")


def _limit(instance: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise RequestError(f"limit must be an integer >= 1, got {value!r}")


@attrs.frozen
class Options:
    """How aexec runs candidates (never what a candidate may do: that is its `Policy`).

    ``cache_dir`` and ``scratch_dir`` are made absolute when the record is made, so a
    relative path means the same directory wherever it is used later.
    """

    #: Runs under way at once (default: 4 per core, and of those one per core while busy).
    limit: int | None = attrs.field(default=None, validator=_limit)
    #: The behavioural cache (and compiled-bytecode store); None: nothing persists.
    cache_dir: str | None = attrs.field(default=None, converter=_absolute)
    #: Where scratch roots are made (default: ``tempfile.gettempdir()``).
    scratch_dir: str | None = attrs.field(default=None, converter=_absolute)
    #: Where the environments aexec builds live (default: ``<cache_dir>/envs``, without a
    #: cache dir ``~/.cache/aexec/envs``; ``AEXEC_ENV_DIR``).
    env_dir: str | None = attrs.field(default=None, converter=_absolute)
    #: Where the fork servers keep what a pytest start imports, per interpreter and
    #: environment (default: ``~/.cache/aexec/startup``, beside the environments: shared
    #: by every observer and process of the user, whatever their ``cache_dir``).
    startup_dir: str | None = attrs.field(default=None, converter=_absolute)
    #: Where each aexec process records its scratch bases, so that what a killed one
    #: left is found wherever its TMPDIR was (default: ``/run/aexec`` as root).
    registry: str | None = attrs.field(default=None, converter=_absolute)
    #: Fork runs from warm interpreters; False: every run starts a fresh one.
    forkserver: bool = True
    #: Compile a repo's modules once for all its runs; False: each run compiles its own.
    bytecode: bool = True
    #: Use namespaces / cgroups where the kernel allows (False: to test the fallbacks).
    namespaces: bool = True
    cgroups: bool = True
    #: How long a recheck of what runs rest on — an interpreter's installed distributions
    #: and editable sources, a language's tools, a warm fork server's imported files —
    #: holds for later calls on the same observer: 0 (the default) rechecks once per
    #: call; ``aexec serve``, whose every request is a call, holds one for
    #: ``--recheck-s`` (an edit is then seen by the calls that start that long after it).
    recheck_s: float = attrs.field(default=0.0, validator=_seconds)
    #: Host paths every run's view also binds read-only (a dataset its tests read, a
    #: shared cache), beside the system directories and the toolchain; none by default.
    readonly: tuple[str, ...] = attrs.field(default=(), converter=_paths)
    #: Mechanisms removed for an ablation (see `MECHANISMS`); empty in real use.
    ablate: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset, validator=_mechanisms)
    #: The probe step's model client (an OpenAI-compatible API root, ``https://host/v1``,
    #: and a model name; both or neither), and its key. Only ``discriminate`` and ``ab``
    #: use them (``aexec.prober_from_options``); None: no probe client.
    probe_base_url: str | None = None
    probe_model: str | None = None
    probe_api_key: str | None = attrs.field(default=None, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Options:
        """Options from ``AEXEC_NO_FORKSERVER``, ``AEXEC_NO_BYTECODE``,
        ``AEXEC_NO_NAMESPACES`` and ``AEXEC_NO_CGROUPS`` (each off when ``=1``),
        ``AEXEC_PROBE_BASE_URL``, ``AEXEC_PROBE_MODEL`` and ``AEXEC_PROBE_API_KEY`` (unset
        or blank: None), ``AEXEC_READONLY_PATHS`` (``os.pathsep``-separated), ``AEXEC_ENV_DIR``, then
        ``overrides``. The one reader of aexec's environment variables: only the CLI (or a
        caller who wants it) calls it."""
        env = os.environ if environ is None else environ
        fields: dict[str, object] = {
            "forkserver": env.get("AEXEC_NO_FORKSERVER") != "1",
            "bytecode": env.get("AEXEC_NO_BYTECODE") != "1",
            "namespaces": env.get("AEXEC_NO_NAMESPACES") != "1",
            "cgroups": env.get("AEXEC_NO_CGROUPS") != "1",
            "probe_base_url": env.get(ENV_PROBE_BASE_URL, "").strip() or None,
            "probe_model": env.get(ENV_PROBE_MODEL, "").strip() or None,
            "probe_api_key": env.get(ENV_PROBE_API_KEY) or None,
            "readonly": env.get("AEXEC_READONLY_PATHS", ""),
            "env_dir": env.get("AEXEC_ENV_DIR") or None,
        }
        return cls(**{**fields, **overrides})  # type: ignore[arg-type]
