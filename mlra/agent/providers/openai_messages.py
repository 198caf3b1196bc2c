"""The neutral history as OpenAI chat messages, translated on every call.

The history is the source of truth, not a provider-side conversation, so each request
rebuilds the chat from it: every tool call answered by a `tool` message (a stand-in error
for a result the run never recorded), consecutive user messages joined, and calls the
model wrote as text sent back as the text it wrote. Apart from the provider (openai.py),
which decides what to send, and from reading the answers (openai_replies.py).
"""

from __future__ import annotations

import json
from typing import Any

from mlra.agent.providers.base import Message, ToolCallRequest
from mlra.agent.providers.text_calls import call_as_text, result_as_text

MISSING_RESULT = "Error: no result was recorded for this tool call (the run was interrupted)."
"""Stands for the result of a call the run never recorded (cut short while the tool ran)."""


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
