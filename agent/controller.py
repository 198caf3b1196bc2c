"""The run controller: owns one run from start to score.

It prepares the workspace and sandbox, drives the agent as an asyncio task,
enforces the deadline (killing running commands) and the budgets, executes
every tool call (breakpoints, approvals, streaming, truncation), takes the
human's control actions, and ends with a host-side evaluation. Every change it
makes is an event in the log; displays subscribe to the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from mlra import __version__
from mlra import events as ev
from mlra.agent.catchup import INTERRUPTED, CatchUp
from mlra.agent.clock import RunClock
from mlra.agent.config import RunConfig
from mlra.agent.controls import Breakpoint, Controls, Decision
from mlra.agent.eventlog import EVENTS_FILE, EventLog
from mlra.agent.fingerprint import request_fingerprint
from mlra.agent.history import AgentHistory
from mlra.agent.prompts import SUMMARIZER_SYSTEM, status_note
from mlra.agent.providers.base import (
    Message,
    ModelProvider,
    ModelResponse,
    ProviderError,
    ToolCallRequest,
)
from mlra.agent.recording import KILLED_BY_RUN_END
from mlra.agent.snapshots import SnapshotStore, WorkspaceScanner
from mlra.agent.state import RunResult, RunState, write_result
from mlra.tasks.spec import TaskSpec
from mlra.tools.registry import ToolContext, ToolOutcome, ToolRegistry
from mlra.tools.sandbox.base import Sandbox, SandboxSpec
from mlra.tools.truncate import truncate_middle

STREAM_CAP_CHARS = 1_000_000
"""Streamed output logged per tool call; past this the log keeps only the result."""

DELTA_FLUSH_CHARS = 64
"""Streamed model text is logged in pieces of about this size, not per token."""


@dataclass
class Ending:
    reason: ev.FinishReason
    status: ev.RunStatus = "finished"
    evaluate: bool = True
    by: str = "agent"
    path: str | None = None
    note: str = ""
    message: str = ""


class EndRun(BaseException):
    """Raised anywhere inside the agent to end the run (submit, budget, provider failure).

    A BaseException, like CancelledError, so that no tool's or loop's
    `except Exception` can swallow it on its way up from a worker inside a
    supervisor's `assign_subtask` call.
    """

    def __init__(self, ending: Ending) -> None:
        super().__init__(ending.reason)
        self.ending = ending


class Agent(Protocol):
    """What the controller drives: the supervisor–worker pair, or the baseline agent."""

    async def run(self) -> None:
        """Work until the run ends; end it by raising EndRun (e.g. on submit)."""


def new_run_id(task: str) -> str:
    return f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{task}-{secrets.token_hex(2)}"


def run_id_problem(run_id: str) -> str | None:
    """Why a run id cannot name a folder inside the runs folder, or None if it can.

    The id is joined to the runs folder; one with a separator, `..` or an absolute
    path would put the run (and its workspace) somewhere else on the host.
    """
    if not run_id or not run_id.strip():
        return "a run id cannot be empty"
    if "/" in run_id or "\\" in run_id or "\0" in run_id:
        return f"run id {run_id!r} must be a plain folder name (no '/')"
    if run_id in (".", ".."):
        return f"run id {run_id!r} must be a plain folder name"
    return None


class RunController:
    def __init__(
        self,
        config: RunConfig,
        task: TaskSpec,
        provider: ModelProvider | None,
        *,
        sandbox_factory: Callable[[Path, SandboxSpec], Sandbox] | None = None,
    ) -> None:
        self.config = config
        self.task = task
        self.provider = provider
        self.run_id = config.run_id or new_run_id(task.name)
        problem = run_id_problem(self.run_id)
        if problem is not None:
            raise ValueError(problem)
        self.run_dir = (config.runs_dir / self.run_id).resolve()
        self.workspace = self.run_dir / "workspace"
        self.time_limit_s = config.time_limit_s or task.time_limit_s
        self.clock = RunClock(self.time_limit_s)
        self.controls = Controls(breakpoints=[Breakpoint.parse(r) for r in config.breakpoints])
        self.state = RunState()
        self.log: EventLog | None = None
        self.sandbox: Sandbox | None = None
        self._sandbox_factory = sandbox_factory
        self._subscribers: list[Callable[[ev.Event], None]] = []
        self._stop = asyncio.Event()
        self._stop_ending: Ending | None = None
        self._call_counter = 0
        self._task: asyncio.Task[Any] | None = None
        self._aborted = False
        self.catchup = CatchUp(
            self.state, self.controls, append=self._append, sandbox_info=self._sandbox_info
        )
        self.scanner = WorkspaceScanner(
            self.workspace,
            SnapshotStore(self.run_dir),
            max_stored_bytes=int(config.snapshot_max_file_mb * 1024 * 1024),
        )

    # --- events -----------------------------------------------------------------------

    def emit(self, event: ev.Event) -> ev.Event:
        """Stamp the run clock on an event and append it: the only way state changes.

        While a resumed run catches up, the agent's events are matched against the
        recorded ones instead (the recorded twin is returned, nothing is written).
        """
        return self.catchup.emit(event)

    def _append(self, event: ev.Event) -> ev.Event:
        if self.log is None:
            raise RuntimeError("the run has not been prepared")
        event.t = round(self.clock.elapsed(), 3)
        return self.log.append(event)

    def catch_up(self, recorded: list[ev.Event], going_live: Callable[[], list[ev.Event]]) -> None:
        """Replay `recorded` through the agent before going live (agent/catchup.py)."""
        self.catchup.load(recorded, going_live)
        self.scanner.load(e for e in recorded if isinstance(e, ev.WorkspaceSnapshot))

    def take_messages(self, agent: ev.AgentRole, *, review: bool = False) -> list[str]:
        """The user's messages for an agent; while catching up, the ones it read then."""
        return self.catchup.take_messages(agent, review=review)

    def subscribe(self, callback: Callable[[ev.Event], None]) -> None:
        """Displays subscribe before `run()` so they see every event from the first."""
        self._subscribers.append(callback)
        if self.log is not None:
            self.log.subscribe(callback)

    # --- setting up -------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the run folder, its log and the workspace with the task's starter files."""
        # Private to its owner: the agent may leave set-id programs in the workspace
        # (as root, its files are root's), and no other user may reach them.
        self.run_dir.parent.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(mode=0o700, exist_ok=False)
        try:
            self.workspace.mkdir()
            for source in self.task.starter_paths():
                if source.is_dir():
                    shutil.copytree(source, self.workspace, dirs_exist_ok=True)
                else:
                    shutil.copy2(source, self.workspace / source.name)
        except BaseException:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            raise
        self.log = EventLog(self.run_dir / EVENTS_FILE)
        self.log.subscribe(self.state.apply)
        for callback in self._subscribers:
            self.log.subscribe(callback)

    def sandbox_spec(self) -> SandboxSpec:
        # The task folders (hidden test data) and the runs folder (other runs' logs)
        # must not be readable from inside, even where the host file system is.
        hide = [*self.task.hidden_paths(), self.task.root.parent, self.run_dir.parent]
        return SandboxSpec(
            network=self.task.resources.network,
            env={**self.task.sandbox.env, **self.config.env},
            hide_paths=hide,
        )

    def _make_sandbox(self) -> Sandbox:
        spec = self.sandbox_spec()
        if self._sandbox_factory is not None:
            return self._sandbox_factory(self.workspace, spec)
        from mlra.agent.sandboxes import create_sandbox

        return create_sandbox(
            self.workspace, spec, config=self.config, task=self.task, run_id=self.run_id
        )

    def _sandbox_info(self) -> ev.SandboxInfo | None:
        if self.sandbox is None:
            return None
        return ev.SandboxInfo(
            kind=self.sandbox.kind,
            isolation=self.sandbox.isolation,
            network=self.sandbox.spec.network,
            workdir=self.sandbox.workdir,
            workspace=str(self.workspace),
            limits=self.sandbox.limits,
        )

    def _emit_started(self) -> None:
        sandbox = self._sandbox_info()
        assert sandbox is not None
        self.emit(
            ev.RunStarted(
                run_id=self.run_id,
                task=self.task.name,
                task_title=self.task.title,
                task_dir=str(self.task.root),
                model=self.config.model,
                limits=ev.Limits(
                    time_limit_s=self.time_limit_s,
                    max_steps=self.config.max_steps,
                    max_cost_usd=self.config.max_cost_usd,
                    max_tokens=self.config.max_tokens,
                ),
                sandbox=sandbox,
                config=self.config.model_dump(mode="json"),
                mlra_version=__version__,
                context_window=self.provider.context_window if self.provider else None,
            )
        )

    # --- the run ----------------------------------------------------------------------

    async def run(self, make_agent: Callable[[RunController], Agent]) -> RunResult:
        """Drive the agent to an ending, evaluate, and write `result.json`.

        The agent is made once the sandbox is up (its prompts name the sandbox's
        working directory). The log survives every failure: an internal error
        ends the run with status error, a cancellation with status stopped.
        """
        if self.log is None:
            self.prepare()
        self._task = asyncio.current_task()
        try:
            await self.start()
            ending = await self._drive(make_agent(self))
            await self._finish(ending)
        except asyncio.CancelledError:
            self._finish_abruptly("stopped", "the run was cancelled before it could finish")
            if not self._aborted:
                await self._close()
                write_result(self.state, self.run_dir)
                raise
            if self._task is not None:
                self._task.uncancel()
        except Exception as exc:
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self.emit_safely(ev.Notice(level="error", message=traceback.format_exc()))
            self._finish_abruptly("error", f"internal error: {detail}")
        await self._close()
        return write_result(self.state, self.run_dir)

    async def start(self) -> None:
        """Start the sandbox, record the run's start and start the clock."""
        if self.log is None:
            self.prepare()
        self.sandbox = self._make_sandbox()
        notices = await self.sandbox.start()
        if not self.catchup.replaying:
            self._emit_started()
        for notice in notices:
            self._append(ev.Notice(level="warning", message=notice))
        self.clock.start()
        if not self.catchup.replaying:
            self.catchup.go_live()
            await self._snapshot(0)
        if self.config.start_paused:
            self.pause(source="start")

    def abort(self) -> None:
        """End the run now, without evaluating; for a second Ctrl-C or a killed console."""
        if not self._stop.is_set():
            self.request_stop(evaluate=False)
            return
        self._aborted = True
        if self._task is not None:
            self._task.cancel()

    def emit_safely(self, event: ev.Event) -> None:
        with contextlib.suppress(Exception):
            self.emit(event)

    async def _drive(self, agent: Agent) -> Ending:
        agent_task = asyncio.create_task(self._run_agent(agent), name="agent")
        deadline_task = asyncio.create_task(self._watch_deadline(), name="deadline")
        stop_task = asyncio.create_task(self._stop.wait(), name="stop")
        sampler_task = asyncio.create_task(self._sample_resources(), name="resources")
        try:
            done, _ = await asyncio.wait(
                {agent_task, deadline_task, stop_task}, return_when=asyncio.FIRST_COMPLETED
            )
            if agent_task in done:
                ending = agent_task.result()
            elif deadline_task in done:
                ending = deadline_task.result()
            else:
                assert self._stop_ending is not None
                ending = self._stop_ending
        finally:
            for task in (agent_task, deadline_task, stop_task, sampler_task):
                task.cancel()
            # Cancelling the agent kills its running commands (the sandbox kills the
            # process group on cancellation) before evaluation looks at the workspace.
            await asyncio.gather(
                agent_task, deadline_task, stop_task, sampler_task, return_exceptions=True
            )
        return ending

    async def _run_agent(self, agent: Agent) -> Ending:
        try:
            await agent.run()
        except EndRun as end:
            return end.ending
        return Ending(
            reason="submitted",
            by="agent",
            note="the agent stopped without calling submit; its workspace is evaluated",
        )

    async def _watch_deadline(self) -> Ending:
        while True:
            await self.controls.wait_running()
            remaining = self.clock.remaining()
            if remaining <= 0:
                return Ending(reason="deadline", by="deadline", note="time limit reached")
            # Re-checked after each wait: a pause stops the clock, moving the deadline.
            await asyncio.sleep(min(remaining, 5.0) + 0.01)

    async def _sample_resources(self) -> None:
        from mlra.agent.resources import ResourceMonitor

        monitor = await asyncio.to_thread(ResourceMonitor, self.workspace)
        await self.catchup.wait_live()
        while True:
            self._append(await asyncio.to_thread(monitor.sample))
            await asyncio.sleep(self.config.resource_interval_s)

    async def _finish(self, ending: Ending) -> None:
        self.clock.pause()
        self.catchup.go_live()
        if ending.evaluate:
            await self._evaluate(ending)
        message = ending.message or self._ending_message(ending)
        self.emit(ev.RunFinished(status=ending.status, reason=ending.reason, message=message))

    def _ending_message(self, ending: Ending) -> str:
        return {
            "submitted": "the agent submitted",
            "deadline": "the time limit was reached",
            "stopped": "stopped by the user",
            "budget": "a budget was used up",
            "error": "the run failed",
        }[ending.reason]

    def _finish_abruptly(self, status: ev.RunStatus, message: str) -> None:
        if self.log is None or self.state.finished is not None:
            return
        with contextlib.suppress(Exception):
            self.catchup.go_live()
        reason: ev.FinishReason = "error" if status == "error" else "stopped"
        self.emit_safely(ev.RunFinished(status=status, reason=reason, message=message))

    async def _close(self) -> None:
        self.clock.pause()
        if self.sandbox is not None:
            with contextlib.suppress(Exception):
                await self.sandbox.close()
        if self.log is not None:
            self.log.close()

    async def _evaluate(self, ending: Ending) -> None:
        """Stop every process, freeze the artifact, record it, and grade the frozen copy.

        Stopping comes first: a daemon the agent left running must not be able to
        change the artifact while it is copied, nor after (it is the copy that is graded).
        """
        from mlra.tasks.grading import grade_artifact
        from mlra.tools.submission import (
            SUBMISSION_DIR,
            SubmissionRefused,
            describe_error,
            freeze,
        )

        workdir = None
        if self.sandbox is not None:
            workdir = self.sandbox.workdir
            try:
                await self.sandbox.stop_processes()
            except Exception as exc:
                self._append(
                    ev.Notice(
                        level="warning",
                        message=f"the sandbox's processes could not all be stopped before the "
                        f"submission was copied: {exc}",
                    )
                )
        label = ending.path or self.task.evaluator.artifact
        frozen, problem = None, None
        try:
            frozen = await asyncio.to_thread(
                freeze,
                self.workspace,
                label,
                self.run_dir / SUBMISSION_DIR,
                workdir=workdir,
                max_gb=self.task.evaluator.max_submission_gb,
            )
        except SubmissionRefused as exc:
            problem = str(exc)
        except Exception as exc:
            # freeze turns its failures into refusals; whatever else escapes must still
            # end in a recorded evaluation, never an "internal error" with none.
            problem = (
                f"the submission could not be copied out of the workspace: {describe_error(exc)}"
            )
        frozen_rel = frozen.path.relative_to(self.run_dir).as_posix() if frozen else None
        self.emit(
            ev.Submission(
                path=ending.path,
                note=ending.note,
                by=ending.by,  # type: ignore[arg-type]
                frozen=frozen_rel,
                sha256=frozen.sha256 if frozen else None,
                size_bytes=frozen.size_bytes if frozen else None,
            )
        )
        _, finished = await grade_artifact(
            self.task,
            label,
            frozen.path if frozen else None,
            self.run_dir / "evaluation",
            problem=problem,
            graded=frozen_rel,
            sha256=frozen.sha256 if frozen else None,
            on_start=self.emit,
            isolation=self.config.isolation,
        )
        if self.state.sandbox is not None:
            finished.agent_isolation = self.state.sandbox.isolation
        self.emit(finished)

    # --- the human's controls ---------------------------------------------------------

    def _control(self, action: ev.ControlAction, **fields: Any) -> None:
        self._append(ev.Control(action=action, **fields))

    def pause(self, *, source: str = "user") -> None:
        if self.controls.paused or self.state.finished:
            return
        self.controls.pause()
        self.clock.pause()
        if self.sandbox is not None:
            self.sandbox.suspend_commands()
        self._control("pause", source=source)

    def resume(self) -> None:
        self.controls.resume()
        self._unpause()
        self._control("resume")

    def step(self) -> None:
        """Run exactly one agent action, then pause again."""
        self.controls.step()
        self._unpause()
        self._control("step")

    def _unpause(self) -> None:
        if self.controls.pending_calls():
            return  # the clock waits with the approval
        self.clock.resume()
        if self.sandbox is not None:
            self.sandbox.resume_commands()

    def inject(self, target: str, text: str) -> None:
        self.controls.inject(target, text)
        self._control("inject", target=target, text=text)

    def set_breakpoints(self, breakpoints: list[Breakpoint]) -> None:
        self.controls.breakpoints = list(breakpoints)
        self._control(
            "breakpoints",
            text="; ".join(b.describe() for b in breakpoints) or "none",
            arguments={"rules": [b.rule for b in breakpoints]},
        )

    def approve(self, call_id: str) -> bool:
        if self.controls.decide(call_id, Decision("approve")):
            self._control("approve", call_id=call_id)
            return True
        return False

    def edit(self, call_id: str, arguments: dict[str, Any]) -> bool:
        if self.controls.decide(call_id, Decision("edit", arguments=arguments)):
            self._control("edit", call_id=call_id, arguments=arguments)
            return True
        return False

    def reject(self, call_id: str, message: str = "") -> bool:
        if self.controls.decide(call_id, Decision("reject", message=message)):
            self._control("reject", call_id=call_id, text=message)
            return True
        return False

    def request_stop(self, *, evaluate: bool = True) -> None:
        """Stop now; evaluate what the workspace holds unless `evaluate` is False (quit)."""
        if self._stop.is_set():
            return
        self._control("stop" if evaluate else "quit")
        self._stop_ending = Ending(
            reason="stopped",
            status="finished" if evaluate else "stopped",
            evaluate=evaluate,
            by="stop",
            note="stopped by the user",
        )
        self.controls.resume()
        self._stop.set()

    # --- services for the agents ------------------------------------------------------

    def elapsed_note(self) -> str:
        return status_note(
            elapsed_s=self.clock.elapsed(),
            limit_s=self.time_limit_s,
            steps=self.state.steps,
            max_steps=self.config.max_steps,
            cost_usd=self.state.cost_usd,
            max_cost_usd=self.config.max_cost_usd,
            tokens=self.state.tokens,
            max_tokens=self.config.max_tokens,
        )

    def check_budget(self) -> None:
        c, s = self.config, self.state
        problem = None
        if c.max_steps is not None and s.steps >= c.max_steps:
            problem = f"step budget used up ({s.steps} of {c.max_steps} steps)"
        elif c.max_cost_usd is not None and s.cost_usd >= c.max_cost_usd:
            problem = f"cost budget used up (${s.cost_usd:.2f} of ${c.max_cost_usd:.2f})"
        elif c.max_tokens is not None and s.tokens >= c.max_tokens:
            problem = f"token budget used up ({s.tokens:,} of {c.max_tokens:,} tokens)"
        if problem:
            raise EndRun(Ending(reason="budget", by="budget", note=problem, message=problem))

    def next_call_id(self, agent: str) -> str:
        self._call_counter += 1
        return f"{agent[:3]}-{self._call_counter:04d}"

    async def begin_step(self, agent: ev.AgentRole, *, counts: bool) -> int:
        """Wait at the gate (pause, step mode), check budgets, and number the step."""
        if self.catchup.ahead():
            return self.state.steps + 1 if counts else self.state.steps
        if self.controls.step_used_up():
            self.pause(source="step")
        await self.controls.gate()
        self.check_budget()
        return self.state.steps + 1 if counts else self.state.steps

    async def model_turn(
        self,
        agent: ev.AgentRole,
        history: AgentHistory,
        registry: ToolRegistry,
        *,
        counts_as_step: bool,
        extra_prompt: str = "",
    ) -> tuple[ModelResponse, int]:
        """One model turn: gate, budget, context upkeep, status note, streamed call."""
        assert self.provider is not None
        step = await self.begin_step(agent, counts=counts_as_step)
        await self._keep_in_context(agent, history)
        injected = self.take_messages(agent)
        prompt = self.catchup.recorded_prompt()  # the clock note as it was then
        if prompt is None:
            parts = [
                *(f"[message from the user] {m}" for m in injected),
                extra_prompt,
                self.elapsed_note(),
            ]
            prompt = "\n\n".join(p for p in parts if p)
        history.add_user(prompt)
        turn = history.turn + 1
        self.emit(
            ev.StepStarted(agent=agent, step=step, turn=turn, prompt=prompt, delivered=injected)
        )
        response = await self._generate(agent, history.system, history.messages, registry, turn)
        history.record_usage(response.usage.input_tokens)
        history.add_assistant(response)
        return response, step

    async def _generate(
        self,
        agent: ev.AgentRole,
        system: str,
        messages: list[Message],
        registry: ToolRegistry | None,
        turn: int,
        *,
        purpose: str = "turn",
    ) -> ModelResponse:
        recorded = self.catchup.model_answer(agent, purpose)
        if recorded is not None:
            return recorded
        assert self.provider is not None
        tools = registry.specs() if registry else []
        request_sha, _ = request_fingerprint(system, messages, tools, self.replacements())
        buffer: list[str] = []

        def flush() -> None:
            if buffer:
                self.emit(ev.TextDelta(agent=agent, turn=turn, text="".join(buffer)))
                buffer.clear()

        def on_text(piece: str) -> None:
            buffer.append(piece)
            if "\n" in piece or sum(map(len, buffer)) >= DELTA_FLUSH_CHARS:
                flush()

        while True:
            try:
                self.provider.expect(request_sha, messages, self.replacements())
                response = await self.provider.generate(
                    system=system,
                    messages=messages,
                    tools=tools,
                    on_text=on_text if purpose == "turn" else None,
                    max_tokens=self.config.max_output_tokens,
                )
                break
            except ProviderError as exc:
                buffer.clear()
                fatal = self.config.on_provider_failure == "end"
                self.emit(
                    ev.ModelError(agent=agent, model=self.config.model, error=str(exc), fatal=fatal)
                )
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
                self.pause(source="system")
                await self.controls.gate()
        flush()
        usage = response.usage
        self.emit(
            ev.ModelCall(
                agent=agent,
                model=self.config.model,
                turn=turn,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cost_usd=response.cost_usd,
                latency_s=round(response.latency_s, 4),
                stop_reason=response.stop_reason,
                purpose=purpose,  # type: ignore[arg-type]
                text=response.text,
                tool_calls=[c.model_dump(exclude_defaults=True) for c in response.tool_calls],
                request_sha=request_sha,
            )
        )
        return response

    def replacements(self) -> list[tuple[str, str]]:
        """Names that differ between two runs of the same thing (see agent/fingerprint.py)."""
        pairs = [(str(self.workspace), "<workspace>"), (self.run_id, "<run>")]
        if self.sandbox is not None:
            pairs.insert(0, (self.sandbox.workdir, "<workspace>"))
        return sorted(pairs, key=lambda p: -len(p[0]))

    async def ask(
        self,
        agent: ev.AgentRole,
        system: str,
        text: str,
        *,
        purpose: str,
        registry: ToolRegistry | None = None,
    ) -> ModelResponse:
        """A one-off model call outside the agent's main history (summaries, reviews)."""
        self.check_budget()
        return await self._generate(
            agent, system, [Message(role="user", content=text)], registry, 0, purpose=purpose
        )

    async def _keep_in_context(self, agent: ev.AgentRole, history: AgentHistory) -> None:
        before = history.estimated_tokens()
        if self.catchup.ahead():
            # Summarize where the run did, whatever this provider's window.
            cut = self.catchup.recorded_summary(history, self.config.keep_recent_turns)
        else:
            assert self.provider is not None
            window = self.provider.context_window
            budget = int(window * self.config.context_fraction) - self.config.max_output_tokens
            if before <= budget:
                return
            cut = history.summarizable(self.config.keep_recent_turns)
            if cut is None:
                cut = history.summarizable(1)
        if cut is None:
            return
        start, end, first_turn, last_turn = cut
        response = await self.ask(
            agent, SUMMARIZER_SYSTEM, history.render(start, end), purpose="summary"
        )
        summary = response.text.strip() or "(the summarizer returned nothing)"
        history.replace_with_summary(start, end, summary)
        self.emit(
            ev.HistorySummarized(
                agent=agent,
                summary=summary,
                first_turn=first_turn,
                last_turn=last_turn,
                tokens_before=before,
            )
        )

    async def execute_tool(
        self,
        agent: ev.AgentRole,
        call: ToolCallRequest,
        registry: ToolRegistry,
        *,
        step: int = 0,
        turn: int = 0,
    ) -> ToolOutcome:
        """Run one tool call the agent asked for, with everything the user may do about it."""
        assert self.sandbox is not None
        self.emit(
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
            recorded = self.catchup.recorded_result(call.id)
            if isinstance(recorded, ev.ToolResult):
                return outcome_of(recorded)
            if recorded == INTERRUPTED:
                return self._record_result(
                    call,
                    agent,
                    ToolOutcome(
                        output="Interrupted: the run stopped (crashed, was killed or was "
                        "stopped) while this call was running, and has been resumed. It may "
                        "have run in part: check its effects before running it again.",
                        ok=False,
                        error="interrupted",
                    ),
                )
        arguments = call.arguments
        breakpoint_ = (
            self.controls.should_break(call.name, arguments) if call.parse_error is None else None
        )
        if breakpoint_ is not None:
            decision = await self._await_decision(call, breakpoint_)
            if decision.action == "reject":
                message = decision.message or "no reason given"
                return self._record_result(
                    call,
                    agent,
                    ToolOutcome(
                        output=f"The user rejected this call: {message}",
                        ok=False,
                        error="rejected by the user",
                    ),
                )
            if decision.action == "edit" and decision.arguments is not None:
                arguments = decision.arguments

        # A pause that came while the model was thinking holds the action back.
        await self.controls.wait_running()
        streamed = 0

        def on_output(stream: str, text: str) -> None:
            nonlocal streamed
            if streamed >= STREAM_CAP_CHARS:
                return
            streamed += len(text)
            if streamed >= STREAM_CAP_CHARS:
                text += "\n[... further output is not streamed to the log; see the result ...]\n"
            self.emit(ev.ToolOutput(call_id=call.id, stream=stream, text=text))  # type: ignore[arg-type]

        ctx = ToolContext(
            sandbox=self.sandbox,
            agent=agent,
            call_id=call.id,
            on_output=on_output,
            default_timeout_s=self.config.command_timeout_s,
            remaining_s=self.clock.remaining,
            default_artifact=self.task.evaluator.artifact,
        )
        try:
            outcome = await registry.dispatch(
                call.name, arguments, ctx, parse_error=call.parse_error
            )
        except asyncio.CancelledError:
            # The run ended under the call (deadline, stop): the sandbox has killed the
            # command; the log still gets the call's result so no call is left open.
            self._record_result(
                call,
                agent,
                ToolOutcome(
                    output="Killed: the run ended while this call was running.",
                    ok=False,
                    error=KILLED_BY_RUN_END,
                ),
            )
            raise
        self._record_result(call, agent, outcome)
        await self._snapshot(step)
        return outcome

    async def _snapshot(self, step: int) -> None:
        """Record what the last action changed in the workspace (agent/snapshots.py)."""
        if not self.config.snapshots:
            return
        try:
            snapshot = await asyncio.to_thread(self.scanner.scan, step)
        except Exception as exc:  # a full disk must not end the run
            self._append(ev.Notice(level="warning", message=f"workspace snapshot failed: {exc}"))
            return
        if snapshot is not None:
            self.emit(snapshot)

    async def _await_decision(self, call: ToolCallRequest, bp: Breakpoint) -> Decision:
        future = self.controls.expect_decision(call.id)
        self.emit(
            ev.ApprovalRequested(
                call_id=call.id, tool=call.name, arguments=call.arguments, reason=bp.describe()
            )
        )
        # The clock does not run while the run waits for a human.
        self.clock.pause()
        try:
            return await future
        finally:
            if not self.controls.paused:
                self.clock.resume()

    def _record_result(
        self, call: ToolCallRequest, agent: ev.AgentRole, outcome: ToolOutcome
    ) -> ToolOutcome:
        text, truncated = truncate_middle(outcome.output, self.config.observation_limit)
        outcome.output = text
        self.emit(
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

    def set_plan(
        self, steps: list[ev.PlanStep], reason: str = "", *, agent: ev.AgentRole = "supervisor"
    ) -> None:
        self.emit(ev.PlanUpdated(agent=agent, steps=steps, reason=reason))


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
        signal=signal,  # type: ignore[arg-type]
        duration_s=result.duration_s,
    )
