"""One model turn: the step gate, keeping the history within the context window,
the turn's prompt, and the streamed call with what a provider failure does.

The model's answers are recorded whole (`model_call`) and streamed in pieces
(`text_delta`); a resumed run takes them from the recording instead
(agent/catchup.py), summarizing where the run did whatever this provider's
window, so its histories come out as they were.

The history is kept within the window before a request is sent, never after a
server refused it: the request's size (history, tools, the prompt to come) is
estimated, and if it and the answer's budget would not fit, the oldest turns are
summarized first. A call cut off midway (the deadline, a stop) still counts its
estimated tokens. Text that looked like a tool call but could not be read is
pointed out in the agent's next prompt (agent/providers/text_calls.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Literal

from mlra import events as ev
from mlra.agent.catchup import Cut
from mlra.agent.ending import Ending, EndRun
from mlra.agent.fingerprint import request_fingerprint
from mlra.agent.history import AgentHistory, estimate_tokens
from mlra.agent.prompts import SUMMARIZER_SYSTEM
from mlra.agent.providers.base import (
    Message,
    ModelResponse,
    ProviderError,
    estimated_usage,
    is_context_overflow,
    retries_told_to,
    stated_window,
)
from mlra.agent.providers.replay import ReplayDiverged, ReplayProvider
from mlra.agent.providers.text_calls import problem_note, read_text_calls
from mlra.agent.run_context import RunContext
from mlra.tools.registry import ToolRegistry, ToolSpec

DELTA_FLUSH_CHARS = 64
"""Streamed model text is logged in pieces of about this size, not per token."""

Purpose = Literal["turn", "summary", "review"]
"""Why the model is called, as `model_call` records it."""

PROMPT_TOKENS = 200
"""Room kept for the turn's own prompt (clock note, nudges) when checking the window."""
MIN_OUTPUT_TOKENS = 256
"""An answer's budget is cut to what the window has left, but never below this."""
WINDOW_MARGIN = 0.05
"""The share of the window kept free when sizing an answer's budget: the estimate is no
tokenizer's count, and chat templates add tokens of their own."""
MESSAGE_OVERHEAD = 8
"""Tokens a chat template adds around each message (role markers), estimated."""


class _TooLong(Exception):
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


