"""How a run is judged: the submission, its evaluation and progress, the agent's own
validations and the experiments table they make.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlra.events.base import _Event
from mlra.events.run import LimitsInForce, RulesSummary

# --- ending --------------------------------------------------------------------------


class Submission(_Event):
    type: Literal["submission"] = "submission"
    path: str | None = None
    note: str = ""
    by: Literal["agent", "user", "deadline", "budget", "stop", "error"] = "agent"
    """Who ended the run: the agent submitted, the user submitted (promoted a search's
    attempt), or a limit, a stop or an error graded what there was."""
    frozen: str | None = None
    """The copy that is graded, relative to the run folder (`submission/<name>`);
    None when the artifact could not be frozen (missing, a link out of it)."""
    sha256: str | None = None
    """Of the frozen copy: a file's bytes, or a folder's sorted paths and contents."""
    size_bytes: int | None = None
    attempt: str | None = None
    """The attempt whose frozen artifact this is (a search's submission, or its best
    validated attempt graded at the deadline); None: the run's own workspace."""
    best_validation: str | None = None
    """Set when the run reached its deadline with nothing submitted and the task opts in
    to grading its best validated artifact: that validation's call id (the graded copy,
    `frozen`, is the one kept when it was validated)."""


class EvaluationStarted(_Event):
    type: Literal["evaluation_started"] = "evaluation_started"
    evaluator: str
    artifact: str
    graded: str | None = None
    """What is graded: the frozen copy (relative to the run folder), or a copy of the
    workspace path made just now (`mlra eval --path`, or a run with no frozen copy)."""
    sha256: str | None = None
    regrade_by: str | None = None
    """Set by `mlra eval` (who ran it, user@host): a re-grade after the run, whose score
    is kept beside the run's own result, never in its place (older logs: None)."""


class EvaluationProgress(_Event):
    """How far the evaluator has got, read from its own output while it grades (lm-eval's
    progress bars, a script's lines): a grading of minutes shows it is moving. Logged
    every few seconds at most (tasks/evaluators/progress.py)."""

    type: Literal["evaluation_progress"] = "evaluation_progress"
    line: str
    """The evaluator's latest line, as it wrote it (displays escape it)."""
    done: int | None = None
    total: int | None = None
    """Where the line is a progress bar ("Running loglikelihood requests: 45%|...| 4500/10000"):
    its counts."""
    what: str = ""
    """What the bar counts: its description ("Running loglikelihood requests"), else the
    step the evaluator's last line named; lm-eval's step where it named one that the
    bar's own description does not (its rolling requests draw bars of plain "Running
    loglikelihood requests", a batch of windows each)."""
    bar: int = 0
    """Which bar of the grading this is, counting from 1 (a count falling, or another
    description or total, starts the next). 0: a line that is no bar, or an older log."""
    repeat: int = 0
    """How many bars of this description (`what`) the grading has drawn, this one
    included: lm-eval draws one bar after another, and where one of the same name
    starts again (its rolling requests, a bar a batch) the displays say "part 2", so
    the percentage reads as the next part, not the grading going back; a bar of another
    name needs no number, its name says what it counts. (`bar` was shown instead: "bar
    11" of lm-eval's per-task context bars meant nothing to a reader.) 0: a line that is
    no bar, or an older log."""


class EvaluationFinished(_Event):
    type: Literal["evaluation_finished"] = "evaluation_finished"
    ok: bool
    metric: str
    higher_is_better: bool = True
    score: float | None = None
    baseline: float | None = None
    top: float | None = None
    normalized: float | None = None
    success: bool | None = None
    success_rule: str | None = None
    """The task's rule that decided `success` (gap_fraction, relative_improvement,
    threshold); None in logs from before rules existed, which used gap_fraction."""
    success_bar: str | None = None
    """That rule's bar in words, as displays show it."""
    self_reported: str | None = None
    """Why the score is a number the workspace's own code wrote, not a measurement
    (the task's `metric.self_reported`): marked wherever the score is shown, and never
    counted as a plain success. None: a measurement."""
    direction_known: bool = True
    """False where nothing says which way the metric improves (a foreign folder mlra did
    not recognize): `higher_is_better` is a placeholder then and success is not judged."""
    metrics: dict[str, float] = Field(default_factory=dict)
    violations: list[str] = Field(default_factory=list)
    error: str | None = None
    restored_read_only: list[str] = Field(default_factory=list)
    """The task's read-only files the agent had changed, put back from the task folder in
    the graded copy before grading, so the change could not move the score."""
    duration_s: float = 0.0
    isolation: str | None = None
    """How the evaluator was confined: "bwrap", or "none" where no isolation could be had."""
    evaluator_limits: LimitsInForce | None = None
    """What bounded the evaluator (its memory, /tmp and /dev/shm, its scratch folder's
    disk quota) and where each limit came from; None in logs from before it was recorded."""
    agent_isolation: str | None = None
    """How the agent's commands were confined while it earned this score (run_started's
    sandbox isolation): "none" marks the score unisolated wherever it is shown."""
    rules: RulesSummary | None = None
    """The challenge's rules this grade checked and trusted; None for a task that lists
    none (and in logs from before rules were recorded)."""


class Validation(_Event):
    """One `validate` call's grading: the artifact frozen as it was, graded host-side by
    the task's evaluator on its validation split (never the hidden test split), or, for
    a task without validation data, checked for format and rules only (`split` "format")."""

    type: Literal["validation"] = "validation"
    call_id: str | None = None
    artifact: str
    """The workspace-relative path validated."""
    sha256: str | None = None
    """Digest of the frozen copy that was graded (the folder digest for a folder)."""
    kept: str | None = None
    """Where the frozen copy is kept in the run folder (for grading the best one later)."""
    split: Literal["validation", "format"] = "validation"
    ok: bool
    metric: str = ""
    higher_is_better: bool = True
    score: float | None = None
    normalized: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    violations: list[str] = Field(default_factory=list)
    error: str | None = None
    """The evaluator's own words, whole (for the user); the agent reads `told`."""
    told: str | None = None
    """Why it failed, as the agent was told it: the violations and the error with every
    line that quotes the task's hidden files withheld (tasks/hidden_text.py). None in
    logs from before it was recorded (the agent then read `violations` and `error`)."""
    duration_s: float = 0.0
    out_of_time: bool = False
    """It timed out on the time the run (or its attempt) had left, shorter than the
    evaluator's own timeout: the clock ran out, no fault of the artifact's."""


class ExperimentNote(_Event):
    """What the worker says it is trying before a run (`note`): a hypothesis and the
    change made to test it; the experiments table pairs it with the validations after it."""

    type: Literal["experiment_note"] = "experiment_note"
    call_id: str | None = None
    hypothesis: str
    change: str = ""
    job: str | None = None
    """A background job the experiment runs as, when the worker names one."""


class Experiment(_Event):
    """One row of the experiments table, written after each validation: the latest note
    (if any), the job it ran as, and the validation's score."""

    type: Literal["experiment"] = "experiment"
    number: int
    hypothesis: str = ""
    change: str = ""
    job: str | None = None
    validation_seq: int
    """The `seq` of the `validation` event this row reports."""
    score: float | None = None
    normalized: float | None = None
    best: bool = False
    """Whether this is the best validation score so far."""
