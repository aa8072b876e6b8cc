"""The one learned entry (spec §4): diagnostic-probe generation, as a bounded stub.

A model may speak in exactly one place: when 2+ candidates of one task are being
discriminated and the suite cannot tell them apart. Then it is asked **once** (temperature
0, at most 2048 completion tokens) for at most 8 small probes. The harness, not the
model, decides what an answer means::

    Prober                 the protocol: one chat-completions call → the answer's text
    ├── OpenAIProber       an OpenAI-compatible ``POST {base_url}/chat/completions`` (httpx)
    └── ScriptedProber     answers from a script and records every call (for tests)

`parse_probes` accepts exactly ``{"probes": [{"probe_id", "program", "expected"}, ...]}``;
anything else — not JSON, a missing or extra key, a non-string, a duplicate id, an
over-size program, more than 8 probes, none at all — is "no probe", never a re-prompt.
Nothing here runs a probe: `aexec.discriminate` runs each one under the same isolation as
any candidate and records the result as probe evidence, never as a test result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

import attrs

from .._errors import ProbeCallError, RequestError
from .._options import ENV_PROBE_API_KEY, ENV_PROBE_BASE_URL, ENV_PROBE_MODEL, Options

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "OpenAIProber",
    "ProbeCall",
    "ProbeSpec",
    "Prober",
    "ScriptedProber",
    "bounded",
    "parse_probes",
    "probe_messages",
    "prober_from_env",
    "prober_from_options",
]

#: §4 caps of the one learned step (diagnostic-probe generation).
PROBE_CALLS_PER_FIRING: Final = 1
PROBE_TEMPERATURE: Final = 0.0
PROBE_MAX_COMPLETION_TOKENS: Final = 2048
#: At most this many probes per firing; more is a schema violation (no probe at all).
PROBE_CAP: Final = 8
#: A probe is small: its program and its ``expected`` each fit in this many characters.
PROBE_PROGRAM_CAP_CHARS: Final = 4096
PROBE_ID_CAP_CHARS: Final = 64
#: What of a candidate the probe prompt shows: each patch or snippet is cut here.
PROBE_PROMPT_ARTIFACT_CHARS: Final = 4096
#: At most this many test names are listed as the existing tests in the prompt.
PROBE_PROMPT_TESTS: Final = 100
#: How much of a probe's stdout is kept in its probe evidence.
PROBE_STDOUT_CHARS: Final = 4096
#: How long the one HTTP call may take.
DEFAULT_PROBE_HTTP_TIMEOUT_S: Final = 120.0

ENV_BASE_URL: Final = ENV_PROBE_BASE_URL
ENV_MODEL: Final = ENV_PROBE_MODEL
ENV_API_KEY: Final = ENV_PROBE_API_KEY

Message = Mapping[str, str]

SYSTEM_PROMPT = f"""\
You write diagnostic probes for a code-execution harness. Several candidate changes to one
Python repository behave identically on its existing tests; your probes must expose a
behavioural difference between them, or establish the property named below.

A probe is ONE small, self-contained Python program (at most {PROBE_PROGRAM_CAP_CHARS} characters).
It runs in the root of the candidate's patched repository, with the repository importable,
no network and a 30 s limit. It should print what it observes and/or assert what it expects.
A probe is evidence, never a test: it cannot make a candidate pass.

