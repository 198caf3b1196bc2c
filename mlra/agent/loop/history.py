"""An agent's message history, and keeping it inside the model's context window.

The history is a real conversation in the provider-neutral format. When it
nears the context window, the oldest turns are replaced by a model-written
summary, within a subtask as well as between subtasks: a turn is a model call
and its results (with the prompt that asked for it), and turns are cut only at
their boundaries so no tool result loses its call. The instructions at the
start (the pinned messages) and the current subtask's instructions are never
cut, and the latest turns stay whole. There is one summary at a time: the next
summary is written over the last one and the turns after it, so summaries never
pile up into a history that no summary can shrink.
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
    misses (see agent/loop/model_turn.py)."""
    if not text:
        return 1
    escaped = len(json.dumps(text)) - 2
    digits = sum(1 for c in text if c.isdigit())
    return (escaped - digits) // 4 + digits + 1


MESSAGE_OVERHEAD = 8
"""Tokens a chat template adds around each message (role markers), estimated."""
CALL_OVERHEAD = 20
"""Tokens a tool call's wrapping takes beyond its arguments (id, type, name), estimated."""

SUMMARY_HEADER = "[Summary of earlier steps]"


def message_tokens(message: Message) -> int:
    """One message's share of a request, estimated: what it says, its calls' arguments,
    and the wrapping around both (which many short turns add up to)."""
    tokens = estimate_tokens(message.content) + MESSAGE_OVERHEAD
    for call in message.tool_calls:
        arguments = call.raw_arguments or json.dumps(call.arguments)
        tokens += estimate_tokens(call.name + arguments) + CALL_OVERHEAD
    return tokens


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
    _subtask_at: int | None = None
    """Where the current subtask's instructions are: kept whole and in place while its
    turns are summarized (the instructions of subtasks before it are history)."""
    _summary_at: int | None = None
    """Where the summary of earlier steps is (one at a time), if any."""

    def pin(self, content: str) -> None:
        self.messages.append(Message(role="user", content=content))
        self.pinned = len(self.messages)

    def pin_subtask(self, content: str) -> None:
        """The instructions of the subtask that begins now: never summarized while it runs."""
        self.messages.append(Message(role="user", content=content))
        self._subtask_at = len(self.messages) - 1

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
        return base + sum(message_tokens(m) for m in rest)

    def kept_tokens(self) -> int:
        """What a summary never shrinks, estimated: the system prompt, the pinned
        instructions and the current subtask's."""
        kept = [*self.messages[: self.pinned]]
        if self._subtask_at is not None:
            kept.append(self.messages[self._subtask_at])
        return estimate_tokens(self.system) + sum(message_tokens(m) for m in kept)

    def replaced(self, start: int, end: int) -> list[Message]:
        """What a summary of messages `start`..`end` takes out of the request: all of
        them but the current subtask's instructions, which stay beside it."""
        return [m for i, m in enumerate(self.messages[start:end], start) if i != self._subtask_at]

    def tokens_from(self, index: int) -> int:
        """The messages from `index` on, estimated: what a summary ending there keeps."""
        return sum(message_tokens(m) for m in self.messages[index:])

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
        """What to summarize so that the latest `keep_recent_turns` turns stay whole:
        (start, end, first turn, last turn), or None where no older turn is left.

        The stretch runs from just after the pinned instructions (so the summary before
        it, if any, is summarized again with the turns since) to the prompt of the first
        turn kept; the current subtask's instructions inside it stay as they are. First
        and last turn name the turns summarized for the first time. `keep_recent_turns` 0:
        every turn, up to the prompt now asked."""
        candidates = [(i, t) for i, t in self._turn_starts if i >= self.pinned]
        if keep_recent_turns == 0 and candidates:
            return self._all_turns(candidates)
        if keep_recent_turns < 1 or len(candidates) <= keep_recent_turns:
            return None
        start = self.pinned
        end, _ = candidates[len(candidates) - keep_recent_turns]
        # The prompt that asked for the first turn kept belongs with it.
        while (
            end - 1 > candidates[len(candidates) - keep_recent_turns - 1][0]
            and self.messages[end - 1].role == "user"
            and end - 1 not in (self._subtask_at, self._summary_at)
        ):
            end -= 1
        first_turn = candidates[0][1]
        last_turn = candidates[len(candidates) - keep_recent_turns - 1][1]
        return start, end, first_turn, last_turn

    def _all_turns(self, candidates: list[tuple[int, int]]) -> tuple[int, int, int, int] | None:
        """Every turn, up to the prompt now asked (what a server that refused the second
        request of a history leaves to summarize: the first answer)."""
        end = len(self.messages)
        while (
            end - 1 > candidates[-1][0]
            and self.messages[end - 1].role == "user"
            and end - 1 not in (self._subtask_at, self._summary_at)
        ):
            end -= 1
        return self.pinned, end, candidates[0][1], candidates[-1][1]

    def render(self, start: int, end: int, *, limit: int = 60_000) -> str:
        """Old turns as plain text for the summarizer (long tool outputs shortened), the
        summary before them included; the current subtask's instructions are left out
        (they stay in the history as they are)."""
        lines = []
        for index in range(start, end):
            if index == self._subtask_at:
                continue
            message = self.messages[index]
            text = message_text(message)
            if index == self._summary_at:
                lines.append(f"--- summary of the steps before these:\n{text}")
                continue
            if len(text) > 2_000:
                text = text[:1_000] + "\n[...]\n" + text[-800:]
            who = {"assistant": "agent", "tool": f"result of {message.tool_name}", "user": "user"}
            lines.append(f"--- {who[message.role]}:\n{text}")
        out = "\n".join(lines)
        return out if len(out) <= limit else out[: limit // 2] + "\n[...]\n" + out[-limit // 2 :]

    def replace_with_summary(self, start: int, end: int, summary: str) -> None:
        """Messages `start`..`end` become the one summary; the current subtask's
        instructions among them stay, just before it (the summary tells what was done
        since, and before)."""
        kept = self._subtask_at is not None and start <= self._subtask_at < end
        new = [self.messages[self._subtask_at]] if kept and self._subtask_at is not None else []
        new.append(Message(role="user", content=f"{SUMMARY_HEADER}\n{summary}"))
        self.messages[start:end] = new
        shift = len(new) - (end - start)
        self._turn_starts = [(i + shift, t) for i, t in self._turn_starts if i >= end]
        if kept:
            self._subtask_at = start
        elif self._subtask_at is not None and self._subtask_at >= end:
            self._subtask_at += shift
        self._summary_at = start + len(new) - 1
        self._measured_at = 0
