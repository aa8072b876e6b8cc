"""A `Workspace`: a scratch copy of a repo that lives across commands (``aexec.session``).

Opened, it is one scratch root laid out as a run's is (``aexec._boundary.scratch``), its
``work`` the copy of the repo, sealed for one uid of its own. Each `Workspace.exec` is
one run of a ``command`` candidate in it, under the whole boundary every run gets
(namespaces, seccomp, the sealed view, caps, a cgroup of its own that is killed when the
command ends): the same `invoke.invocation`, supervisor and `collect` as a fresh run,
in a root that is not fresh. Its observation's ``changes`` are what that command did.

`write_file` and `read_file` stay inside ``work`` (no ``..``, no absolute path outside
it, no link followed). `diff` is the patch of ``work`` against the repo; `grade`
observes that patch as any ``run_suite`` candidate is observed, in a fresh copy with
every guard, so what the workspace holds never vouches for itself. One command (or file
operation) at a time per workspace; many workspaces at once, each command bounded.
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import attrs

from .._boundary.forkserver import ForkServer
from .._boundary.patch import base_tree, diff_against
from .._boundary.scratch import SCRATCH_PREFIX, make_scratch, make_view, remove_scratch, run_uid, seal_scratch
from .._boundary.trees import read_inside_strict, snapshot, write_inside
from .._environments.spec import EnvSpec
from .._errors import RequestError
from .._inputs import check_path
from .._records import Candidate, ExecutionObservation, Policy
from .._stages import judge
from .._stages.plan import Scratch
from . import invoke
from .cache import in_thread
from .observer import Observer
from .rebuild import carry_base
from .request import validate
from .run import Prepared, collect
from .session import Job, Session

T = TypeVar("T")

#: What `read_file` returns at most by default.
READ_CAP_BYTES = 100 << 20


async def _shielded(fn: Callable[..., T], *args: Any) -> T:
    """Blocking work on the workspace's root, finished even if the caller is cancelled."""
    with anyio.CancelScope(shield=True):
        out: T = await anyio.to_thread.run_sync(fn, *args)
    return out


