"""What happens on a tool call, from the agent's request to its recorded result.

In order: the call is recorded; a resumed run takes the recorded result instead
(agent/loop/catchup.py); a breakpoint holds it for the user to approve, edit or
reject (the run is held meanwhile, as a pause holds it, unless `--break-runs-jobs`);
a pause that came while the model was thinking holds it back; the tool runs through
the registry (a search's attempt's `validate` in a task of its own, which the attempt's
time limit leaves running for its end to take up: agent/loop/held_calls.py); the result is
truncated for the model and recorded, even when the run ends under the call;
and the workspace's changes are snapshotted.

A replay (`--model replay:RUN`) runs a call as its recording's user decided it at a
breakpoint (agent/loop/call_decisions.py), or it would diverge at the next request;
and a resumed replay runs again the call it was killed or stopped under, where its
recording ran that call to a result (`_replays_again`).

An edited call reaches the model as it ran: the call in the agent's history
takes the user's arguments, and its result opens with a note saying the user
edited it (the note is in the recorded result, and the arguments are in the
`control` edit event, so a resumed or forked run rebuilds the same history).

A command's output streams to the log up to `STREAM_CAP_CHARS`, and only while the
log is short of its size budget's shortening point (agent/record/log_budget.py); past
that it goes on streaming to the live console only (agent/loop/unlogged.py), so a day-long
training log does not grow the event log without bound; the result, with the
output's head and tail, still ends the call in the log (cut shorter, for the model
too, once the log nears its budget). Durations are the run
clock's: time paused does not count.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from mlra import events as ev
from mlra.agent.loop.call_as_run import edited_note, outcome_of, ran_as
from mlra.agent.loop.call_decisions import await_decision, rejected, replayed_decision, used_up
from mlra.agent.loop.catchup import INTERRUPTED
from mlra.agent.loop.held_calls import LIMIT, STOPPED, HeldCalls
from mlra.agent.loop.root_outside import tell_root_outside
from mlra.agent.loop.run_context import RunContext
from mlra.agent.loop.unlogged import UnloggedWatcher
from mlra.agent.metrics.run_metrics import RunMetrics
from mlra.agent.providers.base import ToolCallRequest
from mlra.agent.providers.result_notes import INTERRUPTED_OUTPUT, RUN_ENDED_UNDER
from mlra.agent.record.log_budget import (
    LOG_BUDGET_CUT_NOTE,
    SHORT_SNAPSHOT_BYTES,
    STREAM_BUDGET_NOTE,
)
from mlra.agent.record.recording import KILLED_BY_RUN_END
from mlra.agent.record.snapshots import WorkspaceScanner
from mlra.tools.jobs import JOBS_DIR
from mlra.tools.registry import Tool, ToolContext, ToolOutcome, ToolRegistry, error, validated
from mlra.tools.sandbox.base import OutputCallback, Stream
from mlra.tools.truncate import truncate_middle

STREAM_CAP_CHARS = 1_000_000
"""Streamed output logged per tool call; past this only the live console sees it
stream, and the log keeps the result (the output's head and tail)."""
STREAM_CAP_NOTE = (
    "\n[... the log keeps no more of this output as it streams (the live console still "
    "shows it); the call's result holds its end ...]\n"
)


class ToolStep:
    def __init__(
        self, run: RunContext, scanner: WorkspaceScanner, metrics: RunMetrics | None = None
    ) -> None:
        self.run = run
        self.scanner = scanner
        self.metrics = metrics
        """Reads training metrics from commands' output as it streams (agent/metrics/)."""
        self._in_flight: dict[str, ToolContext] = {}
        """The calls running now, by id: their commands' time-outs move with the deadline."""
        self.held = HeldCalls(lambda: self.run.clock.expired())
        """Those an attempt's time limit left running, for its end to take up or cut."""

    def raise_time_outs(self, by_s: float) -> dict[str, float]:
        """The run's deadline moved `by_s` later: each running command the old one bound
        may run that much longer (no longer than its own time-out), rather than being
        killed at the limit it started under. The calls whose time-out moved, by id: their
        new time-out, in seconds of their own running time."""
        moved: dict[str, float] = {}
        for call_id, ctx in self._in_flight.items():
            for time_out in ctx.time_outs:
                if time_out.raise_by(by_s):
                    moved[call_id] = round(time_out.seconds, 3)
        return moved

    def watch_output(self, watcher: UnloggedWatcher) -> None:
        """Also hand `watcher` what the log no longer takes (the live console's
        transcript): such an event is never logged, and its `seq` is 0."""
        self.run.unlogged.watch(watcher)

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
        tool = registry.get(call.name)
        note = ""
        if not run.catchup.replaying and (given := run.state.edited_calls.get(call.id)):
            # Edited before it was made (a baseline run's fork, `--edit-action`: the
            # recipe makes the same call there): logged and run as the user gave it, as
            # an edit at its breakpoint would run.
            note = edited_note(agent, call)
            ran_as(call, given)
        refused = None
        if tool is not None and call.arguments is not None:
            refused = validated(tool, call.arguments)[1]
        # a replay refuses what its recording refused (a loose plan, before), in its words
        kept = run.provider.recorded_refusal(call) if run.provider is not None else None
        refused = kept or refused
        asked = run.emit(
            ev.ToolCall(
                call_id=call.id,
                agent=agent,
                tool=call.name,
                arguments=call.arguments,
                raw_arguments=call.raw_arguments if call.parse_error else None,
                step=step,
                turn=turn,
                logs_start=True,
                refused=refused,
            )
        )
        tool = registry.get(call.name)
        logs_start = isinstance(asked, ev.ToolCall) and asked.logs_start
        if (
            tool is None
            or not tool.reruns_on_resume
            or run.catchup.closed_unbegun(call.id, logs_start=logs_start)
        ):
            recorded = run.catchup.recorded_result(call.id, logs_start=logs_start)
            if recorded is not None and self._replays_again(call, tool, recorded):
                recorded = None  # run as the recording ran it
            interrupted = recorded == INTERRUPTED and not (tool and tool.reruns_when_interrupted)
            if isinstance(recorded, ev.ToolResult) or interrupted:
                used_up(run, call)  # it runs no more: the decision it ran under goes with it
            edited = run.state.edited_calls.get(call.id)
            if recorded is not None and edited is not None:
                ran_as(call, edited)  # the history shows the call as it ran then
            if isinstance(recorded, ev.ToolResult):
                return outcome_of(recorded)
            if interrupted:
                # What the dead run's log says of it: what it printed, and how long it had
                # run by the log's last event (the console and the model read both).
                printed = run.catchup.printed_by(call.id)
                outcome = ToolOutcome(
                    output=printed
                    + ("\n" if printed and not printed.endswith("\n") else "")
                    + INTERRUPTED_OUTPUT,
                    ok=False,
                    error="interrupted",
                    duration_s=round(max(0.0, run.state.elapsed_s - asked.t), 3),
                )
                return self._record_result(call, agent, outcome)
        arguments = call.arguments
        replayed = replayed_decision(run, call)
        if replayed is not None and replayed.action == "reject":
            run.controls.call_decided()
            return self._record_result(call, agent, rejected(replayed.text))
        if replayed is not None and replayed.arguments is not None:
            note = edited_note(agent, call)
            arguments = dict(replayed.arguments)
            ran_as(call, arguments)
        breakpoint_ = (
            run.controls.should_break(call.name, arguments)
            if call.parse_error is None and replayed is None
            else None
        )
        if breakpoint_ is not None:
            try:
                decision = await await_decision(run, call, breakpoint_, tool)
            except asyncio.CancelledError:
                # The run ended while the call waited for the user (a stop, a quit, its
                # time limit): closed in the log, or a replay shows it waiting for ever.
                self._record_result(call, agent, self._unrun("it was approved"))
                raise
            if decision.action == "reject":
                run.controls.call_decided()
                return self._record_result(call, agent, rejected(decision.message))
            if decision.action == "edit" and decision.arguments is not None:
                note = edited_note(agent, call)
                arguments = decision.arguments
                ran_as(call, arguments)

        # A pause that came while the model thought (or the call waited for approval)
        # holds the action back; a step then lets it through. In step mode, a call past the
        # step's pauses the run first (a search's once its attempts' actions in hand end).
        try:
            if run.controls.call_waits_for_step():
                await run.pause_at_boundary()
            await run.controls.hold()
        except asyncio.CancelledError:
            # The run ended while it held the call (a stop of a paused run, or one waiting
            # at the step's boundary): the log still gets its result, so no call is left open.
            self._record_result(call, agent, self._unrun("this call began"), note=note)
            raise
        # Past its breakpoint and any pause: from here the call may change things, and a
        # run stopped now resumes it as one that may have run in part.
        run.catchup.tool_started(call.id)
        kept = None if note else kept  # an edit runs as the user gave it
        ran = self._run(call, agent, registry, arguments, note=note, step=step, refused=kept)
        if tool is not None and tool.held_at_limit and run.config.attempt is not None:
            return await self.held.run(call.id, ran)  # agent/loop/held_calls.py
        return await ran

    async def _run(
        self,
        call: ToolCallRequest,
        agent: ev.AgentRole,
        registry: ToolRegistry,
        arguments: dict[str, Any] | None,
        *,
        note: str,
        step: int,
        refused: str | None = None,
    ) -> ToolOutcome:
        """The call run through the registry (or refused as its recording was), recorded."""
        run = self.run
        assert run.sandbox is not None
        tail = _Tail(run.config.observation_limit)
        ctx = ToolContext(
            sandbox=run.sandbox,
            agent=agent,
            call_id=call.id,
            on_output=self._streamer(call.id, tail, metrics=not reads_job_log(arguments or {})),
            default_timeout_s=run.config.command_timeout_s,
            remaining_s=run.clock.remaining,
            default_artifact=run.task.evaluator.artifact,
            root_outside=partial(tell_root_outside, run),
        )
        took = _Stopwatch(run)
        self._in_flight[call.id] = ctx
        try:
            if refused is not None:
                outcome = error(refused)
            else:
                outcome = await registry.dispatch(
                    call.name, arguments, ctx, parse_error=call.parse_error
                )
        except asyncio.CancelledError:
            # The run ended under the call (deadline, stop): the sandbox has killed the
            # command; the log still gets the call's result so no call is left open,
            # with how long it ran and what it had printed (a resumed run's model reads it).
            seconds = took.seconds(None)
            why = self.held.why_cut(call.id) or (LIMIT if run.clock.expired() else STOPPED)
            printed = tail.text()
            killed = ToolOutcome(
                output=(printed + ("\n" if printed and not printed.endswith("\n") else ""))
                + f"[killed after {seconds:.1f} s: the run ended ({why}"
                + RUN_ENDED_UNDER,
                ok=False,
                error=KILLED_BY_RUN_END,
                duration_s=seconds,
            )
            self._record_result(call, agent, killed, note=note, unlogged=tail.unlogged)
            if self.metrics is not None:
                self.metrics.command_ended(call.id)
            raise
        finally:
            self._in_flight.pop(call.id, None)
        if self.metrics is not None:
            self.metrics.command_ended(call.id)
        outcome.duration_s = took.seconds(outcome.duration_s)
        self._record_result(call, agent, outcome, note=note, unlogged=tail.unlogged)
        await self.snapshot(step)
        return outcome

    def _replays_again(
        self, call: ToolCallRequest, tool: Tool[Any] | None, recorded: ev.ToolResult | str
    ) -> bool:
        """Whether a replay runs again a call its catch-up finds cut short (the run was
        killed under it, or stopped): where its recording ran it to a result, the
        recording's next request holds that result, not "interrupted", and a replay that
        went on with the cut one diverged there. Only a call the run stopped under, with
        nothing of the agent's after it in the log, and a tool that may run again
        (`Tool.reruns_in_replay`)."""
        killed = isinstance(recorded, ev.ToolResult) and recorded.error == KILLED_BY_RUN_END
        if not (killed or recorded == INTERRUPTED) or tool is None or not tool.reruns_in_replay:
            return False
        provider = self.run.provider
        then = provider.recorded_result(call.id) if provider is not None else None
        if then is None or then.error in (INTERRUPTED, KILLED_BY_RUN_END):
            return False  # the recording was cut there too: its next request says so
        # A killed result the run went on past (it resumed and read it) stays as it is.
        return not (killed and self.run.catchup.ahead())

    def _unrun(self, before: str) -> ToolOutcome:
        """The result of a call the run's end came to before it ran."""
        why = LIMIT if self.run.clock.expired() else STOPPED
        return ToolOutcome(
            output=f"[not run: the run ended ({why}) before {before}]",
            ok=False,
            error=KILLED_BY_RUN_END,
        )

    def _streamer(self, call_id: str, tail: _Tail, *, metrics: bool = True) -> OutputCallback:
        """Logs a call's output as it comes, up to `STREAM_CAP_CHARS` or while the log is
        short of its budget's shortening point (agent/record/log_budget.py), whichever
        comes first; past that it goes to the watchers alone, with a note in the log
        where it stopped. `tail` keeps the end, for a call the run kills, and counts what
        the log did not take. `metrics`: the output is read for training metrics too
        (agent/metrics/)."""
        streamed = 0
        cut = False

        def on_output(stream: Stream, text: str) -> None:
            nonlocal streamed, cut
            tail.add(text)
            if metrics and self.metrics is not None and not self.run.catchup.replaying:
                self.metrics.command_output(call_id, text)
            logged, rest = "", text
            if not cut:
                room = max(0, STREAM_CAP_CHARS - streamed)
                budget = self.run.log_budget.stream_room()
                if len(text) < room and (budget is None or len(text) < budget):
                    logged, rest = text, ""
                else:
                    cut = True
                    note = STREAM_CAP_NOTE
                    if budget is not None and budget < room:
                        # A call the log takes nothing of has no note: its result counts
                        # what the log left out (`unlogged_chars`).
                        room, note = budget, STREAM_BUDGET_NOTE if budget else ""
                    logged, rest = text[:room] + note, text[room:]
                streamed += len(text) - len(rest)
            tail.unlogged += len(rest)
            if logged:
                self.run.emit(ev.ToolOutput(call_id=call_id, stream=stream, text=logged))
            if rest and self.run.unlogged.watched and not self.run.catchup.replaying:
                self.run.unlogged.show(ev.ToolOutput(call_id=call_id, stream=stream, text=rest))

        return on_output

    def _record_result(
        self,
        call: ToolCallRequest,
        agent: ev.AgentRole,
        outcome: ToolOutcome,
        *,
        note: str = "",
        unlogged: int = 0,
    ) -> ToolOutcome:
        limit = self.run.config.observation_limit
        # Near the log's budget the result is cut shorter, for the model as for the log; a
        # replay cuts where its recording did (agent/record/log_budget.py).
        provider = self.run.provider
        recorded = provider.recorded_result(call.id) if provider is not None else None
        cut = (
            recorded.log_budget_chars if recorded is not None else self.run.log_budget.result_cut()
        )
        if cut is not None and (cut >= limit or len(outcome.output) <= cut):
            cut = None
        text, truncated = truncate_middle(outcome.output, limit if cut is None else cut)
        if cut is not None:
            text = LOG_BUDGET_CUT_NOTE.format(kept=cut) + text
        text = note + text
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
                log_budget_chars=cut,
                unlogged_chars=unlogged,
                timed_out=outcome.timed_out,
                error=outcome.error,
                data=outcome.data,
                signal=outcome.signal,
            )
        )
        return outcome

    async def snapshot(self, step: int) -> None:
        """Record what the last action changed in the workspace (agent/record/snapshots.py)."""
        if not self.run.config.snapshots:
            return
        try:
            # Near the log's budget an event lists fewer paths (agent/record/log_budget.py).
            listed = SHORT_SNAPSHOT_BYTES if self.run.log_budget.shortening() else None
            snapshot = await asyncio.to_thread(self.scanner.scan, step, listed_bytes=listed)
        except Exception as exc:  # a full disk must not end the run
            self.run.append(ev.Notice(level="warning", message=f"workspace snapshot failed: {exc}"))
            return
        if snapshot is not None:
            self.run.emit(snapshot)
        if self.metrics is not None:  # the metric files the scan found (agent/metrics/)
            await self.metrics.spotted(self.scanner.index)
        while self.scanner.notices:
            self.run.append(ev.Notice(level="warning", message=self.scanner.notices.pop(0)))


