"""`note`: the worker records what it is about to try before a run, so the run's
experiments table (agent/record/experiments.py) pairs each validation with the hypothesis
and change behind it, and the supervisor compares experiments instead of
repeating them."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field, field_validator

from mlra import events as ev
from mlra.tools.registry import Tool, ToolContext, ToolOutcome

MAX_TEXT = 2000
"""A note is a line or two for a table, not a report: longer text is refused."""


class NoteArgs(BaseModel):
    hypothesis: str = Field(
        description="What you expect and why, in a sentence (e.g. 'a 4-layer model beats "
        "the 2-layer baseline at equal time').",
        max_length=MAX_TEXT,
    )
    change: str = Field(
        default="",
        description="What you changed to test it: files, settings, commands.",
        max_length=MAX_TEXT,
    )
    job: str | None = Field(
        default=None,
        description="The background job that runs the experiment (its id or name), if "
        "started already; otherwise the next job you start is taken.",
        max_length=200,
    )

    @field_validator("hypothesis")
    @classmethod
    def _said(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("say what you expect, in a sentence")
        return value

    @field_validator("change")
    @classmethod
    def _stripped(cls, value: str) -> str:
        return value.strip()

    @field_validator("job")
    @classmethod
    def _job(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None


class Note(Tool[NoteArgs]):
    name = "note"
    description = (
        "Record an experiment before you run it: your hypothesis and the change that tests "
        "it (and its background job, if any). The next validation is recorded with it in "
        "the experiments table the supervisor reads."
    )
    Args = NoteArgs

    def __init__(self, on_note: Callable[[ev.ExperimentNote], object]) -> None:
        self._on_note = on_note

    async def run(self, args: NoteArgs, ctx: ToolContext) -> ToolOutcome:
        note = ev.ExperimentNote(
            call_id=ctx.call_id or None,
            hypothesis=args.hypothesis,
            change=args.change,
            job=args.job,
        )
        self._on_note(note)
        return ToolOutcome(
            output="Noted. The next validation is recorded as this experiment's result.",
            data={"hypothesis": args.hypothesis, "change": args.change, "job": args.job},
        )
