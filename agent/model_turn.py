"""One model turn: the step gate, keeping the history within the context window,
the turn's prompt, and the streamed call with what a provider failure does.

The model's answers are recorded whole (`model_call`) and streamed in pieces
(`text_delta`); a resumed run takes them from the recording instead
(agent/catchup.py), summarizing where the run did whatever this provider's
window, so its histories come out as they were.
"""

from __future__ import annotations

from typing import Literal

from mlra import events as ev
from mlra.agent.catchup import Cut
from mlra.agent.ending import Ending, EndRun
from mlra.agent.fingerprint import request_fingerprint
from mlra.agent.history import AgentHistory
from mlra.agent.prompts import SUMMARIZER_SYSTEM
from mlra.agent.providers.base import Message, ModelResponse, ProviderError
from mlra.agent.run_context import RunContext
from mlra.tools.registry import ToolRegistry

DELTA_FLUSH_CHARS = 64
"""Streamed model text is logged in pieces of about this size, not per token."""

Purpose = Literal["turn", "summary", "review"]
"""Why the model is called, as `model_call` records it."""


class ModelTurn:
    def __init__(self, run: RunContext) -> None:
        self.run = run

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
        await self._keep_in_context(agent, history)
        injected = run.catchup.take_messages(agent)
        prompt = run.catchup.recorded_prompt()  # the clock note as it was then
        if prompt is None:
            parts = [
                *(f"[message from the user] {m}" for m in injected),
                extra_prompt,
                run.elapsed_note(),
            ]
            prompt = "\n\n".join(p for p in parts if p)
        history.add_user(prompt)
        turn = history.turn + 1
        run.emit(
            ev.StepStarted(agent=agent, step=step, turn=turn, prompt=prompt, delivered=injected)
        )
        response = await self._generate(agent, history.system, history.messages, registry, turn)
        history.record_usage(response.usage.input_tokens)
        history.add_assistant(response)
        return response, step

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
    ) -> ModelResponse:
        run = self.run
        recorded = run.catchup.model_answer(agent, purpose)
        if recorded is not None:
            return recorded
        provider = run.provider
        assert provider is not None
        tools = registry.specs() if registry else []
        request_sha, _ = request_fingerprint(system, messages, tools, self.replacements())
        buffer: list[str] = []

        def flush() -> None:
            if buffer:
                run.emit(ev.TextDelta(agent=agent, turn=turn, text="".join(buffer)))
                buffer.clear()

        def on_text(piece: str) -> None:
            buffer.append(piece)
            if "\n" in piece or sum(map(len, buffer)) >= DELTA_FLUSH_CHARS:
                flush()

        while True:
            try:
                provider.expect(request_sha, messages, self.replacements())
                response = await provider.generate(
                    system=system,
                    messages=messages,
                    tools=tools,
                    on_text=on_text if purpose == "turn" else None,
                    max_tokens=run.config.max_output_tokens,
                )
                break
            except ProviderError as exc:
                buffer.clear()
                await self._provider_failed(agent, exc)
        flush()
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
            )
        )
        return response

    async def _provider_failed(self, agent: ev.AgentRole, exc: ProviderError) -> None:
        """End the run, or pause it for the user to retry, as the config says."""
        run = self.run
        fatal = run.config.on_provider_failure == "end"
        run.emit(ev.ModelError(agent=agent, model=run.config.model, error=str(exc), fatal=fatal))
        if fatal:
            raise EndRun(
                Ending(
                    reason="error",
                    status="error",
                    evaluate=False,
                    by="error",
                    message=f"model provider failed: {exc}",
                )
            ) from exc
        # The console pauses instead: the user can wait, resume or stop.
        run.pause(source="system")
        await run.controls.gate()

    async def _keep_in_context(self, agent: ev.AgentRole, history: AgentHistory) -> None:
        """Summarize the oldest turns when the history outgrows its share of the window."""
        before = history.estimated_tokens()
        keep = self.run.config.keep_recent_turns
        if self.run.catchup.ahead():
            # Summarize where the run did, whatever this provider's window.
            cut = self.run.catchup.recorded_summary(history, keep)
        else:
            cut = self._cut_for_window(history, before)
        if cut is None:
            return
        start, end, first_turn, last_turn = cut
        response = await self.ask(
            agent, SUMMARIZER_SYSTEM, history.render(start, end), purpose="summary"
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
        assert self.run.provider is not None
        window = self.run.provider.context_window
        budget = int(window * config.context_fraction) - config.max_output_tokens
        if tokens <= budget:
            return None
        return history.summarizable(config.keep_recent_turns) or history.summarizable(1)
