"""A run's state, folded from its events.

Displays, budget checks and `result.json` read this fold rather than keeping
counters of their own, so whatever they show can be rebuilt from the log alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from mlra import events as ev
from mlra.agent.attempt_tree import AttemptsSummary, AttemptTree, summary_of
from mlra.agent.eventlog import EVENTS_FILE, dump_json
from mlra.agent.experiments import ExperimentTable
from mlra.tools.jobs import JobRecord

Phase = Literal[
    "starting",
    "running",
    "paused",
    "awaiting_approval",
    "evaluating",
    "finished",
    "stopped",
    "error",
]


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


@dataclass
class RunState:
    run_id: str = ""
    task: str = ""
    task_title: str = ""
    model: str = ""
    limits: ev.Limits | None = None
    sandbox: ev.SandboxInfo | None = None
    started: bool = False
    paused: bool = False
    evaluating: bool = False
    plan: list[ev.PlanStep] = field(default_factory=list)
    subtask: int | None = None
    subtask_step_id: str | None = None
    steps: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0
    elapsed_s: float = 0.0
    started_ts: float | None = None
    last_ts: float | None = None
    resources: ev.ResourceSample | None = None
    pending_approval: ev.ApprovalRequested | None = None
    submission: ev.Submission | None = None
    evaluation: ev.EvaluationFinished | None = None
    """The run's own grading; a later `mlra eval` is a re-grade, in `regrades`."""
    regrades: list[Regrade] = field(default_factory=list)
    regrading: ev.EvaluationStarted | None = None
    """The re-grade under way, between its evaluation_started and evaluation_finished."""
    evaluation_progress: ev.EvaluationProgress | None = None
    """The grading under way's latest progress, as its evaluator wrote it."""
    finished: ev.RunFinished | None = None
    last_error: str | None = None
    events: int = 0
    resumed: int = 0
    forked_from: str | None = None
    ungraded: str = ""
    """Why this machine could not grade the task, where the user ran it anyway (the
    recorded config's `ungraded`)."""
    context_window: int | None = None
    context_tokens: int = 0
    """The prompt of the latest turn (cached or not): what the window holds now."""
    estimated_tokens: int = 0
    """Of `tokens`, those mlra estimated (four characters a token) because the server sent
    no counts, or a call was cut off midway: the displays mark the totals "~"."""
    context_estimated: bool = False
    """The latest turn's `context_tokens` are an estimate."""
    generating_since: float | None = None
    """The run clock (`t`) when the model was last asked for a turn; None once it answered
    (`model_call`, `model_error`, or its first tool call) and for the baseline, which has
    no model. No event marks a summary's or a review's start: a retry of one shows it."""
    generating_agent: str | None = None
    awaiting_turn: str | None = None
    """The agent whose step started and whose turn's answer (`model_call` of purpose
    "turn") has not come: a summary made for that turn (after the server refused it as
    too long) is followed by the turn's request, sent again."""
    retry: ev.ModelRetry | None = None
    """The provider's latest retry of the call now generating."""
    answering_since: float | None = None
    """The run clock when the call now generating began to answer (`model_answering`, or
    its first `text_delta`); None while the server still reads the prompt."""
    first_token_s: float | None = None
    """How long the server took to read the prompt of the call now answering."""
    streamed_chars: int = 0
    """The text the call now answering has streamed so far: its speed as it writes."""
    running: dict[str, ev.ToolCall] = field(default_factory=dict)
    """Tool calls asked for and not yet ended, by call id (one waiting for approval too)."""
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    """Every background job the run started, by id, running or how it ended."""
    edited_calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The arguments the user gave calls at a breakpoint, by call id: a resumed run shows
    its model the call as it ran (agent/tool_step.py)."""
    validations: list[ev.Validation] = field(default_factory=list)
    """Every `validate` call's grading, in order: its rate limit counts them."""
    experiments: ExperimentTable = field(default_factory=ExperimentTable)
    attempts: AttemptTree = field(default_factory=AttemptTree)
    """The search's attempts, as a tree (agent/attempt_tree.py); empty without a search."""
    """The worker's notes and the validations, as the experiments table (agent/experiments.py)."""

    @property
    def phase(self) -> Phase:
        if self.finished is not None:
            return self.finished.status  # each way a run ends is also a phase of its own
        if self.evaluating:
            return "evaluating"
        if self.pending_approval is not None:
            return "awaiting_approval"
        if self.paused:
            return "paused"
        return "running" if self.started else "starting"

    @property
    def running_jobs(self) -> list[JobRecord]:
        return [job for job in self.jobs.values() if job.ended is None]

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def remaining_s(self) -> float | None:
        if self.limits is None:
            return None
        return max(0.0, self.limits.time_limit_s - self.elapsed_s)

    def _confined_by(self, sandbox: ev.SandboxInfo | None) -> None:
        """A later part of the run (resumed, forked) in another sandbox.

        Unisolated stays unisolated: work done unconfined before is in the result.
        """
        if sandbox is None:
            return
        if self.sandbox is None or self.sandbox.isolation != "none":
            self.sandbox = sandbox

    def apply(self, event: ev.Event) -> None:
        self.events += 1
        self.elapsed_s = max(self.elapsed_s, event.t)
        self.last_ts = event.ts
        if isinstance(event, ev.Validation):
            self.validations.append(event)
        match event:
            case ev.RunStarted():
                self.run_id = event.run_id
                self.task = event.task
                self.task_title = event.task_title
                self.model = event.model
                self.limits = event.limits
                self.sandbox = event.sandbox
                self.started = True
                self.started_ts = event.ts
                self.ungraded = str(event.config.get("ungraded") or "")
                self.context_window = event.context_window
            case ev.PlanUpdated():
                self.plan = list(event.steps)
            case ev.SubtaskStarted():
                self.subtask = event.subtask
                self.subtask_step_id = event.step_id
            case ev.SubtaskFinished():
                self.subtask = None
                self.subtask_step_id = None
            case ev.StepStarted():
                if event.agent != "supervisor":
                    self.steps = max(self.steps, event.step)
                # A model's turn is asked for right after its step starts (agent/model_turn.py:
                # a summary, if any, came before); the baseline has no model to wait on.
                if event.agent != "baseline":
                    self._generating(event.agent, event.t)
                    self.awaiting_turn = event.agent
            case ev.ToolCall():
                self.tool_calls += 1
                self.running[event.call_id] = event
                if self.generating_agent == event.agent:
                    # A call is the answer's: that model is no longer generating, even
                    # where no model_call was logged for it.
                    self.generating_since = self.generating_agent = self.retry = None
                if self.awaiting_turn == event.agent:
                    self.awaiting_turn = None
            case ev.ToolResult():
                if not event.ok:
                    self.tool_errors += 1
                self.running.pop(event.call_id, None)
                if self.pending_approval and self.pending_approval.call_id == event.call_id:
                    self.pending_approval = None
            case ev.ApprovalRequested():
                self.pending_approval = event
            case ev.ModelCall():
                self.model_calls += 1
                self.input_tokens += event.input_tokens
                self.output_tokens += event.output_tokens
                self.cache_read_tokens += event.cache_read_tokens
                self.cost_usd += event.cost_usd
                if event.tokens_estimated:
                    self.estimated_tokens += event.input_tokens + event.output_tokens
                if event.purpose == "turn":
                    self.context_tokens = event.input_tokens
                    self.context_estimated = event.tokens_estimated
                self.generating_since = self.generating_agent = self.retry = None
                if event.purpose == "turn":
                    self.awaiting_turn = None
                elif self.awaiting_turn == event.agent:
                    # A summary for the turn now in flight: its request goes out again.
                    self._generating(event.agent, event.t)
            case ev.ModelRetry():
                if self.generating_since is None or self.generating_agent != event.agent:
                    self._generating(event.agent, event.t)  # a summary or a review
                self.retry = event
                self.answering_since = self.first_token_s = None  # asked again: read again
                self.streamed_chars = 0
            case ev.ContextWindowLearned():
                self.context_window = event.context_window
            case ev.ModelAnswering():
                if self.generating_since is None or self.generating_agent != event.agent:
                    self._generating(event.agent, event.t - event.first_token_s)
                if self.answering_since is None:
                    self.answering_since = event.t
                self.first_token_s = event.first_token_s
                self.retry = None
            case ev.TextDelta():
                if self.generating_agent == event.agent and self.generating_since is not None:
                    if self.answering_since is None:
                        self.answering_since = event.t
                    self.streamed_chars += len(event.text)
            case ev.ModelError():
                if event.cut_off is None:
                    self.last_error = event.error
                # A call cut off midway still used (estimated) tokens.
                self.input_tokens += event.input_tokens
                self.output_tokens += event.output_tokens
                self.estimated_tokens += event.input_tokens + event.output_tokens
                self.cost_usd += event.cost_usd
                self.generating_since = self.generating_agent = self.retry = None
                self.awaiting_turn = None
            case ev.ResourceSample():
                self.resources = event
            case ev.JobStarted():
                self.jobs[event.job] = JobRecord(started=event)
                self.experiments.apply(event)
            case ev.ExperimentNote() | ev.Validation() | ev.Experiment():
                self.experiments.apply(event)
            case ev.AttemptStarted():
                self.attempts.apply(event)
            case ev.AttemptFinished():
                self.attempts.apply(event)
                self.experiments.add_attempt(event)
                # What its model calls cost counts against this run's budget too.
                self.cost_usd += event.cost_usd
            case ev.JobEnded():
                if event.job in self.jobs:
                    self.jobs[event.job].ended = event
            case ev.Control():
                self._apply_control(event)
            case ev.Submission():
                self.submission = event
            case ev.EvaluationStarted():
                self.evaluating = True
                self.regrading = event if event.regrade_by else None
                self.evaluation_progress = None
            case ev.EvaluationProgress():
                self.evaluation_progress = event
            case ev.EvaluationFinished():
                self.evaluating = False
                self.evaluation_progress = None
                if self.regrading is not None:
                    self.regrades.append(_regrade(self.regrading, event))
                    self.regrading = None
                else:
                    self.evaluation = event
            case ev.RunFinished():
                self.finished = event
                self._idle()
                if event.status == "error":
                    self.last_error = event.message or self.last_error
            case ev.RunResumed():
                # The run goes on: the earlier ending (a stop, a crash) is history.
                self.finished = None
                self.evaluating = False
                self.paused = False
                self.pending_approval = None
                self._idle()
                self.resumed += 1
                if event.model:
                    self.model = event.model
                self._confined_by(event.sandbox)
            case ev.RunForked():
                self._confined_by(event.sandbox)
                self.finished = None
                self.evaluating = False
                self.paused = False
                self.pending_approval = None
                self._idle()
                self.submission = None
                self.evaluation = None
                self.regrades = []
                self.run_id = event.run_id
                self.forked_from = f"{event.source_run}@{event.at_step}"
                self.model = event.model
            case _:
                pass

    def _generating(self, agent: str, t: float) -> None:
        self.generating_since = t
        self.generating_agent = agent
        self.retry = None
        self.answering_since = self.first_token_s = None
        self.streamed_chars = 0

    def _idle(self) -> None:
        """Nothing runs once the run ended (or before it goes on)."""
        self.generating_since = self.generating_agent = self.retry = None
        self.awaiting_turn = None
        self.running.clear()

    @property
    def cache_hit_rate(self) -> float | None:
        """The share of all prompt tokens so far that the provider read from its cache."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else None

    def _apply_control(self, event: ev.Control) -> None:
        if event.action == "pause":
            self.paused = True
        elif event.action in ("resume", "step", "stop", "quit"):
            self.paused = False
        elif event.action in ("approve", "reject", "edit"):
            if self.pending_approval and self.pending_approval.call_id == event.call_id:
                self.pending_approval = None
            if event.action == "edit" and event.call_id and event.arguments is not None:
                self.edited_calls[event.call_id] = event.arguments


def _regrade(started: ev.EvaluationStarted, finished: ev.EvaluationFinished) -> Regrade:
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


def fold(events: list[ev.Event]) -> RunState:
    state = RunState()
    for event in events:
        state.apply(event)
    return state


class RunResult(BaseModel):
    """What `result.json` holds: the run's outcome, derived from its events."""

    run_id: str
    task: str
    model: str
    status: str
    reason: str
    message: str = ""
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
    regrades: list[Regrade] = []
    """Gradings after the run (`mlra eval`), oldest first; `score` stays the run's own."""
    experiments: int = 0
    """Rows of the experiments table: one per validation (agent/experiments.py)."""
    best_validation: float | None = None
    """The best validation score (never the hidden test split's), in `validation_metric`."""
    validation_metric: str | None = None
    validation_higher_is_better: bool | None = None
    validation_curve: list[tuple[float, float]] = []
    """(run clock seconds, score) of each scored validation, for the report's plot."""
    attempts: AttemptsSummary | None = None
    """A search's attempts (`--search`): how many, the best validation, the submitted
    attempt and its validation-to-test gap; None for a run with one line of work."""

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


def result_of(state: RunState) -> RunResult:
    evaluation = state.evaluation
    finished = state.finished
    wall = (state.last_ts or 0.0) - (state.started_ts or state.last_ts or 0.0)
    return RunResult(
        run_id=state.run_id,
        task=state.task,
        model=state.model,
        status=finished.status if finished else "error",
        reason=finished.reason if finished else "error",
        message=finished.message if finished else "run did not finish",
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
        attempts=summary_of(
            state.attempts,
            state.submission.attempt if state.submission else None,
            evaluation.score if evaluation else None,
        ),
        **validation_summary(state),
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


def write_result(state: RunState, run_dir: Path) -> RunResult:
    """Write `result.json`, bound to the log as it is now (call it with the log closed)."""
    result = result_of(state)
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
