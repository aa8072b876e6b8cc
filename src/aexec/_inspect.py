"""inspect-ai's sandbox provider ``aexec`` (the ``inspect`` extra): each sample gets a
workspace (``aexec.session``) and each of its commands runs under the whole boundary.

Registered with ``@sandboxenv(name="aexec")`` and the ``inspect_ai`` entry point, so
``eval(task, sandbox="aexec")`` finds it once aexec is installed. The sandbox's config is
an `AexecSandboxConfig` (or a repo's path, a string): the repo copied into the workspace,
the interpreter, each command's caps. Inspect's limits hold: a command past its
``timeout`` raises `TimeoutError`; an output stream past Inspect's limit raises
``OutputLimitExceededError`` (what was kept travels with it), as does a file read past
it; a path outside the workspace (or reached through a link) raises `PermissionError`;
another ``user`` than the sandbox's own raises ``SandboxUserUnsupportedError`` (every
command runs as the workspace's one unprivileged uid).
"""

from __future__ import annotations

import os
import re
from typing import Any, ClassVar, Literal, overload

from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    sandboxenv,
)
from inspect_ai.util._sandbox.environment import SandboxUserUnsupportedError
from pydantic import BaseModel

from ._api import session
from ._pipeline.observer import Observer
from ._pipeline.session import WAITING_RUNS_PER_CORE
from ._pipeline.workspace import Workspace
from ._records import Policy

#: The marker the supervisor appends to a stream it cut (`aexec._types.TRUNCATION_MARKER`).
_CUT = re.compile(r"\n\[aexec: (\d+) more bytes of \w+ not kept \(cap \d+ bytes\)\]\n$")


class AexecSandboxConfig(BaseModel, frozen=True):
    """The ``aexec`` sandbox's configuration: ``sandbox=("aexec", AexecSandboxConfig(...))``."""

    #: A directory copied into each sample's workspace (else the workspace starts empty).
    repo: str | None = None
    #: The interpreter the commands' ``python3`` is (else the one aexec runs under).
    python: str | None = None
    #: Each command's caps (aexec's defaults where None); a command's own ``timeout`` wins.
    timeout_s: float | None = None
    ram_mib: int | None = None
    cpu_cores: float | None = None


def _config(config: SandboxEnvironmentConfigType | None) -> AexecSandboxConfig:
    if config is None:
        return AexecSandboxConfig()
    if isinstance(config, str):
        return AexecSandboxConfig(repo=config)
    if isinstance(config, AexecSandboxConfig):
        return config
    raise ValueError(f"the aexec sandbox takes an AexecSandboxConfig or a repo's path, not {config!r}")


def _uncut(text: str) -> tuple[str, bool]:
    """A stream without aexec's truncation marker, and whether it was cut."""
    m = _CUT.search(text)
    return (text, False) if m is None else (text[: m.start()], True)


@sandboxenv(name="aexec")
class AexecSandboxEnvironment(SandboxEnvironment):
    """One sample's workspace; see the module docstring."""

    #: Per task, the observer its samples share (its warm interpreters and fork servers
    #: live as long as the task: `task_cleanup` stops them, inside the eval's loop).
    _observers: ClassVar[dict[str, Observer]] = {}

    def __init__(self, workspace: Workspace) -> None:
        super().__init__()
        self.workspace = workspace

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        cls._observers.setdefault(task_name, Observer())

    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool
    ) -> None:
        observer = cls._observers.pop(task_name, None)
        if observer is not None:
            await observer.aclose()

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return AexecSandboxConfig(**config)

    @classmethod
    def default_concurrency(cls) -> int | None:
        """Samples at once: as many runs as aexec admits by default, 4 per core (a
        sample's commands mostly wait on its model, not on a core)."""
        return WAITING_RUNS_PER_CORE * (os.cpu_count() or 1)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        c = _config(config)
        workspace = session(
            observer=cls._observers.setdefault(task_name, Observer()),
            repo=c.repo,
            python=c.python,
            policy=Policy(timeout_s=c.timeout_s, ram_mib=c.ram_mib, cpu_cores=c.cpu_cores),
            stream_cap=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE,
        )
        await workspace.open()
        return {"default": cls(workspace)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            await environment.as_type(AexecSandboxEnvironment).workspace.aclose()

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,  # noqa: ASYNC109 (Inspect's signature)
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        if user is not None:
            raise SandboxUserUnsupportedError(
                f"the aexec sandbox runs every command as its own uid, not {user!r}"
            )
        obs = await self.workspace.exec(cmd, input=input, cwd=cwd, env=env, timeout=timeout)
        if obs.timed_out:
            raise TimeoutError(f"{cmd[0]!r} passed its timeout ({obs.environment.timeout_s:g} s)")
        stdout, out_cut = _uncut(obs.stdout)
        stderr, err_cut = _uncut(obs.stderr)
        if out_cut or err_cut:
            raise OutputLimitExceededError(
                SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, stdout if out_cut else stderr
            )
        code = obs.exit_code if obs.exit_code is not None else 1
        return ExecResult(success=code == 0, returncode=code, stdout=stdout, stderr=stderr)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        await self.workspace.write_file(file, contents)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        try:
            data = await self.workspace.read_file(file, limit)
        except ValueError:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None) from None
        return data.decode("utf-8") if text else data