class Workspace:
    """See the module docstring; made by ``aexec.session(...)``, used with ``async with``."""

    def __init__(
        self,
        observer: Observer,
        *,
        repo: str | None = None,
        python: str | None = None,
        environment: EnvSpec | None = None,
        policy: Policy | None = None,
        stream_cap: int | None = None,
    ) -> None:
        self.observer = observer
        self.repo = None if repo is None else os.path.abspath(repo)
        self.python = python
        self.environment = environment
        self.policy = policy if policy is not None else Policy()
        self.stream_cap = stream_cap
        self.commands = 0
        self._session: Session | None = None
        self._scratch: Scratch | None = None
        self._git: str | None = None
        self._tree: str | None = None
        self._uid: int | None = None
        self._sealed = False
        self._opened: dict[str, tuple[int, int]] = {}
        self._lock = anyio.Lock()

    @property
    def path(self) -> str:
        """The workspace's directory on the host (the commands' ``cwd``)."""
        if self._scratch is None:
            raise RuntimeError("the session is not open")
        return self._scratch.work

    async def __aenter__(self) -> Workspace:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Lay the workspace out and check its interpreter (or build its environment:
        `EnvBroken` if it cannot be had)."""
        self._session = session = await self.observer.session(self.observer.options, {})
        namespaces = session.isolation.namespaces
        self._scratch = await _shielded(make_scratch, namespaces, session.scratch_base)
        try:
            self._uid = run_uid() if namespaces else None
            job = await self._job(("true",), None)
            await _shielded(self._lay_out, job)
        except BaseException:
            await self.aclose()
            raise

    def _lay_out(self, job: Job) -> None:
        assert self._scratch is not None
        make_view(self._scratch, self.repo)
        carry_base(job, self._scratch.work)
        self._opened = snapshot(self._scratch.root)

    async def aclose(self) -> None:
        """Remove the workspace (nothing of its commands is left running: each was killed
        at its end)."""
        scratch, git, self._scratch, self._git = self._scratch, self._git, None, None
        if scratch is not None:
            await _shielded(remove_scratch, scratch)
        if git is not None:
            await _shielded(shutil.rmtree, git, True)

    async def _job(self, argv: Sequence[str], timeout_s: float | None) -> Job:
        assert self._session is not None
        policy = self.policy if timeout_s is None else attrs.evolve(self.policy, timeout_s=timeout_s)
        candidate = Candidate(
            "run_entry",
            "command",
            id=self.commands,
            command=tuple(argv),
            repo=self.repo,
            python=self.python,
            environment=self.environment,
            policy=policy,
        )
        # Run as written, as a plain command: a `python -m pytest` too (not aexec's own
        # pytest run, which would add its options and leave out the command's `env`).
        checked = attrs.evolve(validate(candidate), runner="command")
        return await self._session.job(self.commands, checked)

    async def exec(
        self,
        argv: Sequence[str],
        *,
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (the command's, not this call's)
    ) -> ExecutionObservation:
        """Run ``argv`` in the workspace under the whole boundary; its observation (exit
        code, capped output, duration, resource usage, the ``changes`` it made).
        ``timeout`` (seconds) replaces the policy's for this command; ``env`` is added to
        the command's environment; ``cwd`` is a directory of the workspace."""
        extra = {str(k): str(v) for k, v in (env or {}).items()}
        for key in extra:
            if not key or "=" in key or "\0" in key or "\0" in extra[key]:
                raise RequestError(f"env: {key!r} is not a variable's name and value")
        async with self._lock:
            session, scratch = self._session, self._scratch
            if session is None or scratch is None:
                raise RuntimeError("the session is not open")
            self.commands += 1
            job = await self._job(argv, timeout)
            server = await session.server(job)
            prep = await _shielded(self._prepare, session, job, server, input, cwd, extra)
            assert prep.invocation is not None
            async with session.slots.slot(prep.invocation.run, job.index):
                raw = await session.execute(job, prep.invocation)
            if raw is None:  # a warm start refused: once more, cold
                prep = attrs.evolve(prep, invocation=attrs.evolve(prep.invocation, server=None))
                assert prep.invocation is not None
                async with session.slots.slot(prep.invocation.run, job.index):
                    raw = await session.supervisor.execute(prep.invocation)
            outcome = await _shielded(collect, job, prep, raw)
        return judge.conclude(job, judge.Results(first=outcome))

    def _prepare(
        self,
        session: Session,
        job: Job,
        server: ForkServer | None,
        data: str | bytes | None,
        cwd: str | None,
        env: dict[str, str],
    ) -> Prepared:
        scratch = self._scratch
        assert scratch is not None
        where = scratch.work if cwd is None else os.path.join(scratch.work, self._inside(cwd))
        if not os.path.isdir(where) or not _under(os.path.realpath(where), os.path.realpath(scratch.work)):
            raise NotADirectoryError(f"cwd: {cwd!r} is not a directory of the workspace")
        stdin = None
        if data is not None:
            stdin = scratch.private_file("stdin")
            with open(stdin, "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
        name = f"{self.commands}-{os.path.basename(scratch.root)}"
        inv, _, the_plan = invoke.invocation(
            session,
            job,
            scratch,
            server,
            name,
            self._uid,
            snippet=None,
            stdin=stdin,
            touched_sources=(),
            cwd=where,
            command_env=env,
        )
        if self.stream_cap is not None:
            inv = attrs.evolve(inv, stream_cap=self.stream_cap)
        if self._uid is not None and not self._sealed:
            seal_scratch(scratch, self._uid, the_plan.limits.disk_bytes)
            self._sealed = True
        before = snapshot(scratch.root)
        # A file changed since the workspace opened is not the repo's: no earlier text.
        changed = [
            r[len("work/") :]
            for r, st in before.items()
            if r.startswith("work/") and self._opened.get(r) != st
        ]
        return Prepared(scratch, invocation=inv, touched=changed, before=before)

    def _inside(self, path: str) -> str:
        """``path`` relative to ``work``: refused (PermissionError) if it leaves it."""
        assert self._scratch is not None
        work = self._scratch.work
        if posixpath.isabs(path):
            norm = posixpath.normpath(path)
            if not _under(norm, work):
                raise PermissionError(f"{path!r} is outside the workspace")
            path = posixpath.relpath(norm, work)
        if path in (".", ""):
            return "."
        try:
            check_path("path", path)
        except RequestError as e:
            raise PermissionError(str(e)) from None
        return path

    async def write_file(self, path: str, data: str | bytes) -> None:
        """Write ``data`` at ``path`` in the workspace (its directories made); no link on
        the way is followed (PermissionError)."""
        raw = data.encode() if isinstance(data, str) else data
        async with self._lock:
            rel = self._inside(path)
            await _shielded(self._write, rel, raw)

    def _write(self, rel: str, data: bytes) -> None:
        assert self._scratch is not None
        work = self._scratch.work
        try:
            write_inside(work, rel, data)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):  # a link, or a file, on the way
                raise PermissionError(f"{rel!r} is reached through a link or a file") from None
            raise
        if self._uid is not None:  # the commands' uid owns what the workspace holds
            parts = rel.split("/")
            for i in range(1, len(parts) + 1):
                os.chown(os.path.join(work, *parts[:i]), self._uid, self._uid, follow_symlinks=False)

    async def read_file(self, path: str, limit: int = READ_CAP_BYTES) -> bytes:
        """The regular file at ``path`` in the workspace: FileNotFoundError, IsADirectoryError,
        PermissionError (a link on the way), or ValueError past ``limit`` bytes."""
        async with self._lock:
            rel = self._inside(path)
            assert self._scratch is not None
            return await in_thread(read_inside_strict, self._scratch.work, rel, limit)

    async def diff(self) -> str:
        """The workspace's patch against its repo (``git apply -p1``; binary included)."""
        async with self._lock:
            return await _shielded(self._diff)

    def _diff(self) -> str:
        assert self._scratch is not None and self._session is not None
        if self._git is None:
            self._git = tempfile.mkdtemp(
                prefix=f"{SCRATCH_PREFIX}{os.getpid()}-git-", dir=self._session.scratch_base
            )
        if self._tree is None:
            base = self.repo
            if base is None:
                base = os.path.join(self._git, "empty")
                os.makedirs(base, exist_ok=True)
            self._tree = base_tree(os.path.join(self._git, "store"), base)
        return diff_against(os.path.join(self._git, "store"), self._tree, self._scratch.work)

    async def grade(
        self,
        *,
        fail_to_pass: Sequence[str] = (),
        pass_to_pass: Sequence[str] = (),
        test_patch: str | None = None,
        tests: Sequence[str] | None = None,
        runner: str = "pytest",
    ) -> ExecutionObservation:
        """The workspace's `diff`, observed as a ``run_suite`` candidate of the repo is: in
        a fresh copy, with the tamper check, the confirming re-run and SWE-bench's grade."""
        if self.repo is None:
            raise RequestError("grade needs a session opened on a repo")
        patch = await self.diff()
        candidate = Candidate(
            "run_suite",
            "patch" if patch else "test_subset",
            id="grade",
            repo=self.repo,
            patch=patch or None,
            python=self.python,
            environment=self.environment,
            policy=self.policy,
            fail_to_pass=tuple(fail_to_pass),
            pass_to_pass=tuple(pass_to_pass),
            test_patch=test_patch,
            tests=None if tests is None else tuple(tests),
            runner=runner,  # type: ignore[arg-type]
        )
        return (await self.observer.observe_many([candidate]))[0]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
