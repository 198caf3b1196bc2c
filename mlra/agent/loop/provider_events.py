"""What passes between mlra and the model provider that the log must tell.

A server that refused native tools (the provider then reads calls from text), a
cost budget on a model with no known price, each SDK retry (`model_retry`, so
the console shows the run waiting), a call the deadline or a stop cut off (its
estimated tokens still counted), and a provider that failed: the run ends, or the
console pauses it for the user. A replay that diverged from its recording is no
provider failure and ends as "replay_diverged".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from mlra import events as ev
from mlra.agent.loop.context_window import tools_tokens
from mlra.agent.loop.ending import Ending, EndRun
from mlra.agent.loop.replay_provider import ReplayDiverged, ReplayProvider
from mlra.agent.loop.run_context import RunContext
from mlra.agent.providers.base import Message, ProviderError, ServerGone, estimated_usage
from mlra.tools.registry import ToolSpec


class ProviderEvents:
    def __init__(
        self, run: RunContext, smallest: Callable[[ev.AgentRole, int], int] | None = None
    ) -> None:
        self.run = run
        self._cost_told = False
        self._smallest = smallest
        """The smallest window an agent's own first request fits (loop/context_window.py):
        a window told below it is said as such."""

    def tell_adaptations(self, agent: ev.AgentRole) -> None:
        """What the provider changed about its requests (a server that refused native
        tools) becomes a `notice`, once each; a window the server told once its model was
        loaded, `context_window_learned`."""
        provider = self.run.provider
        assert provider is not None
        for message in provider.take_notices():
            self.run.emit(ev.Notice(level="warning", message=message))
        told = provider.take_window_told()
        if told is not None:
            self.run.emit(
                ev.ContextWindowLearned(
                    agent=agent,
                    context_window=told.window,
                    assumed=told.assumed,
                    smallest=self._smallest(agent, 0) if self._smallest else None,
                    told_by=told.told_by,
                )
            )

    def tell_unpriced(self) -> None:
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

    def count_cut_off(
        self,
        agent: ev.AgentRole,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        produced: int,
        started: float,
        *,
        lost: bool = False,
    ) -> None:
        """A call cut off midway (the deadline, a stop, a connection lost mid-answer:
        `lost`) used tokens all the same: they are estimated and recorded, so the budgets
        and the report count them."""
        provider = self.run.provider
        assert provider is not None
        prompt_chars = len(system) + sum(len(m.content) for m in messages)
        prompt_chars += 4 * tools_tokens(tools)
        usage = estimated_usage(prompt_chars, produced)
        by: Literal["deadline", "stop", "connection_lost"] = (
            "connection_lost" if lost else "deadline" if self.run.clock.remaining() <= 0 else "stop"
        )
        who = {
            "deadline": "the run's time limit",
            "stop": "the stop",
            "connection_lost": "the lost connection",
        }[by]
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

    def retry_told(
        self, agent: ev.AgentRole, in_wait: Callable[[int | None], int | None]
    ) -> Callable[[int, int | None], None]:
        """Each retry the provider's SDK makes becomes a `model_retry` event, so the
        console (and its replay) shows that the run waits for the provider; `in_wait`
        says, from the retry's status, which of the run's waits for its server the
        retry belongs to (None: none), for the displays to fold it into that wait."""
        run = self.run

        def on_retry(attempt: int, status: int | None) -> None:
            retries = run.provider.max_retries if run.provider is not None else 0
            run.emit(
                ev.ModelRetry(
                    agent=agent,
                    model=run.config.model,
                    attempt=attempt,
                    max_retries=retries,
                    status=status,
                    in_wait=in_wait(status),
                )
            )

        return on_retry

    async def failed(self, agent: ev.AgentRole, exc: ProviderError) -> None:
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
        waited = exc.waited_s if isinstance(exc, ServerGone) else None
        run.emit(
            ev.ModelError(
                agent=agent,
                model=run.config.model,
                error=str(exc),
                fatal=fatal,
                server_waited_s=waited,
            )
        )
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
