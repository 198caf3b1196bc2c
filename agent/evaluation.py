"""The end of a run that is graded: stop every process, freeze the artifact,
record the submission, and grade the frozen copy on the host.

Stopping comes first: a daemon the agent left running must not be able to
change the artifact while it is copied, nor after (it is the copy that is graded).
"""

from __future__ import annotations

import asyncio

from mlra import events as ev
from mlra.agent.ending import Ending
from mlra.agent.run_context import RunContext


async def evaluate(run: RunContext, ending: Ending) -> None:
    from mlra.tasks.grading import grade_artifact
    from mlra.tools.submission import (
        SUBMISSION_DIR,
        SubmissionRefused,
        describe_error,
        freeze,
    )

    workdir = None
    if run.sandbox is not None:
        workdir = run.sandbox.workdir
        try:
            await run.sandbox.stop_processes()
        except Exception as exc:
            run.append(
                ev.Notice(
                    level="warning",
                    message=f"the sandbox's processes could not all be stopped before the "
                    f"submission was copied: {exc}",
                )
            )
    label = ending.path or run.task.evaluator.artifact
    frozen, problem = None, None
    try:
        frozen = await asyncio.to_thread(
            freeze,
            run.workspace,
            label,
            run.run_dir / SUBMISSION_DIR,
            workdir=workdir,
            max_gb=run.task.evaluator.max_submission_gb,
        )
    except SubmissionRefused as exc:
        problem = str(exc)
    except Exception as exc:
        # freeze turns its failures into refusals; whatever else escapes must still
        # end in a recorded evaluation, never an "internal error" with none.
        problem = f"the submission could not be copied out of the workspace: {describe_error(exc)}"
    frozen_rel = frozen.path.relative_to(run.run_dir).as_posix() if frozen else None
    run.emit(
        ev.Submission(
            path=ending.path,
            note=ending.note,
            by=ending.by,
            frozen=frozen_rel,
            sha256=frozen.sha256 if frozen else None,
            size_bytes=frozen.size_bytes if frozen else None,
        )
    )
    _, finished = await grade_artifact(
        run.task,
        label,
        frozen.path if frozen else None,
        run.run_dir / "evaluation",
        problem=problem,
        graded=frozen_rel,
        sha256=frozen.sha256 if frozen else None,
        on_start=run.emit,
        isolation=run.config.isolation,
    )
    if run.state.sandbox is not None:
        finished.agent_isolation = run.state.sandbox.isolation
    run.emit(finished)
