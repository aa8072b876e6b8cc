"""aexec — the observation layer of an LLM coding harness.

A model proposes code; aexec runs it under a declared boundary and answers with one
structured `ExecutionObservation` per run::

    obs = await aexec.observe(aexec.Candidate("run_entry", "snippet", code="print(1)"))

The optional parts — discrimination and its probe call, the Ray executor — are
imported on first use, so ``import aexec`` imports neither httpx nor Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._api import VERSION as __version__
from ._api import Workspace, aclose, observe, observe_many, observer, session
from ._boundary.supervise import Invocation, LocalSupervisor, Supervisor
from ._errors import AexecError, ProbeCallError, RequestError
from ._options import Options
from ._pipeline.observer import Observer
from ._raw import RawRun
from ._records import (
    Candidate,
    Environment,
    ExecutionObservation,
    Failure,
    Flags,
    FsBoundary,
    Policy,
    ResourceUsage,
    TestResult,
)
from ._serde import candidate as candidate_from_json
from ._serde import dumps, structure, unstructure

if TYPE_CHECKING:
    from ._code_eval import code_eval, code_eval_async
    from ._discrimination.discriminate import BehaviourGroup, Discrimination, ProbeStep, discriminate
    from ._discrimination.probe import (
        OpenAIProber,
        Prober,
        ProbeSpec,
        ScriptedProber,
        prober_from_env,
        prober_from_options,
    )
    from ._scaleout.ray import RayExecutor, observe_many_ray

#: Public names of the optional parts, by the module that holds them (imported lazily).
_LAZY = {
    "BehaviourGroup": "._discrimination.discriminate",
    "Discrimination": "._discrimination.discriminate",
    "ProbeStep": "._discrimination.discriminate",
    "discriminate": "._discrimination.discriminate",
    "OpenAIProber": "._discrimination.probe",
    "Prober": "._discrimination.probe",
    "ProbeSpec": "._discrimination.probe",
    "ScriptedProber": "._discrimination.probe",
    "prober_from_env": "._discrimination.probe",
    "prober_from_options": "._discrimination.probe",
    "RayExecutor": "._scaleout.ray",
    "observe_many_ray": "._scaleout.ray",
    "code_eval": "._code_eval",
    "code_eval_async": "._code_eval",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aexec' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AexecError",
    "BehaviourGroup",
    "Candidate",
    "Discrimination",
    "Environment",
    "ExecutionObservation",
    "Failure",
    "Flags",
    "FsBoundary",
    "Invocation",
    "LocalSupervisor",
    "Observer",
    "OpenAIProber",
    "Options",
    "Policy",
    "ProbeCallError",
    "ProbeSpec",
    "ProbeStep",
    "Prober",
    "RawRun",
    "RayExecutor",
    "RequestError",
    "ResourceUsage",
    "ScriptedProber",
    "Supervisor",
    "TestResult",
    "Workspace",
    "__version__",
    "aclose",
    "candidate_from_json",
    "code_eval",
    "code_eval_async",
    "discriminate",
    "dumps",
    "observe",
    "observe_many",
    "observe_many_ray",
    "observer",
    "prober_from_env",
    "prober_from_options",
    "session",
    "structure",
    "unstructure",
]
