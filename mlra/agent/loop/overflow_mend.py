"""Mending a request a server refused as too long for its window: never the same one twice.

The server says how much was too much (agent/providers/overflow.py); the next request
is made smaller by at least that, and by a margin for the estimate's error, in this
order: the oldest turns summarized (all but the latest, or every turn before the
prompt now asked, when fewer would not do), the longest tool outputs cut in their
middle, then, where the server counts the answer's budget in the request, a smaller
answer. Where all of that together cannot make the request smaller by what the
server asked, the run ends with one line naming the window and the request's size:
sending it again would only be refused again (aider and OpenHands do the same:
never the same failing request twice).

The server's tokens are not mlra's estimate (agent/loop/history.py): the excess is
scaled by how the two counted the refused request, and never taken smaller than the
server's own figure.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Protocol

from mlra import events as ev
from mlra.agent.loop.catchup import Cut
from mlra.agent.loop.ending import Ending, EndRun
from mlra.agent.loop.history import (
    SUMMARY_HEADER,
    AgentHistory,
    estimate_tokens,
    message_tokens,
)
from mlra.agent.loop.run_context import RunContext
from mlra.agent.providers.base import Message, ProviderError
from mlra.agent.providers.overflow import Overflow, stated_overflow

MIN_MENDED_ANSWER = 64
"""The smallest answer budget a mended request asks for: below it no tool call fits."""
MARGIN = 0.02
"""Beyond the stated excess, this share of the window is freed too, so the mended
request is not refused again by a few tokens the estimate missed."""


class ContextWindow(Protocol):
    """What a mend asks of agent/loop/context_window.py: the run, and its summaries."""

    run: RunContext

    async def summarize(
        self, agent: ev.AgentRole, history: AgentHistory, cut: Cut, before: int | None = None
    ) -> None: ...

    def summary_tokens(self, agent: ev.AgentRole, history: AgentHistory) -> int: ...


@dataclass(frozen=True)
class Sent:
    """The refused request as mlra sent it: its prompt, estimated, its characters over
    four (`prompt_sizes`), and its answer budget."""

    prompt: int
    chars: int
    max_tokens: int


def prompt_sizes(history: AgentHistory, tools: int) -> tuple[int, int]:
    """A request's prompt two ways, with nothing taken from the server's counts: mlra's
    estimate (a digit a token, as many tokenizers count them) and its characters as sent
    over four (as a tokenizer counts prose). What a mend saves is taken as the smaller of
    the two, so it is no more than any server would count."""
    messages = history.messages
    estimate = estimate_tokens(history.system) + tools + sum(message_tokens(m) for m in messages)
    chars = len(json.dumps(history.system)) + sum(_chars(m) for m in messages)
    return estimate, chars // 4 + tools


def _chars(message: Message) -> int:
    """A message's characters as sent: what `prompt_sizes` counts beside the estimate."""
    return len(json.dumps(message.content)) + sum(
        len(c.raw_arguments or json.dumps(c.arguments)) for c in message.tool_calls
    )


def _saved(before: tuple[int, int], after: tuple[int, int]) -> int:
    return min(before[0] - after[0], before[1] - after[1])


