"""`result.json`: a run's outcome derived from its folded state, and bound to the log it
was derived from (its size and sha256), so a reader can tell when the two disagree.

Apart from the fold (agent/record/state.py) because the fold is what every display reads
while the run goes on, and this is what is written once it has ended (and again after
a re-grade or a resume); nothing here is kept that the log could not rebuild.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, model_validator

from mlra import events as ev
from mlra.agent.record.attempt_tree import AttemptsSummary, summary_of
from mlra.agent.record.eventlog import EVENTS_FILE, dump_json
from mlra.agent.record.state import Regrade, RunState


class EarlierGrade(BaseModel):
    """The grading of an ending the run was resumed past: kept for the record, never the
    run's score (the run as it ends now may have none)."""

    ending: str
    """How the run had ended then: `stopped (stopped)`, `finished (budget)`."""
    metric: str
    score: float | None = None
    normalized_score: float | None = None


class RunResult(BaseModel):
    """What `result.json` holds: the run's outcome, derived from its events."""

    run_id: str
    task: str
    model: str
    status: str
    reason: str
    message: str = ""
    cause: ev.EndCause | None = None
    """Why the run ended where `reason` alone does not say how to judge it, as its
    `run_finished` recorded it (events/base.py `EndCause`); in a result.json from before
    the field, as its message tells it (`ev.cause_as_read`, on reading)."""
    metric: str | None = None
    higher_is_better: bool | None = None
    score: float | None = None
    baseline_score: float | None = None
    top_score: float | None = None
    normalized_score: float | None = None
    success: bool | None = None
    success_rule: str | None = None
    """The task's rule that decided `success`; None in results from before rules existed
    (gap_fraction) or with no grading."""
    success_bar: str | None = None
    """That rule's bar in words (`threshold: acc >= 0.8`)."""
    self_reported: str | None = None
    """Why the score is the workspace's own report rather than a measurement (None: a
    measurement); such a score is marked wherever shown, never a plain success."""
    direction_known: bool = True
    """False: nothing said which way the metric improves, so success was not judged."""
    metrics: dict[str, float] = {}
    violations: list[str] = []
    evaluation_error: str | None = None
    restored_read_only: list[str] = []
    """Read-only task files the agent had changed, put back before grading."""
    rules: ev.RulesSummary | None = None
    """The challenge's rules the grade checked and those it trusted (tasks/challenge.py)."""
    duration_s: float
    wall_s: float
    steps: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    tokens: int
    cost_usd: float
    tokens_estimated: bool = False
    """Some of the token counts (and the cost reckoned from them) are mlra's estimates,
    four characters a token, not the server's counts: a server that sent none (many local
    servers), or calls cut off midway. `estimated_tokens` says how many."""
    estimated_tokens: int = 0
    forked_from: str | None = None
    resumed: int = 0
    ungraded: str | None = None
    """Why this machine could not grade the task, for a run the user started anyway
    (`mlra run --ungraded`); None: a task it could grade. Any score it has is not the
    benchmark's grading of it."""
    isolation: str | None = None
    """The sandbox isolation the run had ("bwrap", "docker", "none"): a score earned
    with "none" is shown as unisolated wherever scores are shown."""
    isolated_by: str | None = None
    """What confined the agent's commands (the bubblewrap binary's path, the Docker
    engine's address) and, below, its version: as `run_started` recorded them."""
    isolated_by_version: str | None = None
    log_sha256: str | None = None
    """SHA-256 of the `events.jsonl` bytes this result was derived from, and their
    length: `mlra runs` tells a log appended to since (a resume) from one rewritten."""
    log_size: int | None = None
    graded_best_validation: str | None = None
    """The call id of the validation whose kept artifact was graded, for a run that reached
    its deadline with nothing submitted in a task that opts in; None: what was submitted."""
    earlier_grade: EarlierGrade | None = None
    """The grading a resume superseded; `score` is None unless the run was graded since."""
    regrades: list[Regrade] = []
    """Gradings after the run (`mlra eval`), oldest first; `score` stays the run's own."""
    experiments: int = 0
    """Rows of the experiments table: one per validation (agent/record/experiments.py)."""
    best_validation: float | None = None
    """The best validation score (never the hidden test split's), in `validation_metric`."""
    validation_metric: str | None = None
    validation_higher_is_better: bool | None = None
    validation_curve: list[tuple[float, float]] = []
    """(run clock seconds, score) of each scored validation, for the report's plot."""
    worker_alone: ev.WorkerAloneReason | None = None
    """Why the worker did the task alone ("chosen": `--agent worker`; "supervisor_stuck":
    the supervisor repeated one call until stuck, never handing a subtask; "supervisor_idle":
    the supervisor never handed it a subtask); None: the supervisor led the run."""
    log_shortened: str | None = None
    """The run's log neared its size budget and was shortened from there (commands'
    output cut, for the model too): its notice; None: recorded whole."""
    attempts: AttemptsSummary | None = None
    """A search's attempts (`--search`): how many, the best validation, the submitted
    attempt and its validation-to-test gap; None for a run with one line of work."""

    @model_validator(mode="after")
    def _cause_as_read(self) -> RunResult:
        self.cause = ev.cause_as_read(self.reason, self.message, self.cause)
        return self

    @property
    def unisolated(self) -> bool:
        return self.isolation == "none"


