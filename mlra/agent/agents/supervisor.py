"""The supervisor: plans with `update_plan`, hands the worker one subtask at a
time with `assign_subtask`, reads the report, revises the plan, and submits.

`assign_subtask` is an ordinary tool whose result is the worker's report, so the
supervisor's history stays a valid tool-calling conversation. Periodic reviews
of a running subtask happen in a side conversation (a tool call is still open
in the main one) and may change the plan and send guidance to the worker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from mlra import events as ev
from mlra.agent.agents.worker import Worker
from mlra.agent.agents.worker_alone import work_alone
from mlra.agent.loop.ending import unsubmitted
from mlra.agent.loop.history import AgentHistory
from mlra.agent.loop.loops import Repeats, call_key
from mlra.agent.run.controller import Agent, Ending, EndRun, RunController
from mlra.agent.setup.config import RunConfig
from mlra.agent.setup.prompts import (
    REVIEWER_SYSTEM,
    SEARCH_SUPERVISOR_SYSTEM,
    SUPERVISOR_SYSTEM,
    reading_clause,
    task_message,
)
from mlra.tasks.spec import TaskSpec
from mlra.tools.attempts import Attempts, attempt_tools
from mlra.tools.files import ReadFile
from mlra.tools.list_files import ListFiles
from mlra.tools.plan import UpdatePlan, render_plan
from mlra.tools.registry import Tool, ToolContext, ToolOutcome, ToolRegistry
from mlra.tools.research import reading_tools
from mlra.tools.submit import Submit, SubmitAttempt

MAX_NUDGES = 3


class AssignSubtaskArgs(BaseModel):
    step_id: str = Field(description="The id of the plan step this subtask serves.")
    instructions: str = Field(
        description="Precise instructions: what to do, which files, what to report back."
    )


class AssignSubtask(Tool[AssignSubtaskArgs]):
    name = "assign_subtask"
    description = (
        "Hand the worker one subtask and wait for it to finish. Returns the worker's report."
    )
    Args = AssignSubtaskArgs
    reruns_on_resume = True

    def __init__(self, delegate: Delegate) -> None:
        self.delegate = delegate

    async def run(self, args: AssignSubtaskArgs, ctx: ToolContext) -> ToolOutcome:
        return await self.delegate(args.step_id, args.instructions)


Delegate = Callable[[str, str], Awaitable[ToolOutcome]]
"""(plan step id, instructions) -> the worker's report, as `assign_subtask` returns it."""


def supervisor_tools(
    config: RunConfig,
    *,
    on_plan: Callable[[list[ev.PlanStep], str], None],
    delegate: Delegate,
    attempts: Attempts | None = None,
) -> list[Tool[Any]]:
    """The supervisor's tools: one list for the run and for sizing its first request
    against the window (agent/agents/window_floor.py), so the two cannot drift apart. A search
    (`--search llm`, `attempts` given) starts attempts instead of assigning subtasks."""
    if config.search == "llm" and attempts is not None:
        return [
            UpdatePlan(on_plan),
            *attempt_tools(attempts),
            ReadFile(),
            ListFiles(),
            *reading_tools(config.research_tools, config.fetch),
            SubmitAttempt(attempts),
        ]
    return [
        UpdatePlan(on_plan),
        AssignSubtask(delegate),
        ReadFile(),
        ListFiles(),
        *reading_tools(config.research_tools, config.fetch),
        Submit(),
    ]


def supervisor_history(
    config: RunConfig, task: TaskSpec, workdir: str, time_limit_s: float
) -> AgentHistory:
    """The supervisor's history before its first turn: its system prompt and the task."""
    if config.search == "llm":
        system = SEARCH_SUPERVISOR_SYSTEM.format(
            workdir=workdir,
            reading=reading_clause(config.research_tools),
            parallel=config.attempts_parallel,
            attempts=config.attempts,
        )
    else:
        system = SUPERVISOR_SYSTEM.format(
            workdir=workdir, reading=reading_clause(config.research_tools)
        )
    history = AgentHistory(system=system)
    history.pin(task_message(task.render_prompt(time_limit_s=time_limit_s), role="supervisor"))
    return history


