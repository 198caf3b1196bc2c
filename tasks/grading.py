"""Grading a run's submission: the evaluator's outcome turned into the events the
log records, with the normalized score and the success bar.

The run controller grades at the end of a run, and `mlra eval` grades a finished
run's workspace again; both go through here so both record the same thing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mlra.agent import events as ev
from mlra.tasks.evaluators.base import normalize, run_evaluation
from mlra.tasks.spec import TaskSpec


def artifact_path(
    workspace: Path, submitted: str | None, task: TaskSpec
) -> tuple[str, Path | None, str | None]:
    """(path as submitted, host path or None, why not): the artifact must be in the workspace."""
    rel = submitted or task.evaluator.artifact  # `submit` records paths relative to the workspace
    host = (workspace / rel).resolve()
    root = workspace.resolve()
    if host != root and root not in host.parents:
        return rel, None, f"the submitted path {rel!r} is outside the workspace"
    return rel, host, None


async def grade(
    task: TaskSpec,
    workspace: Path,
    submitted: str | None,
    out_dir: Path,
    *,
    on_start: Callable[[ev.Event], object] | None = None,
) -> tuple[ev.EvaluationStarted, ev.EvaluationFinished]:
    """Evaluate the submission; `on_start` gets the start event before the (long) evaluation."""
    rel, host, problem = artifact_path(workspace, submitted, task)
    started = ev.EvaluationStarted(evaluator=task.evaluator.kind, artifact=rel)
    if on_start is not None:
        on_start(started)
    metric = task.metric
    if host is None:
        return started, ev.EvaluationFinished(ok=False, metric=metric.name, error=problem)
    outcome = await run_evaluation(task, host, out_dir)
    scored = outcome.ok and not outcome.violations
    score = outcome.score if scored else None
    normalized = normalize(score, metric.baseline, metric.top)
    finished = ev.EvaluationFinished(
        ok=scored,
        metric=metric.name,
        higher_is_better=metric.higher_is_better,
        score=score,
        baseline=metric.baseline,
        top=metric.top,
        normalized=normalized,
        success=None if normalized is None else normalized >= metric.success_fraction,
        metrics=outcome.metrics,
        violations=outcome.violations,
        error=outcome.error or ("the submission breaks a rule" if outcome.violations else None),
    )
    return started, finished
