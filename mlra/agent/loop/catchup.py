"""A resumed or forked run's catch-up with its log, as one object the run consults.

A resumed run executes the agent's code again against its own log
(agent/record/recording.py). Everything the run would do for real (write an event,
ask the model, run a tool, hand over the user's messages) asks this object
first: while the recording holds the answer it is given from there, and when
it runs out the run goes live, once, where it stopped. A fresh run has nothing
recorded, so every question is answered "live" and the code that asks need
not know which kind of run it is in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

from mlra import events as ev
from mlra.agent.loop.controls import Breakpoint, Controls, Decision
from mlra.agent.loop.history import AgentHistory
from mlra.agent.providers.base import ModelResponse
from mlra.agent.record.recording import Recording, response_from
from mlra.agent.record.state import RunState

Cut = tuple[int, int, int, int]
"""A stretch of history to summarize: (start, end, first turn, last turn)."""

INTERRUPTED: Literal["interrupted"] = "interrupted"
"""A recorded call that was running when the run stopped (see `recorded_result`)."""
PRINTED_KEPT_CHARS = 20_000
"""Of a recorded call's logged output, the end kept until its result comes: a call the
run stopped under shows it in its `interrupted` result (the observation limit cuts it)."""


class CatchUp:
    """The recording a run catches up with, and the moment it goes live.

    `append` writes an event to the log past the catch-up; `sandbox_info`
    describes the sandbox the live part runs in (None before it is started).
    """

    def __init__(
        self,
        state: RunState,
        controls: Controls,
        *,
        append: Callable[[ev.Event], ev.Event],
        sandbox_info: Callable[[], ev.SandboxInfo | None],
    ) -> None:
        self._state = state
        self._controls = controls
        self._append = append
        self._sandbox_info = sandbox_info
        self._recording: Recording | None = None
        self._going_live: Callable[[], list[ev.Event]] | None = None
        self._interrupted: list[str] = []
        self._delivered_ahead: list[tuple[str, str]] = []
        self._printed: dict[str, str] = {}
        """The logged output of recorded calls with no result yet, by call id."""
        self._replayed: set[str] = set()
        """The calls, by id, whose replayed decision (a `control` from `replay`) the log
        holds since the call was asked for (an id a server that sends none repeats)."""
        self._live = asyncio.Event()
        self._when_live: list[Callable[[], None]] = []

    def load(self, recorded: list[ev.Event], going_live: Callable[[], list[ev.Event]]) -> None:
        """Catch up with `recorded` before going live.

        `going_live` makes the events that open the live part (`run_resumed`,
        `run_forked`); it is called once, when the recording runs out.
        """
        self._recording = Recording(recorded, self._fold)
        self._going_live = going_live

    @property
    def replaying(self) -> bool:
        """True until the recording has run out (or from the start, for a fresh run, False)."""
        return self._recording is not None

    def ahead(self) -> bool:
        """True while the agent has recorded actions ahead; goes live when it has none."""
        if self._recording is None:
            return False
        if self._recording.peek_agent_event() is None:
            self.go_live()
            return False
        return True

    async def wait_live(self) -> None:
        await self._live.wait()

    def go_live(self, *, interrupted: str | None = None) -> None:
        """Fold what is left of the recording and open the live part of the run.

        `interrupted` names a call the run stopped in the middle of; the
        `run_resumed` event lists every such call.
        """
        recording, self._recording = self._recording, None
        if recording is not None:
            recording.finish()
            if interrupted:
                self._interrupted.append(interrupted)
            if self._going_live is not None:
                for event in self._going_live():
                    self._open_live_part(event)
            self._lose_jobs()
        self._live.set()
        while self._when_live:
            self._when_live.pop(0)()

    def when_live(self, act: Callable[[], None]) -> None:
        """Do `act` once the run is live: now, or when its catch-up runs out."""
        if self._recording is None:
            act()
        else:
            self._when_live.append(act)

    def _lose_jobs(self) -> None:
        """Jobs the recording leaves running belonged to the process that died: this one
        cannot reach them to see them through, so they are lost (their logs stay in the
        workspace)."""
        for job in self._state.running_jobs:
            self._append(
                ev.JobEnded(
                    job=job.started.job,
                    end="lost",
                    reason="mlra stopped while it ran; its log is kept",
                    duration_s=round(max(0.0, self._state.elapsed_s - job.started.t), 3),
                )
            )

    def _open_live_part(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunResumed):
            event.interrupted_calls = list(self._interrupted)
        if isinstance(event, ev.RunResumed | ev.RunForked):
            sandbox = self._sandbox_info()
            if sandbox is not None:
                event.sandbox = sandbox  # the sandbox this part runs in
        self._append(event)

    def _fold(self, event: ev.Event) -> None:
        """Bring the run's state and the user's controls to what they were at `event`."""
        self._state.apply(event)
        if isinstance(event, ev.ToolOutput):
            printed = self._printed.get(event.call_id, "") + event.text
            self._printed[event.call_id] = printed[-PRINTED_KEPT_CHARS:]
        elif isinstance(event, ev.ToolResult):
            self._printed.pop(event.call_id, None)
        elif isinstance(event, ev.ToolCall):
            self._replayed.discard(event.call_id)
        elif isinstance(event, ev.Control):
            if event.source == ev.REPLAYED and event.call_id:
                self._replayed.add(event.call_id)
            if event.action == "inject" and event.target and event.text:
                if (event.target, event.text) in self._delivered_ahead:
                    self._delivered_ahead.remove((event.target, event.text))
                else:
                    self._controls.inject(event.target, event.text)
            elif event.action == "breakpoints" and event.arguments is not None:
                rules = event.arguments.get("rules", [])
                self._controls.breakpoints = [Breakpoint.parse(r) for r in rules]
        elif isinstance(event, ev.RunForked):
            # A message still queued at the cut was read, in the run forked from, at the
            # step the fork takes again or later: the fork's timeline never read it, and
            # handing it over now delivered it a second time, beside the fork's own
            # `--message` (which comes after this event). One read before the cut is
            # in the history already.
            self._controls.drop_messages()

    # --- what the run asks ------------------------------------------------------------

    def emit(self, event: ev.Event) -> ev.Event:
        """Write an event the agent emits; while catching up, match it to its recorded twin
        instead (the twin is returned and nothing is written)."""
        if self._recording is not None:
            recorded = self._recording.match(event)
            if recorded is not None:
                return recorded
            self.go_live()
        return self._append(event)

    def take_messages(self, agent: ev.AgentRole, *, review: bool = False) -> list[str]:
        """The user's messages for an agent; while catching up, the ones it read then."""
        delivered = self._recorded_delivery(agent, review=review)
        if delivered is None:
            return self._controls.take_messages(agent)
        inbox = self._controls.take_messages(agent)
        for text in delivered:
            if text in inbox:
                inbox.remove(text)
            else:  # its `inject` is still ahead in the log
                self._delivered_ahead.append((agent, text))
        for text in inbox:
            self._controls.inject(agent, text)
        return delivered

    def _recorded_delivery(self, agent: ev.AgentRole, *, review: bool) -> list[str] | None:
        if self._recording is None:
            return None
        if review:
            recorded = self._recording.find_next(ev.Review)
            return list(recorded.user_messages) if isinstance(recorded, ev.Review) else None
        recorded = self._recording.find_next(ev.StepStarted)
        if isinstance(recorded, ev.StepStarted) and recorded.agent == agent:
            return list(recorded.delivered)
        return None

    def recorded_prompt(self) -> str | None:
        """The prompt of the step the agent starts now as it was then (its clock note
        with the time of then), or None when live."""
        if not self.ahead():
            return None
        assert self._recording is not None
        recorded = self._recording.find_next(ev.StepStarted)
        return recorded.prompt if isinstance(recorded, ev.StepStarted) else None

    def model_answer(self, agent: ev.AgentRole, purpose: str) -> ModelResponse | None:
        """The model's recorded answer to the call the agent makes now, or None when the
        call is to be made (live, or it was in flight when the run stopped)."""
        if not self.ahead():
            return None
        assert self._recording is not None
        recorded = self._recording.model_call(agent, purpose)
        if recorded is not None:
            return response_from(recorded)
        self.go_live()  # the call was in flight when the run stopped: ask again
        return None

    def recorded_summary(self, history: AgentHistory, keep_recent_turns: int) -> Cut | None:
        """Where the run summarized `history` at this point, whatever this provider's
        window, or None where it did not. Asked only while `ahead()`."""
        assert self._recording is not None
        upcoming = self._recording.peek_agent_event()
        if not (isinstance(upcoming, ev.ModelCall) and upcoming.purpose == "summary"):
            return None
        done = self._recording.find_next(ev.HistorySummarized)
        cuts = [history.summarizable(k) for k in range(keep_recent_turns, -1, -1)]
        if isinstance(done, ev.HistorySummarized):
            for cut in cuts:
                if cut and cut[2:] == (done.first_turn, done.last_turn):
                    return cut
        return next((cut for cut in cuts if cut), None)

    def recorded_decision(self, call_id: str) -> Decision | None:
        """What the user decided of a call at its breakpoint, where the recording holds it:
        a call the run executes again while catching up (a supervisor's `assign_subtask`)
        is decided as it was then, not asked of the user again (nobody is asked while a
        run catches up, so the resume waited for ever). None: live, or undecided then."""
        if self._recording is None:
            return None
        recording = self._recording
        for event in recording.events[recording.pos :]:
            if isinstance(event, ev.Control) and event.call_id == call_id:
                if event.action == "approve":
                    return Decision("approve")
                if event.action == "edit" and event.arguments is not None:
                    return Decision("edit", arguments=dict(event.arguments))
                if event.action == "reject":
                    return Decision("reject", message=event.text or "")
        self.ahead()  # nothing more was recorded of it: the run goes live to ask
        return None

    def decision_logged(self, call_id: str) -> bool:
        """Whether the log holds the replayed decision of the call asked now: a replay
        killed after logging it, and before the call began, runs the call again on resume
        and logs the decision no second time."""
        return call_id in self._replayed

    def printed_by(self, call_id: str) -> str:
        """What a recorded call with no result (the run stopped under it) had printed."""
        return self._printed.get(call_id, "")

    def recorded_result(
        self, call_id: str, *, logs_start: bool = False
    ) -> ev.ToolResult | Literal["interrupted"] | None:
        """The recorded result of a call the agent makes now, folding what happened while
        it ran; `INTERRUPTED` when the run stopped while it was running; None when the
        call is to run (live, or it had not begun: it waited for the user's approval,
        or a pause held it). `logs_start`: the recorded `tool_call`'s own."""
        if self._recording is None:
            return None
        result, began = self._recording.tool_result(call_id, logs_start=logs_start)
        if result is not None:
            return result
        # A call that never began is run now (asked for again at its breakpoint).
        self.go_live(interrupted=call_id if began else None)
        return INTERRUPTED if began else None

    def closed_unbegun(self, call_id: str, *, logs_start: bool) -> bool:
        """Whether the recording closes this call with a result it never began for: the
        run ended while the call waited at its breakpoint or a pause held it ("not run"),
        or the user rejected it. A call the agent would run again while catching up (a
        supervisor's `assign_subtask`) then takes that result as it stands, the one the
        model read, rather than run again and write a second result for the call. Only
        where the log marks starts (`logs_start`): an older log's calls have none."""
        if self._recording is None or not logs_start:
            return False
        for event in self._recording.events[self._recording.pos :]:
            if isinstance(event, ev.ToolStarted) and event.call_id == call_id:
                return False
            if isinstance(event, ev.ToolResult) and event.call_id == call_id:
                return True
        return False

    def tool_started(self, call_id: str) -> None:
        """Mark that a call's tool begins. Live only: a call run again while catching up
        (a supervisor's `assign_subtask`) has its recorded start, or, in an older log,
        none to match."""
        if self._recording is not None and self._recording.peek_agent_event() is not None:
            return
        self.go_live()
        self._append(ev.ToolStarted(call_id=call_id))
