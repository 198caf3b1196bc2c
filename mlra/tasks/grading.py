"""Grading a run's submission: the evaluator's outcome turned into the events the
log records, with the normalized score and the success bar.

The run controller grades the frozen copy of the submission (tools/submission.py)
at the end of a run, and `mlra eval` grades it again; a workspace path graded
afterwards (`mlra eval --path`) is frozen the same way first, so links out of it
are refused there too. All go through here so all record the same thing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mlra import events as ev
from mlra.tasks.evaluators.base import normalize, run_evaluation
from mlra.tasks.failures import failure_problem
from mlra.tasks.spec import TaskSpec
from mlra.tasks.success import success_bar, success_of
from mlra.tools.artifact_copy import SubmissionRefused
from mlra.tools.submission import freeze

__all__ = ["WORKSPACE_COPY_SUFFIX", "grade", "grade_artifact", "success_bar", "success_of"]

if TYPE_CHECKING:
    from mlra.tools.sandbox.local import IsolationMode

WORKSPACE_COPY_SUFFIX = "-artifact"
"""A workspace path graded afterwards is copied beside the evaluation folder
(`evaluation-artifact/`), not into it: the evaluator may write its own folder."""


async def grade_artifact(
    task: TaskSpec,
    label: str,
    artifact: Path | None,
    out_dir: Path,
    *,
    problem: str | None = None,
    graded: str | None = None,
    sha256: str | None = None,
    on_start: Callable[[ev.Event], object] | None = None,
    on_progress: Callable[[ev.EvaluationProgress], object] | None = None,
    isolation: IsolationMode = "auto",
    restored_read_only: list[str] | None = None,
    gpus: str | None = None,
    disk_mb: int | None = None,
    on_root_outside: Callable[[str, str], object] | None = None,
) -> tuple[ev.EvaluationStarted, ev.EvaluationFinished]:
    """Evaluate a frozen artifact (`label` is its path as submitted); with `artifact`
    None, record `problem` as the evaluation's error. `on_start` gets the start event
    before the (long) evaluation, `on_progress` the evaluator's progress during it.
    `restored_read_only`: the task's read-only paths that freezing put back
    (FrozenArtifact.restored), recorded with the grade. `gpus` and `disk_mb` (its
    `--disk`): the run's (evaluators/base.py's run_evaluation). `on_root_outside` is told
    (what, why) where the grader ran as root outside (the run says it once)."""
    started = ev.EvaluationStarted(
        evaluator=task.evaluator.kind, artifact=label, graded=graded, sha256=sha256
    )
    if on_start is not None:
        on_start(started)
    metric = task.metric
    if artifact is None:
        return started, ev.EvaluationFinished(ok=False, metric=metric.name, error=problem)
    outcome = await run_evaluation(
        task,
        artifact,
        out_dir,
        isolation=isolation,
        on_progress=on_progress,
        gpus=gpus,
        disk_mb=disk_mb,
    )
    if on_root_outside is not None and "root_outside" in outcome.details:
        on_root_outside("the grader's sandbox", str(outcome.details["root_outside"]))
    scored = outcome.ok and not outcome.violations
    failed = (
        failure_problem(outcome.score, metric.failure_values, metric.score_range)
        if scored and outcome.score is not None
        else None
    )
    if failed is not None:
        # The evaluator's own way of failing (vectorization's 1e10 for a submission it
        # cannot read), or a number the metric cannot take: a failed grading, not a score.
        scored = False
        outcome.error = failed  # the displays frame it ("no score: ...")
    score = outcome.score if scored else None
    normalized = normalize(score, metric.baseline, metric.top)
    isolation_used = outcome.details.get("isolation")
    limits = outcome.details.get("limits")
    finished = ev.EvaluationFinished(
        ok=scored,
        metric=metric.name,
        higher_is_better=metric.higher_is_better,
        score=score,
        baseline=metric.baseline,
        top=metric.top,
        normalized=normalized,
        success=success_of(metric, score),
        success_rule=metric.success_rule,
        success_bar=success_bar(metric),
        self_reported=metric.self_reported or None,
        direction_known=metric.direction_known,
        metrics=outcome.metrics,
        violations=outcome.violations,
        error=outcome.error or ("the submission breaks a rule" if outcome.violations else None),
        restored_read_only=list(restored_read_only or []),
        isolation=str(isolation_used) if isolation_used is not None else None,
        evaluator_limits=ev.LimitsInForce.model_validate(limits)
        if isinstance(limits, dict)
        else None,
        rules=task.challenge.summary(outcome.metrics),
    )
    return started, finished


async def grade(
    task: TaskSpec,
    workspace: Path,
    submitted: str | None,
    out_dir: Path,
    *,
    workdir: str | None = None,
    on_start: Callable[[ev.Event], object] | None = None,
    on_progress: Callable[[ev.EvaluationProgress], object] | None = None,
    isolation: IsolationMode = "auto",
    gpus: str | None = None,
    disk_mb: int | None = None,
    on_root_outside: Callable[[str, str], object] | None = None,
) -> tuple[ev.EvaluationStarted, ev.EvaluationFinished]:
    """Grade a path of a workspace as it is now: copied (links checked) beside the
    evaluation folder first, so the evaluator sees only the copy.

    `workdir` is the workspace as the run's sandbox saw it, so an absolute link the
    agent made there (`/workspace/best.pt`) reads as it did at submission. The copy
    is recorded (`graded`) relative to the folder holding `out_dir`, the run folder,
    as the controller records it. `gpus`, `disk_mb`, `on_root_outside`: as for
    `grade_artifact`.
    """
    label = submitted or task.evaluator.artifact
    copy_dir = out_dir.with_name(out_dir.name + WORKSPACE_COPY_SUFFIX)
    try:
        frozen = await asyncio.to_thread(
            freeze,
            workspace,
            label,
            copy_dir,
            workdir=workdir,
            max_gb=task.evaluator.max_submission_gb,
            originals=task.read_only_originals(),
        )
    except SubmissionRefused as exc:
        return await grade_artifact(
            task, label, None, out_dir, problem=str(exc), on_start=on_start, isolation=isolation
        )
    return await grade_artifact(
        task,
        label,
        frozen.path,
        out_dir,
        graded=Path(os.path.relpath(frozen.path, out_dir.parent)).as_posix(),
        sha256=frozen.sha256,
        on_start=on_start,
        on_progress=on_progress,
        isolation=isolation,
        restored_read_only=frozen.restored,
        disk_mb=disk_mb,
        on_root_outside=on_root_outside,
        gpus=gpus,
    )
