"""Keeping an agent's history within the model's context window.

The history is kept within the window before a request is sent, never after a
server refused it: the request's size (history, tools, the prompt to come) is
estimated before every turn, and if it and the answer's budget would not fit,
the older turns are summarized first, in the middle of a subtask as at its
start. Enough of them go that the request comes back to about half the room it
may grow in, so a long subtask of short steps is summarized now and then, not at
every step; the summary itself is held to a size the window can carry. A server that still refuses a request as too long is believed:
its stated window is taken, older turns are summarized (or the longest outputs
cut), and the request is sent once more (agent/loop/model_turn.py).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from mlra import events as ev
from mlra.agent.loop.catchup import Cut
from mlra.agent.loop.history import AgentHistory, estimate_tokens, message_tokens
from mlra.agent.loop.overflow_mend import Sent, mend, prompt_sizes
from mlra.agent.loop.run_context import RunContext
from mlra.agent.providers.base import Message, ModelResponse, ProviderError, stated_window
from mlra.agent.setup.prompts import SUMMARIZER_SYSTEM
from mlra.tools.registry import ToolSpec
from mlra.tools.truncate import truncate_middle

PROMPT_TOKENS = 200
"""Room kept for the turn's own prompt (clock note, nudges) when checking the window."""
MIN_OUTPUT_TOKENS = 256
"""An answer's budget is cut to what the window has left, but never below this."""
WINDOW_MARGIN = 0.05
"""The share of the window kept free when sizing an answer's budget: the estimate is no
tokenizer's count, and chat templates add tokens of their own."""
SUMMARY_TOKENS = 600
"""The most a summary of earlier steps may take (the summarizer is asked for ~400 words);
less where the window has less room (`ContextWindow.summary_tokens`)."""
MIN_SUMMARY_TOKENS = 120
COUNT_RATIO = 2
"""A server's prompt count this many times above or below mlra's estimate is doubted."""


OUTPUT_CAP = 8192
"""An answer's budget where neither the user nor a window below 4 x this sets it."""


