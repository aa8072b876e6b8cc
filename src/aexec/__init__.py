"""aexec — the observation layer of an LLM coding harness.

A model proposes code; aexec runs it under a declared boundary and answers with one
structured `ExecutionObservation` per run::

    obs = await aexec.observe(aexec.Candidate("run_entry", "snippet", code="print(1)"))
"""

from __future__ import annotations

from ._api import VERSION as __version__
from ._api import observe, observe_many
from ._discriminate import BehaviourGroup, Discrimination, ProbeStep, discriminate
from ._errors import AexecError, ProbeCallError, RequestError
from ._probe import OpenAIProber, Prober, ProbeSpec, ScriptedProber, prober_from_env
from ._ray import RayExecutor, observe_many_ray
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
    "OpenAIProber",
    "Policy",
    "ProbeCallError",
    "ProbeSpec",
    "ProbeStep",
    "Prober",
    "RayExecutor",
    "RequestError",
    "ResourceUsage",
    "ScriptedProber",
    "TestResult",
    "__version__",
    "candidate_from_json",
    "discriminate",
    "dumps",
    "observe",
    "observe_many",
    "observe_many_ray",
    "prober_from_env",
    "structure",
    "unstructure",
]
