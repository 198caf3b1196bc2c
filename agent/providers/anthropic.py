"""Claude through the Anthropic Messages API, streamed.

The neutral history is translated on every call (the history is the source of
truth, not a provider-side conversation). Anthropic needs strict alternation and
tool results right after their calls, so consecutive tool results and any user
text after them become one user message, and calls whose results are missing
(a run cut short while a tool ran) get a stand-in error result instead of a 400.

Prompt caching marks the stable prefix (system prompt, tool definitions) and a
moving breakpoint on the newest message, so each turn reads the previous turn's
prefix from the cache and pays full price only for what is new.

Retries of 429, 5xx, overloads and time-outs are the SDK's (`max_retries`,
backing off as the server's retry-after asks); what is left is a ProviderError
with one readable line.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import anthropic
import httpx2
from anthropic.types import (
    AssistantMessageParam,
    CacheControlEphemeralParam,
    InputJSONDelta,
    MessageDeltaUsage,
    MessageParam,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    TextBlock,
    TextBlockParam,
    TextDelta,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlock,
    ToolUseBlockParam,
    UserMessageParam,
)
from anthropic.types import Usage as AnthropicUsage
from anthropic.types.message_create_params import MessageCreateParamsBase

from mlra.agent.providers.base import (
    Message,
    ModelProvider,
    ModelResponse,
    ProviderError,
    TextCallback,
    ToolCallRequest,
    Usage,
)
from mlra.agent.providers.pricing import cost, longest_prefix, price_for
from mlra.tools.registry import ToolSpec, parse_arguments

DEFAULT_MAX_RETRIES = 4
DEFAULT_TIMEOUT_S = 600.0
MISSING_RESULT = "Error: no result was recorded for this tool call (the run was interrupted)."

# (context window, max output tokens) by longest model-name prefix. A newer model of a
# known family gets the family's line; a model of no known family gets 200k / 8192.
MODEL_LIMITS: dict[str, tuple[int, int]] = {
    "claude-opus": (200_000, 64_000),
    "claude-opus-4-0": (200_000, 32_000),
    "claude-opus-4-1": (200_000, 32_000),
    "claude-opus-4-20250514": (200_000, 32_000),
    "claude-4-opus": (200_000, 32_000),
    "claude-opus-4-6": (200_000, 128_000),
    "claude-sonnet": (200_000, 64_000),
    "claude-4-sonnet": (200_000, 64_000),
    "claude-haiku": (200_000, 64_000),
    "claude-3-7-sonnet": (200_000, 64_000),
    "claude-3-5": (200_000, 8_192),
    "claude-3-haiku": (200_000, 4_096),
    "claude-3-opus": (200_000, 4_096),
}

# The blocks this provider writes into a request; narrowed on their "type" key.
Block = TextBlockParam | ToolUseBlockParam | ToolResultBlockParam


def _ephemeral() -> CacheControlEphemeralParam:
    """A fresh marker each time: the request's dicts must not share one mutable value."""
    return {"type": "ephemeral"}


@dataclass
class _Turn:
    """One message while the history is being merged and repaired; mutable, unlike the
    SDK's TypedDicts whose content is only an Iterable."""

    role: Literal["user", "assistant"]
    content: list[Block]

    def param(self) -> MessageParam:
        if self.role == "user":
            return UserMessageParam(role="user", content=self.content)
        return AssistantMessageParam(role="assistant", content=self.content)


@dataclass
class _PendingCall:
    """A tool_use block whose input JSON is still streaming in."""

    id: str
    name: str
    start_input: object
    json: list[str] = field(default_factory=list)


