"""A run's state, folded from its events.

Displays, budget checks and `result.json` read this fold rather than keeping
counters of their own, so whatever they show can be rebuilt from the log alone.
What the fold comes to in the end, `result.json`, is agent/record/run_result.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mlra import events as ev
from mlra.agent.record.attempt_tree import AttemptTree
from mlra.agent.record.experiments import ExperimentTable
from mlra.agent.record.regrades import Regrade, regrade_of
from mlra.agent.record.run_limits import RunLimits
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


BASELINE_READS_NO_MESSAGES = "the baseline agent follows its recipe and reads no messages"
SUPERVISOR_GONE = (
    "the worker does the task alone and no supervisor reads messages: send it to the worker"
)
SEARCH_HAS_NO_WORKER = "a search's workers are its attempts': m in the Attempts pane tells one"


AFTER_ACTION = "pause after the action in hand"
"""The text of a step taken while the run runs freely: it pauses at the next step boundary."""
AFTER_ATTEMPTS = "pause after the actions in hand (each attempt's, then the search)"
"""The same step in a search: each running attempt pauses after its action in hand, and
the search once none moves (agent/control/steering.py `settle`)."""
PAUSED_AFTER_ATTEMPTS = "paused after the attempts' actions in hand"  # its pause's text


@dataclass
class RunState:
    run_id: str = ""
    task: str = ""
    task_title: str = ""
    model: str = ""
    run_limits: RunLimits = field(default_factory=RunLimits)
    """Its limits, folded as every display that says its time left folds them
    (agent/record/run_limits.py)."""
    sandbox: ev.SandboxInfo | None = None
    budget: ev.Budget | None = None  # the run's (an attempt's: its share), from `run_started`
    started: bool = False
    paused: bool = False
    pausing: bool = False
    """A step asked while it ran (`AFTER_ACTION`, a search's `AFTER_ATTEMPTS`): it pauses
    once the action in hand ends (a search's: its attempts' actions in hand)."""
    pausing_attempts: bool = False  # a search's (`AFTER_ATTEMPTS`): its pause says so
    evaluating: bool = False
    plan: list[ev.PlanStep] = field(default_factory=list)
    subtask: int | None = None
    subtask_step_id: str | None = None
    steps: int = 0
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
    """The grading of the run's current ending (a resume moves it to `earlier_evaluation`,
    with the ending it graded); a later `mlra eval` is a re-grade, in `regrades`."""
    earlier_evaluation: ev.EvaluationFinished | None = None
    earlier_ending: ev.RunFinished | None = None
    regrades: list[Regrade] = field(default_factory=list)
    regrading: ev.EvaluationStarted | None = None  # the re-grade under way (until it ends)
    evaluation_progress: ev.EvaluationProgress | None = None  # the grading's latest progress
    finished: ev.RunFinished | None = None
    last_error: str | None = None
    events: int = 0
    resumed: int = 0
    forked_from: str | None = None
    worker_alone: ev.WorkerAloneReason | None = None  # why it took the task whole; None: not
    log_shortened: str | None = None  # the log neared its size budget: that notice
    root_outside: str | None = None
    """The run's one `root_outside` notice (a sandbox of it ran as root outside), once said."""
    searches: bool = False  # over attempts (`--search`): its workers are its attempts' own
    attempt: bool = False  # a search's attempt's own run: its ending is read so (ev.as_read)
    ungraded: str = ""
    """Why this machine could not grade the task, run anyway (its config's `ungraded`)."""
    context_window: int | None = None
    context_tokens: int = 0
    """The latest turn's prompt (cached or not), or mlra's estimate of one in flight."""
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
    """The agent whose step started and whose turn is not answered yet (`model_call` "turn"):
    a summary made for that turn (the server refused it as too long) precedes it, sent again."""
    retry: ev.ModelRetry | None = None
    """The provider's latest retry of the call now generating."""
    answering_since: float | None = None
    """The run clock when the call now generating began to answer (`model_answering`, or
    its first `text_delta`); None while the server still reads the prompt."""
    first_token_s: float | None = None
    """How long the server took to read the prompt of the call now answering."""
    streamed_chars: int = 0
    """The text the call now answering has streamed so far, while the run clock ran: its
    speed as it writes. A pause stops the clock, not the server, so what streams during
    one is left out, as its time is."""
    running: dict[str, ev.ToolCall] = field(default_factory=dict)
    """Tool calls asked for and not yet ended, by call id (one waiting for approval too)."""
    begun: set[str] = field(default_factory=set)
    """Of `running`, the calls whose tool began (`tool_started`): one a pause holds before
    it began is shown as the next action, not as a call running."""
    ended_calls: dict[str, ev.ToolCall] = field(default_factory=dict)
    """Calls that ended, by id: one begun again (a resumed replay runs a call its stop or
    kill cut short again, as the recording ran it whole) is running again."""
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    """Every background job the run started, by id, running or how it ended."""
    edited_calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The arguments the user gave calls at a breakpoint, by call id: a resumed run shows
    its model the call as it ran (agent/loop/tool_step.py)."""
    rejected_calls: set[str] = field(default_factory=set)
    """The calls the user rejected at a breakpoint: a baseline run with one measured a
    recipe the user changed, not the starter (agent/loop/evaluation.py)."""
    validations: list[ev.Validation] = field(default_factory=list)
    """Every `validate` call's grading, in order: its rate limit counts them."""
    experiments: ExperimentTable = field(default_factory=ExperimentTable)
    """The worker's notes and validations, the experiments table (agent/record/experiments.py)."""
    attempts: AttemptTree = field(default_factory=AttemptTree)
    """The search's attempts, as a tree (agent/record/attempt_tree.py); empty without a search."""

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

    def message_refusal(self, target: str) -> str | None:
        """Why a message to `target` would be read by nobody: the baseline agent follows
        its task's recipe and has no model to tell (its `edit` is refused alike); once the
        worker works alone (`worker_alone`), the supervisor takes no more turns; a search
        has no worker of its own."""
        if self.model == "baseline":
            return BASELINE_READS_NO_MESSAGES
        if target == "supervisor" and self.worker_alone is not None:
            return SUPERVISOR_GONE
        if target == "worker" and self.searches:  # a message queued for no worker was lost
            return SEARCH_HAS_NO_WORKER
        return None

    @property
    def running_jobs(self) -> list[JobRecord]:
        return [job for job in self.jobs.values() if job.ended is None]

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def limits(self) -> ev.Limits | None:
        return self.run_limits.limits

    @property
    def settings_changed(self) -> dict[str, Any]:
        """The settings a resume, a fork or a raise changed since `run_started`."""
        return self.run_limits.changed

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
        self.run_limits.apply(event)
        if isinstance(event, ev.Validation):
            self.validations.append(event)
        match event:
            case ev.RunStarted():
                self.run_id = event.run_id
                self.task = event.task
                self.task_title = event.task_title
                self.model = event.model
                self.sandbox = event.sandbox
                self.budget = event.budget
                self.started = True
                self.started_ts = event.ts
                self.ungraded = str(event.config.get("ungraded") or "")
                self.searches = str(event.config.get("search") or "none") != "none"
                self.attempt = event.is_attempt
                self.context_window = event.context_window
            case ev.PlanUpdated():
                self.plan = list(event.steps)
            case ev.SubtaskStarted():
                self.subtask = event.subtask
                self.subtask_step_id = event.step_id
            case ev.SubtaskFinished():
                self.subtask = None
                self.subtask_step_id = None
            case ev.WorkerAlone():
                self.worker_alone = event.reason
            case ev.StepStarted():
                if event.agent != "supervisor":
                    self.steps = max(self.steps, event.step)
                # A model's turn is asked for right after its step starts (agent/loop/model_turn.py:
                # a summary, if any, came before); the baseline has no model to wait on.
                if event.agent != "baseline":
                    self._generating(event.agent, event.t)
                    self.awaiting_turn = event.agent
                if event.prompt_tokens is not None:  # until the answer counts it
                    self.context_tokens, self.context_estimated = event.prompt_tokens, True
            case ev.ToolCall():
                self.tool_calls += 1
                self.running[event.call_id] = event
                if self.generating_agent == event.agent:
                    # A call is the answer's: that model is no longer generating, even
                    # where no model_call was logged for it.
                    self.generating_since = self.generating_agent = self.retry = None
                if self.awaiting_turn == event.agent:
                    self.awaiting_turn = None
            case ev.ToolStarted():
                if event.call_id not in self.running and event.call_id in self.ended_calls:
                    self.running[event.call_id] = self.ended_calls.pop(event.call_id)
                self.begun.add(event.call_id)
            case ev.ToolResult():
                if not event.ok:
                    self.tool_errors += 1
                if (call := self.running.pop(event.call_id, None)) is not None:
                    self.ended_calls[event.call_id] = call
                self.begun.discard(event.call_id)
                if self.pending_approval and self.pending_approval.call_id == event.call_id:
                    self.pending_approval = None
            case ev.ApprovalRequested():
                self.pending_approval = event
            case ev.ModelCall():
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
                if event.in_wait is None:  # else the wait it is made in stays the news
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
                    if not self.paused:  # the run clock stands still: its speed would soar
                        before = 0 if event.whole else self.streamed_chars
                        self.streamed_chars = before + len(event.text)
            case ev.ModelError():
                if event.cut_off is None:
                    self.last_error = event.error
                # A call cut off midway still used (estimated) tokens.
                self.input_tokens += event.input_tokens
                self.output_tokens += event.output_tokens
                self.estimated_tokens += event.input_tokens + event.output_tokens
                self.cost_usd += event.cost_usd
                if event.cut_off == "connection_lost":
                    # The same call is asked again once the server is back (`model_retry`):
                    # it goes on generating, its time counted from when it was sent.
                    self.answering_since = self.first_token_s = None
                    self.streamed_chars = 0
                else:
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
                # What its model calls cost counts against this run's budget too, and
                # its tokens in this run's totals (estimates marked as its were).
                self.cost_usd += event.cost_usd
                self.input_tokens += event.input_tokens
                self.output_tokens += event.output_tokens
                self.estimated_tokens += event.estimated_tokens
            case ev.JobEnded():
                if event.job in self.jobs:
                    self.jobs[event.job].ended = event
            case ev.Notice() if event.kind == "log_budget":
                self.log_shortened = event.message
            case ev.Notice() if event.kind == "root_outside":
                self.root_outside = event.message
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
                    self.regrades.append(regrade_of(self.regrading, event))
                    self.regrading = None
                else:
                    self.evaluation = event
            case ev.RunFinished():
                self.finished = ev.as_read(event, attempt=self.attempt)
                self._idle()
                if event.status == "error":
                    self.last_error = event.message or self.last_error
            case ev.RunResumed():
                # The run goes on: the earlier ending and its grading are history (a
                # resumed run killed midway showed that score beside "interrupted").
                if self.evaluation is not None:
                    self.earlier_evaluation, self.earlier_ending = self.evaluation, self.finished
                    self.evaluation = None
                self.finished, self.evaluating, self.paused = None, False, False
                self.pending_approval = None
                # Calls open when the run stopped get their results after this (interrupted,
                # asked again, run again: `attempt_wait`, `assign_subtask`): running until
                # then, so the displays say what the resumed run waits for; those that had
                # begun stay so (no pause holds them "before it runs").
                open_calls, open_begun = dict(self.running), self.begun & self.running.keys()
                self._idle()
                self.running.update(open_calls)
                self.begun |= open_begun
                self.resumed += 1
                self.model = event.model or self.model
                self._confined_by(event.sandbox)
            case ev.RunForked():
                self._confined_by(event.sandbox)
                self.finished, self.evaluating, self.paused = None, False, False
                self.pending_approval = None
                self._idle()
                self.submission = self.evaluation = self.earlier_evaluation = None
                self.earlier_ending = None
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
        self.awaiting_turn, self.pausing = None, False
        self.running.clear()
        self.begun.clear()

    @property
    def cache_hit_rate(self) -> float | None:
        """The share of all prompt tokens so far that the provider read from its cache."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else None

    def _apply_control(self, event: ev.Control) -> None:
        if event.action in ("pause", "resume", "step", "stop", "quit"):
            self.pausing = event.action == "step" and event.text in (AFTER_ACTION, AFTER_ATTEMPTS)
            self.pausing_attempts = event.action == "step" and event.text == AFTER_ATTEMPTS
        if event.action == "pause":
            self.paused = True
        elif event.action in ("resume", "step", "stop", "quit") and not event.target:
            self.paused = False  # an attempt's step (its target) leaves the search as it was
        elif event.action in ("approve", "reject", "edit"):
            if self.pending_approval and self.pending_approval.call_id == event.call_id:
                self.pending_approval = None
            if event.action == "edit" and event.call_id and event.arguments is not None:
                self.edited_calls[event.call_id] = event.arguments
            elif event.action == "reject" and event.call_id:
                self.rejected_calls.add(event.call_id)


def fold(events: list[ev.Event]) -> RunState:
    state = RunState()
    for event in events:
        state.apply(event)
    return state
