"""`validate`: feedback while the run goes on, from the task's own evaluator on a
validation split the agent does not have (never the hidden test split).

The tool checks the path as `submit` does (it must exist, no link on the way out
of the workspace) and hands it to the run's `Validator`, which lives above the
tools (tasks/validation.py): it freezes a copy, grades the copy host-side in the
evaluator's own sandbox, on the run's clock, records a `validation` event and
enforces the task's rate limit. A task without validation data gets a check of
the artifact's format and the task's rules, and the result says so. What the
agent reads is the validation score and which split it came from; the test score
is only ever computed at the end, on the submitted artifact.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from mlra import events as ev
from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox.base import SandboxError
from mlra.tools.sandbox.time_out import TimeOut
from mlra.tools.submit import only_the_workspace, submitted_path


class Validator(Protocol):
    """Grades a workspace path on the validation split for the run (tasks/validation.py).

    Raises `SandboxError` with a readable reason for a call it refuses (the rate
    limit, an artifact that cannot be frozen); the registry makes that an error
    observation. A graded artifact, passing or not, comes back as the recorded event.
    The grading's time-out joins `time_outs`, the call's (tools/registry.py
    `ToolContext`): the run raises it with its deadline, as it does a command's.
    """

    async def __call__(
        self,
        path: str,
        *,
        call_id: str,
        workdir: str | None,
        time_outs: list[TimeOut] | None = None,
    ) -> ev.Validation: ...

    def calls_left(self) -> tuple[int, float | None]:
        """Validations left to the run, and the run time from which the next is allowed."""
        ...


class ValidateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        default=None,
        description="The artifact to validate (file or folder in the workspace); "
        "default: the one the task names.",
    )


class Validate(Tool[ValidateArgs]):
    name = "validate"
    description = (
        "Grade a frozen copy of the artifact at `path` (default: the artifact the task asks "
        "for) with the task's evaluator on a validation split you do not have (not the hidden "
        "test split), and get its score. The run goes on. Calls are limited in number and "
        "spacing; where the task has no validation data it checks the artifact's format and "
        "the task's rules only. The final grade is still the test split, on what you submit."
    )
    Args = ValidateArgs
    held_at_limit = True

    def __init__(self, validator: Validator) -> None:
        self.validator = validator

    async def run(self, args: ValidateArgs, ctx: ToolContext) -> ToolOutcome:
        if args.path:
            rel = _checked(ctx, args.path, default=False)
            only_the_workspace(
                rel, args.path, ctx.default_artifact, tool="validate", done="validated"
            )
        elif ctx.default_artifact:
            rel = _checked(ctx, ctx.default_artifact, default=True)
        else:
            raise SandboxError("this task names no default artifact; give the path to validate")
        result = await self.validator(
            rel, call_id=ctx.call_id, workdir=ctx.sandbox.workdir, time_outs=ctx.time_outs
        )
        left, next_at = self.validator.calls_left()
        return ToolOutcome(
            output=describe(result, left, next_at),
            ok=result.ok,
            error=None if result.ok else (result.told or "the artifact failed validation"),
            data={"split": result.split, "score": result.score, "sha256": result.sha256},
        )


def _checked(ctx: ToolContext, path: str, *, default: bool) -> str:
    """`submit`'s check of the path, said for a validation."""
    try:
        return submitted_path(ctx.sandbox, path, default=default)
    except SandboxError as exc:
        raise SandboxError(
            str(exc).replace("so nothing was submitted", "so nothing was validated")
        ) from None


def describe(result: ev.Validation, left: int, next_at: float | None) -> str:
    """The tool's answer: the score and its split, or what the format check found."""
    from mlra.durations import format_duration

    digest = f"sha256 {result.sha256[:12]}" if result.sha256 else "no digest"
    lines: list[str] = []
    if result.split == "format":
        lines.append(
            "Format check only: this task has no validation data, so the artifact's format "
            "and the task's rules were checked, and there is no score."
        )
        lines.append(
            f"{result.artifact} ({digest}): "
            + ("passes." if result.ok else f"fails: {_problem(result)}")
        )
    elif result.ok and result.score is not None:
        direction = "higher" if result.higher_is_better else "lower"
        lines.append(
            f"Validation split (not the hidden test split): {result.metric} = "
            f"{result.score:.4f} ({direction} is better) for {result.artifact} ({digest})."
        )
        shown = {k: v for k, v in result.metrics.items() if k != result.metric}
        if shown:
            lines.append(
                "Metrics: " + ", ".join(f"{k} = {v:.4g}" for k, v in list(shown.items())[:12])
            )
    else:
        lines.append(
            f"Validation of {result.artifact} ({digest}) gave no score: {_problem(result)}"
        )
    lines.append(f"Graded in {result.duration_s:.1f} s of run time.")
    if left <= 0:
        lines.append("No validations are left in this run.")
    else:
        when = "" if next_at is None else f"; the next from run time {format_duration(next_at)}"
        lines.append(f"{left} validation{'s' if left != 1 else ''} left{when}.")
    return "\n".join(lines)


def _problem(result: ev.Validation) -> str:
    """Why it failed, as the agent is told: never the evaluator's words unchecked."""
    if result.told is not None:
        return result.told
    if result.violations:
        return "it breaks the task's rules: " + "; ".join(result.violations)
    return result.error or "no reason given"
