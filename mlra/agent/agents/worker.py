"""The worker: a ReAct loop with the provider's native tool calling.

It keeps one real message history across subtasks (so it remembers what it
already did), is told the clock and budget every turn, and ends a subtask by
calling `report`. Every `review_every` steps the supervisor looks at its
recent work and may send guidance, which the worker reads as a message.

A subtask ends as it happened: a worker that stops calling tools and never
calls `report` ends it "no_report", and the supervisor reads that it made no
report (and whether it made any tool call), with its last text marked as not
one. The same call made again and again with the same result is pointed out,
then ends the run "stuck" (agent/loop/loops.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mlra import events as ev
from mlra.agent.loop.evaluation import run_validator
from mlra.agent.loop.history import AgentHistory
from mlra.agent.loop.loops import Repeats
from mlra.agent.providers.base import ToolCallRequest
from mlra.agent.run.controller import Ending, EndRun, RunController
from mlra.agent.setup.config import RunConfig
from mlra.agent.setup.prompts import (
    WORKER_ALONE_SYSTEM,
    WORKER_SYSTEM,
    research_sentence,
    task_message,
)
from mlra.tasks.spec import TaskSpec
from mlra.tools.core import core_tools
from mlra.tools.jobs import JobManager
from mlra.tools.plan import Report
from mlra.tools.registry import Tool, ToolRegistry
from mlra.tools.research import research_tools
from mlra.tools.validate import Validator

MAX_NUDGES = 3

Reviewer = Callable[[int, str, list[str]], Awaitable[str]]
"""(subtask, instructions, recent steps as text) -> guidance for the worker, or ''."""


Ended = ev.SubtaskOutcome
"""How a subtask ended, as `subtask_finished` records it."""


@dataclass
class SubtaskOutcome:
    report: str
    outcome: Ended
    steps: int


def worker_tools(
    config: RunConfig,
    *,
    jobs: JobManager,
    on_note: Callable[[ev.ExperimentNote], object],
    validator: Validator,
    alone: bool = False,
) -> list[Tool[Any]]:
    """The worker's tools: one list for the run and for sizing its first request against
    the window (agent/agents/window_floor.py), so the two cannot drift apart. Alone, it
    has no one to `report` to: it ends its work with `submit` (a core tool)."""
    return [
        *core_tools(jobs=jobs, on_note=on_note, validator=validator),
        *research_tools(config.research_tools, config.fetch),
        *([] if alone else [Report()]),
    ]


def worker_history(
    config: RunConfig, task: TaskSpec, workdir: str, time_limit_s: float, *, alone: bool = False
) -> AgentHistory:
    """The worker's history before its first subtask: its system prompt and the task."""
    system = WORKER_ALONE_SYSTEM if alone else WORKER_SYSTEM
    history = AgentHistory(
        system=system.format(workdir=workdir, research=research_sentence(config.research_tools))
    )
    role = "worker_alone" if alone else "worker"
    history.pin(task_message(task.render_prompt(time_limit_s=time_limit_s), role=role))
    return history


