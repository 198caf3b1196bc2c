"""The baseline agent (`--model baseline`): no LLM, it runs the task's reference
recipe and submits, as MLAgentBench's baseline agent does.

It goes through the same controller services as the LLM agents (plan events,
the step gate, tool dispatch, breakpoints), so every part of the pipeline and
the console can be exercised, and each task gets its reference score, with no
model at all. With `--baseline-validate` it calls `validate` on the recipe's
artifact before submitting, so the whole loop (validation split, rate limit, the
`validation` event) runs with no LLM too; what validation says does not change
what it submits.
"""

from __future__ import annotations

import re

from mlra import events as ev
from mlra.agent.agents.closing_validation import attempt_validator, validate_at_limit
from mlra.agent.loop.catchup import INTERRUPTED
from mlra.agent.loop.ending import attempt_ending, unsubmitted
from mlra.agent.loop.evaluation import run_validator
from mlra.agent.providers.base import ToolCallRequest
from mlra.agent.record.recording import KILLED_BY_RUN_END
from mlra.agent.run.controller import Agent, Ending, EndRun, RunController
from mlra.durations import parse_duration
from mlra.tools.core import core_tools
from mlra.tools.registry import ToolOutcome, ToolRegistry
from mlra.tools.submission import artifact_words


def step_failure(outcome: ToolOutcome) -> str:
    """Why a recipe step failed, in a few words: its exit status and the last line its
    command wrote (where a failing command says why: `python: command not found`), not
    the sandbox's own `[exit code ...]` line nor bash's `bash: line 1:` prefix."""
    if outcome.timed_out:
        status = "timed out"
    elif outcome.exit_code is not None:
        status = f"exit {outcome.exit_code}"
    else:
        status = ""
    lines = [
        line.strip()
        for line in outcome.output.splitlines()
        if line.strip() and not re.match(r"\[(exit code|timed out|killed)", line.strip())
    ]
    said = re.sub(r"^(bash|sh): (line \d+: )?", "", lines[-1]) if lines else ""
    said = " ".join(said.split())[:160]
    return ": ".join(part for part in (status, said) if part) or "failed"


def recipe_command(command: str, seed: int | None, variables: dict[str, str] | None = None) -> str:
    """The step's command with `{seed}` made the run's seed (0 for a run given none): a
    batch's seeds reseed the recipe, so `--seeds 8` measures its spread. `variables`
    (the recipe's `vars`, a search's variant over them) fill their `{name}`s; a variant's
    own `seed` wins over the run's."""
    values = dict(variables or {})
    values.setdefault("seed", str(seed if seed is not None else 0))
    for name, value in values.items():
        command = command.replace("{" + name + "}", value)
    return command


