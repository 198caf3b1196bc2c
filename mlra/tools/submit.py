"""`submit`: hand the result in for evaluation, which ends the run.

The tool only checks that the path is there and signals; the controller stops
the sandbox's processes, freezes a copy of the artifact, records it and runs the
task's evaluator on the copy, so the score never comes from anything the agent
says about its own result. The submitted path is followed link by link here, so a
link out of the workspace or to nothing is refused at once, while the agent can
still fix it; links inside a submitted folder are judged when it is frozen.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

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


class SubmitAttemptArgs(SubmitArgs):
    attempt: str | None = Field(
        default=None,
        description="Submit this attempt's validated artifact (its frozen copy, as it was "
        "validated) instead of a path in your workspace.",
    )


class Submittable(Protocol):
    def submittable(self, attempt: str) -> Any:
        """Raises with why the attempt cannot be submitted."""
        ...


class Submit(Tool[SubmitArgs]):
    name = "submit"
    description = (
        "Submit the result for evaluation. This ends the run: no more commands run after it, "
        "and the task's evaluator scores the artifact at `path` (default: the artifact the "
        "task asks for). Call it once, when the result is ready or time is nearly out."
    )
    Args = SubmitArgs

    async def run(self, args: SubmitArgs, ctx: ToolContext) -> ToolOutcome:
        return self._submit_path(args, ctx)

    def _submit_path(self, args: SubmitArgs, ctx: ToolContext) -> ToolOutcome:
        if args.path:
            rel = submitted_path(ctx.sandbox, args.path)
            only_the_workspace(rel, args.path, ctx.default_artifact)
        elif ctx.default_artifact:
            # The default must be there too: "submitted" with nothing there is no submission.
            submitted_path(ctx.sandbox, ctx.default_artifact, default=True)
            rel = None
        else:
            # No default to check is no default to grade: an error to the agent, which goes on.
            raise SandboxError(
                "this task names no default artifact, so nothing was submitted; "
                "give the path to submit"
            )
        from mlra.tools.submission import artifact_words

        what = artifact_words(rel) if rel is not None else "the task's default artifact"
        return ToolOutcome(
            output=f"Submitted {what}. Evaluation starts now; the run ends here.",
            signal="submit",
            data={"path": rel, "note": args.note},
        )


def only_the_workspace(
    rel: str, path: str, artifact: str | None, *, tool: str = "submit", done: str = "submitted"
) -> None:
    """Refuses a path within the workspace where the task grades the workspace itself
    (MLAgentBench, MLRC-Bench: `get_score(<folder>)`): a model that submitted the
    `submission.csv` the task asks it to write had that file graded as the folder, which
    no evaluator can read, and the run ended unscored."""
    if artifact is None or os.path.normpath(artifact) != "." or rel == ".":
        return
    raise SandboxError(
        f"this task's evaluator reads the whole workspace, not a path in it, so nothing "
        f"was {done}; {tool} with no path takes the workspace, {path!r} included"
    )


def submitted_path(sandbox: Sandbox, path: str, *, default: bool = False) -> str:
    """The path relative to the workspace, as written; it must exist, and no link on
    the way may lead out of the workspace (the freeze checks the artifact's inside)."""
    from mlra.tools.artifact_copy import SubmissionRefused
    from mlra.tools.submission import follow_submitted, workspace_relative

    try:
        rel = workspace_relative(sandbox.workspace, path, workdir=sandbox.workdir)
        source = follow_submitted(sandbox.workspace.resolve(), rel, sandbox.workdir)
    except SubmissionRefused as exc:
        raise SandboxError(f"{exc}, so nothing was submitted") from None
    what = f"the task's artifact {path!r}" if default else repr(path)
    if not source.exists():
        # Followed to the end: a link inside the workspace to nothing is nothing.
        dangling = (
            " (it is a symbolic link to nothing)"
            if os.path.lexists(sandbox.workspace / rel)
            else ""
        )
        raise SandboxError(
            f"{what} does not exist in the workspace{dangling}, so nothing was submitted; "
            "create it first or submit another path"
        )
    return rel


class SubmitAttempt(Submit):
    """`submit` in a run that searches: it also hands in an attempt's artifact."""

    description = Submit.description + (
        " In a search, give `attempt` to submit that attempt's validated artifact."
    )
    Args = SubmitAttemptArgs  # type: ignore[assignment]

    def __init__(self, attempts: Submittable) -> None:
        self.attempts = attempts

    async def run(self, args: SubmitArgs, ctx: ToolContext) -> ToolOutcome:
        attempt = args.attempt if isinstance(args, SubmitAttemptArgs) else None
        if attempt is None:
            return self._submit_path(args, ctx)
        if args.path:
            raise SandboxError("give `attempt` or `path`, not both")
        try:
            self.attempts.submittable(attempt)
        except Exception as exc:
            raise SandboxError(f"attempt {attempt} was not submitted: {exc}") from None
        return ToolOutcome(
            output=f"Submitted attempt {attempt}'s validated artifact. Evaluation starts now; "
            "the run ends here.",
            signal="submit",
            data={"path": None, "note": args.note, "attempt": attempt},
        )
