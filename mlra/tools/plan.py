"""The tools the two agents coordinate with: `update_plan` (supervisor) and `report` (worker)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from mlra.events import PlanStatus, PlanStep
from mlra.tools.registry import Tool, ToolContext, ToolOutcome

STATUS_WORDS: dict[str, PlanStatus] = {
    "todo": "pending",
    "to_do": "pending",
    "not_started": "pending",
    "planned": "pending",
    "open": "pending",
    "in_progress": "in_progress",
    "inprogress": "in_progress",
    "active": "in_progress",
    "running": "in_progress",
    "doing": "in_progress",
    "started": "in_progress",
    "ongoing": "in_progress",
    "current": "in_progress",
    "completed": "done",
    "complete": "done",
    "finished": "done",
    "succeeded": "done",
    "success": "done",
    "skip": "skipped",
    "fail": "failed",
    "failure": "failed",
    "error": "failed",
}
"""Other words for a step's status (the ones other agents' plan tools and task lists
use), read as the one they mean: a small supervisor that writes `"completed"` was
refused and spent its turns rewriting the plan instead of handing out subtasks."""
TITLE_KEYS = ("title", "step", "description", "name", "task", "text", "content")
"""Where small models put a step's line when not under `title`, in the order read."""


def loose_step(step: Any, position: int) -> Any:
    """A plan step as small models write it, in the shape the plan takes: a bare
    string is the step's title, a step without an id gets its position (from 1), a
    number for an id is its text, and the title and status are read from the words
    such models use. Anything else is left for validation to refuse, as before."""
    if isinstance(step, str):
        return {"id": str(position), "title": step}
    if not isinstance(step, dict):
        return step
    step = dict(step)
    if "id" not in step or step["id"] in (None, ""):
        step["id"] = str(position)
    elif isinstance(step["id"], int | float) and not isinstance(step["id"], bool):
        step["id"] = str(step["id"])
    if "title" not in step:
        for key in TITLE_KEYS[1:]:
            if isinstance(step.get(key), str) and step[key].strip():
                step["title"] = step[key]
                break
    status = step.get("status")
    if isinstance(status, str):
        word = status.strip().lower().replace(" ", "_").replace("-", "_")
        step["status"] = STATUS_WORDS.get(word, word)
    return step


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

    @model_validator(mode="before")
    @classmethod
    def _loose(cls, data: Any) -> Any:
        """The plan as small models send it (a list of strings, steps without ids, the
        list JSON-encoded in a string) read as meant: refused, a small supervisor sends
        its plan again, often as loosely, and its turns go on the plan, not the work.
        The call is recorded as the model sent it; a replay reads it the same way."""
        if not isinstance(data, dict):
            return data
        steps = data.get("steps")
        if isinstance(steps, str):
            try:
                steps = json.loads(steps)
            except (json.JSONDecodeError, RecursionError):
                return data
        if isinstance(steps, dict) and isinstance(steps.get("steps"), list):
            steps = steps["steps"]
        if not isinstance(steps, list):
            return data
        return {**data, "steps": [loose_step(s, i) for i, s in enumerate(steps, start=1)]}

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