class TooLong(Exception):
    """The server said the request did not fit the window, though the estimate said it
    would: the turn makes it smaller and asks again rather than ending the run."""

    def __init__(self, error: ProviderError, sent: Sent, tools: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.sent = sent
        self.tools = tools


def tools_tokens(tools: list[ToolSpec]) -> int:
    """The tool definitions' share of a request, estimated."""
    if not tools:
        return 0
    return estimate_tokens(
        json.dumps([[t.name, t.description, t.parameters] for t in tools], ensure_ascii=False)
    )


def history_budget(window: int, output: int, fraction: float) -> int:
    """The tokens a request may take in a `window` whose answers get `output` tokens: the
    history's share of the window (`fraction`), and no more than leaves room for the
    answer and the margin. An agent whose first request is larger cannot work in it
    (agent/agents/window_floor.py)."""
    return min(int(window * fraction), window - output - int(window * WINDOW_MARGIN))


def smallest_window(first: int, fraction: float, output_set: int | None = None) -> int:
    """The smallest window whose history budget holds a first request of `first` tokens,
    with answers of `output_set` tokens, or, where the user set none, what the run gives
    an answer in that window (a quarter of it, at most `OUTPUT_CAP`)."""
    low, high = 1, 1 << 24
    while low < high:
        window = (low + high) // 2
        output = output_set or min(OUTPUT_CAP, max(1, window // 4))
        if history_budget(window, output, fraction) >= first:
            high = window
        else:
            low = window + 1
    return low


Ask = Callable[..., Awaitable[ModelResponse]]
"""A one-off model call (`ModelTurn.ask`): the summarizer is one."""


class ContextWindow:
    def __init__(self, run: RunContext, ask: Ask) -> None:
        self.run = run
        self._ask = ask
        self._tools: dict[str, int] = {}
        """Each agent's tool definitions' tokens, as its last turn sent them."""
        self._history_kept: dict[str, int] = {}
        """Each agent's history's part that is always sent (system prompt, instructions)."""
        self._count_told = False
        self.floor: Callable[[], int] | None = None
        """The smallest window all the run's agents work in, as `mlra run` measures it
        (agent/agents/window_floor.py sets it): a learned window is compared with it."""

    def output_budget(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> int:
        """The answer's token budget: the run's, the model's, and no more than the window
        has left after the request and a margin (`WINDOW_MARGIN`: the request's size is
        estimated, so filling the window exactly by the estimate is an HTTP 400 when the
        server counts more)."""
        provider = self.run.provider
        assert provider is not None
        wanted = min(self.run.config.max_output_tokens, provider.max_output_tokens)
        request = estimate_tokens(system) + tools_tokens(tools)
        request += sum(message_tokens(m) for m in messages)
        margin = int(provider.context_window * WINDOW_MARGIN)
        left = provider.context_window - request - margin
        return max(min(wanted, left), min(wanted, MIN_OUTPUT_TOKENS))

    async def shorten(self, agent: ev.AgentRole, history: AgentHistory, refusal: TooLong) -> int:
        """The server refused a request as too long for its window: the estimate was
        wrong. Its stated window is taken from here on (said below mlra's smallest where
        it is), and the request is made smaller by at least what the server said was too
        much (agent/loop/overflow_mend.py); returns the next answer's budget."""
        run = self.run
        provider = run.provider
        assert provider is not None
        error = refusal.error
        window = stated_window(error)
        if window is not None and window < provider.context_window:
            # The server's window is smaller than the one assumed: go by it from now on,
            # and the gauges too (a log, not a guess).
            assumed = provider.context_window
            provider.context_window = window
            provider.context_window_from = "server"
            provider.max_output_tokens = min(provider.max_output_tokens, max(1, window // 4))
            # Said once, by the event's own line (console/text/event_lines.py): the
            # notice below repeated it, and two lines said the same in headless output.
            least = self.smallest(agent, refusal.tools)
            run.emit(
                ev.ContextWindowLearned(
                    agent=agent, context_window=window, assumed=assumed, smallest=least
                )
            )
        run.emit(
            ev.Notice(
                level="warning",
                message=f"the server refused {agent}'s request as too long for the model's "
                f"window ({error}); it is made smaller, where it can be, before it is sent "
                "again",
            )
        )
        return await mend(self, agent, history, error, refusal.sent, refusal.tools)

    def checked_count(
        self,
        agent: ev.AgentRole,
        history: AgentHistory,
        tools: int,
        reported: int,
        *,
        tell: bool = True,
    ) -> int:
        """The server's count of the prompt just sent, unless it is more than `COUNT_RATIO`
        away from mlra's estimate of it: then the larger, said once a run. A server or
        proxy that reports a constant, or only the part it had not cached, would otherwise
        keep the history from ever being summarized while the answer's budget falls to
        its floor (96 KB requests went to an 8k window so)."""
        if reported <= 0:
            return reported
        # mlra's estimate is a range: a digit a token (as Qwen and Llama 2 count them) or
        # four characters a token (as most count prose); a count within reach of either
        # end is believed.
        low, high = sorted(prompt_sizes(history, tools))
        if low <= reported * COUNT_RATIO and reported <= high * COUNT_RATIO:
            return reported
        estimate = high
        if tell and not self._count_told:
            self._count_told = True
            self.run.emit(
                ev.Notice(
                    level="warning",
                    message=f"the server counted {agent}'s prompt as {reported:,} tokens, "
                    f"mlra estimates about {estimate:,}: more than {COUNT_RATIO}x apart, so "
                    f"the larger is taken to keep the history within the window (said once)",
                )
            )
        return max(reported, estimate)

    def smallest(self, agent: ev.AgentRole, tools: int) -> int:
        """The smallest window `agent`'s own first request fits (as agent/agents/window_floor.py
        measures it before a run): what is always sent, its tools and a turn's prompt."""
        kept = self._history_kept.get(agent, 0)
        own = smallest_window(
            kept + (tools or self._tools.get(agent, 0)) + PROMPT_TOKENS,
            self.run.config.context_fraction,
        )
        return max(own, self.floor()) if self.floor is not None else own

    async def keep(
        self, agent: ev.AgentRole, history: AgentHistory, tools: int = 0, coming: int = 0
    ) -> None:
        """Summarize the oldest turns when the next request (the history, the `tools`'
        definitions, and `coming`: the prompt still to be added) and its answer would
        outgrow the history's share of the window."""
        before = history.estimated_tokens()
        keep = self.run.config.keep_recent_turns
        if tools:  # (a resumed run's second look, after a refusal, passes none)
            self._tools[agent] = tools
        self._history_kept[agent] = history.kept_tokens()
        if self.run.catchup.ahead():
            # Summarize where the run did, whatever this provider's window.
            cut = self.run.catchup.recorded_summary(history, keep)
        else:
            cut = self._cut_for_window(agent, history, tools, coming)
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
        most = self.summary_tokens(agent, history)
        words = max(60, most * 3 // 5)
        response = await self._ask(
            agent,
            SUMMARIZER_SYSTEM,
            history.render(start, end, limit=self._summary_chars())
            + f"\n\n(Write at most about {words} words.)",
            purpose="summary",
            max_tokens=most,
        )
        summary = response.text.strip() or "(the summarizer returned nothing)"
        tokens = estimate_tokens(summary)
        if tokens > most:
            # A summary the window cannot carry would be summarized again at once.
            summary, _ = truncate_middle(summary, max(200, len(summary) * most // tokens))
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

    def summary_tokens(self, agent: ev.AgentRole, history: AgentHistory) -> int:
        """How long a summary may be: `SUMMARY_TOKENS`, or a quarter of the room the
        window leaves beside what is always sent, where that is less."""
        room = self._window_budget() - history.kept_tokens() - self._tools.get(agent, 0)
        return max(MIN_SUMMARY_TOKENS, min(SUMMARY_TOKENS, room // 4))

    def _cut_for_window(
        self, agent: ev.AgentRole, history: AgentHistory, tools: int, coming: int
    ) -> Cut | None:
        """None while the next request fits; else the summary that keeps the most of the
        latest turns (up to `keep_recent_turns`, at least the last one) whole while
        bringing the request back to about half the room it may grow in."""
        budget = self._window_budget()
        if history.estimated_tokens(extra=tools) + coming <= budget:
            return None
        fixed = history.kept_tokens() + tools + coming + self.summary_tokens(agent, history)
        room = budget - fixed
        for keep in range(self.run.config.keep_recent_turns, 0, -1):
            cut = history.summarizable(keep)
            if cut is not None and history.tokens_from(cut[1]) <= room // 2:
                return cut
        return history.summarizable(1)

    def _window_budget(self) -> int:
        """The tokens a request may take, as this run's window and answers have it."""
        config = self.run.config
        provider = self.run.provider
        assert provider is not None
        output = min(config.max_output_tokens, provider.max_output_tokens)
        return history_budget(provider.context_window, output, config.context_fraction)

    def _summary_chars(self) -> int:
        """How much old history the summarizer is shown: what its window holds (at about
        three characters a token, for safety), at most 60,000 characters."""
        provider = self.run.provider
        assert provider is not None
        output = min(self.run.config.max_output_tokens, provider.max_output_tokens)
        room = provider.context_window - output - estimate_tokens(SUMMARIZER_SYSTEM) - 100
        return max(2_000, min(60_000, room * 3))
