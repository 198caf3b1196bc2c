"""The tools the two agents coordinate with: `update_plan` (supervisor) and `report` (worker)."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field, field_validator

from mlra.events import PlanStatus, PlanStep
from mlra.tools.registry import Tool, ToolContext, ToolOutcome


class PlanStepArgs(BaseModel):
    id: str = Field(description="Short stable id, e.g. '1' or 'train'.")
    title: str = Field(description="What the step does, in a line.")
    status: PlanStatus = "pending"
    note: str = Field(default="", description="Optional: results or reasons.")


class UpdatePlanArgs(BaseModel):
    steps: list[PlanStepArgs] = Field(
        description="The whole plan, in order (replaces the old one)."
    )
    reason: str = Field(default="", description="Why the plan changed.")

    @field_validator("steps")
    @classmethod
    def _unique_ids(cls, steps: list[PlanStepArgs]) -> list[PlanStepArgs]:
        if not steps:
            raise ValueError("a plan needs at least one step")
        seen: set[str] = set()
        for step in steps:
            if step.id in seen:
                raise ValueError(f"step id {step.id!r} is used twice")
            seen.add(step.id)
        return steps


def render_plan(steps: list[PlanStep]) -> str:
    marks = {
        "pending": "[ ]",
        "in_progress": "[>]",
        "done": "[x]",
        "failed": "[!]",
        "skipped": "[-]",
    }
    lines = []
    for step in steps:
        note = f" ({step.note})" if step.note else ""
        lines.append(f"{marks[step.status]} {step.id}. {step.title}{note}")
    return "\n".join(lines)


class UpdatePlan(Tool[UpdatePlanArgs]):
    name = "update_plan"
    description = (
        "Replace the plan with an ordered list of steps, each with an id, title and status "
        "(pending, in_progress, done, failed, skipped). Call it to make the first plan and "
        "whenever a report changes what should happen next."
    )
    Args = UpdatePlanArgs

    def __init__(self, on_plan: Callable[[list[PlanStep], str], None]) -> None:
        self._on_plan = on_plan

    async def run(self, args: UpdatePlanArgs, ctx: ToolContext) -> ToolOutcome:
        steps = [PlanStep(**s.model_dump()) for s in args.steps]
        self._on_plan(steps, args.reason)
        return ToolOutcome(
            output="Plan updated:\n" + render_plan(steps),
            data={"steps": [s.model_dump() for s in steps]},
        )


class ReportArgs(BaseModel):
    summary: str = Field(
        description="What you did, results with numbers, files produced, problems met."
    )


class Report(Tool[ReportArgs]):
    name = "report"
    description = (
        "End the current subtask and send your report to the supervisor. Call it when the "
        "subtask is done or cannot be done."
    )
    Args = ReportArgs

    async def run(self, args: ReportArgs, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome(
            output="Report sent to the supervisor.", data={"summary": args.summary}, signal="report"
        )
