"""OpenAI chat completions, streamed; also any OpenAI-compatible server.

The same code talks to api.openai.com and, through `base_url`, to vLLM,
llama.cpp, Ollama and similar servers. Those servers differ in small ways, so
the provider adapts once and remembers: a server that rejects `stream_options`
is asked again without it (usage is then estimated), an OpenAI organization not
verified for streaming a model gets non-streamed answers, and vLLM's
`max_model_len` is read from `/v1/models` when the model's window is unknown.

Tool-call deltas are accumulated by index; arguments are parsed here so a model
that writes broken JSON gets an error observation, not a crashed run.
"""

from __future__ import annotations

import json
import time
from typing import Any

import openai

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
UNKNOWN_LOCAL_LIMITS = (32_768, 8192)
"""A local server's model whose window the server does not tell: small windows are common."""


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
    ) -> None:
        self.model = model
        self.name = name or f"openai/{model}"
        self.base_url = base_url
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        limits = longest_prefix(MODEL_LIMITS, model.lower())
        self._window_known = limits is not None or context_window is not None
        fallback = UNKNOWN_LOCAL_LIMITS if base_url else UNKNOWN_API_LIMITS
        known_window, known_output = limits or fallback
        self.context_window = context_window or known_window
        self.max_output_tokens = max_output_tokens or known_output
        self.priced = price_for(model) is not None
        self._client = openai.AsyncOpenAI(
            api_key=api_key or PLACEHOLDER_API_KEY,
            base_url=base_url,
            max_retries=max_retries,
            timeout=openai.Timeout(timeout_s, connect=min(10.0, timeout_s)),
        )
        # What the server accepts, learned from its 400s and kept for the next calls.
        self._stream = True
        self._stream_usage = True
        # api.openai.com wants max_completion_tokens (reasoning models refuse max_tokens);
        # compatible servers know max_tokens best.
        self._token_param = "max_tokens" if base_url else "max_completion_tokens"
        self._probed = self._window_known or not base_url

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
        if not self._probed:
            await self._probe_context_window()
        wanted = max_tokens or self.max_output_tokens
        limit = max(1, min(wanted, self.max_output_tokens))
        chat = to_openai_messages(system, messages)
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
        while True:
            request = self.build_request(chat, specs, limit)
            try:
                if self._stream:
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
        response.latency_s = time.monotonic() - started
        if response.usage.input_tokens == 0:
            # No usage from the server: an estimate keeps context upkeep honest.
            size = len(json.dumps(request["messages"])) + len(json.dumps(specs))
            produced = len(response.text) + sum(len(c.raw_arguments) for c in response.tool_calls)
            response.usage = Usage(input_tokens=size // 4 + 1, output_tokens=produced // 4 + 1)
        response.cost_usd = cost(self.model, response.usage)[0]
        return response

    def build_request(
        self, chat: list[dict[str, Any]], specs: list[dict[str, Any]], limit: int
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "messages": chat, self._token_param: limit}
        if specs:
            request["tools"] = specs
        if self._stream:
            request["stream"] = True
            if self._stream_usage:
                request["stream_options"] = {"include_usage": True}
        return request

    def _adapt(self, exc: openai.BadRequestError) -> bool:
        """Change what is sent after a 400 that names an unsupported feature; False if none."""
        text = f"{exc.message} {exc.body}".lower()
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
        stream = await self._client.chat.completions.create(**request)
        async with stream:
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices or []:
                    if choice.index not in (0, None):
                        continue
                    if choice.finish_reason:
                        finish = choice.finish_reason
                    delta = choice.delta
                    if delta is None:
                        continue
                    if delta.content:
                        text.append(delta.content)
                        if on_text:
                            on_text(delta.content)
                    for piece in delta.tool_calls or []:
                        _add_tool_delta(calls, piece)
        return ModelResponse(
            text="".join(text),
            tool_calls=[_tool_call(calls[k], k, finish) for k in sorted(calls)],
            usage=_usage(usage),
            stop_reason=finish,
        )

    async def _whole(self, request: dict[str, Any], on_text: TextCallback | None) -> ModelResponse:
        completion = await self._client.chat.completions.create(**request)
        choice = completion.choices[0] if completion.choices else None
        message = choice.message if choice else None
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

    async def _probe_context_window(self) -> None:
        """vLLM tells its `max_model_len` in /v1/models; other servers are left at the default."""
        self._probed = True
        try:
            listing = await self._client.with_options(timeout=5.0, max_retries=0).models.list()
        except openai.APIError:
            return
        entries = list(listing.data)
        for entry in entries:
            if entry.id != self.model and len(entries) > 1:
                continue
            window = (entry.model_extra or {}).get("max_model_len")
            if isinstance(window, int) and window > 0:
                self.context_window = window
                self.max_output_tokens = min(self.max_output_tokens, max(1, window // 4))
                return

    def _describe(self, exc: BaseException) -> str:
        return describe_error(
            self.name,
            exc,
            retries=self.max_retries,
            timeout_s=self.timeout_s,
            base_url=self.base_url,
        )


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
    servers refuse two user turns in a row.
    """
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    pending: list[str] = []
    """Tool-call ids of the latest assistant message still waiting for a result."""

    def settle() -> None:
        out.extend(
            {"role": "tool", "tool_call_id": cid, "content": MISSING_RESULT} for cid in pending
        )
        pending.clear()

    for message in messages:
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
        if message.role == "assistant":
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
