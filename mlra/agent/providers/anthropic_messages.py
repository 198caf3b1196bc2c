"""The neutral history as Anthropic turns, translated on every call.

The history is the source of truth, not a provider-side conversation. Anthropic needs
strict alternation and tool results right after their calls, so consecutive tool results
and any user text after them become one user message, and calls whose results are missing
(a run cut short while a tool ran) get a stand-in error result instead of a 400. The turns
stay mutable (`Turn`) so the provider (anthropic.py) can place its cache breakpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from anthropic.types import (
    AssistantMessageParam,
    MessageParam,
    TextBlockParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
    UserMessageParam,
)

from mlra.agent.providers.base import Message
from mlra.agent.providers.text_calls import call_as_text, result_as_text

MISSING_RESULT = "Error: no result was recorded for this tool call (the run was interrupted)."
"""Stands for the result of a call the run never recorded (cut short while the tool ran)."""

# The blocks this provider writes into a request; narrowed on their "type" key.
Block = TextBlockParam | ToolUseBlockParam | ToolResultBlockParam


@dataclass
class Turn:
    """One message while the history is being merged and repaired; mutable, unlike the
    SDK's TypedDicts whose content is only an Iterable."""

    role: Literal["user", "assistant"]
    content: list[Block]

    def param(self) -> MessageParam:
        if self.role == "user":
            return UserMessageParam(role="user", content=self.content)
        return AssistantMessageParam(role="assistant", content=self.content)


def to_anthropic_turns(messages: list[Message]) -> list[Turn]:
    """The neutral history as strictly alternating Anthropic turns with paired tool results,
    still mutable so the cache breakpoint can be placed."""
    out: list[Turn] = []
    written: set[str] = set()
    """Ids of calls the model wrote as text: they and their results go back as text."""

    def add(role: Literal["user", "assistant"], blocks: list[Block]) -> None:
        if not blocks:
            return
        if out and out[-1].role == role:
            out[-1].content.extend(blocks)
        else:
            out.append(Turn(role, list(blocks)))

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


def _pair_tool_results(messages: list[Turn]) -> list[Turn]:
    """Every tool_use answered in the next user message, results first; strays become text."""
    fixed: list[Turn] = []
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
            fixed.append(Turn("user", results + others))
        else:
            if not fixed:
                fixed.append(Turn("user", [{"type": "text", "text": "(continue)"}]))
            fixed.append(message)
            last = i == len(messages) - 1
            calls = _call_ids(message)
            if calls and last:
                fixed.append(Turn("user", [_missing_result(c) for c in calls]))
    if not fixed:
        fixed.append(Turn("user", [{"type": "text", "text": "(continue)"}]))
    return fixed


def _call_ids(turn: Turn) -> list[str]:
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
