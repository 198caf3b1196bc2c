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
backing off as the server's retry-after asks); a stream that ends before its
stop reason, or an HTTP 200 that is no stream of events (a proxy's HTML page,
truncated JSON), is retried here the same way. What is left is a ProviderError
with one readable line.

An Anthropic-compatible local server's model may write its tool calls as text;
they are read as calls as the OpenAI provider reads them
(agent/providers/text_calls.py), and go back to the model as text.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal, cast

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
    InvalidResponse,
    Message,
    ModelProvider,
    ModelResponse,
    ModelSettings,
    ProviderError,
    TextCallback,
    ToolCallRequest,
    Usage,
    retry_hooks,
    tell_first_piece,
    tell_invalid_retry,
    wire_safe,
)
from mlra.agent.providers.pricing import cost, longest_prefix, price_for
from mlra.agent.providers.server_window import (
    UNKNOWN_LOCAL_LIMITS,
    read_server_window,
    server_root,
    unknown_note,
)
from mlra.agent.providers.text_calls import (
    call_as_text,
    read_text_calls,
    result_as_text,
    tools_prompt,
)
from mlra.tools.registry import ToolSpec, parse_arguments

DEFAULT_MAX_RETRIES = 4
DEFAULT_TIMEOUT_S = 600.0
RETRY_DELAY_S = 0.5
"""The first wait before asking again after a stream that was no answer (doubling, to 8 s)."""
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
        settings: ModelSettings | None = None,
        retry_delay_s: float = RETRY_DELAY_S,
    ) -> None:
        self.model = model
        self.name = name or f"anthropic/{model}"
        self.base_url = base_url
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.retry_delay_s = retry_delay_s
        self.prompt_caching = prompt_caching
        self.settings = settings or ModelSettings()
        self._native_tools = self.settings.tool_calls != "text"
        """False once `auto` fell back to tools described in the prompt (or text was chosen)."""
        context_window = context_window or self.settings.context_window
        max_output_tokens = max_output_tokens or self.settings.max_output_tokens
        limits = longest_prefix(MODEL_LIMITS, model.lower())
        # An Anthropic-compatible local server's model (llama-server, vLLM): small windows
        # are common there, and the server is asked for its own (`discover_limits`).
        fallback = UNKNOWN_LOCAL_LIMITS if base_url else (200_000, 8192)
        known_window, known_output = limits or fallback
        self.context_window = context_window or known_window
        self.context_window_from = (
            "setting" if context_window else "model table" if limits else "default"
        )
        self.max_output_tokens = max_output_tokens or known_output
        if context_window and not max_output_tokens:
            self.max_output_tokens = min(self.max_output_tokens, max(1, context_window // 4))
        self.priced = price_for(model) is not None
        self._api_key = api_key
        self._output_set = max_output_tokens is not None
        self._probed = limits is not None or context_window is not None or not base_url
        self._notices: list[str] = []
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            max_retries=max_retries,
            timeout=anthropic.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            http_client=anthropic.DefaultAsyncHttpxClient(event_hooks=retry_hooks(max_retries)),
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def discover_limits(self) -> None:
        """An Anthropic-compatible local server's window, read as the OpenAI provider reads
        it (agent/providers/server_window.py: llama-server's /props, vLLM's /v1/models);
        a server that tells none keeps the default, and the run is told so once."""
        if self._probed:
            return
        self._probed = True
        assert self.base_url is not None
        found = await read_server_window(
            server_root(self.base_url) + "/v1", self.model, self._api_key
        )
        if found.window is None:
            self._notices.append(unknown_note(self.name, found, self.context_window))
            return
        self.context_window = found.window
        self.context_window_from = "server"
        if not self._output_set:
            self.max_output_tokens = min(self.max_output_tokens, max(1, found.window // 4))

    def take_notices(self) -> list[str]:
        notices, self._notices = self._notices, []
        return notices

    def cost_of(self, usage: Usage) -> float:
        return cost(self.model, usage)[0]

    def describe_tools_in_prompt(self) -> bool:
        if not self.base_url or not self._native_tools or self.settings.tool_calls != "auto":
            return False  # the vendor's own API never drops the tools it is sent
        self._native_tools = False
        return True

    async def generate(
        self,
        *,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        on_text: TextCallback | None = None,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        if not self._probed:
            await self.discover_limits()
        request = self.build_request(
            system=system, messages=messages, tools=tools, max_tokens=max_tokens
        )
        started = time.monotonic()
        invalid = 0
        while True:
            try:
                response = await self._stream(request, on_text)
                break
            except (anthropic.APIError, httpx2.HTTPError) as exc:
                raise ProviderError(self._describe(exc)) from exc
            except InvalidResponse as exc:
                invalid += 1
                if invalid > self.max_retries:
                    after = (
                        f" (gave up after {self.max_retries} retries)" if self.max_retries else ""
                    )
                    raise ProviderError(
                        f"{self.name}: HTTP 200 but no valid answer: {exc}{after}"
                    ) from exc
                tell_invalid_retry()
                await asyncio.sleep(min(8.0, self.retry_delay_s * 2 ** (invalid - 1)))
        response.latency_s = time.monotonic() - started
        if tools and self.settings.tool_calls != "native" and not response.tool_calls:
            found = read_text_calls(response.text, [t.name for t in tools])
            if found.calls:
                response.text, response.tool_calls = found.prose, found.calls
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
        native = self._native_tools
        if tools and not native:
            system = f"{system}\n\n{tools_prompt(tools)}".strip()
        if system:
            block: TextBlockParam = {"type": "text", "text": system}
            if self.prompt_caching:
                block["cache_control"] = _ephemeral()
            request["system"] = [block]
        if tools and native:
            specs: list[ToolParam] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
            if self.prompt_caching:
                specs[-1]["cache_control"] = _ephemeral()
            request["tools"] = specs
        return cast(MessageCreateParamsBase, wire_safe(request))

    # --- streaming -------------------------------------------------------------------

    async def _stream(
        self, request: MessageCreateParamsBase, on_text: TextCallback | None
    ) -> ModelResponse:
        read = _StreamRead(on_text)
        sent = time.monotonic()
        first: float | None = None
        """When the first piece of the answer came: before it, the server reads the prompt."""
        # This SDK's typed request has no temperature; compatible servers still take one.
        extra = {"temperature": self.settings.temperature}
        stream = await self._client.messages.create(
            **request,
            stream=True,
            extra_body=extra if self.settings.temperature is not None else None,
        )
        try:
            async with stream:
                async for event in stream:
                    read.take(event)
                    if first is None and (read.text or read.pending):
                        first = time.monotonic() - sent
                        tell_first_piece(first)
        except ValueError as exc:  # a data line that is not JSON (truncated, HTML)
            raise InvalidResponse(f"the stream is not JSON: {_one_line(str(exc), 120)}") from exc
        except httpx2.TransportError as exc:
            if isinstance(exc, httpx2.TimeoutException):
                raise
            raise InvalidResponse(f"the stream broke off: {type(exc).__name__}") from exc
        if not read.started:
            raise InvalidResponse("the stream holds no message")
        if read.stop_reason is None:
            raise InvalidResponse("the stream ended with no stop reason")
        response = read.response()
        response.first_token_s = first
        return response

    def _describe(self, exc: BaseException) -> str:
        return describe_error(self.name, exc, retries=self.max_retries, timeout_s=self.timeout_s)


class _StreamRead:
    """One streamed answer as its events arrive: text, tool calls, usage, stop reason."""

    def __init__(self, on_text: TextCallback | None) -> None:
        self.on_text = on_text
        self.text: list[str] = []
        self.pending: dict[int, _PendingCall] = {}
        self.order: list[int] = []
        self.usage: dict[str, int] = {}
        self.stop_reason: str | None = None
        self.started = False

    def _say(self, piece: str) -> None:
        self.text.append(piece)
        if self.on_text and piece:
            self.on_text(piece)

    def take(self, event: object) -> None:
        if isinstance(event, RawMessageStartEvent):
            self.started = True
            _merge_usage(self.usage, event.message.usage)
        elif isinstance(event, RawContentBlockStartEvent):
            block = event.content_block
            if isinstance(block, TextBlock):
                if block.text:
                    self._say(block.text)
            elif isinstance(block, ToolUseBlock):
                self.pending[event.index] = _PendingCall(
                    id=block.id, name=block.name, start_input=block.input
                )
                self.order.append(event.index)
        elif isinstance(event, RawContentBlockDeltaEvent):
            delta = event.delta
            if isinstance(delta, TextDelta):
                self._say(delta.text)
            elif isinstance(delta, InputJSONDelta):
                call = self.pending.get(event.index)
                if call is not None:
                    call.json.append(delta.partial_json)
        elif isinstance(event, RawMessageDeltaEvent):
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            _merge_usage(self.usage, event.usage)

    def response(self) -> ModelResponse:
        usage = self.usage
        read = usage.get("cache_read_input_tokens", 0)
        written = usage.get("cache_creation_input_tokens", 0)
        return ModelResponse(
            text="".join(self.text),
            tool_calls=[_tool_call(self.pending[i], self.stop_reason) for i in self.order],
            usage=Usage(
                input_tokens=usage.get("input_tokens", 0) + read + written,
                output_tokens=usage.get("output_tokens", 0),
                cache_read_tokens=read,
                cache_write_tokens=written,
                estimated="input_tokens" not in usage,
            ),
            stop_reason=self.stop_reason,
        )


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
    written: set[str] = set()
    """Ids of calls the model wrote as text: they and their results go back as text."""

    def add(role: Literal["user", "assistant"], blocks: list[Block]) -> None:
        if not blocks:
            return
        if out and out[-1].role == role:
            out[-1].content.extend(blocks)
        else:
            out.append(_Turn(role, list(blocks)))

    for message in messages:
        as_text = [c for c in message.tool_calls if c.from_text]
        if message.role == "assistant" and as_text:
            written.update(c.id for c in as_text)
            parts = [message.content.strip(), *(call_as_text(c) for c in as_text)]
            add("assistant", [{"type": "text", "text": "\n\n".join(p for p in parts if p)}])
        elif message.role == "tool" and message.tool_call_id in written:
            content = result_as_text(
                message.tool_name or "tool", message.content, is_error=message.is_error
            )
            add("user", [{"type": "text", "text": content}])
        elif message.role == "assistant":
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