class AnthropicProvider(ModelProvider):
    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        prompt_caching: bool = True,
        name: str | None = None,
    ) -> None:
        self.model = model
        self.name = name or f"anthropic/{model}"
        self.base_url = base_url
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.prompt_caching = prompt_caching
        limits = longest_prefix(MODEL_LIMITS, model.lower())
        known_window, known_output = limits or (200_000, 8192)
        self.context_window = context_window or known_window
        self.max_output_tokens = max_output_tokens or known_output
        self.priced = price_for(model) is not None
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            max_retries=max_retries,
            timeout=anthropic.Timeout(timeout_s, connect=min(10.0, timeout_s)),
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def generate(
        self,
        *,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        on_text: TextCallback | None = None,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        request = self.build_request(
            system=system, messages=messages, tools=tools, max_tokens=max_tokens
        )
        started = time.monotonic()
        try:
            response = await self._stream(request, on_text)
        except (anthropic.APIError, httpx2.HTTPError) as exc:
            raise ProviderError(self._describe(exc)) from exc
        response.latency_s = time.monotonic() - started
        response.cost_usd = cost(self.model, response.usage)[0]
        return response

    # --- request ---------------------------------------------------------------------

    def build_request(
        self,
        *,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        max_tokens: int | None = None,
    ) -> MessageCreateParamsBase:
        """The keyword arguments of `messages.create`, public so tests can inspect them."""
        wanted = max_tokens or self.max_output_tokens
        turns = to_anthropic_turns(messages)
        if self.prompt_caching and turns:
            turns[-1].content[-1]["cache_control"] = _ephemeral()
        request: MessageCreateParamsBase = {
            "model": self.model,
            "max_tokens": max(1, min(wanted, self.max_output_tokens)),
            "messages": [turn.param() for turn in turns],
        }
        if system:
            block: TextBlockParam = {"type": "text", "text": system}
            if self.prompt_caching:
                block["cache_control"] = _ephemeral()
            request["system"] = [block]
        if tools:
            specs: list[ToolParam] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
            if self.prompt_caching:
                specs[-1]["cache_control"] = _ephemeral()
            request["tools"] = specs
        return request

    # --- streaming -------------------------------------------------------------------

    async def _stream(
        self, request: MessageCreateParamsBase, on_text: TextCallback | None
    ) -> ModelResponse:
        text: list[str] = []
        pending: dict[int, _PendingCall] = {}
        order: list[int] = []
        usage: dict[str, int] = {}
        stop_reason: str | None = None
        stream = await self._client.messages.create(**request, stream=True)
        async with stream:
            async for event in stream:
                if isinstance(event, RawMessageStartEvent):
                    _merge_usage(usage, event.message.usage)
                elif isinstance(event, RawContentBlockStartEvent):
                    block = event.content_block
                    if isinstance(block, TextBlock):
                        if block.text:
                            text.append(block.text)
                            if on_text:
                                on_text(block.text)
                    elif isinstance(block, ToolUseBlock):
                        pending[event.index] = _PendingCall(
                            id=block.id, name=block.name, start_input=block.input
                        )
                        order.append(event.index)
                elif isinstance(event, RawContentBlockDeltaEvent):
                    delta = event.delta
                    if isinstance(delta, TextDelta):
                        text.append(delta.text)
                        if on_text and delta.text:
                            on_text(delta.text)
                    elif isinstance(delta, InputJSONDelta):
                        call = pending.get(event.index)
                        if call is not None:
                            call.json.append(delta.partial_json)
                elif isinstance(event, RawMessageDeltaEvent):
                    stop_reason = event.delta.stop_reason or stop_reason
                    _merge_usage(usage, event.usage)
        calls = [_tool_call(pending[i], stop_reason) for i in order]
        read = usage.get("cache_read_input_tokens", 0)
        written = usage.get("cache_creation_input_tokens", 0)
        return ModelResponse(
            text="".join(text),
            tool_calls=calls,
            usage=Usage(
                input_tokens=usage.get("input_tokens", 0) + read + written,
                output_tokens=usage.get("output_tokens", 0),
                cache_read_tokens=read,
                cache_write_tokens=written,
            ),
            stop_reason=stop_reason,
        )

    def _describe(self, exc: BaseException) -> str:
        return describe_error(self.name, exc, retries=self.max_retries, timeout_s=self.timeout_s)


def _merge_usage(
    usage: dict[str, int], reported: AnthropicUsage | MessageDeltaUsage | None
) -> None:
    """Streamed usage is cumulative: a later non-null count replaces the earlier one."""
    if reported is None:
        return
    for key in (
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ):
        value = getattr(reported, key, None)
        if value is not None:
            usage[key] = int(value)


def _tool_call(call: _PendingCall, stop_reason: str | None) -> ToolCallRequest:
    raw = "".join(call.json)
    start_input = call.start_input
    if not raw and isinstance(start_input, dict) and start_input:
        # Some Anthropic-compatible servers send the whole input up front, unstreamed.
        raw = json.dumps(start_input)
    arguments, problem = parse_arguments(raw)
    if problem is not None and stop_reason == "max_tokens":
        problem = "the arguments were cut off at the output token limit (max_tokens); " + problem
    return ToolCallRequest(
        id=call.id,
        name=call.name,
        arguments=arguments,
        raw_arguments=raw,
        parse_error=problem,
    )


# --- history ---------------------------------------------------------------------------


def to_anthropic_turns(messages: list[Message]) -> list[_Turn]:
    """The neutral history as strictly alternating Anthropic turns with paired tool results,
    still mutable so the cache breakpoint can be placed."""
    out: list[_Turn] = []

    def add(role: Literal["user", "assistant"], blocks: list[Block]) -> None:
        if not blocks:
            return
        if out and out[-1].role == role:
            out[-1].content.extend(blocks)
        else:
            out.append(_Turn(role, list(blocks)))

    for message in messages:
        if message.role == "assistant":
            blocks: list[Block] = []
            if message.content.strip():
                # Trailing whitespace is refused in a final assistant turn; strip it everywhere
                # so the cached prefix stays byte-identical from turn to turn.
                blocks.append({"type": "text", "text": message.content.rstrip()})
            for call in message.tool_calls:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        # A call whose arguments were not a JSON object is replayed as {}:
                        # its tool result already tells the model what went wrong.
                        "input": call.arguments if call.arguments is not None else {},
                    }
                )
            add("assistant", blocks or [{"type": "text", "text": "(no response)"}])
        elif message.role == "tool":
            result: ToolResultBlockParam = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content or "(no output)",
            }
            if message.is_error:
                result["is_error"] = True
            add("user", [result])
        elif message.content.strip():
            add("user", [{"type": "text", "text": message.content}])
    return _pair_tool_results(out)