class BaselineAgent(Agent):
    role: ev.AgentRole = "baseline"

    def __init__(self, controller: RunController) -> None:
        self.ctl = controller
        attempt = controller.config.attempt
        self.attempt = attempt
        """Set where this runs one variant of the recipe as a search's attempt: it then
        always validates, and ends there (the search submits)."""
        self.validates = controller.config.baseline_validate or attempt is not None
        validator = run_validator if attempt is None else attempt_validator
        self.validator = validator(controller) if self.validates else None
        self.registry = ToolRegistry(core_tools(validator=self.validator))
        self.recipe = controller.task.baseline
        self.variables = {**self.recipe.vars, **(attempt.variant if attempt else {})}

    def _plan(self, statuses: list[ev.PlanStatus], reason: str) -> None:
        """The recipe as a plan: its steps, then submitting (`statuses` may cover it)."""
        artifact = artifact_words(self.recipe.submit or self.ctl.task.evaluator.artifact)
        titles = [step.title for step in self.recipe.steps]
        ids = [str(i + 1) for i in range(len(self.recipe.steps))]
        if self.validates:
            titles.append(f"Validate {artifact}")
            ids.append("validate")
        titles.append(f"Submit {artifact}")
        ids.append("submit")
        pending: list[ev.PlanStatus] = ["pending"] * (len(titles) - len(statuses))
        padded: list[ev.PlanStatus] = [*statuses, *pending]
        steps = [
            ev.PlanStep(id=i, title=title, status=status)
            for i, title, status in zip(ids, titles, padded, strict=True)
        ]
        self.ctl.set_plan(steps, reason, agent=self.role)

    async def run(self) -> None:
        steps = self.recipe.steps
        if not steps:
            raise EndRun(
                Ending(
                    reason="error",
                    status="error",
                    evaluate=False,
                    by="error",
                    message=f"task {self.ctl.task.name} has no baseline recipe",
                )
            )
        statuses: list[ev.PlanStatus] = ["pending"] * len(steps)
        self._plan(statuses, "the task's reference recipe")
        failed = ""
        """The step that failed first and why, which is why nothing is there to submit."""
        for index, recipe_step in enumerate(steps):
            again = False
            while True:
                step = await self.ctl.begin_step(self.role, counts=True)
                if statuses[index] != "in_progress":
                    # Once the step may start (a run started `--paused` waits above):
                    # the plan never shows a step running that has not begun.
                    statuses[index] = "in_progress"
                    self._plan(statuses, f"running step {index + 1}")
                self.ctl.emit(ev.StepStarted(agent=self.role, step=step, turn=step))
                title = f"Recipe step {index + 1} of {len(steps)}: {recipe_step.title}"
                self.ctl.emit(
                    ev.WorkerThought(
                        text=title + (" (again: the run ended while it ran)" if again else ""),
                        turn=step,
                        step=step,
                    )
                )
                call = ToolCallRequest(
                    id=self.ctl.next_call_id(self.role),
                    name="bash",
                    arguments={
                        "command": recipe_command(
                            recipe_step.command, self.ctl.config.seed, self.variables
                        ),
                        "timeout": parse_duration(recipe_step.timeout),
                    },
                )
                outcome = await self.ctl.execute_tool(
                    self.role, call, self.registry, step=step, turn=step
                )
                # A step the run ended under (stopped, killed, its node lost) did not
                # fail: it did not finish. This resumed run runs it again, as a person
                # would, rather than skip the rest of the recipe and submit nothing.
                if outcome.error not in (INTERRUPTED, KILLED_BY_RUN_END):
                    break
                again = True
            statuses[index] = "done" if outcome.ok else "failed"
            self._plan(statuses, f"step {index + 1} {'done' if outcome.ok else 'failed'}")
            if not outcome.ok:
                failed = f"step {index + 1} failed ({step_failure(outcome)})"
                # Later steps depend on this one; what exists is still evaluated.
                skipped: list[ev.PlanStatus] = ["skipped"] * (len(steps) - index - 1)
                statuses[index + 1 :] = skipped
                self._plan(statuses, "a recipe step failed; skipping the rest")
                break
        if self.validates:
            statuses.append(await self._validate(statuses))
        if self.attempt is not None:
            raise EndRun(attempt_ending("the recipe's variant ran and was validated"))
        step = await self.ctl.begin_step(self.role, counts=True)
        self.ctl.emit(ev.StepStarted(agent=self.role, step=step, turn=step))
        submit = ToolCallRequest(
            id=self.ctl.next_call_id(self.role),
            name="submit",
            arguments={"path": self.recipe.submit, "note": "baseline recipe"}
            if self.recipe.submit
            else {"note": "baseline recipe"},
        )
        outcome = await self.ctl.execute_tool(
            self.role, submit, self.registry, step=step, turn=step
        )
        if not outcome.ok:
            # A refused submit is no submission, whatever the recipe did before it
            # (a step that timed out leaves no artifact): the run says so, ungraded.
            self._plan([*statuses, "failed"], "submit failed")
            first = outcome.output.strip().splitlines()[0] if outcome.output.strip() else ""
            # A step that failed is the cause (the artifact it would have made is not
            # there): the ending names it, not only the submit it left nothing for.
            why = (
                f"the recipe's {failed}, so nothing was submitted"
                if failed
                else f"the recipe's submit failed, so nothing was submitted: {first}".rstrip(": ")
            )
            raise EndRun(unsubmitted("no_submission", why))
        self._plan([*statuses, "done"], "submitted")
        raise EndRun(
            Ending(
                reason="submitted",
                by="agent",
                path=outcome.data.get("path"),
                note="baseline recipe",
            )
        )

    async def _validate(self, statuses: list[ev.PlanStatus]) -> ev.PlanStatus:
        """One `validate` call on the artifact the recipe submits; its status in the plan.
        A failed validation is reported, and the recipe submits all the same."""
        step = await self.ctl.begin_step(self.role, counts=True)
        self._plan([*statuses, "in_progress"], "validating before submitting")
        self.ctl.emit(ev.StepStarted(agent=self.role, step=step, turn=step))
        call = ToolCallRequest(
            id=self.ctl.next_call_id(self.role),
            name="validate",
            arguments={"path": self.recipe.submit} if self.recipe.submit else {},
        )
        if self.attempt is not None and self.validator is not None:
            self.validator.closing_calls.add(call.id)  # the attempt's result: mlra's own
        outcome = await self.ctl.execute_tool(self.role, call, self.registry, step=step, turn=step)
        return "done" if outcome.ok else "failed"

    async def validate_at_limit(self) -> None:
        """An attempt's recipe reached its time limit: what its workspace holds is
        validated all the same (agent/agents/closing_validation.py)."""
        if self.attempt is not None and self.validator is not None:
            await validate_at_limit(
                self.ctl, self.role, self.registry, self.validator, self.recipe.submit
            )
