"""The tools the two agents coordinate with: `update_plan` (supervisor) and `report` (worker)."""

from __future__ import annotations

import json
import re
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
TITLE_KEYS = ("description", "task", "name", "text", "content", "step")
"""Where small models put a step's line when there is no `title`, in the order read:
`step` last, as it often holds the step's number (`{"step": "1", "description": ...}`)."""
_NUMBER = re.compile(r"(?:step\s*)?(\d+)", re.I)


def _id_of(value: Any) -> Any:
    """A step's id as the plan takes it: a whole number (`1`, `1.0`, `"Step 1"` under
    `step`) as its digits; other values as they are, for validation to judge."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return str(int(value))
    return value


def loose_step(step: Any) -> Any:
    """A plan step as small models write it, in the shape the plan takes: a bare
    string is the step's title, a number for an id is its digits, a step's number
    under `step` is its id, and the title and status are read from the words such
    models use. A step left with no id gets one from `UpdatePlanArgs` (its position).
    Anything else is left for validation to refuse, as before."""
    if isinstance(step, str):
        return {"title": step}
    if not isinstance(step, dict):
        return step
    step = dict(step)
    number = step.get("step")
    as_number = _NUMBER.fullmatch(number.strip()) if isinstance(number, str) else None
    if step.get("id") in (None, "") and (as_number or isinstance(number, int | float)):
        step["id"] = as_number.group(1) if as_number else number
        del step["step"]
    step["id"] = _id_of(step.get("id"))
    if step["id"] in (None, ""):
        del step["id"]
    if "title" not in step:
        for key in TITLE_KEYS:
            if isinstance(step.get(key), str) and step[key].strip():
                step["title"] = step[key]
                break
    status = step.get("status")
    if isinstance(status, str):
        word = status.strip().lower().replace(" ", "_").replace("-", "_")
        step["status"] = STATUS_WORDS.get(word, word)
    return step


def numbered(steps: list[Any]) -> list[Any]:
    """Steps without an id numbered by position (from 1), or, where a step's own id
    already is that number, by the next number no step has: `[{"id": "3"}, "B", "C"]`
    is 3, 2, 4, where numbering by position alone made it "3 used twice"."""
    taken = {s["id"] for s in steps if isinstance(s, dict) and isinstance(s.get("id"), str)}
    out = []
    for position, step in enumerate(steps, start=1):
        if isinstance(step, dict) and "id" not in step:
            number = position
            while str(number) in taken:
                number += 1
            taken.add(str(number))
            step = {"id": str(number), **step}
        out.append(step)
    return out


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
        return cls.loosely(data)

    @staticmethod
    def loosely(data: Any) -> Any:
        """The plan as small models send it (a list of strings, steps without ids, the
        list JSON-encoded in a string) read as meant: refused, a small supervisor sends
        its plan again, often as loosely, and its turns go on the plan, not the work.
        The call is recorded as the model sent it, and read so wherever it is shown."""
        if not isinstance(data, dict):
            return data
        steps = data.get("steps")
        if isinstance(steps, str):
            try:
                steps = json.loads(steps)
            except (ValueError, RecursionError):  # a number too long to read is a ValueError
                return data
        if isinstance(steps, dict) and isinstance(steps.get("steps"), list):
            steps = steps["steps"]
        if not isinstance(steps, list):
            return data
        return {**data, "steps": numbered([loose_step(s) for s in steps])}

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
