"""inspect-ai's sandbox provider ``aexec`` (issue 41): a real ``eval()`` of a small task
whose tools run in the sandbox, and the provider's limits called directly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageTool, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate, use_tools
from inspect_ai.tool import bash, python
from inspect_ai.util import OutputLimitExceededError, SandboxEnvironment, SandboxEnvironmentLimits, sandbox
from inspect_ai.util._sandbox.environment import SandboxUserUnsupportedError
from inspect_ai.util._sandbox.registry import registry_find_sandboxenv

from aexec._inspect import AexecSandboxConfig, AexecSandboxEnvironment

from .conftest import scratch_roots

#: inspect-ai's own retry set-up calls tenacity with a parameter tenacity deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")


def _used(output: ModelOutput) -> ModelOutput:
    """With its usage said, mockllm counts no tokens (tiktoken would fetch its tables)."""
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


@scorer(metrics=[accuracy()])
def answer_file():  # type: ignore[no-untyped-def]
    async def score(state: TaskState, target: Target) -> Score:
        written = await sandbox().read_file("out/answer.txt")
        return Score(value="C" if written.strip() == target.text else "I", answer=written)

    return score


# inspect-ai leaves a memory stream of its own unclosed at the end of an eval (it does so
# with its own "local" sandbox too).
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <function MemoryObjectReceiveStream:pytest.PytestUnraisableExceptionWarning"
)
def test_a_real_eval_runs_its_tools_in_the_aexec_sandbox(tmp_path: Path, scratch_tmp: Path) -> None:
    model = get_model(
        "mockllm/model",
        custom_outputs=[
            _used(
                ModelOutput.for_tool_call(
                    "mockllm/model",
                    "bash",
                    {"command": "mkdir -p out && echo $((6*7)) > out/answer.txt && id -u"},
                )
            ),
            _used(
                ModelOutput.for_tool_call(
                    "mockllm/model", "python", {"code": "print(open('out/answer.txt').read().strip() + '!')"}
                )
            ),
            _used(ModelOutput.from_content("mockllm/model", "done")),
        ],
    )
    task = Task(
        dataset=[Sample(input="write the answer", target="42")],
        solver=[use_tools(bash(timeout=60), python(timeout=60)), generate()],
        scorer=answer_file(),
        sandbox="aexec",
    )
    (log,) = eval(task, model=model, log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    assert log.results is not None and log.results.scores[0].metrics["accuracy"].value == 1.0
    (sample,) = log.samples or []
    tools = [m for m in sample.messages if isinstance(m, ChatMessageTool)]
    uid, answer = (str(m.content).strip() for m in tools)
    assert int(uid) != os.getuid() and answer == "42!"  # the workspace's own uid; its own earlier write
    assert scratch_roots(scratch_tmp) == []  # sample_cleanup removed the workspace


def test_the_provider_is_found_by_its_name() -> None:
    assert registry_find_sandboxenv("aexec") is AexecSandboxEnvironment
    assert (AexecSandboxEnvironment.default_concurrency() or 0) >= os.cpu_count()  # type: ignore[operator]


@pytest.mark.anyio
async def test_the_provider_honours_inspects_limits(shop: Path, scratch_tmp: Path) -> None:
    envs = await AexecSandboxEnvironment.sample_init("t", AexecSandboxConfig(repo=str(shop)), {})
    box: SandboxEnvironment = envs["default"]
    try:
        listed = await box.exec(["ls", "shop"])
        assert listed.success and "cart.py" in listed.stdout
        missing = await box.exec(["no-such-program"])
        assert not missing.success and missing.returncode == 127
        with pytest.raises(TimeoutError):
            await box.exec(["sleep", "30"], timeout=1)
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        with pytest.raises(OutputLimitExceededError) as cut:
            await box.exec(["sh", "-c", f"head -c {limit + 4096} /dev/zero | tr '\\0' a"])
        assert cut.value.truncated_output == "a" * limit
        at_limit = await box.exec(["sh", "-c", f"head -c {limit} /dev/zero | tr '\\0' b"])
        assert at_limit.stdout == "b" * limit
        with pytest.raises(PermissionError):
            await box.write_file("/etc/motd", "x")
        with pytest.raises(PermissionError):
            await box.read_file("../../etc/passwd")
        with pytest.raises(SandboxUserUnsupportedError):
            await box.exec(["id"], user="root")
        await box.write_file("sub/crlf.txt", "a\r\nb")
        assert await box.read_file("sub/crlf.txt") == "a\r\nb"
        assert await box.read_file("sub/crlf.txt", text=False) == b"a\r\nb"
        with pytest.raises(FileNotFoundError):
            await box.read_file("absent")
    finally:
        await AexecSandboxEnvironment.sample_cleanup("t", None, envs, False)
        await AexecSandboxEnvironment.task_cleanup("t", None, True)
    assert scratch_roots(scratch_tmp) == []