def needed(overflow: Overflow, sent: Sent, window: int) -> tuple[int, int]:
    """(at least, aim): the tokens the next request must lose, and what it should lose to
    fit with a margin. Without a stated excess, any shrink is a change; the aim is then
    a quarter of the request. Where the server counted fewer tokens than the request's
    characters make, its excess is scaled up by as much."""
    excess = overflow.excess
    if excess is None:
        return 1, max(1, sent.chars // 4)
    server_prompt = (overflow.requested or 0) - (sent.max_tokens if overflow.answer_counts else 0)
    scale = max(1.0, sent.chars / server_prompt) if server_prompt > 0 else 1.0
    least = math.ceil(excess * scale)
    return least, least + int(window * MARGIN)


async def mend(
    window: ContextWindow,
    agent: ev.AgentRole,
    history: AgentHistory,
    error: ProviderError,
    sent: Sent,
    tools: int,
) -> int:
    """Make the refused request smaller by what the server asked; returns the answer
    budget the next request may ask for. Raises `EndRun` where it cannot be made so."""
    run = window.run
    provider = run.provider
    assert provider is not None
    overflow = stated_overflow(str(error))
    least, aim = needed(overflow, sent, provider.context_window)
    before = prompt_sizes(history, tools)
    done: list[str] = []
    cut = _best_cut(window, agent, history, aim)
    if cut is not None:
        await window.summarize(agent, history, cut)
        done.append("older turns summarized")
    saved = _saved(before, prompt_sizes(history, tools))
    if saved < aim and history.shorten_outputs(aim - saved) > 0:
        done.append("the longest tool outputs cut")
        saved = _saved(before, prompt_sizes(history, tools))
    answer = sent.max_tokens
    if saved < aim and overflow.answer_counts and sent.max_tokens > MIN_MENDED_ANSWER:
        answer = max(MIN_MENDED_ANSWER, sent.max_tokens - (aim - saved))
        done.append(f"the answer's budget cut to {answer:,} tokens")
        saved += sent.max_tokens - answer
    if saved < least:
        raise EndRun(_cannot(agent, overflow, sent, provider.context_window))
    run.emit(
        ev.Notice(
            level="warning",
            message=f"{agent}'s request was made smaller by about {saved:,} tokens "
            f"({'; '.join(done)})"
            + (
                f", more than the {overflow.excess:,} the server said were too many"
                if overflow.excess
                else ""
            )
            + "; it is sent again",
        )
    )
    return answer


def _best_cut(
    window: ContextWindow, agent: ev.AgentRole, history: AgentHistory, aim: int
) -> Cut | None:
    """The summary that keeps the most latest turns whole while saving `aim` tokens, or,
    where none does, the one that saves the most (every turn before the prompt now
    asked); None where nothing is older than it, or summarizing would save nothing."""
    summary = window.summary_tokens(agent, history) + message_tokens(
        Message(role="user", content=SUMMARY_HEADER)
    )
    best = None
    for keep in range(window.run.config.keep_recent_turns, -1, -1):
        cut = history.summarizable(keep)
        if cut is None:
            continue
        # Counted as `mend` counts what it saved (the smaller of the estimate and the
        # characters), without the current subtask's instructions, which stay: the
        # estimate alone, with them, made a summary of a few short turns look like
        # enough, and the run ended with turns left to summarize (a real llama-server).
        replaced = history.replaced(cut[0], cut[1])
        saving = (
            min(
                sum(message_tokens(m) for m in replaced),
                sum(_chars(m) for m in replaced) // 4,
            )
            - summary
        )
        if saving <= 0:
            continue
        best = cut
        if saving >= aim:
            return cut
    return best


WINDOW_CANNOT_HOLD = "the model's window"
"""How the message of a run ended because the model's window cannot hold its request
begins. Words for the reader only: a batch report judges such a run (failed,
batch/report_judged.py) by its recorded cause, "window_overflow", for unlike a provider
that failed, it says something of the model, and would end the same way again."""


def _cannot(agent: ev.AgentRole, overflow: Overflow, sent: Sent, window: int) -> Ending:
    """The honest end: what the window is, what the request takes, and what would help."""
    size = (
        f"{overflow.requested:,} tokens as the server counts it"
        if overflow.requested
        else f"about {sent.prompt + sent.max_tokens:,} tokens by mlra's estimate"
    )
    message = (
        f"{WINDOW_CANNOT_HOLD} ({overflow.window or window:,} tokens) cannot hold {agent}'s "
        f"request ({size}): nothing is left to summarize or cut that would make it fit, and "
        "sending it again would only be refused again; start the server with a larger "
        "context (llama.cpp --ctx-size, Ollama num_ctx) or use a model with a larger window"
    )
    return Ending(
        reason="provider_error",
        status="error",
        evaluate=False,
        by="error",
        cause="window_overflow",
        message=message,
    )