def reads_job_log(arguments: dict[str, Any]) -> bool:
    """A command that names a job's log (`tail jobs/job-1.log`): its output repeats lines
    the job's own metrics already hold, and is not read for metrics again."""
    return any(isinstance(v, str) and f"{JOBS_DIR}/" in v for v in arguments.values())


class _Tail:
    """The last `limit` characters of a call's output, kept in bounded memory."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 0)
        self.unlogged = 0
        """Characters of the call's output the log did not take (`_streamer`)."""
        self._parts: list[str] = []
        self._size = 0

    def add(self, text: str) -> None:
        self._parts.append(text)
        self._size += len(text)
        if self._size > 2 * self.limit + 4096:
            joined = "".join(self._parts)[-self.limit :]
            self._parts, self._size = [joined], len(joined)

    def text(self) -> str:
        return "".join(self._parts)[-self.limit :] if self.limit else ""


class _Stopwatch:
    """How long a call ran by the run clock, so a pause does not count. The registry's
    wall time stands where the clock was not running (a run that never started it)."""

    def __init__(self, run: RunContext) -> None:
        self._clock = run.clock
        self._counts = run.clock.running
        self._start = run.clock.elapsed()

    def seconds(self, wall: float | None) -> float:
        if self._counts or wall is None:
            return round(max(0.0, self._clock.elapsed() - self._start), 4)
        return wall
