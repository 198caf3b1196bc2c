"""The run controller: owns one run from start to score, and is what the agents,
the console and resume hold.

It prepares the run (agent/setup/run_setup.py), starts its sandbox and records the
start (agent/run/run_start.py), drives the agent as an asyncio task
beside the deadline and the user's stop (agent/loop/drive.py), takes the human's
control actions (agent/control/steering.py), and ends the run, evaluating it
(agent/loop/evaluation.py) unless it failed. What happens inside the run lives with
its own part: a model turn in agent/loop/model_turn.py, a tool call in
agent/loop/tool_step.py, and a resumed run's catch-up with its log in
agent/loop/catchup.py. Every change is an event in the log; displays subscribe to
the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.control.control_server import ControlServer
from mlra.agent.control.steering import Steering
from mlra.agent.loop.attempts import AttemptManager
from mlra.agent.loop.catchup import CatchUp
from mlra.agent.loop.clock import RunClock
from mlra.agent.loop.controls import Breakpoint, Controls
from mlra.agent.loop.drive import Agent, drive, sample_resources, watch_deadline
from mlra.agent.loop.ending import Ending, EndRun, budget_ending, unread_notices
from mlra.agent.loop.evaluation import evaluate, nothing_validated
from mlra.agent.loop.held_calls import FAILED, LIMIT, STOPPED
from mlra.agent.loop.model_turn import ModelTurn
from mlra.agent.loop.tool_step import ToolStep
from mlra.agent.loop.unlogged import UnloggedFeed
from mlra.agent.metrics.run_metrics import RunMetrics
from mlra.agent.notify import Notifications
from mlra.agent.providers.base import ModelProvider
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog
from mlra.agent.record.log_budget import SAMPLES_SLOWED, LogBudget
from mlra.agent.record.run_result import RunResult, write_result
from mlra.agent.record.snapshots import NO_QUOTA, SnapshotLimits, SnapshotStore, WorkspaceScanner
from mlra.agent.record.state import RunState
from mlra.agent.run.run_start import StartRefused, start_run
from mlra.agent.setup.config import RunConfig
from mlra.agent.setup.prompts import status_note
from mlra.agent.setup.run_setup import (
    make_run_folder,
    new_run_id,
    run_id_problem,
    sandbox_info,
)
from mlra.tasks.environment import TaskEnvError
from mlra.tasks.spec import TaskSpec
from mlra.tasks.success import with_direction
from mlra.tools.jobs import JobManager
from mlra.tools.sandbox.base import Sandbox, SandboxSpec
from mlra.tools.sandbox.run_group import RunGroup

__all__ = ["Agent", "EndRun", "Ending", "RunController", "new_run_id", "run_id_problem"]
"""Ending, EndRun and the run-id helpers live in their own modules; the agents and the
console name them here, beside the controller they go with."""


class RunController(Steering):
    def __init__(
        self,
        config: RunConfig,
        task: TaskSpec,
        provider: ModelProvider | None,
        *,
        sandbox_factory: Callable[[Path, SandboxSpec], Sandbox] | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.task = with_direction(task, config.direction)
        self.provider = provider
        self.run_id = config.run_id or new_run_id(task.name)
        problem = run_id_problem(self.run_id)
        if problem is not None:
            raise ValueError(problem)
        self.run_dir = (config.runs_dir / self.run_id).resolve()
        self.workspace = self.run_dir / "workspace"
        self.time_limit_s = config.time_limit_for(task)
        self.clock = RunClock(self.time_limit_s)
        self.controls = Controls(
            breakpoints=[Breakpoint.parse(r) for r in config.breakpoints],
            hold_at_breaks=not config.break_runs_jobs,
        )
        self.state = RunState()
        self.log: EventLog | None = None
        self.sandbox: Sandbox | None = None
        self._sandbox_factory = sandbox_factory
        self.run_group: RunGroup | None = None  # the run's cgroup, its attempts' too
        self._subscribers: list[Callable[[ev.Event], None]] = []
        self._call_counter = 0
        self._task: asyncio.Task[Any] | None = None
        self._aborted = False
        self.control_server: ControlServer | None = None
        """The run's control endpoint (`control.sock`: `mlra ctl`, `mlra attach`), while it
        runs; a search's attempts have none (they are steered through their run)."""
        self.agent: Agent | None = None
        self.closing_left: Callable[[], float] | None = None
        """A search's attempt: the run's time left, in which it is validated as it
        reaches its own limit (agent/agents/closing_validation.py)."""
        self.console_holder: str | None = None
        """Who holds the controls from the first moment, where a console drives this run
        in its own process (console/apps/app.py): an attached console then only watches."""
        self._time_warned = False
        # The log's size budget (agent/record/log_budget.py): its notice comes once a run.
        self.log_budget = LogBudget(config.log_budget_mb)
        self.log_budget.measure(lambda: self.log.size if self.log is not None else 0)
        self.unlogged = UnloggedFeed(lambda: self.clock.elapsed())
        self.catchup = CatchUp(
            self.state, self.controls, append=self.append, sandbox_info=self._sandbox_info
        )
        self.scanner = WorkspaceScanner(
            self.workspace,
            SnapshotStore(self.run_dir),
            limits=SnapshotLimits(
                max_stored_bytes=int(config.snapshot_max_file_mb * 1024 * 1024),
                quota_bytes=int(config.snapshot_quota_mb * 1024 * 1024) or NO_QUOTA,
            ),
        )
        # Training metrics read from jobs' and commands' output and from metric files
        # (agent/metrics/): the run's own observations, as the jobs' events are.
        self.metrics = RunMetrics(self.append, lambda: self.clock.elapsed(), self._open_beneath)
        # Background jobs (tools/jobs.py): their events are the run's own observations,
        # written past any catch-up; the run clock times them, pauses excluded.
        self.jobs = JobManager(
            emit=self.append,
            clock=lambda: self.clock.elapsed(),
            records=lambda: self.state.jobs,
            on_output=self.metrics.job_output,
            on_end=self.metrics.job_ended,
        )
        # A search's attempts (agent/loop/attempts.py): runs of their own inside this one.
        self.attempts = AttemptManager(self)
        self.turns = ModelTurn(self)
        self.tool_step = ToolStep(self, self.scanner, self.metrics)
        # What the agents call: a model turn and a one-off call (agent/loop/model_turn.py),
        # and one tool call with everything the user may do about it (agent/loop/tool_step.py).
        self.model_turn = self.turns.take
        self.ask = self.turns.ask
        self.execute_tool = self.tool_step.execute
        # The user's `--notify` destinations, fed by this run's events (agent/notify/);
        # an attempt's run has none: its run's read its server waits (attempt_runs.py).
        self.notifications = (
            Notifications.attach(self, config.notify)
            if config.notify and config.attempt is None
            else None
        )

    @property
    def sandbox_factory(self) -> Callable[[Path, SandboxSpec], Sandbox] | None:
        """How this run makes its sandbox (tests give their own): its attempts' too."""
        return self._sandbox_factory

    # --- events -----------------------------------------------------------------------

    def emit(self, event: ev.Event) -> ev.Event:
        """Stamp the run clock on an event and append it: the only way state changes.

        While a resumed run catches up, the agent's events are matched against the
        recorded ones instead (the recorded twin is returned, nothing is written).
        """
        return self.catchup.emit(event)

    def append(self, event: ev.Event) -> ev.Event:
        """Append what the run itself observes (notices, samples), past any catch-up."""
        if self.log is None:
            raise RuntimeError("the run has not been prepared")
        event.t = round(self.clock.elapsed(), 3)
        written = self.log.append(event)
        if (notice := self.log_budget.notice_due()) is not None:
            self.append(ev.Notice(level="warning", message=notice, kind="log_budget"))
        if isinstance(written, ev.Validation):
            # Its row of the experiments table (agent/record/experiments.py), from the state the
            # validation was just folded into; a resumed run folds the recorded row instead.
            self.append(self.state.experiments.next_row(written))
        return written

    def emit_safely(self, event: ev.Event) -> None:
        with contextlib.suppress(Exception):
            self.emit(event)

    def catch_up(self, recorded: list[ev.Event], going_live: Callable[[], list[ev.Event]]) -> None:
        """Replay `recorded` through the agent before going live (agent/loop/catchup.py)."""
        self.catchup.load(recorded, going_live)
        self._time_warned = any(isinstance(e, ev.TimeWarning) for e in recorded)
        self.log_budget.told(
            any(isinstance(e, ev.Notice) and e.kind == "log_budget" for e in recorded)
        )
        self.scanner.load(e for e in recorded if isinstance(e, ev.WorkspaceSnapshot))
        self.metrics.load(recorded)

    def subscribe(self, callback: Callable[[ev.Event], None]) -> None:
        """Displays subscribe before `run()` so they see every event from the first."""
        self._subscribers.append(callback)
        if self.log is not None:
            self.log.subscribe(callback)

    # --- setting up -------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the run folder, its log and the workspace with the task's starter files."""
        make_run_folder(self.run_dir, self.workspace, self.task)
        self.log = EventLog(self.run_dir / EVENTS_FILE)
        self.log.subscribe(self.state.apply)
        for callback in self._subscribers:
            self.log.subscribe(callback)

    def _open_beneath(self, path: str, flags: int) -> tuple[int, str]:
        """A workspace file opened as the agent could open it (the metric files)."""
        if self.sandbox is None:
            raise FileNotFoundError(path)
        return self.sandbox.open_beneath(path, flags)

    def _sandbox_info(self) -> ev.SandboxInfo | None:
        return sandbox_info(self.sandbox, self.workspace) if self.sandbox is not None else None

    # --- the run ----------------------------------------------------------------------

    async def run(self, make_agent: Callable[[RunController], Agent]) -> RunResult:
        """Drive the agent to an ending, evaluate, and write `result.json`.

        The agent is made once the sandbox is up (its prompts name the sandbox's
        working directory). The log survives every failure: an internal error
        ends the run with status error, a cancellation with status stopped. The
        control endpoint goes last, once `result.json` says how the run ended.
        """
        try:
            return await self._run(make_agent)
        finally:
            await self._stop_serving()

    async def _run(self, make_agent: Callable[[RunController], Agent]) -> RunResult:
        if self.log is None:
            self.prepare()
        self._task = asyncio.current_task()
        try:
            await self.start()
            self.agent = make_agent(self)
            ending = await drive(
                self.agent,
                deadline=watch_deadline(self.clock, self.controls, self._warn_time),
                stop=self.wait_for_stop(),
                sampler=sample_resources(
                    self.workspace,
                    self.catchup,
                    self.append,
                    self._sample_every,
                    sandbox=self.sandbox,
                    sampled=self.metrics.sampled,
                    group=self.run_group,
                    attempts=lambda: [c.sandbox for c in self.attempts.children.values()],
                ),
            )
            await self._finish(ending)
        except asyncio.CancelledError:
            await self._stop_attempts("the run was cancelled")
            await self._stop_jobs("the run was cancelled")
            await self.tool_step.held.drop(STOPPED)
            self._finish_abruptly("stopped", "the run was cancelled before it could finish")
            if not self._aborted:
                await self._close()
                self._write_result()
                raise
            if self._task is not None:
                self._task.uncancel()
        except (TaskEnvError, StartRefused) as exc:  # one line, not a traceback
            self.emit_safely(ev.Notice(level="error", message=str(exc)))
            self._finish_abruptly("error", str(exc))
        except Exception as exc:
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self.emit_safely(ev.Notice(level="error", message=traceback.format_exc()))
            await self._stop_attempts("the run failed")
            await self._stop_jobs("the run failed")
            await self.tool_step.held.drop(FAILED)
            self._finish_abruptly("error", f"internal error: {detail}")
        await self._close()
        return self._write_result()

    def _sample_every(self) -> float:
        """Seconds between resource samples: a tenth as often once the log nears its size
        budget (agent/record/log_budget.py)."""
        slowed = SAMPLES_SLOWED if self.log_budget.shortening() else 1
        return self.config.resource_interval_s * slowed

    def _write_result(self) -> RunResult:
        return write_result(
            self.state,
            self.run_dir,
            run_id=self.run_id,
            task=self.task.name,
            model=self.config.model,
        )

    async def start(self) -> None:
        """Start the sandbox, record the run's start and start the clock
        (agent/run/run_start.py)."""
        if self.log is None:
            self.prepare()
        await start_run(self, await self._serve_controls())

    async def _serve_controls(self) -> str | None:
        """Open the control endpoint (agent/control/control_server.py) of a top-level run. A run
        folder where no socket can be made (a file system without them) runs on,
        steerable from its console only: the problem is returned, said once the start is
        recorded."""
        if self.config.attempt is not None or self.control_server is not None:
            return None
        server = ControlServer(self)
        server.holder = self.console_holder
        try:
            await server.start()
        except OSError as exc:
            return f"no control endpoint for `mlra ctl`/`mlra attach`: {exc}"
        self.control_server = server
        return None

    async def _stop_serving(self) -> None:
        server, self.control_server = self.control_server, None
        if server is not None:
            await server.close()

    def abort(self) -> None:
        """End the run now, without evaluating; for a second Ctrl-C or a killed console."""
        if not self.stop_requested:
            self.request_stop(evaluate=False)
            return
        self._aborted = True
        if self._task is not None:
            self._task.cancel()

    async def _finish(self, ending: Ending) -> None:
        self.clock.pause()
        self.catchup.go_live()
        # Before anything is frozen or graded: a job left running could still change
        # the artifact after the copy that is graded was taken.
        await self._stop_attempts(ending.finished_message, deadline=ending.by == "deadline")
        await self._stop_jobs(ending.finished_message)
        if self.agent is not None and self.config.attempt is not None and ending.by == "deadline":
            await self.agent.validate_at_limit()  # an attempt at its own limit
        # a validation its limit left that none took up (or a stop that raced the limit)
        await self.tool_step.held.drop(LIMIT if ending.by == "deadline" else STOPPED)
        ending = nothing_validated(self, ending) or ending
        for notice in unread_notices(self.controls.queued()):
            self.emit(notice)
        # An attempt's own run is never graded on the test split: the search grades the
        # attempt it submits, from the run it belongs to.
        if ending.evaluate and self.config.attempt is None:
            await evaluate(self, ending)
        self.emit(ending.run_finished())

    def _finish_abruptly(self, status: ev.RunStatus, message: str) -> None:
        if self.log is None or self.state.finished is not None:
            return
        with contextlib.suppress(Exception):
            self.catchup.go_live()
        reason: ev.FinishReason = "error" if status == "error" else "stopped"
        self.emit_safely(ev.RunFinished(status=status, reason=reason, message=message))

    async def _stop_jobs(self, reason: str) -> None:
        """Stop every background job, each with its `job_ended`; never raises (the run is
        ending, and the sandbox kills whatever is left on closing)."""
        with contextlib.suppress(Exception):
            await self.jobs.stop_all(reason)
        if self.log is not None and self.state.finished is None:
            await self.metrics.close()  # the jobs' last points, before the run's end

    async def _stop_attempts(self, reason: str, *, deadline: bool = False) -> None:
        """Stop every attempt still running, each with its `attempt_finished`; never raises."""
        with contextlib.suppress(Exception):
            await self.attempts.stop_all(reason, deadline=deadline)

    def _warn_time(self, left_s: float) -> None:
        """Once a run (a resumed one counts its log's): the time warning, as an event."""
        if self._time_warned or self.log is None or self.state.finished is not None:
            return
        self._time_warned = True
        self.append(ev.TimeWarning(left_s=round(left_s, 1), limit_s=self.time_limit_s))

    async def _close(self) -> None:
        self.clock.pause()
        await self._stop_attempts("the run ended")
        await self._stop_jobs("the run ended")
        if self.sandbox is not None:
            with contextlib.suppress(Exception):
                await self.sandbox.close()
        if self.run_group is not None and self.config.attempt is None:
            self.run_group.close()  # what its sandboxes left, the attempts' included
        if self.notifications is not None:
            # The end's notification is delivered (or its failure logged) before the log
            # closes and the process exits, within the notifications' own bound.
            await self.notifications.drain()
        if self.log is not None:
            self.log.close()

    # --- services for the agents ------------------------------------------------------

    def elapsed_note(self) -> str:
        cfg, state = self.config, self.state
        return status_note(
            elapsed_s=self.clock.elapsed(), limit_s=self.time_limit_s,
            steps=state.steps, max_steps=cfg.max_steps,
            cost_usd=state.cost_usd, max_cost_usd=cfg.max_cost_usd,
            tokens=state.tokens, max_tokens=cfg.max_tokens,
            jobs=self.jobs.running(),
            cost_enforced=self.provider is None or self.provider.priced,
        )  # fmt: skip

    def check_budget(self) -> None:
        ending = budget_ending(self.config, self.state)
        if ending is None and self.log_budget.used_up():
            problem = self.log_budget.ending_message()
            ending = Ending(reason="budget", by="budget", note=problem, message=problem)
        if ending is not None:
            raise EndRun(ending)

    def next_call_id(self, agent: str) -> str:
        self._call_counter += 1
        return f"{agent[:3]}-{self._call_counter:04d}"

    async def begin_step(self, agent: ev.AgentRole, *, counts: bool) -> int:
        """Wait at the gate (pause, step mode), check budgets, and number the step."""
        if self.catchup.ahead():
            return self.state.steps + 1 if counts else self.state.steps
        await self.pause_at_boundary()
        await self.controls.gate()
        self.check_budget()
        return self.state.steps + 1 if counts else self.state.steps

    def take_messages(self, agent: ev.AgentRole, *, review: bool = False) -> list[str]:
        """The user's messages for an agent; while catching up, the ones it read then."""
        return self.catchup.take_messages(agent, review=review)

    def set_plan(
        self, steps: list[ev.PlanStep], reason: str = "", *, agent: ev.AgentRole = "supervisor"
    ) -> None:
        self.emit(ev.PlanUpdated(agent=agent, steps=steps, reason=reason))
