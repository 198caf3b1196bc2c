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

Tool-call deltas are accumulated by index; arguments are parsed here so a model
that writes broken JSON gets an error observation, not a crashed run. A model
that writes its calls as text has them read (agent/providers/text_calls.py).

An HTTP 200 that is no answer (HTML from a proxy, `{}`, no `choices`, truncated
JSON, a stream that ends with no finish reason) is retried as the SDK retries a
5xx, then is a ProviderError, never an empty turn. An empty or cut stream is first
checked against the window: llama-cpp-python answers a streamed request longer than its
window with HTTP 200 and an empty stream, and the same request without streaming with
HTTP 400 `context_length_exceeded`. A request that is larger than a known window by
its own count fails as too long at once; else it is asked once more without streaming,
so the server's own reason is read. A "too long" failure is mended by the caller
(summarized and sent again, agent/model_turn.py), never retried unchanged.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx2
import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

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
    estimated_usage,
    retry_hooks,
    tell_first_piece,
    tell_invalid_retry,
    wire_safe,
)
from mlra.agent.providers.pricing import cost, longest_prefix, price_for
from mlra.agent.providers.server_window import (
    UNKNOWN_LOCAL_LIMITS,
    read_server_window,
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
PLACEHOLDER_API_KEY = "not-needed"
MISSING_RESULT = "Error: no result was recorded for this tool call (the run was interrupted)."

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


class OpenAIProvider(ModelProvider):
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
        self._probed = self._window_known or not base_url
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
        if not self._probed:
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
            except openai.APIError as exc:
                raise ProviderError(self._describe(exc)) from exc
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
        if tools and self.settings.tool_calls != "native" and not response.tool_calls:
            found = read_text_calls(response.text, [t.name for t in tools])
            if found.calls:
                response.text, response.tool_calls = found.prose, found.calls
        if response.usage.input_tokens == 0:
            # No usage from the server: an estimate keeps context upkeep honest.
            size = len(json.dumps(request["messages"])) + len(json.dumps(request.get("tools", [])))
            produced = len(response.text) + sum(len(c.raw_arguments) for c in response.tool_calls)
            response.usage = estimated_usage(size, produced)
        response.cost_usd = cost(self.model, response.usage)[0]
        return response

    def describe_tools_in_prompt(self) -> bool:
        if not self.base_url or not self._native_tools or self.settings.tool_calls != "auto":
            return False  # the vendor's own API never drops the tools it is sent
        self._native_tools = False
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
                f"{self.name}: the server refused native tool definitions "
                f"({_one_line(exc.message, 120)}); the tools are now described in the "
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
                    _take_chunk(chunk, text, calls, on_text)
                    if first is None and (text or calls):
                        first = time.monotonic() - sent
                        tell_first_piece(first)
                    finish = _finish_of(chunk) or finish
        except ValueError as exc:  # a data line that is not JSON (truncated, HTML)
            raise InvalidResponse(f"the stream is not JSON: {_one_line(str(exc), 120)}") from exc
        except httpx2.TransportError as exc:  # the connection broke off mid-stream
            if isinstance(exc, httpx2.TimeoutException):
                raise ProviderError(self._describe(exc)) from exc
            raise InvalidResponse(
                f"the stream broke off: {type(exc).__name__}", cut_stream=True
            ) from exc
        if finish is None:
            what = "an empty stream" if not text and not calls else "a stream cut off"
            raise InvalidResponse(f"{what} (no finish reason)", cut_stream=True)
        return ModelResponse(
            text="".join(text),
            tool_calls=[_tool_call(calls[k], k, finish) for k in sorted(calls)],
            usage=_usage(usage),
            stop_reason=finish,
            first_token_s=first,
        )

    async def _whole(self, request: dict[str, Any], on_text: TextCallback | None) -> ModelResponse:
        try:
            completion: Any = await self._client.chat.completions.create(**request)
        except ValueError as exc:  # a body that is not JSON (truncated, HTML)
            raise InvalidResponse(f"the body is not JSON: {_one_line(str(exc), 120)}") from exc
        choices = getattr(completion, "choices", None)
        if not isinstance(completion, ChatCompletion) or not choices:
            raise InvalidResponse(f"the body is no completion: {_one_line(repr(completion), 120)}")
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
            tool_calls=[_tool_call(calls[k], k, finish) for k in sorted(calls)],
            usage=_usage(completion.usage),
            stop_reason=finish,
        )

    async def discover_limits(self) -> None:
        """The context window as the server tells it, unless the user set one or the model
        is a known one (agent/providers/server_window.py: vLLM, llama-server, Ollama). A
        server that tells nothing leaves the default (32k for a local server), and the run
        is told so once, with how to set it. Asked once, with a short time-out, no retries."""
        if self._probed:
            return
        self._probed = True
        assert self.base_url is not None
        found = await read_server_window(self.base_url, self.model, self._api_key)
        if found.window is None:
            self._notices.append(unknown_note(self.name, found, self.context_window))
            return
        self.context_window = found.window
        self.context_window_from = "server"
        if not self._output_set:
            self.max_output_tokens = min(self.max_output_tokens, max(1, found.window // 4))

    def _describe(self, exc: BaseException) -> str:
        return describe_error(
            self.name,
            exc,
            retries=self.max_retries,
            timeout_s=self.timeout_s,
            base_url=self.base_url,
        )


def _finish_of(chunk: Any) -> str | None:
    for choice in chunk.choices or []:
        if choice.index in (0, None) and choice.finish_reason:
            return str(choice.finish_reason)
    return None


def _take_chunk(
    chunk: Any, text: list[str], calls: dict[int, dict[str, Any]], on_text: TextCallback | None
) -> None:
    """One streamed chunk's text and tool-call pieces (only the first choice is read)."""
    for choice in chunk.choices or []:
        if choice.index not in (0, None):
            continue
        delta = choice.delta
        if delta is None:
            continue
        if delta.content:
            text.append(delta.content)
            if on_text:
                on_text(delta.content)
        for piece in delta.tool_calls or []:
            _add_tool_delta(calls, piece)


def _add_tool_delta(calls: dict[int, dict[str, Any]], piece: Any) -> None:
    index = piece.index
    if index is None:
        # Some servers leave out the index: find the call by id, or start a new one.
        index = next((k for k, c in calls.items() if piece.id and c["id"] == piece.id), None)
        if index is None:
            index = len(calls) if piece.id or not calls else max(calls)
    entry = calls.setdefault(index, {"id": None, "name": "", "arguments": []})
    if piece.id and not entry["id"]:
        entry["id"] = piece.id
    function = piece.function
    if function is not None:
        if function.name and not entry["name"]:
            entry["name"] = function.name
        if function.arguments:
            entry["arguments"].append(function.arguments)


def _tool_call(entry: dict[str, Any], index: int, finish: str | None) -> ToolCallRequest:
    raw = "".join(entry["arguments"])
    arguments, problem = parse_arguments(raw)
    if problem is not None and finish == "length":
        problem = "the arguments were cut off at the output token limit; " + problem
    return ToolCallRequest(
        id=entry["id"] or f"call_{index}",
        name=entry["name"],
        arguments=arguments,
        raw_arguments=raw,
        parse_error=problem,
    )


def _usage(reported: Any) -> Usage:
    if reported is None:
        return Usage()
    details = getattr(reported, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    written = getattr(details, "cache_write_tokens", None) or 0
    return Usage(
        input_tokens=reported.prompt_tokens or 0,
        output_tokens=reported.completion_tokens or 0,
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )


# --- history ---------------------------------------------------------------------------


def to_openai_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """Neutral history to chat messages, every tool call answered by a `tool` message.

    Consecutive user messages are joined: several chat templates of local
    servers refuse two user turns in a row. Calls the model wrote as text go back
    as the text it wrote, and their results as user messages: a server with no
    tool parser may drop native `tool_calls` from the prompt it shows the model.
    """
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    pending: list[str] = []
    """Tool-call ids of the latest assistant message still waiting for a result."""
    written: set[str] = set()
    """Ids of calls the model wrote as text."""

    def settle() -> None:
        out.extend(
            {"role": "tool", "tool_call_id": cid, "content": MISSING_RESULT} for cid in pending
        )
        pending.clear()

    for message in messages:
        if message.role == "tool" and message.tool_call_id in written:
            content = result_as_text(
                message.tool_name or "tool", message.content, is_error=message.is_error
            )
            _add_user(out, content)
            continue
        if message.role == "tool":
            if message.tool_call_id in pending:
                pending.remove(message.tool_call_id)
                content = message.content or "(no output)"
                if message.is_error and not content.lower().startswith("error"):
                    content = f"Error: {content}"
                out.append(
                    {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
                )
            else:
                settle()
                _add_user(out, f"[tool result for {message.tool_call_id}]\n{message.content}")
            continue
        settle()
        as_text = [c for c in message.tool_calls if c.from_text]
        if message.role == "assistant" and as_text:
            written.update(c.id for c in as_text)
            parts = [message.content.strip(), *(call_as_text(c) for c in as_text)]
            out.append({"role": "assistant", "content": "\n\n".join(p for p in parts if p)})
        elif message.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": message.content or None}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": _replayed_arguments(call)},
                    }
                    for call in message.tool_calls
                ]
                pending.extend(call.id for call in message.tool_calls)
            elif not message.content:
                entry["content"] = ""
            out.append(entry)
        elif message.content:
            _add_user(out, message.content)
    settle()
    return out


def _add_user(out: list[dict[str, Any]], content: str) -> None:
    if out and out[-1]["role"] == "user":
        out[-1]["content"] += "\n\n" + content
    else:
        out.append({"role": "user", "content": content})


def _replayed_arguments(call: ToolCallRequest) -> str:
    """What the model wrote, when it was valid; servers that re-parse history choke on the rest."""
    if call.parse_error is None and call.raw_arguments:
        return call.raw_arguments
    return json.dumps(call.arguments if call.arguments is not None else {})


# --- errors ----------------------------------------------------------------------------


def describe_error(
    name: str, exc: BaseException, *, retries: int, timeout_s: float, base_url: str | None = None
) -> str:
    """One line a user can act on: what failed, the status and the server's own words."""
    after = f" (gave up after {retries} retries)" if retries else ""
    where = base_url or "the API"
    if isinstance(exc, openai.APITimeoutError):
        return f"{name}: no answer from {where} within {timeout_s:g} s{after}"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        detail = _one_line(str(cause) or type(cause).__name__)
        return f"{name}: cannot connect to {where}: {detail}{after}"
    if isinstance(exc, openai.APIStatusError):
        kind, message = _error_fields(exc.body)
        label = f"HTTP {exc.status_code}" + (f" {kind}" if kind else "")
        retried = after if exc.status_code == 429 or exc.status_code >= 500 else ""
        return f"{name}: {label}: {_one_line(message or exc.message)}{retried}"
    if isinstance(exc, openai.APIError):
        return f"{name}: the response stream failed: {_one_line(exc.message)}"
    return f"{name}: {type(exc).__name__}: {_one_line(str(exc))}"


def _error_fields(body: Any) -> tuple[str | None, str | None]:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            kind = inner.get("code") or inner.get("type")
            message = inner.get("message")
            return (
                kind if isinstance(kind, str) else None,
                message if isinstance(message, str) else None,
            )
        if isinstance(inner, str):
            return None, inner
    elif isinstance(body, str):
        return None, body
    return None, None


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