Answer with ONLY this JSON object and nothing else (no prose, no code fences):
{{"probes": [{{"probe_id": "P1", "program": "...", "expected": "..."}}]}}
with 1 to {PROBE_CAP} probes, unique probe_id strings, and "expected" saying in one sentence
what a correct candidate does when the program runs."""


@attrs.frozen
class ProbeSpec:
    """One probe as the model proposed it (schema-checked, spec §4)."""

    probe_id: str
    program: str
    expected: str


@attrs.frozen
class ProbeCall:
    """What one call asked for: the messages and the caps it was held to."""

    messages: tuple[Message, ...]
    temperature: float
    max_completion_tokens: int


class Prober(Protocol):
    """Anything that answers one chat-completions call with the text of its answer.

    Raise `ProbeCallError` (or any ``Exception``) when no answer can be had; the caller
    treats that as "no probe" and never calls again.
    """

    async def complete(
        self, messages: Sequence[Message], *, temperature: float, max_completion_tokens: int
    ) -> str: ...


def _cut(text: str, cap: int) -> str:
    return text if len(text) <= cap else text[:cap] + f"\n[... {len(text) - cap} more characters not shown]"


def probe_messages(
    candidates: Sequence[Mapping[str, Any]], prop: str | None, existing_tests: Sequence[str]
) -> tuple[dict[str, str], ...]:
    """The prompt, assembled deterministically in the spec's order:
    candidates, property, existing tests (each already bounded by the caller)."""
    body = {
        "candidates": list(candidates),
        "property": prop or "(none given: find any behaviour the existing tests leave open)",
        "existing_tests": list(existing_tests),
    }
    user = json.dumps(body, indent=1, ensure_ascii=False, sort_keys=False)
    return ({"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user})


_KEYS = frozenset({"probe_id", "program", "expected"})


def parse_probes(text: str) -> tuple[tuple[ProbeSpec, ...], str | None]:
    """The model's answer → (probes, None), or ((), why there is no probe).

    Strict on purpose: the model must emit nothing outside the schema (spec §4).
    """
    try:
        data = json.loads(text)
    except (ValueError, TypeError) as e:
        return (), f"answer is not JSON ({e})"
    if not isinstance(data, dict) or set(data) != {"probes"}:
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        return (), f'schema violation: the answer must be {{"probes": [...]}}, got {got}'
    items = data["probes"]
    if not isinstance(items, list):
        return (), f"schema violation: `probes` must be a list, got {type(items).__name__}"
    if not items:
        return (), "the answer has no probes"
    if len(items) > PROBE_CAP:
        return (), f"over the cap: {len(items)} probes > {PROBE_CAP}"
    out: list[ProbeSpec] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict) or set(item) != _KEYS:
            got = sorted(item) if isinstance(item, dict) else type(item).__name__
            return (), f"schema violation: probes[{i}] must have exactly {sorted(_KEYS)}, got {got}"
        if not all(isinstance(item[k], str) for k in _KEYS):
            return (), f"schema violation: probes[{i}]: every field must be a string"
        pid, program, expected = item["probe_id"].strip(), item["program"], item["expected"]
        if not pid or len(pid) > PROBE_ID_CAP_CHARS or not pid.isprintable():
            return (
                (),
                f"schema violation: probes[{i}].probe_id {pid[:80]!r} is empty, too long or unprintable",
            )
        if pid in seen:
            return (), f"schema violation: probes[{i}].probe_id {pid!r} is not unique"
        if not program.strip() or "\x00" in program:
            return (), f"schema violation: probes[{i}].program is empty or contains a NUL byte"
        for name, value in (("program", program), ("expected", expected)):
            if len(value) > PROBE_PROGRAM_CAP_CHARS:
                return (
                    (),
                    f"over the cap: probes[{i}].{name} has {len(value)} > {PROBE_PROGRAM_CAP_CHARS} characters",
                )
        seen.add(pid)
        out.append(ProbeSpec(pid, program, expected))
    return tuple(out), None


@attrs.frozen
class OpenAIProber:
    """An OpenAI-compatible chat-completions client (``httpx``, async, one request per call).

    ``base_url`` is the API root (``https://host/v1``); the request goes to
    ``{base_url}/chat/completions`` with ``response_format: json_object``.
    """

    base_url: str
    model: str
    api_key: str | None = attrs.field(default=None, repr=False)
    timeout_s: float = DEFAULT_PROBE_HTTP_TIMEOUT_S

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    async def complete(
        self, messages: Sequence[Message], *, temperature: float, max_completion_tokens: int
    ) -> str:
        """POST one request and return ``choices[0].message.content``.

        Raises `ProbeCallError` on a transport error, a non-200 status or a body without
        that string. Never retries.

        **Cancellation:** cancelling the call closes the connection and re-raises; no
        request is sent again.
        """
        body = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "temperature": temperature,
            "max_completion_tokens": max_completion_tokens,
            "n": 1,
            "stream": False,
            "response_format": {"type": "json_object"},
        }
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        import httpx  # here: most runs never call a model, and httpx costs ~80 ms to import

        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                resp = await client.post(self.url, json=body, headers=headers)
        except httpx.HTTPError as e:
            raise ProbeCallError(f"{self.url}: {type(e).__name__}: {e}") from None
        if resp.status_code != 200:
            raise ProbeCallError(f"{self.url}: HTTP {resp.status_code}: {resp.text[:200]!r}")
        try:
            content = resp.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ProbeCallError(f"{self.url}: the answer has no choices[0].message.content") from None
        if not isinstance(content, str):
            raise ProbeCallError(f"{self.url}: choices[0].message.content is not a string")
        return content


def prober_from_options(options: Options) -> OpenAIProber | None:
    """The client ``options`` configure, or ``None`` when they configure none (then the
    probe step is absent). Raises `RequestError` when only one of ``probe_base_url`` and
    ``probe_model`` is set (naming the variable `Options.from_env` reads it from), or
    when the URL is not http(s)."""
    base, model = options.probe_base_url, options.probe_model
    if not base and not model:
        return None
    if not base or not model:
        missing = ENV_BASE_URL if not base else ENV_MODEL
        raise RequestError(f"probe client: {missing} is not set ({ENV_BASE_URL} and {ENV_MODEL} go together)")
    if not base.startswith(("http://", "https://")):
        raise RequestError(f"probe client: {ENV_BASE_URL}={base!r} is not an http(s) URL")
    return OpenAIProber(base_url=base, model=model, api_key=options.probe_api_key)


def prober_from_env(environ: Mapping[str, str] | None = None) -> OpenAIProber | None:
    """`prober_from_options` of `Options.from_env`: ``AEXEC_PROBE_BASE_URL``,
    ``AEXEC_PROBE_MODEL`` and (optional) ``AEXEC_PROBE_API_KEY``."""
    return prober_from_options(Options.from_env(environ))


class ScriptedProber:
    """A fake model for tests (like httpx's ``MockTransport``): each call gets the next
    scripted reply — a string, or an exception to raise — and is recorded in ``calls``."""

    def __init__(self, *replies: str | Exception) -> None:
        self.replies = list(replies)
        self.calls: list[ProbeCall] = []

    async def complete(
        self, messages: Sequence[Message], *, temperature: float, max_completion_tokens: int
    ) -> str:
        self.calls.append(ProbeCall(tuple(messages), temperature, max_completion_tokens))
        if not self.replies:
            raise ProbeCallError("the scripted prober has no reply left")
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def bounded(text: str | None, cap: int) -> str | None:
    """``text`` cut to ``cap`` characters with a visible marker (for the prompt)."""
    return None if text is None else _cut(text, cap)
