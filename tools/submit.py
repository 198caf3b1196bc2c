"""`submit`: hand the result in for evaluation, which ends the run.

The tool only checks the path and signals; the controller records the
submission and runs the task's evaluator, so the score never comes from
anything the agent says about its own result.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mlra.tools.registry import Tool, ToolContext, ToolOutcome
from mlra.tools.sandbox.base import Sandbox, SandboxError


class SubmitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        default=None,
        description="The artifact to evaluate (file or folder in the workspace); "
        "default: the one the task names.",
    )
    note: str | None = Field(default=None, description="Optional: what is being submitted.")


class Submit(Tool[SubmitArgs]):
    name = "submit"
    description = (
        "Submit the result for evaluation. This ends the run: no more commands run after it, "
        "and the task's evaluator scores the artifact at `path` (default: the artifact the "
        "task asks for). Call it once, when the result is ready or time is nearly out."
    )
    Args = SubmitArgs

    async def run(self, args: SubmitArgs, ctx: ToolContext) -> ToolOutcome:
        rel = submitted_path(ctx.sandbox, args.path) if args.path else None
        what = rel if rel is not None else "the task's default artifact"
        return ToolOutcome(
            output=f"Submitted {what}. Evaluation starts now; the run ends here.",
            signal="submit",
            data={"path": rel, "note": args.note},
        )


def submitted_path(sandbox: Sandbox, path: str) -> str:
    host = sandbox.host_path(path)
    if not host.exists():
        raise SandboxError(
            f"{path!r} does not exist in the workspace, so nothing was submitted; "
            "create it first or submit another path"
        )
    return sandbox.relative(host)
