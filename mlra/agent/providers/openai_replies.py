"""What an OpenAI-compatible server sends back, read into mlra's terms.

A streamed answer comes as chunks whose tool-call pieces are accumulated by index (some
servers leave the index out, so a piece is matched by id); a whole completion comes at
once; either ends as tool calls whose arguments are parsed here, so broken JSON becomes an
error observation, not a crashed run, and a call sent with no id gets one of its own
(agent/providers/call_ids.py). A failed request becomes one line a user can act on, with
the status and the server's own words. Apart from the provider (openai.py), which decides
what to send and how to adapt to what a server accepts.
"""

from __future__ import annotations

from typing import Any

import openai

from mlra.agent.providers.base import TextCallback, ToolCallRequest, Usage
from mlra.agent.providers.call_ids import new_call_id
from mlra.agent.providers.server_gone import one_line
from mlra.tools.registry import parse_arguments


def finish_of(chunk: Any) -> str | None:
    for choice in chunk.choices or []:
        if choice.index in (0, None) and choice.finish_reason:
            return str(choice.finish_reason)
    return None


def take_chunk(
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


def tool_call(entry: dict[str, Any], finish: str | None) -> ToolCallRequest:
    raw = "".join(entry["arguments"])
    arguments, problem = parse_arguments(raw)
    if problem is not None and finish == "length":
        problem = "the arguments were cut off at the output token limit; " + problem
    return ToolCallRequest(
        id=entry["id"] or new_call_id(),
        name=entry["name"],
        arguments=arguments,
        raw_arguments=raw,
        parse_error=problem,
    )


def usage_of(reported: Any) -> Usage:
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
        detail = one_line(str(cause) or type(cause).__name__)
        return f"{name}: cannot connect to {where}: {detail}{after}"
    if isinstance(exc, openai.APIStatusError):
        kind, message = _error_fields(exc.body)
        label = f"HTTP {exc.status_code}" + (f" {kind}" if kind else "")
        retried = after if exc.status_code == 429 or exc.status_code >= 500 else ""
        return f"{name}: {label}: {one_line(message or exc.message)}{retried}"
    if isinstance(exc, openai.APIError):
        return f"{name}: the response stream failed: {one_line(exc.message)}"
    return f"{name}: {type(exc).__name__}: {one_line(str(exc))}"


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
