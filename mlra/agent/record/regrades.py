"""A grading after the run (`mlra eval`), as the run's state keeps it beside the run's
own result, which it never replaces."""

from __future__ import annotations

from pydantic import BaseModel

from mlra import events as ev


class Regrade(BaseModel):
    """A grading after the run (`mlra eval`): what was graded, when, by whom, and the
    outcome; kept beside the run's own result, which it never replaces."""

    artifact: str
    graded: str | None = None
    """What the evaluator read: the frozen submission, or a copy of a workspace path."""
    sha256: str | None = None
    by: str
    at: float
    """When it finished (seconds since the epoch)."""
    ok: bool
    metric: str
    score: float | None = None
    normalized_score: float | None = None
    error: str | None = None


def regrade_of(started: ev.EvaluationStarted, finished: ev.EvaluationFinished) -> Regrade:
    return Regrade(
        artifact=started.artifact,
        graded=started.graded,
        sha256=started.sha256,
        by=started.regrade_by or "",
        at=finished.ts,
        ok=finished.ok,
        metric=finished.metric,
        score=finished.score,
        normalized_score=finished.normalized,
        error=finished.error,
    )
