"""Keeping an agent's history within the model's context window.

The history is kept within the window before a request is sent, never after a
server refused it: the request's size (history, tools, the prompt to come) is
estimated, and if it and the answer's budget would not fit, the oldest turns are
summarized first. A server that still refuses a request as too long is believed:
its stated window is taken, older turns are summarized (or the longest outputs
cut), and the request is sent once more (agent/model_turn.py).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from mlra import events as ev
from mlra.agent.catchup import Cut
from mlra.agent.history import AgentHistory, estimate_tokens
from mlra.agent.prompts import SUMMARIZER_SYSTEM
from mlra.agent.providers.base import Message, ModelResponse, ProviderError, stated_window
from mlra.agent.run_context import RunContext
from mlra.tools.registry import ToolSpec

PROMPT_TOKENS = 200
"""Room kept for the turn's own prompt (clock note, nudges) when checking the window."""
MIN_OUTPUT_TOKENS = 256
"""An answer's budget is cut to what the window has left, but never below this."""
WINDOW_MARGIN = 0.05
"""The share of the window kept free when sizing an answer's budget: the estimate is no
tokenizer's count, and chat templates add tokens of their own."""
MESSAGE_OVERHEAD = 8
"""Tokens a chat template adds around each message (role markers), estimated."""


class TooLong(Exception):
    """The server said the request did not fit the window, though the estimate said it
    would: the turn summarizes and asks once more rather than ending the run."""

    def __init__(self, error: ProviderError) -> None:
        super().__init__(str(error))
        self.error = error


def tools_tokens(tools: list[ToolSpec]) -> int:
    """The tool definitions' share of a request, estimated."""
    if not tools:
        return 0
    return estimate_tokens(
        json.dumps([[t.name, t.description, t.parameters] for t in tools], ensure_ascii=False)
    )


Ask = Callable[..., Awaitable[ModelResponse]]
"""A one-off model call (`ModelTurn.ask`): the summarizer is one."""


class ContextWindow:
    def __init__(self, run: RunContext, ask: Ask) -> None:
        self.run = run
        self._ask = ask

    def output_budget(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> int:
        """The answer's token budget: the run's, the model's, and no more than the window
        has left after the request and a margin (`WINDOW_MARGIN`: the request's size is
        estimated, so filling the window exactly by the estimate is an HTTP 400 when the
        server counts more)."""
        provider = self.run.provider
        assert provider is not None
        wanted = min(self.run.config.max_output_tokens, provider.max_output_tokens)
        request = estimate_tokens(system) + tools_tokens(tools)
        request += sum(
            estimate_tokens(m.content) + len(m.tool_calls) * 20 + MESSAGE_OVERHEAD for m in messages
        )
        request += sum(estimate_tokens(c.raw_arguments) for m in messages for c in m.tool_calls)
        margin = int(provider.context_window * WINDOW_MARGIN)
        left = provider.context_window - request - margin
        return max(min(wanted, left), min(wanted, MIN_OUTPUT_TOKENS))

    async def shorten(
        self, agent: ev.AgentRole, history: AgentHistory, error: ProviderError
    ) -> bool:
        """The server refused a request as too long for its window: the estimate was
        wrong, so the oldest turns are summarized (all but the last, if need be) and the
        request is sent once more; a second refusal is a provider failure. True when nothing
        was left to summarize: the request then asks for the smallest answer."""
        run = self.run
        provider = run.provider
        assert provider is not None
        window = stated_window(error)
        learned = ""
        if window is not None and window < provider.context_window:
            # The server's window is smaller than the one assumed: go by it from now on.
            provider.context_window = window
            provider.max_output_tokens = min(provider.max_output_tokens, max(1, window // 4))
            learned = f"the window is now taken as {window:,} tokens; "
        keep = run.config.keep_recent_turns
        cut = history.summarizable(keep) or history.summarizable(1)
        run.emit(
            ev.Notice(
                level="warning",
                message=f"the server refused {agent}'s request as too long for the model's "
                f"window ({error}); {learned}"
                + (
                    "older turns are summarized and the request is sent again"
                    if cut
                    else "nothing old is left to summarize; the longest tool outputs are cut "
                    "and it is sent again with a smaller answer"
                ),
            )
        )
        if cut is not None:
            await self.summarize(agent, history, cut)
        else:
            history.shorten_outputs(max(1, history.estimated_tokens() // 2))
        return cut is None

    async def keep(
        self, agent: ev.AgentRole, history: AgentHistory, tools: int = 0, coming: int = 0
    ) -> None:
        """Summarize the oldest turns when the next request (the history, the `tools`'
        definitions, and `coming`: the prompt still to be added) and its answer would
        outgrow the history's share of the window."""
        before = history.estimated_tokens()
        keep = self.run.config.keep_recent_turns
        if self.run.catchup.ahead():
            # Summarize where the run did, whatever this provider's window.
            cut = self.run.catchup.recorded_summary(history, keep)
        else:
            cut = self._cut_for_window(history, history.estimated_tokens(extra=tools) + coming)
        if cut is not None:
            await self.summarize(agent, history, cut, before)
        over = history.estimated_tokens(extra=tools) + coming - self._window_budget()
        if over > 0:
            # What is left is still too big for the window (a single huge output): the
            # middle of the longest outputs is cut, as a resumed run, with the same
            # history, cuts it again.
            history.shorten_outputs(over)

    async def summarize(
        self, agent: ev.AgentRole, history: AgentHistory, cut: Cut, before: int | None = None
    ) -> None:
        """Replace the turns `cut` names with the summarizer's summary of them."""
        if before is None:
            before = history.estimated_tokens()
        start, end, first_turn, last_turn = cut
        response = await self._ask(
            agent,
            SUMMARIZER_SYSTEM,
            history.render(start, end, limit=self._summary_chars()),
            purpose="summary",
        )
        summary = response.text.strip() or "(the summarizer returned nothing)"
        history.replace_with_summary(start, end, summary)
        self.run.emit(
            ev.HistorySummarized(
                agent=agent,
                summary=summary,
                first_turn=first_turn,
                last_turn=last_turn,
                tokens_before=before,
            )
        )

    def _cut_for_window(self, history: AgentHistory, tokens: int) -> Cut | None:
        config = self.run.config
        provider = self.run.provider
        assert provider is not None
        if tokens <= self._window_budget():
            return None
        return history.summarizable(config.keep_recent_turns) or history.summarizable(1)

    def _window_budget(self) -> int:
        """The tokens a request may take: the history's share of the window, less the
        answer's budget."""
        config = self.run.config
        provider = self.run.provider
        assert provider is not None
        output = min(config.max_output_tokens, provider.max_output_tokens)
        return int(provider.context_window * config.context_fraction) - output

    def _summary_chars(self) -> int:
        """How much old history the summarizer is shown: what its window holds (at about
        three characters a token, for safety), at most 60,000 characters."""
        provider = self.run.provider
        assert provider is not None
        output = min(self.run.config.max_output_tokens, provider.max_output_tokens)
        room = provider.context_window - output - estimate_tokens(SUMMARIZER_SYSTEM) - 100
        return max(2_000, min(60_000, room * 3))