class Supervisor(Agent):
    role: ev.AgentRole = "supervisor"

    def __init__(self, controller: RunController) -> None:
        self.ctl = controller
        assert controller.sandbox is not None
        workdir = controller.sandbox.workdir
        self.registry = ToolRegistry(
            supervisor_tools(
                controller.config,
                on_plan=self._plan_changed,
                delegate=self.delegate,
                attempts=controller.attempts,
            )
        )
        self.review_registry = ToolRegistry([UpdatePlan(self._plan_changed)])
        self.history = supervisor_history(
            controller.config, controller.task, workdir, controller.time_limit_s
        )
        self.task_prompt = controller.task.render_prompt(time_limit_s=controller.time_limit_s)
        self.worker = Worker(controller, reviewer=self.review)
        self.subtasks = 0
        self._reviews: list[str] = []
        self._user_notes: list[str] = []

    # --- the plan ---------------------------------------------------------------------

    def _plan_changed(self, steps: list[ev.PlanStep], reason: str) -> None:
        self.ctl.set_plan(steps, reason)

    def _mark(self, step_id: str, status: ev.PlanStatus) -> None:
        plan = [s.model_copy() for s in self.ctl.state.plan]
        changed = False
        for step in plan:
            if step.id == step_id and step.status != status:
                step.status = status
                changed = True
        if changed:
            self.ctl.set_plan(plan, f"step {step_id} is {status.replace('_', ' ')}")

    # --- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        """Turn after turn until `submit`, bounded: by the supervisor's turn limit, by
        turns with no tool call, by one call failing the same way again and again, and
        by the same call with the same result made again and again (agent/loop/loops.py)."""
        cfg = self.ctl.config
        repeats = Repeats.of(self.role, cfg)
        nudges = 0
        empty = 0
        turns = 0
        failures: dict[str, int] = {}
        failed_submit = ""
        """Why its last `submit` failed, if it called one: the ending then says so."""
        prompt = ""
        while True:
            if turns >= cfg.supervisor_max_turns:
                problem = (
                    f"supervisor turn limit reached ({turns} of {cfg.supervisor_max_turns} turns)"
                )
                raise EndRun(Ending(reason="budget", by="budget", note=problem, message=problem))
            response, step = await self.ctl.model_turn(
                self.role, self.history, self.registry, counts_as_step=False, extra_prompt=prompt
            )
            turns += 1
            prompt = ""
            if response.text.strip():
                self.ctl.emit(ev.SupervisorMessage(text=response.text, turn=self.history.turn))
            if not response.tool_calls:
                nudges += 1
                empty += not response.text.strip()
                if nudges > MAX_NUDGES:
                    what = "gave empty answers" if empty == nudges else "answered without a tool"
                    if self._hands_over(failed_submit):
                        did = f"the supervisor {what} {nudges} turns in a row"
                        await work_alone(
                            self.ctl,
                            "supervisor_idle",
                            f"{did} and never handed the worker a subtask: the worker takes "
                            "the whole task alone (--agent worker starts a run so)",
                            supervisor_turns=turns,
                            before=did + " and never handed the worker a subtask",
                        )
                    if failed_submit:
                        message = (
                            f"the supervisor's submit call failed ({failed_submit}), then it "
                            f"{what} {nudges} turns in a row, so nothing was submitted"
                        )
                    else:
                        message = (
                            f"the supervisor {what} {nudges} turns in a row and never "
                            "called submit, so nothing was submitted"
                        )
                    raise EndRun(unsubmitted("no_tool_calls", message))
                prompt = (
                    "Use your tools: `update_plan`, `assign_subtask` for the next subtask, "
                    "or `submit` when the result is ready."
                )
                continue
            nudges = empty = 0
            for call in response.tool_calls:
                outcome = await self.ctl.execute_tool(
                    self.role, call, self.registry, step=step, turn=self.history.turn
                )
                self.history.add_tool_result(
                    call.id, call.name, outcome.output, is_error=not outcome.ok
                )
                key = call_key(call)
                if call.name == "submit":
                    lines = (outcome.error or outcome.output).strip().splitlines()
                    failed_submit = "" if outcome.ok else (lines[0][:200] if lines else "-")
                if outcome.ok:
                    failures.pop(key, None)
                else:
                    failures[key] = failures.get(key, 0) + 1
                    if failures[key] >= cfg.max_repeated_failures:
                        lines = outcome.output.strip().splitlines()
                        await self._stuck_hands_over(
                            f"the supervisor's {call.name} call failed {failures[key]} times "
                            "with the same arguments",
                            failed_submit,
                            turns,
                        )
                        raise EndRun(
                            unsubmitted(
                                "repeated_failure",
                                f"the supervisor's {call.name} call failed {failures[key]} "
                                f"times with the same arguments"
                                + (f" (last: {lines[0][:200]})" if lines else ""),
                            )
                        )
                if outcome.signal == "submit":
                    raise EndRun(
                        Ending(
                            reason="submitted",
                            by="agent",
                            path=outcome.data.get("path"),
                            note=outcome.data.get("note") or "",
                            attempt=outcome.data.get("attempt"),
                        )
                    )
                if repeats.see(call, outcome) == repeats.told_at and not self.ctl.catchup.replaying:
                    self.ctl.emit(repeats.notice())
                if repeats.stuck:
                    await self._stuck_hands_over(
                        f"the supervisor made the same {call.name} call {repeats.count} times "
                        "in a row",
                        failed_submit,
                        turns,
                    )
                    raise EndRun(repeats.ending())
            prompt = "\n\n".join(p for p in (self._tree_note(), repeats.prompt_note()) if p)

    def _hands_over(self, failed_submit: str) -> bool:
        """Whether a supervisor that stopped calling tools gives the worker the whole task:
        only where it never handed a subtask (it cannot plan) and never tried to submit
        (it thinks the work done), and not in a search, where attempts are its work."""
        return not self.subtasks and not failed_submit and self.ctl.config.search == "none"

    async def _stuck_hands_over(self, did: str, failed_submit: str, turns: int) -> None:
        """A supervisor stuck on one call (a small model rewriting its plan) before it
        ever handed a subtask cannot plan: the worker takes the whole task, as where it
        answers without tools, instead of the run ending stuck with nothing done."""
        if not self._hands_over(failed_submit):
            return
        did += " and never handed the worker a subtask"
        await work_alone(
            self.ctl,
            "supervisor_stuck",
            f"{did}: the worker takes the whole task alone (--agent worker starts a run so)",
            supervisor_turns=turns,
            before=did,
        )

    def _tree_note(self) -> str:
        """A search's tree, as the supervisor reads it before each turn."""
        if self.ctl.config.search != "llm":
            return ""
        return self.ctl.attempts.table() or "No attempts yet: start one with attempt_start."

    async def delegate(self, step_id: str, instructions: str) -> ToolOutcome:
        plan_ids = {s.id for s in self.ctl.state.plan}
        if plan_ids and step_id not in plan_ids:
            return ToolOutcome(
                output=f"Error: no plan step has id {step_id!r}; the ids are {', '.join(sorted(plan_ids))}. "
                "Add the step with update_plan first.",
                ok=False,
                error="unknown plan step",
            )
        self.subtasks += 1
        self._reviews = []
        self._user_notes = []
        self._mark(step_id, "in_progress")
        result = await self.worker.run_subtask(self.subtasks, instructions, step_id)
        outcome = ev.subtask_outcome_words(result.outcome)
        lines = [f"Subtask {self.subtasks} ended ({outcome}, {result.steps} worker steps)."]
        if self._user_notes:
            lines.append(
                "The user wrote to you during the subtask: " + " | ".join(self._user_notes)
            )
        if self._reviews:
            lines.append("Your guidance during the subtask: " + " | ".join(self._reviews))
        if result.outcome == "reported":
            lines.append(f"Worker's report:\n{result.report}")
        else:  # no report: what happened, and the worker's last words marked as such
            lines.append(result.report)
        experiments = self._experiments()
        if experiments:
            lines.append(experiments)
        lines.append("Update the plan, then assign the next subtask or submit.")
        return ToolOutcome(
            output="\n".join(lines),
            ok=result.outcome == "reported",
            data={"subtask": self.subtasks, "outcome": result.outcome, "steps": result.steps},
        )

    async def review(self, subtask: int, instructions: str, recent: list[str]) -> str:
        """A look at the worker's recent steps; returns guidance for it, or ''.

        Messages the user sent the supervisor are read here too: the supervisor's
        own conversation waits on the subtask, and they should not wait with it.
        """
        messages = self.ctl.take_messages("supervisor", review=True)
        self._user_notes += messages
        from_user = [f"[message from the user] {m}" for m in messages]
        text = "\n\n".join(
            [
                self.task_prompt,
                *from_user,
                "Current plan:\n" + (render_plan(self.ctl.state.plan) or "(none)"),
                f"Subtask {subtask}: {instructions}",
                "The worker's recent steps:\n" + "\n".join(f"- {r}" for r in recent),
                *([experiments] if (experiments := self._experiments()) else []),
                self.ctl.elapsed_note(),
            ]
        )
        response = await self.ctl.ask(
            self.role, REVIEWER_SYSTEM, text, purpose="review", registry=self.review_registry
        )
        for call in response.tool_calls:
            await self.ctl.execute_tool(self.role, call, self.review_registry)
        guidance = response.text.strip()
        if guidance.lower().rstrip(".") == "continue":
            guidance = ""
        self.ctl.emit(
            ev.Review(
                subtask=subtask, after_steps=len(recent), guidance=guidance, user_messages=messages
            )
        )
        if guidance:
            self._reviews.append(guidance)
        return guidance

    def _experiments(self) -> str:
        """The experiments table (agent/record/experiments.py) as text, or '' while the worker has
        neither noted nor validated anything: plans compare experiments, not repeat them."""
        table = self.ctl.state.experiments
        if not table.rows and not table.notes:
            return ""
        return table.render() + (
            "\nCompare these before planning more: build on the best, do not repeat a tried change."
        )