class ModelTurn:
    def __init__(self, run: RunContext) -> None:
        self.run = run
        self._notes: dict[str, str] = {}
        """A note for an agent's next prompt (its text looked like a call and was not read)."""
        self._cost_told = False

    async def take(
        self,
        agent: ev.AgentRole,
        history: AgentHistory,
        registry: ToolRegistry,
        *,
        counts_as_step: bool,
        extra_prompt: str = "",
    ) -> tuple[ModelResponse, int]:
        """One model turn: gate, budget, context upkeep, status note, streamed call."""
        run = self.run
        assert run.provider is not None
        step = await run.begin_step(agent, counts=counts_as_step)
        note = self._notes.pop(agent, "")
        coming = estimate_tokens(note + extra_prompt) + PROMPT_TOKENS
        await self._keep_in_context(agent, history, tools_tokens(registry.specs()), coming)
        injected = run.catchup.take_messages(agent)
        prompt = run.catchup.recorded_prompt()  # the clock note as it was then
        if prompt is None:
            parts = [
                *(f"[message from the user] {m}" for m in injected),
                note,
                extra_prompt,
                run.elapsed_note(),
            ]
            prompt = "\n\n".join(p for p in parts if p)
        history.add_user(prompt)
        turn = history.turn + 1
        run.emit(
            ev.StepStarted(agent=agent, step=step, turn=turn, prompt=prompt, delivered=injected)
        )
        if run.catchup.ahead():
            # Where the recorded run summarized after a server refused this request as
            # too long (`_retry_shorter`), the summary comes next in the log.
            await self._keep_in_context(agent, history)
        try:
            response = await self._generate(
                agent, history.system, history.messages, registry, turn, too_long_retry=True
            )
        except _TooLong as too_long:
            response = await self._retry_shorter(agent, history, registry, turn, too_long.error)
        history.record_usage(response.usage.input_tokens)
        history.add_assistant(response)
        unread = self._unread_calls(response, registry)
        names = [t.name for t in registry.specs()]
        self._notes[agent] = problem_note(unread, names)
        if unread and not run.catchup.replaying:
            # The person is shown what the model will be told (and a replay, from the log).
            run.emit(
                ev.Notice(
                    level="warning",
                    message=f"{agent}'s answer looked like a tool call that could not be read: "
                    + "; ".join(unread)
                    + " (nothing was run; its next prompt says so)",
                )
            )
        return response, step

    async def _retry_shorter(
        self,
        agent: ev.AgentRole,
        history: AgentHistory,
        registry: ToolRegistry,
        turn: int,
        error: ProviderError,
    ) -> ModelResponse:
        """The server refused a request as too long for its window: the estimate was
        wrong, so the oldest turns are summarized (all but the last, if need be) and the
        request is sent once more; a second refusal is a provider failure."""
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
            await self._summarize(agent, history, cut)
        else:
            history.shorten_outputs(max(1, history.estimated_tokens() // 2))
        return await self._generate(
            agent, history.system, history.messages, registry, turn, shrink=cut is None
        )

    def _unread_calls(self, response: ModelResponse, registry: ToolRegistry) -> list[str]:
        """What in the text of an answer looked like a tool call but could not be read;
        found from the answer's text, so a resumed run, whose answers come from the log,
        finds the same."""
        if self.run.config.tool_calls == "native":
            return []
        if any(call.from_text is None for call in response.tool_calls):
            return []  # native calls: the text was not read for calls
        return read_text_calls(response.text, [t.name for t in registry.specs()]).problems

    async def ask(
        self,
        agent: ev.AgentRole,
        system: str,
        text: str,
        *,
        purpose: Purpose,
        registry: ToolRegistry | None = None,
    ) -> ModelResponse:
        """A one-off model call outside the agent's main history (summaries, reviews)."""
        self.run.check_budget()
        return await self._generate(
            agent, system, [Message(role="user", content=text)], registry, 0, purpose=purpose
        )

    def replacements(self) -> list[tuple[str, str]]:
        """Names that differ between two runs of the same thing (see agent/fingerprint.py)."""
        run = self.run
        pairs = [(str(run.workspace), "<workspace>"), (run.run_id, "<run>")]
        if run.sandbox is not None:
            pairs.insert(0, (run.sandbox.workdir, "<workspace>"))
        return sorted(pairs, key=lambda p: -len(p[0]))

    async def _generate(
        self,
        agent: ev.AgentRole,
        system: str,
        messages: list[Message],
        registry: ToolRegistry | None,
        turn: int,
        *,
        purpose: Purpose = "turn",
        too_long_retry: bool = False,
        shrink: bool = False,
    ) -> ModelResponse:
        """The call, with its retries, recorded as `model_call`. `too_long_retry`: a
        server's "too long for the window" raises `_TooLong` for the caller to mend;
        `shrink`: the answer gets the smallest budget (nothing was left to summarize)."""
        run = self.run
        recorded = run.catchup.model_answer(agent, purpose)
        if recorded is not None:
            return recorded
        provider = run.provider
        assert provider is not None
        tools = registry.specs() if registry else []
        request_sha, _ = request_fingerprint(system, messages, tools, self.replacements())
        self._tell_unpriced()
        max_tokens = self._output_budget(system, messages, tools)
        if shrink:
            max_tokens = min(max_tokens, MIN_OUTPUT_TOKENS)
        buffer: list[str] = []
        produced = 0

        def flush() -> None:
            if buffer:
                run.emit(ev.TextDelta(agent=agent, turn=turn, text="".join(buffer)))
                buffer.clear()

        def on_text(piece: str) -> None:
            nonlocal produced
            produced += len(piece)
            if purpose != "turn":
                return  # summaries and reviews are not streamed to the transcript
            buffer.append(piece)
            if "\n" in piece or sum(map(len, buffer)) >= DELTA_FLUSH_CHARS:
                flush()

        while True:
            started = time.monotonic()
            produced = 0
            try:
                provider.expect(request_sha, messages, self.replacements())
                with retries_told_to(self._retry_told(agent)):
                    response = await provider.generate(
                        system=system,
                        messages=messages,
                        tools=tools,
                        on_text=on_text,
                        max_tokens=max_tokens,
                    )
                break
            except ProviderError as exc:
                buffer.clear()
                self._tell_adaptations()
                if too_long_retry and is_context_overflow(exc):
                    raise _TooLong(exc) from exc
                await self._provider_failed(agent, exc)
            except asyncio.CancelledError:
                flush()
                self._count_cut_off(agent, system, messages, tools, produced, started)
                raise
        flush()
        self._tell_adaptations()
        usage = response.usage
        run.emit(
            ev.ModelCall(
                agent=agent,
                model=run.config.model,
                turn=turn,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cost_usd=response.cost_usd,
                latency_s=round(response.latency_s, 4),
                stop_reason=response.stop_reason,
                purpose=purpose,
                text=response.text,
                tool_calls=[c.model_dump(exclude_defaults=True) for c in response.tool_calls],
                request_sha=request_sha,
                tokens_estimated=usage.estimated,
            )
        )
        return response

    def _output_budget(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> int:
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

    def _tell_adaptations(self) -> None:
        """What the provider changed about its requests (a server that refused native
        tools) becomes a `notice`, once each."""
        provider = self.run.provider
        assert provider is not None
        for message in provider.take_notices():
            self.run.emit(ev.Notice(level="warning", message=message))

    def _tell_unpriced(self) -> None:
        """Once a run: a cost budget on a model with no known price cannot end the run."""
        run = self.run
        if self._cost_told or run.config.max_cost_usd is None or run.provider is None:
            return
        self._cost_told = True
        if not run.provider.priced:
            run.append(
                ev.Notice(
                    level="warning",
                    message=f"--max-cost ${run.config.max_cost_usd:g} cannot be enforced: "
                    f"{run.config.model} has no known price, so its calls count as $0",
                )
            )

    def _count_cut_off(
        self,
        agent: ev.AgentRole,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        produced: int,
        started: float,
    ) -> None:
        """A call cut off midway (the deadline, a stop) used tokens all the same: they are
        estimated and recorded, so the budgets and the report count them."""
        provider = self.run.provider
        assert provider is not None
        prompt_chars = len(system) + sum(len(m.content) for m in messages)
        prompt_chars += 4 * tools_tokens(tools)
        usage = estimated_usage(prompt_chars, produced)
        by = "deadline" if self.run.clock.remaining() <= 0 else "stop"
        who = "the run's time limit" if by == "deadline" else "the stop"
        self.run.emit(
            ev.ModelError(
                agent=agent,
                model=self.run.config.model,
                error=f"{who} cut off {agent}'s model call {time.monotonic() - started:.1f} s "
                f"after it was sent; its tokens may have been billed, so an estimate "
                f"(~{usage.input_tokens} in, ~{usage.output_tokens} out) is counted in the "
                "totals",
                fatal=False,
                cut_off=by,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cost_usd=provider.cost_of(usage),
            )
        )

    def _retry_told(self, agent: ev.AgentRole) -> Callable[[int, int | None], None]:
        """Each retry the provider's SDK makes becomes a `model_retry` event, so the
        console (and its replay) shows that the run waits for the provider."""
        run = self.run

        def on_retry(attempt: int, status: int | None) -> None:
            retries = getattr(run.provider, "max_retries", 0)
            run.emit(
                ev.ModelRetry(
                    agent=agent,
                    model=run.config.model,
                    attempt=attempt,
                    max_retries=retries,
                    status=status,
                )
            )

        return on_retry

    async def _provider_failed(self, agent: ev.AgentRole, exc: ProviderError) -> None:
        """End the run, or pause it for the user to retry, as the config says. A replay
        that diverged from its recording is no provider failure and would diverge
        again: it ends the run as "replay_diverged", whatever the config."""
        run = self.run
        if isinstance(exc, ReplayDiverged):
            config = run.config
            limits = ev.Limits(
                time_limit_s=run.clock.limit_s,
                max_steps=config.max_steps,
                max_cost_usd=config.max_cost_usd,
                max_tokens=config.max_tokens,
            )
            provider = run.provider
            why = provider.limits_difference(limits) if isinstance(provider, ReplayProvider) else ""
            raise EndRun(
                Ending(
                    reason="replay_diverged",
                    status="error",
                    evaluate=False,
                    by="error",
                    message=f"the {exc}{why}",
                )
            ) from exc
        fatal = run.config.on_provider_failure == "end"
        run.emit(ev.ModelError(agent=agent, model=run.config.model, error=str(exc), fatal=fatal))
        if fatal:
            raise EndRun(
                Ending(
                    reason="provider_error",
                    status="error",
                    evaluate=False,
                    by="error",
                    message=f"model provider failed: {exc}",
                )
            ) from exc
        # The console pauses instead: the user can wait, resume or stop.
        run.pause(source="system")
        await run.controls.gate()

    async def _keep_in_context(
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
            await self._summarize(agent, history, cut, before)
        over = history.estimated_tokens(extra=tools) + coming - self._window_budget()
        if over > 0:
            # What is left is still too big for the window (a single huge output): the
            # middle of the longest outputs is cut, as a resumed run, with the same
            # history, cuts it again.
            history.shorten_outputs(over)

    async def _summarize(
        self, agent: ev.AgentRole, history: AgentHistory, cut: Cut, before: int | None = None
    ) -> None:
        """Replace the turns `cut` names with the summarizer's summary of them."""
        if before is None:
            before = history.estimated_tokens()
        start, end, first_turn, last_turn = cut
        response = await self.ask(
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
