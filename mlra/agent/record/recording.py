"""Catching up with a recorded run: how resume and fork rebuild the agent's state.

The supervisor and worker keep their state in ordinary Python objects (message
histories, subtask counters, the call stack of a subtask running inside the
supervisor's `assign_subtask`). Rather than serialize all of that, a resumed
run executes the agent's code again from the start against its own log: model
answers come from the recorded `model_call` events, tool results from the
recorded `tool_result` events (nothing runs again in the sandbox), and every
event the agent emits is matched against the next recorded one instead of
being written. When the recording runs out, the run goes live exactly where it
stopped, with every history as it was. The agent code is deterministic given
those inputs, so a mismatch means the log and the code disagree, and resume
refuses with the first point of disagreement rather than guess.
"""

from __future__ import annotations

from collections.abc import Callable

from mlra import events as ev
from mlra.agent.providers.base import ModelResponse, ToolCallRequest, Usage

KILLED_BY_RUN_END = "killed: the run ended"
"""The error of a tool result recorded when the run ended under a running call."""

PASSIVE = (
    ev.RunStarted,
    ev.ResourceSample,
    ev.TextDelta,
    ev.ModelAnswering,
    ev.ContextWindowLearned,
    ev.ToolStarted,
    ev.ToolOutput,
    ev.Control,
    ev.ApprovalRequested,
    ev.Notice,
    ev.TimeWarning,
    ev.Metrics,
    ev.ModelError,
    ev.ModelRetry,
    ev.WorkspaceSnapshot,
    ev.RunResumed,
    ev.RunForked,
    ev.JobStarted,
    ev.JobEnded,
    ev.AttemptStarted,
    ev.AttemptFinished,
    ev.Submission,
    ev.EvaluationStarted,
    ev.EvaluationProgress,
    ev.EvaluationFinished,
    ev.RunFinished,
    ev.Experiment,
    ev.UnknownEvent,
)
"""Events that the agent's own code does not emit, or emits live only (`tool_started`):
they are folded, never matched."""


class Divergence(Exception):
    """The agent, re-run over its log, did something other than what the log says."""


def _same(recorded: ev.Event, emitted: ev.Event) -> bool:
    if recorded.type != emitted.type:
        return False
    # Of one type, so each test below holds for both or for neither.
    if isinstance(recorded, ev.StepStarted) and isinstance(emitted, ev.StepStarted):
        return recorded.agent == emitted.agent
    if isinstance(recorded, ev.ToolCall | ev.ToolResult) and isinstance(
        emitted, ev.ToolCall | ev.ToolResult
    ):
        return recorded.call_id == emitted.call_id
    if isinstance(recorded, ev.SubtaskStarted | ev.SubtaskFinished) and isinstance(
        emitted, ev.SubtaskStarted | ev.SubtaskFinished
    ):
        return recorded.subtask == emitted.subtask
    return True


def describe(event: ev.Event) -> str:
    detail = ""
    for name in ("agent", "tool", "call_id", "step", "subtask"):
        value = getattr(event, name, None)
        if value is not None:
            detail += f" {name}={value}"
    return f"{event.type}{detail} (event {event.seq})" if event.seq else f"{event.type}{detail}"


class Recording:
    """A cursor over the recorded events a run catches up with.

    `fold` receives every recorded event as the cursor passes it, in log order,
    so the run's state (plan, steps, costs) is at each moment what it was then.
    """

    def __init__(self, events: list[ev.Event], fold: Callable[[ev.Event], None]) -> None:
        self.events = events
        self.pos = 0
        self._fold = fold

    @property
    def exhausted(self) -> bool:
        return self.pos >= len(self.events)

    def _take(self) -> ev.Event:
        event = self.events[self.pos]
        self.pos += 1
        self._fold(event)
        return event

    def _skippable(self, event: ev.Event, awaited_call: str | None = None) -> bool:
        if isinstance(event, PASSIVE):
            return True
        # A result written for a call the run's end killed, on its way out through the
        # supervisor's open `assign_subtask`: the run went on from the inner call.
        return (
            isinstance(event, ev.ToolResult)
            and event.error == KILLED_BY_RUN_END
            and event.call_id != awaited_call
        )

    def match(self, emitted: ev.Event) -> ev.Event | None:
        """The recorded twin of an event the agent emits, or None once the log runs out."""
        while not self.exhausted:
            recorded = self.events[self.pos]
            if _same(recorded, emitted):
                return self._take()
            if self._skippable(recorded):
                self._take()
                continue
            raise Divergence(
                f"the log has {describe(recorded)} where the agent now emits {describe(emitted)}"
            )
        return None

    def peek_agent_event(self) -> ev.Event | None:
        """The next recorded event the agent itself emitted (not folding anything)."""
        for event in self.events[self.pos :]:
            if not self._skippable(event):
                return event
        return None

    def model_call(self, agent: ev.AgentRole, purpose: str) -> ev.ModelCall | None:
        """The recorded answer to the model call the agent makes now, or None if it was
        in flight when the run stopped."""
        while not self.exhausted:
            recorded = self.events[self.pos]
            if isinstance(recorded, ev.ModelCall):
                if recorded.agent != agent or recorded.purpose != purpose:
                    raise Divergence(
                        f"the log has {describe(recorded)} ({recorded.purpose}) where the "
                        f"agent now calls the model for {agent} ({purpose})"
                    )
                self._take()
                return recorded
            if self._skippable(recorded):
                self._take()
                continue
            raise Divergence(
                f"the log has {describe(recorded)} where the agent now calls the model"
            )
        return None

    def tool_result(
        self, call_id: str, *, logs_start: bool = False
    ) -> tuple[ev.ToolResult | None, bool]:
        """The recorded result of a call, folding what happened while it ran (its
        output, a plan it changed, the user's approval).

        Returns (result, began): no result when the call was running, or had not
        begun, when the run stopped. Where the log marks starts (`logs_start`), a call
        began at its `tool_started`; an older log's call began unless it still waited
        for the user's approval.
        """
        awaiting = False
        started = False
        while not self.exhausted:
            recorded = self.events[self.pos]
            if isinstance(recorded, ev.ToolResult) and recorded.call_id == call_id:
                self._take()
                return recorded, True
            if isinstance(recorded, ev.ToolStarted) and recorded.call_id == call_id:
                started = True
            elif isinstance(recorded, ev.ApprovalRequested) and recorded.call_id == call_id:
                awaiting = True
            elif isinstance(recorded, ev.Control | ev.ToolOutput) and recorded.call_id == call_id:
                awaiting = False
            self._take()
        return None, started if logs_start else not awaiting

    def find_next(self, kind: type[ev.Event]) -> ev.Event | None:
        """The next recorded event of a kind, looking ahead without folding."""
        for event in self.events[self.pos :]:
            if isinstance(event, kind):
                return event
        return None

    def finish(self) -> None:
        """Fold whatever is left (a dead run's ending) before the run goes live."""
        while not self.exhausted:
            self._take()


def response_from(call: ev.ModelCall) -> ModelResponse:
    """The model's answer as the agent received it, rebuilt from its record."""
    return ModelResponse(
        text=call.text,
        tool_calls=[ToolCallRequest.model_validate(c) for c in call.tool_calls],
        usage=Usage(
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            cache_read_tokens=call.cache_read_tokens,
            cache_write_tokens=call.cache_write_tokens,
        ),
        stop_reason=call.stop_reason,
        latency_s=call.latency_s,
        cost_usd=call.cost_usd,
        first_token_s=call.first_token_s,
        paused_s=call.paused_s,
    )
