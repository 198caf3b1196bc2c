"""What the Anthropic Messages API sends back, read into mlra's terms.

A streamed answer comes as events: text, tool_use blocks whose input JSON streams in
pieces (or comes whole, up front, from some compatible servers), cumulative usage and a
stop reason; the tool calls' arguments are parsed here, so broken JSON becomes an error
observation, not a crashed run. A failed request becomes one line a user can act on, with
the status and the server's own words. Apart from the provider (anthropic.py), which
decides what to send.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
from anthropic.types import (
    InputJSONDelta,
    MessageDeltaUsage,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    TextBlock,
    TextDelta,
    ToolUseBlock,
)
from anthropic.types import Usage as AnthropicUsage

from mlra.agent.providers.base import ModelResponse, TextCallback, ToolCallRequest, Usage
from mlra.agent.providers.server_gone import one_line
from mlra.tools.registry import parse_arguments


@dataclass
class _PendingCall:
    """A tool_use block whose input JSON is still streaming in."""

    id: str
    name: str
    start_input: object
    json: list[str] = field(default_factory=list)


class StreamRead:
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


def describe_error(name: str, exc: BaseException, *, retries: int, timeout_s: float) -> str:
    """One line a user can act on: what failed, the status and the server's own words."""
    after = f" (gave up after {retries} retries)" if retries else ""
    if isinstance(exc, anthropic.APITimeoutError) or isinstance(exc, httpx2.TimeoutException):
        return f"{name}: no answer within {timeout_s:g} s{after}"
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__ or exc
        return f"{name}: cannot connect to the API: {one_line(str(cause) or type(cause).__name__)}{after}"
    if isinstance(exc, anthropic.APIStatusError):
        kind, message = _error_fields(getattr(exc, "body", None))
        kind = getattr(exc, "type", None) or kind
        message = getattr(exc, "api_message", None) or message or exc.message
        if exc.status_code < 400:
            return f"{name}: the response stream failed: {kind or 'error'}: {one_line(message)}"
        label = f"HTTP {exc.status_code}" + (f" {kind}" if kind else "")
        retried = after if exc.status_code == 429 or exc.status_code >= 500 else ""
        return f"{name}: {label}: {one_line(message)}{retried}"
    if isinstance(exc, httpx2.HTTPError):
        return f"{name}: the response stream broke off: {type(exc).__name__}: {one_line(str(exc))}"
    return f"{name}: {type(exc).__name__}: {one_line(str(exc))}"


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