def log_digest(path: Path, size: int | None = None) -> str:
    """SHA-256 of the log's bytes (of its first `size` bytes, where given)."""
    digest = hashlib.sha256()
    left = size
    with open(path, "rb") as f:
        while left is None or left > 0:
            chunk = f.read(1 << 20 if left is None else min(1 << 20, left))
            if not chunk:
                break
            digest.update(chunk)
            if left is not None:
                left -= len(chunk)
    return digest.hexdigest()


def stands_for_log(result: RunResult, result_file: Path, log: Path) -> bool:
    """Whether `result.json` was derived from the log as it is now (its size and SHA-256;
    by time for a result from before results named their log). A log appended to since
    (resumed, then killed or still going) wins: the report and the exports, which took
    result.json as it was, said a resumed run killed midway had "stopped", as it had
    before its resume, while `mlra runs` and `mlra compare` said "interrupted"."""
    if not log.is_file():
        return True
    if result.log_sha256 is None:
        return result_file.stat().st_mtime >= log.stat().st_mtime
    size = log.stat().st_size
    return size == result.log_size and log_digest(log, size) == result.log_sha256


def as_read_with(result: RunResult, state: RunState) -> RunResult:
    """A stored `result.json` as its log is read (`state`, its fold): an attempt's from
    before "attempt_ended" says "submitted", as its log did (ev.as_read)."""
    result.reason = ev.reason_as_read(result.reason, attempt=state.attempt)
    return result


def listed_status(state: RunState, running: bool) -> str:
    """How a run stands as its log tells it, for the lists and pages that show runs
    (`mlra runs`, `mlra share`): running (its log still being written), how it finished,
    or interrupted (it ended without a `run_finished`)."""
    if running:
        return "running"
    return state.finished.status if state.finished is not None else "interrupted"


UNFINISHED_MESSAGES = {
    "running": "still running: its log is being written",
    "interrupted": "its log ends without run_finished: mlra was killed or crashed "
    "(mlra resume continues the run)",
}
"""What a run whose log has no ending is, by whether its log is still held open."""


