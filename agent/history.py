"""An agent's message history, and keeping it inside the model's context window.

The history is a real conversation in the provider-neutral format. When it
nears the context window, the oldest turns are replaced by a model-written
summary; the instructions at the start (the pinned messages) are never cut, and
turns are cut only at their boundaries so no tool result loses its call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from mlra.agent.providers.base import Message, ModelResponse
from mlra.tools.truncate import truncate_middle


def estimate_tokens(text: str) -> int:
    """A cheap, deliberately high estimate of `text`'s tokens, for keeping requests inside
    the window (no tokenizer is at hand for every model, so it is no exact count).

    Text is counted as it goes over the wire, JSON-escaped (a newline is two
    characters, a non-ASCII character six), at four characters a token; digits
    count apart at one a token, since many tokenizers (Llama 2, Mistral, Qwen)
    split numbers into single digits, and a column of numbers is far denser in
    tokens than prose (`seq 100000 104000` is 2 tokens a line by characters,
    7 by such a tokenizer). The window also keeps a margin for what this
    misses (see agent/model_turn.py)."""
    if not text:
        return 1
    escaped = len(json.dumps(text)) - 2
    digits = sum(1 for c in text if c.isdigit())
    return (escaped - digits) // 4 + digits + 1


def message_text(message: Message) -> str:
    parts = [message.content]
    for call in message.tool_calls:
        parts.append(f"{call.name}({call.raw_arguments or call.arguments})")
    return "\n".join(p for p in parts if p)


@dataclass
class AgentHistory:
    system: str
    messages: list[Message] = field(default_factory=list)
    pinned: int = 0
    """How many leading messages are instructions that are never summarized."""
    turn: int = 0
    """Model turns taken so far in this history (the count survives summaries)."""
    _turn_starts: list[tuple[int, int]] = field(default_factory=list)
    """(message index, turn number) where each assistant turn begins."""
    _measured_tokens: int = 0
    _measured_at: int = 0

    def pin(self, content: str) -> None:
        self.messages.append(Message(role="user", content=content))
        self.pinned = len(self.messages)

    def add_user(self, content: str) -> None:
        if content:
            self.messages.append(Message(role="user", content=content))

    def add_assistant(self, response: ModelResponse) -> None:
        self.turn += 1
        self._turn_starts.append((len(self.messages), self.turn))
        self.messages.append(
            Message(role="assistant", content=response.text, tool_calls=response.tool_calls)
        )

    def add_tool_result(self, call_id: str, tool: str, output: str, *, is_error: bool) -> None:
        self.messages.append(
            Message(
                role="tool", content=output, tool_call_id=call_id, tool_name=tool, is_error=is_error
            )
        )

    def record_usage(self, input_tokens: int) -> None:
        """The provider's count of the prompt just sent: the best size estimate there is."""
        if input_tokens <= 0:
            return  # a server that reports no usage: keep estimating from the text
        self._measured_tokens = input_tokens
        self._measured_at = len(self.messages)

    def estimated_tokens(self, *, extra: int = 0) -> int:
        """The history's size in tokens: the provider's count of the last prompt plus an
        estimate of what came since, or all estimated. `extra` (tokens of tool
        definitions and a prompt still to come) counts only where nothing was measured:
        a measured prompt held the tool definitions already."""
        if self._measured_at and self._measured_at <= len(self.messages):
            base = self._measured_tokens
            rest = self.messages[self._measured_at :]
        else:
            base = estimate_tokens(self.system) + extra
            rest = self.messages
        return base + sum(estimate_tokens(message_text(m)) for m in rest)

    def shorten_outputs(self, excess: int) -> int:
        """Cut the middle of the longest tool outputs (never the pinned instructions)
        until about `excess` tokens are saved: what is left when a single output is too
        big for the window and there are no older turns to summarize. Returns the
        tokens saved, estimated."""
        saved = 0
        while saved < excess:
            tools = [
                (estimate_tokens(m.content), i)
                for i, m in enumerate(self.messages)
                if i >= self.pinned and m.role == "tool" and len(m.content) > 400
            ]
            if not tools:
                break
            tokens, index = max(tools)
            message = self.messages[index]
            # Keep at least 200 characters; cut by the share of tokens to save.
            keep = max(200, int(len(message.content) * (1 - (excess - saved) / tokens)) - 100)
            text, cut = truncate_middle(message.content, keep)
            if not cut:
                break
            saved += tokens - estimate_tokens(text)
            self.messages[index] = message.model_copy(update={"content": text})
            self._measured_at = 0
        return saved

    def summarizable(self, keep_recent_turns: int) -> tuple[int, int, int, int] | None:
        """The slice of old turns to summarize: (start, end, first turn, last turn), or None."""
        candidates = [(i, t) for i, t in self._turn_starts if i >= self.pinned]
        if len(candidates) <= keep_recent_turns:
            return None
        start = candidates[0][0]
        end, _ = candidates[len(candidates) - keep_recent_turns]
        first_turn = candidates[0][1]
        last_turn = candidates[len(candidates) - keep_recent_turns - 1][1]
        if end <= start:
            return None
        return start, end, first_turn, last_turn

    def render(self, start: int, end: int, *, limit: int = 60_000) -> str:
        """Old turns as plain text for the summarizer (long tool outputs shortened)."""
        lines = []
        for message in self.messages[start:end]:
            text = message_text(message)
            if len(text) > 2_000:
                text = text[:1_000] + "\n[...]\n" + text[-800:]
            who = {"assistant": "agent", "tool": f"result of {message.tool_name}", "user": "user"}
            lines.append(f"--- {who[message.role]}:\n{text}")
        out = "\n".join(lines)
        return out if len(out) <= limit else out[: limit // 2] + "\n[...]\n" + out[-limit // 2 :]

    def replace_with_summary(self, start: int, end: int, summary: str) -> None:
        removed = end - start
        self.messages[start:end] = [
            Message(role="user", content=f"[Summary of earlier steps]\n{summary}")
        ]
        self._turn_starts = [
            (i - removed + 1 if i >= end else i, t) for i, t in self._turn_starts if i >= end
        ]
        self._measured_at = 0
