"""OpenAI chat completions, streamed; also any OpenAI-compatible server.

The same code talks to api.openai.com and, through `base_url`, to vLLM,
llama.cpp, Ollama and similar servers. Those servers differ in small ways, so
the provider adapts once and remembers: a server that rejects `stream_options`
is asked again without it (usage is then estimated, and marked so), an OpenAI
organization not verified for streaming a model gets non-streamed answers, and a
server that refuses native tools (vLLM without a tool parser, llama.cpp without
--jinja, an Ollama model without tool support) is described the tools in the
prompt instead. The context window is read from the server where it tells it
(agent/providers/server_window.py) unless the user set one.

The history goes out as chat messages rebuilt on every call
(agent/providers/openai_messages.py); answers and errors are read back in
agent/providers/openai_replies.py, where tool-call deltas are accumulated by index and
arguments parsed, so a model that writes broken JSON gets an error observation, not a
crashed run. A model that writes its calls as text has them read
(agent/providers/text_calls.py: behind a base URL, or with `--tool-calls text`).

An HTTP 200 that is no answer (HTML from a proxy, `{}`, no `choices`, truncated
JSON, a stream that ends with no finish reason) is retried as the SDK retries a
5xx, then is a ProviderError, never an empty turn. An empty or cut stream is first
checked against the window: llama-cpp-python answers a streamed request longer than its
window with HTTP 200 and an empty stream, and the same request without streaming with
HTTP 400 `context_length_exceeded`. A request that is larger than a known window by
its own count fails as too long at once; else it is asked once more without streaming,
so the server's own reason is read. A "too long" failure is mended by the caller
(summarized and sent again, agent/loop/model_turn.py), never retried unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import httpx2
import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

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
    estimated_usage,
    retries_made,
    retry_hooks,
    tell_first_piece,
    tell_invalid_retry,
)
from mlra.agent.providers.openai_messages import to_openai_messages
from mlra.agent.providers.openai_replies import (
    describe_error,
    finish_of,
    one_line,
    take_chunk,
    tool_call,
    usage_of,
)
from mlra.agent.providers.pricing import cost, longest_prefix, price_for
from mlra.agent.providers.server_gone import failed_answer, server_gone
from mlra.agent.providers.server_window import (
    UNKNOWN_LOCAL_LIMITS,
    ServerProbe,
    ServerUnreachable,
)
from mlra.agent.providers.text_calls import REFUSED_NATIVE, TextCallReading, tools_prompt
from mlra.agent.providers.window_reading import WindowReading
from mlra.agent.providers.wire_safe import wire_safe
from mlra.tools.registry import ToolSpec

DEFAULT_MAX_RETRIES = 4
DEFAULT_TIMEOUT_S = 600.0
PLACEHOLDER_API_KEY = "not-needed"

# (context window, max output tokens) by model-name prefix.
MODEL_LIMITS: dict[str, tuple[int, int]] = {
    "gpt-4o": (128_000, 16_384),
    "gpt-4.1": (1_047_576, 32_768),
    "gpt-5": (400_000, 128_000),
    "gpt-5-chat": (128_000, 16_384),
    "gpt-5.1": (400_000, 128_000),
    "gpt-5.2": (400_000, 128_000),
    "gpt-5.4": (1_050_000, 128_000),
    "o1": (200_000, 100_000),
    "o1-mini": (128_000, 65_536),
    "o3": (200_000, 100_000),
    "o4-mini": (200_000, 100_000),
}
UNKNOWN_API_LIMITS = (128_000, 8192)
"""An unknown model on api.openai.com: recent models all have at least this."""
RETRY_DELAY_S = 0.5
"""The first wait before asking again after an answer that was no answer (doubling, to 8 s),
as the SDK waits before retrying a 5xx."""
NO_NATIVE_TOOLS = (
    "enable-auto-tool-choice",
    "tool-call-parser",
    "--jinja",
    "does not support tools",
    "tools are not supported",
    "tool use is not supported",
    "tool calling is not supported",
)
"""What servers say when they refuse native tool definitions."""


class OpenAIProvider(TextCallReading, WindowReading, ModelProvider):
    def __init__(
        self,
        model: str,
        *,
        api_key: str | None,
        base_url: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        name: str | None = None,
        settings: ModelSettings | None = None,
        retry_delay_s: float = RETRY_DELAY_S,
    ) -> None:
        self.model = model
        self.name = name or f"openai/{model}"
        self.base_url = base_url
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.retry_delay_s = retry_delay_s
        self.settings = settings or ModelSettings()
        context_window = context_window or self.settings.context_window
        max_output_tokens = max_output_tokens or self.settings.max_output_tokens
        self._output_set = max_output_tokens is not None
        limits = longest_prefix(MODEL_LIMITS, model.lower())
        self._window_known = limits is not None or context_window is not None
        fallback = UNKNOWN_LOCAL_LIMITS if base_url else UNKNOWN_API_LIMITS
        known_window, known_output = limits or fallback
        self.context_window = context_window or known_window
        self.context_window_from = (
            "setting" if context_window else "model table" if limits else "default"
        )
        self.max_output_tokens = max_output_tokens or known_output
        if context_window and not self._output_set:
            self.max_output_tokens = min(self.max_output_tokens, max(1, context_window // 4))
        self.priced = price_for(model) is not None
        self._api_key = api_key or PLACEHOLDER_API_KEY
        self._client = openai.AsyncOpenAI(
            api_key=api_key or PLACEHOLDER_API_KEY,
            base_url=base_url,
            max_retries=max_retries,
            timeout=openai.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            http_client=openai.DefaultAsyncHttpxClient(event_hooks=retry_hooks(max_retries)),
        )
        # What the server accepts, learned from its 400s and kept for the next calls.
        self._stream = True
        self._stream_usage = True
        # api.openai.com wants max_completion_tokens (reasoning models refuse max_tokens);
        # compatible servers know max_tokens best.
        self._token_param = "max_tokens" if base_url else "max_completion_tokens"
        self._probe = ServerProbe(ask_window=not self._window_known, base_url=base_url)
        self._native_tools = self.settings.tool_calls != "text"
        """False once the server refused native tools (or the user chose text calls)."""
        self._notices: list[str] = []
        """Adaptations not yet told to the run (see `take_notices`)."""

    async def aclose(self) -> None:
        await self._client.close()

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
        wanted = max_tokens or self.max_output_tokens
        limit = max(1, min(wanted, self.max_output_tokens))
        specs = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in tools
        ]
        started = time.monotonic()
        adaptations = 0
        invalid = 0
        plain = False
        """This attempt goes without streaming, to read why the last stream was empty."""
        asked_plain = False
        while True:
            native = self._native_tools
            prompt = system if native or not tools else f"{system}\n\n{tools_prompt(tools)}"
            chat = to_openai_messages(prompt.strip(), messages)
            request = self.build_request(chat, specs if native else [], limit, plain=plain)
            try:
                if request.get("stream"):
                    response = await self._streamed(request, on_text)
                else:
                    response = await self._whole(request, on_text)
                break
            except openai.BadRequestError as exc:
                adaptations += 1
                if adaptations > 3 or not self._adapt(exc):
                    raise ProviderError(self._describe(exc)) from exc
            except openai.APIConnectionError as exc:
                if isinstance(exc, openai.APITimeoutError):
                    raise ProviderError(self._describe(exc)) from exc
                made = retries_made()
                raise server_gone(self.name, self.base_url, exc, made) from exc
            except openai.APIError as exc:
                raise failed_answer(self.name, self.base_url, exc, self._describe(exc)) from exc
            except InvalidResponse as exc:
                plain = False
                invalid += 1
                reread = exc.cut_stream and not asked_plain
                if reread:
                    self._check_window(request, exc)
                if invalid > self.max_retries:
                    after = (
                        f" (gave up after {self.max_retries} retries)" if self.max_retries else ""
                    )
                    raise ProviderError(
                        f"{self.name}: HTTP 200 but no valid answer from "
                        f"{self.base_url or 'the API'}: {exc}{after}"
                    ) from exc
                tell_invalid_retry()
                if reread:
                    asked_plain = plain = True
                    self._notices.append(
                        f"{self.name}: {self.base_url or 'the API'} answered HTTP 200 with "
                        f"{exc}; asked once more without streaming, to read the server's reason"
                    )
                    continue
                await asyncio.sleep(min(8.0, self.retry_delay_s * 2 ** (invalid - 1)))
        response.latency_s = time.monotonic() - started
        await self.read_window_again()
        self.read_calls_into(response, tools)
        if response.usage.input_tokens == 0:
            # No usage from the server: an estimate keeps context upkeep honest.
            size = len(json.dumps(request["messages"])) + len(json.dumps(request.get("tools", [])))
            produced = len(response.text) + sum(len(c.raw_arguments) for c in response.tool_calls)
            response.usage = estimated_usage(size, produced)
        response.cost_usd = cost(self.model, response.usage)[0]
        return response

    def tells_sending(self) -> bool:
        return True

    def take_notices(self) -> list[str]:
        notices, self._notices = self._notices, []
        return notices

    def _check_window(self, request: dict[str, Any], exc: InvalidResponse) -> None:
        """An empty or cut stream for a request larger than the model's known window (by
        the same count as estimated usage: four characters a token) is that request being
        too long: a ProviderError the caller mends by summarizing, not a flaky server."""
        if self.context_window_from == "default":
            return  # a guessed window says nothing: the server's reason is read instead
        size = len(json.dumps(request["messages"])) + len(json.dumps(request.get("tools", [])))
        tokens = size // 4 + 1
        if tokens >= self.context_window:
            raise ProviderError(
                f"{self.name}: {self.base_url or 'the API'} answered HTTP 200 with {exc} "
                f"to a request of about {tokens:,} tokens, more than the model's context window "
                f"({self.context_window:,} tokens, from the {self.context_window_from}): "
                "the request is too long"
            )

    def build_request(
        self,
        chat: list[dict[str, Any]],
        specs: list[dict[str, Any]],
        limit: int,
        *,
        plain: bool = False,
    ) -> dict[str, Any]:
        """The request's body; `plain`: not streamed, whatever the server accepts."""
        request: dict[str, Any] = {"model": self.model, "messages": chat, self._token_param: limit}
        if specs:
            request["tools"] = specs
        if self.settings.temperature is not None:
            request["temperature"] = self.settings.temperature
        if self.settings.seed is not None:
            request["seed"] = self.settings.seed
        if self._stream and not plain:
            request["stream"] = True
            if self._stream_usage:
                request["stream_options"] = {"include_usage": True}
        return wire_safe(request)

    def _adapt(self, exc: openai.BadRequestError) -> bool:
        """Change what is sent after a 400 that names an unsupported feature; False if none."""
        text = f"{exc.message} {exc.body}".lower()
        if (
            self._native_tools
            and self.settings.tool_calls == "auto"
            and any(phrase in text for phrase in NO_NATIVE_TOOLS)
        ):
            self._native_tools = False  # describe the tools in the prompt, read calls from text
            self._notices.append(
                f"{self.name}: {REFUSED_NATIVE} "
                f"({one_line(exc.message, 120)}); the tools are now described in the "
                "prompt and calls are read from the model's text"
            )
            return True
        if self._stream and self._stream_usage and "stream_options" in text:
            self._stream_usage = False
            return True
        if self._stream and "stream" in text and "verif" in text:
            self._stream = False
            return True
        if self._token_param == "max_completion_tokens" and "max_completion_tokens" in text:
            self._token_param = "max_tokens"
            return True
        if (
            self._token_param == "max_tokens"
            and "max_tokens" in text
            and "max_completion_tokens" in text
        ):
            self._token_param = "max_completion_tokens"
            return True
        return False

    async def _streamed(
        self, request: dict[str, Any], on_text: TextCallback | None
    ) -> ModelResponse:
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: Any = None
        finish: str | None = None
        sent = time.monotonic()
        first: float | None = None
        """When the first piece of the answer came: before it, the server reads the prompt."""
        stream = await self._client.chat.completions.create(**request)
        try:
            async with stream:
                async for chunk in stream:
                    if not isinstance(chunk, ChatCompletionChunk):
                        raise InvalidResponse(f"a stream event is not a chunk: {chunk!r:.80}")
                    if chunk.usage is not None:
                        usage = chunk.usage
                    take_chunk(chunk, text, calls, on_text)
                    if first is None and (text or calls):
                        first = time.monotonic() - sent
                        tell_first_piece(first)
                    finish = finish_of(chunk) or finish
        except ValueError as exc:  # a data line that is not JSON (truncated, HTML)
            raise InvalidResponse(f"the stream is not JSON: {one_line(str(exc), 120)}") from exc
        except httpx2.TransportError as exc:  # the connection broke off mid-stream
            if isinstance(exc, httpx2.TimeoutException):
                raise ProviderError(self._describe(exc)) from exc
            # The server went away (killed, restarted): waited for, not asked at once.
            raise server_gone(self.name, self.base_url, exc, None) from exc
        if finish is None:
            what = "an empty stream" if not text and not calls else "a stream cut off"
            raise InvalidResponse(f"{what} (no finish reason)", cut_stream=True)
        return ModelResponse(
            text="".join(text),
            tool_calls=[tool_call(calls[k], finish) for k in sorted(calls)],
            usage=usage_of(usage),
            stop_reason=finish,
            first_token_s=first,
        )

    async def _whole(self, request: dict[str, Any], on_text: TextCallback | None) -> ModelResponse:
        try:
            completion: Any = await self._client.chat.completions.create(**request)
        except ValueError as exc:  # a body that is not JSON (truncated, HTML)
            raise InvalidResponse(f"the body is not JSON: {one_line(str(exc), 120)}") from exc
        choices = getattr(completion, "choices", None)
        if not isinstance(completion, ChatCompletion) or not choices:
            raise InvalidResponse(f"the body is no completion: {one_line(repr(completion), 120)}")
        choice = choices[0]
        message = getattr(choice, "message", None)
        if message is None:
            raise InvalidResponse("the completion's choice holds no message")
        text = (message.content if message else None) or ""
        if text and on_text:
            on_text(text)
        calls: dict[int, dict[str, Any]] = {}
        for k, call in enumerate((message.tool_calls if message else None) or []):
            function = getattr(call, "function", None)
            calls[k] = {
                "id": call.id,
                "name": function.name if function else "",
                "arguments": [function.arguments if function else ""],
            }
        finish = choice.finish_reason if choice else None
        return ModelResponse(
            text=text,
            tool_calls=[tool_call(calls[k], finish) for k in sorted(calls)],
            usage=usage_of(completion.usage),
            stop_reason=finish,
        )

    async def discover_limits(self) -> None:
        """The context window as the server tells it, unless the user set one or the model
        is a known one (agent/providers/server_window.py: vLLM, llama-server, Ollama). A
        server that tells nothing leaves the default (32k for a local server), and the run
        is told so once, with how to set it; one loading its model is asked again after
        its first answer (window_reading.py). Asked with a short time-out, no retries.
        A server that cannot be connected to at all raises ServerUnreachable, window set
        or not: `mlra run` refuses then, before a run folder is made. OpenAI's own API is
        only connected to, and refused the same way where it cannot be (api_reach.py)."""
        if self.base_url is not None:
            await self.read_window(self.base_url)
        else:
            await reach_api(str(self._client.base_url).rstrip("/"))

    def _describe(self, exc: BaseException) -> str:
        made = retries_made()
        return describe_error(
            self.name,
            exc,
            retries=self.max_retries if made is None else made,
            timeout_s=self.timeout_s,
            base_url=self.base_url,
        )


# --- history ---------------------------------------------------------------------------
