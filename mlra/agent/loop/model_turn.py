"""One model turn: the step gate, the turn's prompt, and the streamed call.

The model's answers are recorded whole (`model_call`) and streamed in pieces
(`text_delta`, agent/loop/answer_stream.py); a resumed run takes them from the recording instead
(agent/loop/catchup.py), summarizing where the run did whatever this provider's
window, so its histories come out as they were. Keeping the history within the
window is agent/loop/context_window.py; what the provider does that the log must tell
(retries, a call cut off, a failure) is agent/loop/provider_events.py. Text that
looked like a tool call but could not be read is pointed out in the agent's next
prompt (agent/providers/text_calls.py).
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from mlra import events as ev
from mlra.agent.loop.answer_stream import AnswerStream
from mlra.agent.loop.clock import PausedSpan
from mlra.agent.loop.context_window import (
    PROMPT_TOKENS,
    ContextWindow,
    TooLong,
    tools_tokens,
)
from mlra.agent.loop.fingerprint import request_fingerprint, run_names
from mlra.agent.loop.history import AgentHistory, estimate_tokens
from mlra.agent.loop.overflow_mend import Sent, prompt_sizes
from mlra.agent.loop.provider_events import ProviderEvents
from mlra.agent.loop.replay_provider import ReplayProvider
from mlra.agent.loop.run_context import RunContext
from mlra.agent.loop.server_wait import ServerWait, sdk_retries_off_the_clock
from mlra.agent.loop.tool_call_fallback import ToolCallFallback
from mlra.agent.providers.base import (
    Message,
    ModelResponse,
    ProviderError,
    ServerGone,
    first_piece_told_to,
    is_context_overflow,
)
from mlra.agent.providers.call_ids import new_call_id
from mlra.agent.providers.sent_watch import request_sent_told_to
from mlra.agent.providers.text_calls import problem_note, read_text_calls, unread_notice
from mlra.tools.registry import ToolRegistry

MAX_MENDS = 4
"""How many times one turn's request is made smaller after a server refused it as too
long, each time by what the server said was too much, before a refusal ends the run."""
Purpose = Literal["turn", "summary", "review"]
"""Why the model is called, as `model_call` records it."""


class ModelTurn:
    def __init__(self, run: RunContext) -> None:
        self.run = run
        self._notes: dict[str, str] = {}
        """A note for an agent's next prompt (its text looked like a call and was not read)."""
        self._shown_unread: set[tuple[str, str]] = set()
        """The (agent, problem) pairs a notice has shown the person: the model is told
        each time, the person once (a small model names the same missing tool turn
        after turn). Filled while a resumed run catches up, too, so it says no more."""
        self._call_ids: set[str] = set()
        """The ids of the tool calls the run's model answers held so far, its catch-up's
        included (`_own_ids`)."""
        self.window = ContextWindow(run, self.ask)
        self.provider_events = ProviderEvents(run, self.window.smallest)
        self.fallback = ToolCallFallback(run)
        self.server_wait = ServerWait(run)

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
        specs = tools_tokens(registry.specs())  # the tool definitions, one estimate a turn
        await self.window.keep(agent, history, specs, coming)
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
        sent = history.estimated_tokens(extra=specs)
        run.emit(
            ev.StepStarted(
                agent=agent,
                step=step,
                turn=turn,
                prompt=prompt,
                delivered=injected,
                prompt_tokens=sent,
            )
        )
        if run.catchup.ahead():
            # Where the recorded run summarized after a server refused this request as
            # too long (`ContextWindow.shorten`), the summary comes next in the log.
            await self.window.keep(agent, history)
        answer: int | None = None
        for mends_left in range(MAX_MENDS, -1, -1):
            try:
                response = await self._generate(
                    agent,
                    history.system,
                    history.messages,
                    registry,
                    turn,
                    too_long_retry=mends_left > 0,
                    most_tokens=answer,
                )
                break
            except TooLong as too_long:
                answer = await self.window.shorten(agent, history, too_long)
        else:  # pragma: no cover - the last try raises no TooLong
            raise AssertionError("a mended request was neither answered nor refused")
        counted = response.usage.input_tokens
        if not response.usage.estimated:
            counted = self.window.checked_count(
                agent, history, specs, counted, tell=not run.catchup.replaying
            )
        history.record_usage(counted)
        history.add_assistant(response)
        unread = self._unread_calls(response, registry)
        names = [t.name for t in registry.specs()]
        self._notes[agent] = problem_note(unread, names)
        if switched := self.fallback.after(agent, response, registry):
            self._notes[agent] = "\n\n".join(n for n in (self._notes[agent], switched) if n)
        new = [p for p in unread if (agent, p) not in self._shown_unread]
        self._shown_unread.update((agent, p) for p in unread)
        if new and not run.catchup.replaying:
            # The person is shown what the model will be told (and a replay, from the log).
            run.emit(
                ev.Notice(
                    level="warning",
                    message=unread_notice(agent, new),
                    kind="unread_call",
                    agent=agent,
                    problems=new,
                )
            )
        return response, step

    def _unread_calls(self, response: ModelResponse, registry: ToolRegistry) -> list[str]:
        """What in the text of an answer looked like a tool call but could not be read;
        found from the answer's text, so a resumed run, whose answers come from the log,
        finds the same. Nothing for a provider that reads no text (a vendor's own API:
        its prose is prose), and what the model only meant as a call (a tool that does
        not exist, a ```bash block) only where it was told the format."""
        provider = self.run.provider
        if self.run.config.tool_calls == "native" or provider is None:
            return []
        if not provider.reads_text_calls():
            return []
        if any(call.from_text is None for call in response.tool_calls):
            return []  # native calls: the text was not read for calls
        names = [t.name for t in registry.specs()]
        told = provider.tools_in_prompt()
        return read_text_calls(response.text, names, tools_in_prompt=told).problems

    async def ask(
        self,
        agent: ev.AgentRole,
        system: str,
        text: str,
        *,
        purpose: Purpose,
        registry: ToolRegistry | None = None,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        """A one-off model call outside the agent's main history (summaries, reviews);
        `max_tokens` holds its answer to less than the window would allow."""
        self.run.check_budget()
        return await self._generate(
            agent,
            system,
            [Message(role="user", content=text)],
            registry,
            0,
            purpose=purpose,
            most_tokens=max_tokens,
        )

    def _own_ids(self, response: ModelResponse) -> None:
        """A call whose id the run has had already (a server that sends the same id every
        time, "0") gets a new one, before the history, the log or a breakpoint sees it: the
        run's events and the user's decisions go by call id. A replay keeps the recording's
        ids, which its recorded results and decisions are found by (an older recording
        holds `call_0` many times)."""
        keep = isinstance(self.run.provider, ReplayProvider)
        for call in response.tool_calls:
            if call.id in self._call_ids and not keep:
                call.id = new_call_id()
            self._call_ids.add(call.id)

    def replacements(self) -> list[tuple[str, str]]:
        """Names that differ between two runs of the same thing (see agent/loop/fingerprint.py)."""
        run = self.run
        return run_names(run.sandbox.workdir if run.sandbox else None, str(run.workspace))

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
        most_tokens: int | None = None,
    ) -> ModelResponse:
        """The call, with its retries, recorded as `model_call`. `too_long_retry`: a
        server's "too long for the window" raises `TooLong` for the caller to mend;
        `most_tokens`: the most the answer may take (a summary's, a mended request's)."""
        run = self.run
        recorded = run.catchup.model_answer(agent, purpose)
        if recorded is not None:
            if run.provider is not None:
                run.provider.answered_from_log()
            self._call_ids.update(call.id for call in recorded.tool_calls)  # ids as logged
            return recorded
        provider = run.provider
        assert provider is not None
        tools = registry.specs() if registry else []
        request_sha, _ = request_fingerprint(system, messages, tools, self.replacements())
        self.provider_events.tell_unpriced()
        self.provider_events.tell_adaptations(
            agent
        )  # what it learnt before (a window it could not read)
        max_tokens = self.window.output_budget(system, messages, tools)
        if most_tokens is not None:
            max_tokens = min(max_tokens, most_tokens)
        stream = AnswerStream(run, agent, turn)
        produced = 0

        def on_text(piece: str) -> None:
            nonlocal produced
            produced += len(piece)
            if purpose != "turn":
                return  # summaries and reviews are not streamed to the transcript
            stream.add(piece)

        def on_first_piece(seconds: float) -> None:
            run.emit(ev.ModelAnswering(agent=agent, turn=turn, first_token_s=round(seconds, 3)))

        told = self.provider_events.retry_told(agent, self.server_wait.holding)

        def on_retry(attempt: int, status: int | None) -> None:
            # What the answer given up on streamed is logged before the retry, never
            # glued to the answer asked again (its text is no part of that answer).
            stream.given_up()
            told(attempt, status)

        def on_sent() -> None:
            nonlocal sent
            sent = True

        while True:
            started = time.monotonic()
            span = PausedSpan(run.clock)  # the run clock's pauses in the call: its `paused_s`
            produced = 0
            sent = False
            try:
                provider.expect(request_sha, messages, self.replacements())
                with (
                    sdk_retries_off_the_clock(run, on_retry),
                    first_piece_told_to(on_first_piece),
                    request_sent_told_to(on_sent),
                ):
                    response = await provider.generate(
                        system=system,
                        messages=messages,
                        tools=tools,
                        on_text=on_text,
                        max_tokens=max_tokens,
                    )
                # Up to where its `latency_s` was taken: the provider may ask its server
                # more after (read_window_again), and a pause then is not the call's.
                paused = span.paused_s(response.latency_s)
                break
            except ProviderError as exc:
                stream.given_up()  # what it streamed, logged before its failure
                self.provider_events.tell_adaptations(agent)
                if isinstance(exc, ServerGone) and exc.cause == "connection_lost" and produced:
                    # The server had begun to answer: what it read and wrote counts, though
                    # the call is asked again (a killed local server, a dropped stream).
                    self.provider_events.count_cut_off(
                        agent, system, messages, tools, produced, started, lost=True
                    )
                if isinstance(exc, ServerGone):
                    if await self.server_wait.wait(agent, exc):
                        continue
                    exc = self.server_wait.gave_up(exc)
                else:
                    # The server answered, with an error: whatever comes next (a mended
                    # request, a resume after the pause) is no longer the outage's.
                    self.server_wait.reset()
                if too_long_retry and is_context_overflow(exc):
                    spec = tools_tokens(tools)
                    sizes = prompt_sizes(AgentHistory(system, messages), spec)
                    raise TooLong(exc, Sent(*sizes, max_tokens), spec) from exc
                await self.provider_events.failed(agent, exc)
            except asyncio.CancelledError:
                stream.given_up()
                if sent or produced or not provider.tells_sending():
                    # No request that never reached the server is counted: a stop while
                    # the SDK retried a name that does not resolve cost nothing.
                    self.provider_events.count_cut_off(
                        agent, system, messages, tools, produced, started
                    )
                raise
        self._own_ids(response)
        stream.answered()
        self.server_wait.reset()
        self.provider_events.tell_adaptations(agent)
        usage = response.usage
        if response.paused_s is not None:  # a replay's answer: the pause its call recorded
            paused = response.paused_s
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
                paused_s=round(min(paused, response.latency_s), 4),
                stop_reason=response.stop_reason,
                purpose=purpose,
                text=response.text,
                tool_calls=[c.model_dump(exclude_defaults=True) for c in response.tool_calls],
                request_sha=request_sha,
                tokens_estimated=usage.estimated,
                first_token_s=None
                if response.first_token_s is None
                else round(response.first_token_s, 4),
            )
        )
        return response
