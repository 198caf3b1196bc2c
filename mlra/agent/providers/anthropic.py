"""Claude through the Anthropic Messages API, streamed.

The neutral history is translated on every call into strictly alternating turns
with paired tool results (agent/providers/anthropic_messages.py); the streamed
answer and any error are read back in agent/providers/anthropic_replies.py.

Prompt caching marks the stable prefix (system prompt, tool definitions) and a
moving breakpoint on the newest message, so each turn reads the previous turn's
prefix from the cache and pays full price only for what is new.

Retries of 429, 5xx, overloads and time-outs are the SDK's (`max_retries`,
backing off as the server's retry-after asks); a stream that ends before its
stop reason, or an HTTP 200 that is no stream of events (a proxy's HTML page,
truncated JSON), is retried here the same way. A connection lost mid-answer or
refused is a ServerGone (agent/providers/server_gone.py, read as for OpenAI), which
the run waits out. What is left is a ProviderError with one readable line.

An Anthropic-compatible local server's model may write its tool calls as text;
they are read as calls as the OpenAI provider reads them
(agent/providers/text_calls.py), and go back to the model as text.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import cast

import anthropic
import httpx2
from anthropic.types import CacheControlEphemeralParam, TextBlockParam, ToolParam
from anthropic.types.message_create_params import MessageCreateParamsBase

from mlra.agent.providers.anthropic_messages import to_anthropic_turns
from mlra.agent.providers.anthropic_replies import StreamRead, describe_error, one_line
from mlra.agent.providers.api_reach import reach_api
from mlra.agent.providers.base import (
    InvalidResponse,
    Message,
    ModelProvider,
    ModelResponse,
    ModelSettings,
    ProviderError,
    TextCallback,
    Usage,
    retries_made,
    retry_hooks,
    tell_first_piece,
    tell_invalid_retry,
)
from mlra.agent.providers.pricing import cost, longest_prefix, price_for
from mlra.agent.providers.server_gone import failed_answer, server_gone
from mlra.agent.providers.server_window import (
    UNKNOWN_LOCAL_LIMITS,
    ServerProbe,
    ServerUnreachable,
    server_root,
)
from mlra.agent.providers.text_calls import TextCallReading, tools_prompt
from mlra.agent.providers.window_reading import WindowReading
from mlra.agent.providers.wire_safe import wire_safe
from mlra.tools.registry import ToolSpec

DEFAULT_MAX_RETRIES = 4
DEFAULT_TIMEOUT_S = 600.0
RETRY_DELAY_S = 0.5
"""The first wait before asking again after a stream that was no answer (doubling, to 8 s)."""

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


def _ephemeral() -> CacheControlEphemeralParam:
    """A fresh marker each time: the request's dicts must not share one mutable value."""
    return {"type": "ephemeral"}


class AnthropicProvider(TextCallReading, WindowReading, ModelProvider):
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
        self._probe = ServerProbe(
            ask_window=limits is None and context_window is None, base_url=base_url
        )
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
        a server that tells none keeps the default, and the run is told so once; one that
        cannot be connected to at all raises ServerUnreachable, window set or not; so does
        Anthropic's own API where its address cannot be connected to (api_reach.py)."""
        if self.base_url is not None:
            await self.read_window(server_root(self.base_url) + "/v1", shown_url=self.base_url)
        else:
            await reach_api(str(self._client.base_url).rstrip("/"))

    def tells_sending(self) -> bool:
        return True

    def take_notices(self) -> list[str]:
        notices, self._notices = self._notices, []
        return notices

    def cost_of(self, usage: Usage) -> float:
        return cost(self.model, usage)[0]

    async def generate(
        self,
        *,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        on_text: TextCallback | None = None,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        if not self._probe.probed:
            with contextlib.suppress(ServerUnreachable):  # the request says why, retried
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
            except anthropic.APIConnectionError as exc:
                if isinstance(exc, anthropic.APITimeoutError):
                    raise ProviderError(self._describe(exc)) from exc
                # Nothing answers at the address (after the SDK's own retries): waited for.
                raise server_gone(self.name, self.base_url, exc, retries_made()) from exc
            except (anthropic.APIError, httpx2.HTTPError) as exc:
                raise failed_answer(self.name, self.base_url, exc, self._describe(exc)) from exc
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
        await self.read_window_again()
        self.read_calls_into(response, tools)
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
        read = StreamRead(on_text)
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
            raise InvalidResponse(f"the stream is not JSON: {one_line(str(exc), 120)}") from exc
        except httpx2.TransportError as exc:
            if isinstance(exc, httpx2.TimeoutException):
                raise
            # The server went away (killed, restarted): waited for, not asked at once.
            raise server_gone(self.name, self.base_url, exc, None) from exc
        if not read.started:
            raise InvalidResponse("the stream holds no message")
        if read.stop_reason is None:
            raise InvalidResponse("the stream ended with no stop reason")
        response = read.response()
        response.first_token_s = first
        return response

    def _describe(self, exc: BaseException) -> str:
        return describe_error(self.name, exc, retries=self.max_retries, timeout_s=self.timeout_s)
