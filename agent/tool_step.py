"""What happens on a tool call, from the agent's request to its recorded result.

In order: the call is recorded; a resumed run takes the recorded result instead
(agent/catchup.py); a breakpoint holds it for the user to approve, edit or
reject (the clock stops meanwhile); a pause that came while the model was
thinking holds it back; the tool runs through the registry, its output streamed
to the log up to a cap; the result is truncated for the model and recorded,
even when the run ends under the call; and the workspace's changes are
snapshotted.
"""

from __future__ import annotations

import asyncio

from mlra import events as ev
from mlra.agent.catchup import INTERRUPTED
from mlra.agent.controls import Breakpoint, Decision
from mlra.agent.providers.base import ToolCallRequest
from mlra.agent.recording import KILLED_BY_RUN_END
from mlra.agent.run_context import RunContext
from mlra.agent.snapshots import WorkspaceScanner
from mlra.tools.registry import ToolContext, ToolOutcome, ToolRegistry
from mlra.tools.sandbox.base import OutputCallback, Stream
from mlra.tools.truncate import truncate_middle

STREAM_CAP_CHARS = 1_000_000
"""Streamed output logged per tool call; past this the log keeps only the result."""

INTERRUPTED_OUTPUT = (
    "Interrupted: the run stopped (crashed, was killed or was stopped) while this call was "
    "running, and has been resumed. It may have run in part: check its effects before "
    "running it again."
)


class ToolStep:
    def __init__(self, run: RunContext, scanner: WorkspaceScanner) -> None:
        self.run = run
        self.scanner = scanner

    async def execute(
        self,
        agent: ev.AgentRole,
        call: ToolCallRequest,
        registry: ToolRegistry,
        *,
        step: int = 0,
        turn: int = 0,
    ) -> ToolOutcome:
        """Run one tool call the agent asked for, with everything the user may do about it."""
        run = self.run
        assert run.sandbox is not None
        run.emit(
            ev.ToolCall(
                call_id=call.id,
                agent=agent,
                tool=call.name,
                arguments=call.arguments,
                raw_arguments=call.raw_arguments if call.parse_error else None,
                step=step,
                turn=turn,
            )
        )
        tool = registry.get(call.name)
        if tool is None or not tool.reruns_on_resume:
            recorded = run.catchup.recorded_result(call.id)
            if isinstance(recorded, ev.ToolResult):
                return outcome_of(recorded)
            if recorded == INTERRUPTED:
                outcome = ToolOutcome(output=INTERRUPTED_OUTPUT, ok=False, error="interrupted")
                return self._record_result(call, agent, outcome)
        arguments = call.arguments
        breakpoint_ = (
            run.controls.should_break(call.name, arguments) if call.parse_error is None else None
        )
        if breakpoint_ is not None:
            decision = await self._await_decision(call, breakpoint_)
            if decision.action == "reject":
                message = decision.message or "no reason given"
                outcome = ToolOutcome(
                    output=f"The user rejected this call: {message}",
                    ok=False,
                    error="rejected by the user",
                )
                return self._record_result(call, agent, outcome)
            if decision.action == "edit" and decision.arguments is not None:
                arguments = decision.arguments

        # A pause that came while the model was thinking holds the action back.
        await run.controls.wait_running()
        ctx = ToolContext(
            sandbox=run.sandbox,
            agent=agent,
            call_id=call.id,
            on_output=self._streamer(call.id),
            default_timeout_s=run.config.command_timeout_s,
            remaining_s=run.clock.remaining,
            default_artifact=run.task.evaluator.artifact,
        )
        try:
            outcome = await registry.dispatch(
                call.name, arguments, ctx, parse_error=call.parse_error
            )
        except asyncio.CancelledError:
            # The run ended under the call (deadline, stop): the sandbox has killed the
            # command; the log still gets the call's result so no call is left open.
            killed = ToolOutcome(
                output="Killed: the run ended while this call was running.",
                ok=False,
                error=KILLED_BY_RUN_END,
            )
            self._record_result(call, agent, killed)
            raise
        self._record_result(call, agent, outcome)
        await self.snapshot(step)
        return outcome

    def _streamer(self, call_id: str) -> OutputCallback:
        """Logs a call's output as it comes, up to `STREAM_CAP_CHARS`."""
        streamed = 0

        def on_output(stream: Stream, text: str) -> None:
            nonlocal streamed
            if streamed >= STREAM_CAP_CHARS:
                return
            streamed += len(text)
            if streamed >= STREAM_CAP_CHARS:
                text += "\n[... further output is not streamed to the log; see the result ...]\n"
            self.run.emit(ev.ToolOutput(call_id=call_id, stream=stream, text=text))

        return on_output

    async def _await_decision(self, call: ToolCallRequest, bp: Breakpoint) -> Decision:
        run = self.run
        future = run.controls.expect_decision(call.id)
        run.emit(
            ev.ApprovalRequested(
                call_id=call.id, tool=call.name, arguments=call.arguments, reason=bp.describe()
            )
        )
        # The clock does not run while the run waits for a human.
        run.clock.pause()
        try:
            return await future
        finally:
            if not run.controls.paused:
                run.clock.resume()

    def _record_result(
        self, call: ToolCallRequest, agent: ev.AgentRole, outcome: ToolOutcome
    ) -> ToolOutcome:
        text, truncated = truncate_middle(outcome.output, self.run.config.observation_limit)
        outcome.output = text
        self.run.emit(
            ev.ToolResult(
                call_id=call.id,
                tool=call.name,
                agent=agent,
                ok=outcome.ok,
                output=text,
                exit_code=outcome.exit_code,
                duration_s=outcome.duration_s,
                truncated=truncated,
                timed_out=outcome.timed_out,
                error=outcome.error,
                data=outcome.data,
                signal=outcome.signal,
            )
        )
        return outcome

    async def snapshot(self, step: int) -> None:
        """Record what the last action changed in the workspace (agent/snapshots.py)."""
        if not self.run.config.snapshots:
            return
        try:
            snapshot = await asyncio.to_thread(self.scanner.scan, step)
        except Exception as exc:  # a full disk must not end the run
            self.run.append(ev.Notice(level="warning", message=f"workspace snapshot failed: {exc}"))
            return
        if snapshot is not None:
            self.run.emit(snapshot)


def outcome_of(result: ev.ToolResult) -> ToolOutcome:
    """A tool's outcome as the agent received it, rebuilt from its record."""
    signal = result.signal
    if signal is None and result.ok and result.tool in ("submit", "report"):
        signal = result.tool  # logs written before the signal was recorded
    return ToolOutcome(
        output=result.output,
        ok=result.ok,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        error=result.error,
        data=dict(result.data),
        signal=signal,
        duration_s=result.duration_s,
    )