class Worker:
    role: ev.AgentRole = "worker"

    def __init__(
        self,
        controller: RunController,
        *,
        reviewer: Reviewer | None = None,
        alone: bool = False,
        validator: Validator | None = None,
    ) -> None:
        """`validator`: its run's, where the run validates too (a search's attempt: one
        grading at a time, which its end may take up, agent/agents/closing_validation.py)."""
        self.ctl = controller
        self.reviewer = reviewer
        self.alone = alone
        """Given the task whole (agent/agents/worker_alone.py): it submits, reporting to no one."""
        self.registry = ToolRegistry(
            worker_tools(
                controller.config,
                jobs=controller.jobs,
                on_note=controller.emit,
                validator=validator or run_validator(controller),
                alone=alone,
            )
        )
        assert controller.sandbox is not None
        self.history = worker_history(
            controller.config,
            controller.task,
            controller.sandbox.workdir,
            controller.time_limit_s,
            alone=alone,
        )
        self._recent: list[str] = []
        self.repeats = Repeats.of(self.role, controller.config, alone=alone)

    async def run_subtask(
        self, number: int, instructions: str, step_id: str | None
    ) -> SubtaskOutcome:
        cfg = self.ctl.config
        self.ctl.emit(ev.SubtaskStarted(subtask=number, step_id=step_id, instructions=instructions))
        self.history.pin_subtask(f"[subtask {number}] {instructions}")
        self._recent = []
        self.repeats.reset()
        steps = 0
        nudges = 0
        calls_made = 0
        last_text = ""
        pending_prompt = ""
        loop_note = ""
        while True:
            if steps >= cfg.subtask_max_steps:
                report = (
                    f"(The subtask reached its limit of {cfg.subtask_max_steps} steps without a "
                    f"report. The worker's last words: {last_text or 'none'})"
                )
                return self._finished(number, step_id, report, "step_limit", steps)
            if self.reviewer and steps and steps % cfg.review_every == 0 and not pending_prompt:
                guidance = await self.reviewer(
                    number, instructions, self._recent[-cfg.review_every :]
                )
                if guidance:
                    pending_prompt = f"[message from the supervisor] {guidance}"
            response, step = await self.ctl.model_turn(
                self.role,
                self.history,
                self.registry,
                counts_as_step=True,
                extra_prompt="\n\n".join(p for p in (pending_prompt, loop_note) if p),
            )
            pending_prompt = loop_note = ""
            steps += 1
            if response.text.strip():
                last_text = response.text.strip()
                self.ctl.emit(
                    ev.WorkerThought(text=response.text, turn=self.history.turn, step=step)
                )
            if not response.tool_calls:
                nudges += 1
                if nudges > MAX_NUDGES:
                    report = no_report(nudges, calls_made, last_text, alone=self.alone)
                    return self._finished(number, step_id, report, "no_report", steps)
                pending_prompt = (
                    "Act with a tool, or call `submit` when the artifact is ready."
                    if self.alone
                    else "Act with a tool, or call `report` if the subtask is done or cannot be done."
                )
                continue
            nudges = 0
            for call in response.tool_calls:
                calls_made += 1
                outcome = await self.ctl.execute_tool(
                    self.role, call, self.registry, step=step, turn=self.history.turn
                )
                self.history.add_tool_result(
                    call.id, call.name, outcome.output, is_error=not outcome.ok
                )
                self._recent.append(
                    f"{call.name}({call.raw_arguments or call.arguments}) -> "
                    f"{'ok' if outcome.ok else 'error'}: {outcome.output[-400:]}"
                )
                if outcome.signal == "report":
                    # Calls after `report` in the same turn are answered, not run.
                    self._skip_rest(response.tool_calls, call.id)
                    summary = str(outcome.data.get("summary", ""))
                    return self._finished(number, step_id, summary, "reported", steps)
                if outcome.signal == "submit":
                    self._skip_rest(response.tool_calls, call.id)
                    self._finished(number, step_id, "The worker submitted.", "submitted", steps)
                    raise EndRun(
                        Ending(
                            reason="submitted",
                            by="agent",
                            path=outcome.data.get("path"),
                            note=outcome.data.get("note") or "",
                        )
                    )
                if self.repeats.see(call, outcome) == self.repeats.told_at:
                    self._tell(self.repeats.notice())
                if self.repeats.stuck:
                    self._skip_rest(response.tool_calls, call.id)
                    ending = self.repeats.ending()
                    self._finished(number, step_id, ending.message, "stuck", steps)
                    raise EndRun(ending)
            loop_note = self.repeats.prompt_note()

    def _tell(self, notice: ev.Notice) -> None:
        """A notice for the person, written once: a resumed run catching up has it."""
        if not self.ctl.catchup.replaying:
            self.ctl.emit(notice)

    def _skip_rest(self, calls: list[ToolCallRequest], done_id: str) -> None:
        """The calls of the answer after the one that ended the subtask are answered "not
        run", and the person is told: no `tool_call` shows them, and the model's answer,
        in the log, asked for them."""
        seen = False
        skipped: list[str] = []
        for call in calls:
            if seen:
                self.history.add_tool_result(
                    call.id, call.name, "Not run: the subtask had already ended.", is_error=True
                )
                skipped.append(call.name)
            seen = seen or call.id == done_id
        if skipped:
            done = next(call.name for call in calls if call.id == done_id)
            more = f"{len(skipped)} more call{'s' if len(skipped) > 1 else ''}"
            self._tell(
                ev.Notice(
                    message=f"the worker's answer asked for {more} after {done} "
                    f"({', '.join(skipped)}): not run, as {done} ended the subtask "
                    "(the model is told so)"
                )
            )

    def _finished(
        self, number: int, step_id: str | None, report: str, outcome: Ended, steps: int
    ) -> SubtaskOutcome:
        self.ctl.emit(
            ev.SubtaskFinished(
                subtask=number,
                step_id=step_id,
                report=report,
                outcome=outcome,
                worker_steps=steps,
            )
        )
        return SubtaskOutcome(report=report, outcome=outcome, steps=steps)


def no_report(answers: int, calls: int, last_text: str, *, alone: bool = False) -> str:
    """What the supervisor reads of a subtask the worker ended without `report`: what
    happened, said so, and its last words marked as what they are, never passed off as
    a report (a small model's text can read like one and claim what it never did)."""
    if calls:
        did = (
            f"After {calls} tool call{'s' if calls != 1 else ''}, the worker answered "
            f"{answers} times in a row without calling a tool"
        )
    else:
        did = (
            f"The worker made no tool call in this subtask: it answered {answers} times "
            "without calling a tool, so it ran nothing and changed nothing"
        )
    said = (
        f"Its last text (not a report, and nothing in it was checked):\n{last_text}"
        if last_text
        else "It wrote no text."
    )
    return f"{did}, and it never called `{'submit' if alone else 'report'}`. {said}"