def _pair_tool_results(messages: list[_Turn]) -> list[_Turn]:
    """Every tool_use answered in the next user message, results first; strays become text."""
    fixed: list[_Turn] = []
    for i, message in enumerate(messages):
        if message.role == "user":
            previous = fixed[-1] if fixed and fixed[-1].role == "assistant" else None
            expected = _call_ids(previous) if previous else []
            results: list[Block] = []
            others: list[Block] = []
            answered: set[str] = set()
            for block in message.content:
                if block["type"] == "tool_result":
                    if block["tool_use_id"] in expected:
                        results.append(block)
                        answered.add(block["tool_use_id"])
                    else:
                        others.append(_stray_result(block))
                else:
                    others.append(block)
            results += [_missing_result(cid) for cid in expected if cid not in answered]
            fixed.append(_Turn("user", results + others))
        else:
            if not fixed:
                fixed.append(_Turn("user", [{"type": "text", "text": "(continue)"}]))
            fixed.append(message)
            last = i == len(messages) - 1
            calls = _call_ids(message)
            if calls and last:
                fixed.append(_Turn("user", [_missing_result(c) for c in calls]))
    if not fixed:
        fixed.append(_Turn("user", [{"type": "text", "text": "(continue)"}]))
    return fixed


def _call_ids(turn: _Turn) -> list[str]:
    return [b["id"] for b in turn.content if b["type"] == "tool_use"]


def _missing_result(call_id: str) -> ToolResultBlockParam:
    return {
        "type": "tool_result",
        "tool_use_id": call_id,
        "content": MISSING_RESULT,
        "is_error": True,
    }


def _stray_result(block: ToolResultBlockParam) -> TextBlockParam:
    content = block.get("content", "")
    return {"type": "text", "text": f"[tool result for {block.get('tool_use_id')}]\n{content}"}


# --- errors ----------------------------------------------------------------------------


def describe_error(name: str, exc: BaseException, *, retries: int, timeout_s: float) -> str:
    """One line a user can act on: what failed, the status and the server's own words."""
    after = f" (gave up after {retries} retries)" if retries else ""
    if isinstance(exc, anthropic.APITimeoutError) or isinstance(exc, httpx2.TimeoutException):
        return f"{name}: no answer within {timeout_s:g} s{after}"
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__ or exc
        return f"{name}: cannot connect to the API: {_one_line(str(cause) or type(cause).__name__)}{after}"
    if isinstance(exc, anthropic.APIStatusError):
        kind, message = _error_fields(getattr(exc, "body", None))
        kind = getattr(exc, "type", None) or kind
        message = getattr(exc, "api_message", None) or message or exc.message
        if exc.status_code < 400:
            return f"{name}: the response stream failed: {kind or 'error'}: {_one_line(message)}"
        label = f"HTTP {exc.status_code}" + (f" {kind}" if kind else "")
        retried = after if exc.status_code == 429 or exc.status_code >= 500 else ""
        return f"{name}: {label}: {_one_line(message)}{retried}"
    if isinstance(exc, httpx2.HTTPError):
        return f"{name}: the response stream broke off: {type(exc).__name__}: {_one_line(str(exc))}"
    return f"{name}: {type(exc).__name__}: {_one_line(str(exc))}"


def _error_fields(body: Any) -> tuple[str | None, str | None]:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            kind = inner.get("type")
            message = inner.get("message")
            return (
                kind if isinstance(kind, str) else None,
                message if isinstance(message, str) else None,
            )
    return None, None


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