def result_of(state: RunState, *, running: bool = False) -> RunResult:
    """The outcome the fold comes to. A log without `run_finished` is `running` (its
    writer holds it: pass `running=log_is_live(log)`) or `interrupted`, as `mlra runs`
    and `mlra compare` say: it was "error" here, a reason the log never gave, and the
    report, the shared pages and the trackers each said a killed run differently."""
    evaluation = state.evaluation
    finished = state.finished
    wall = (state.last_ts or 0.0) - (state.started_ts or state.last_ts or 0.0)
    unfinished = "running" if running else "interrupted"
    return RunResult(
        run_id=state.run_id,
        task=state.task,
        model=state.model,
        status=finished.status if finished else unfinished,
        reason=finished.reason if finished else unfinished,
        message=finished.message if finished else UNFINISHED_MESSAGES[unfinished],
        cause=finished.cause if finished else None,
        metric=evaluation.metric if evaluation else None,
        higher_is_better=evaluation.higher_is_better if evaluation else None,
        score=evaluation.score if evaluation else None,
        baseline_score=evaluation.baseline if evaluation else None,
        top_score=evaluation.top if evaluation else None,
        normalized_score=evaluation.normalized if evaluation else None,
        success=evaluation.success if evaluation else None,
        success_rule=evaluation.success_rule if evaluation else None,
        success_bar=evaluation.success_bar if evaluation else None,
        self_reported=evaluation.self_reported if evaluation else None,
        direction_known=evaluation.direction_known if evaluation else True,
        metrics=evaluation.metrics if evaluation else {},
        violations=evaluation.violations if evaluation else [],
        evaluation_error=evaluation.error if evaluation else None,
        restored_read_only=list(evaluation.restored_read_only) if evaluation else [],
        rules=evaluation.rules if evaluation else None,
        duration_s=round(state.elapsed_s, 3),
        wall_s=round(wall, 3),
        steps=state.steps,
        tool_calls=state.tool_calls,
        input_tokens=state.input_tokens,
        output_tokens=state.output_tokens,
        cache_read_tokens=state.cache_read_tokens,
        tokens=state.tokens,
        cost_usd=round(state.cost_usd, 6),
        tokens_estimated=state.estimated_tokens > 0,
        estimated_tokens=state.estimated_tokens,
        forked_from=state.forked_from,
        ungraded=state.ungraded or None,
        resumed=state.resumed,
        isolation=state.sandbox.isolation if state.sandbox else None,
        isolated_by=state.sandbox.isolated_by if state.sandbox else None,
        isolated_by_version=state.sandbox.isolated_by_version if state.sandbox else None,
        graded_best_validation=state.submission.best_validation if state.submission else None,
        regrades=list(state.regrades),
        earlier_grade=earlier_grade(state),
        worker_alone=state.worker_alone,
        log_shortened=state.log_shortened,
        attempts=summary_of(
            state.attempts,
            state.submission.attempt if state.submission else None,
            evaluation.score if evaluation else None,
        ),
        **validation_summary(state),
    )


def earlier_grade(state: RunState) -> EarlierGrade | None:
    """The grading a resume superseded, where the run has no grading of its own since."""
    earlier, ending = state.earlier_evaluation, state.earlier_ending
    if earlier is None or state.evaluation is not None:
        return None
    return EarlierGrade(
        ending=f"{ending.status} ({ending.reason})" if ending is not None else "interrupted",
        metric=earlier.metric,
        score=earlier.score,
        normalized_score=earlier.normalized,
    )


def validation_summary(state: RunState) -> dict[str, Any]:
    """What `result.json` says of the experiments: how many, the best validation score,
    its metric and direction, and the scores over time."""
    table = state.experiments
    best = table.best
    scored = [(row.t, row.score) for row in table.rows if row.score is not None]
    return {
        "experiments": len(table.rows),
        "best_validation": best.score if best is not None else None,
        "validation_metric": table.metric or None,
        "validation_higher_is_better": table.higher_is_better if table.metric else None,
        "validation_curve": scored,
    }


def write_result(
    state: RunState, run_dir: Path, *, run_id: str = "", task: str = "", model: str = ""
) -> RunResult:
    """Write `result.json`, bound to the log as it is now (call it with the log closed).
    `run_id`, `task`, `model`: the run's own, for a run that ended before its start was
    recorded (a sandbox that did not start, a broken task environment), whose log has
    no `run_started` to name them: its result would name nothing."""
    result = result_of(state)
    result.run_id = result.run_id or run_id
    result.task = result.task or task
    result.model = result.model or model
    log = run_dir / EVENTS_FILE
    if log.is_file():
        result.log_size = log.stat().st_size
        result.log_sha256 = log_digest(log, result.log_size)
    tmp = run_dir / "result.json.tmp"
    # Derived text only: a lone surrogate is replaced here (the log keeps it exactly).
    text = dump_json(result, indent=2, surrogates="replace")
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(run_dir / "result.json")
    return result
