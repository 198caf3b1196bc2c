"""What the agents do: the supervisor's plan, messages, subtasks and reviews, and the
worker's steps, streamed text, thoughts, tool calls and their output and results, and
every model call with its errors, retries and summaries.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from mlra.events.base import AgentRole, PlanStatus, _Event

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
    there only, and readers fill `text` back in (see `agent/record/log_refs.py`)."""


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


WorkerAloneReason = Literal["chosen", "supervisor_idle", "supervisor_stuck"]
"""Why the worker took the task whole: the user chose it (`--agent worker`), or the
supervisor answered turn after turn without handing it a subtask or making a usable
call, or made the same call again and again (its plan, on a real Qwen2.5-Coder-0.5B)
without ever handing one (small models that cannot plan, agent/agents/worker_alone.py)."""


class WorkerAlone(_Event):
    """From here the worker does the task alone, given it whole with `submit`, as
    MLAgentBench's single agent does; the supervisor takes no more turns."""

    type: Literal["worker_alone"] = "worker_alone"
    reason: WorkerAloneReason
    supervisor_turns: int = 0
    """The supervisor's turns before the hand-over (0 where the user chose it)."""
    message: str = ""


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
    prompt_tokens: int | None = None
    """The whole request's size as mlra estimated it when it went out (history, system
    prompt, tool definitions): the gauges show it until the answer's count comes, where
    they showed 0% while a long first prompt was read. None: no model (the baseline),
    or a log of an older mlra."""


class TextDelta(_Event):
    """A streamed piece of a model's text, so thoughts show while they are written."""

    type: Literal["text_delta"] = "text_delta"
    agent: AgentRole
    turn: int
    text: str
    whole: bool = False
    """`text` is the answer's whole text so far, not a piece to add: an answer given up on
    whose pieces the log took none or only some of, past its size budget's shortening
    point (agent/loop/answer_stream.py). The displays put it in place of what they showed."""


class ContextWindowLearned(_Event):
    """The server refused a request as too long and stated a smaller window than the run
    had assumed (a server that does not tell its window, as llama-cpp-python), or told
    its window once its model was loaded (`told_by`): the run goes by that window from
    here, and so do the displays' context gauges."""

    type: Literal["context_window_learned"] = "context_window_learned"
    agent: AgentRole
    context_window: int
    assumed: int | None = None
    """The window the run had gone by until then."""
    smallest: int | None = None
    """The smallest window the agent's own first request fits, estimated: a learned
    window below it is said as such, not as a window to start the next run from."""
    told_by: str | None = None
    """Where the server told it ("llama-server's /props, read once its model was
    loaded"); None: stated in a refusal."""


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
    arguments there only, and readers fill them back in (see `agent/record/log_refs.py`)."""
    logs_start: bool = False
    """A `tool_started` marks when this call's tool began. Logs written before it have
    none, so there a call with no result may have run; here one with no
    `tool_started` never began (a pause or the user's approval still held it)."""
    refused: str | None = None
    """What the tool said was wrong with these arguments, checked as the call was made
    (tools/registry.py `validated`: a key it does not take, a value of the wrong type):
    such a call runs nothing, and the displays show it as written, never in the tool's
    readable form (`submit {"file": ...}` read as "submit (default artifact)")."""


class ToolStarted(_Event):
    """The call's tool began to run: past its breakpoint and any pause that held it.

    A call the run stopped under is one that started: one with no start was held
    (approved but paused, say) and a resumed run runs it, where a started one "may
    have run in part" (agent/loop/catchup.py)."""

    type: Literal["tool_started"] = "tool_started"
    call_id: str


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
    log_budget_chars: int | None = None
    """The characters `output` was cut to because the run's log neared its size budget
    (agent/record/log_budget.py): the model read it so cut, and a replay cuts it alike.
    None: cut at the observation limit only (`truncated`)."""
    unlogged_chars: int = 0
    """Characters of this call's streamed output the log did not take (past the per-call
    stream cap, or the log's budget): the live console showed them, `output` holds the
    head and tail."""


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
    so `output_tokens` over it is the model's speed (tokens/s). Both are the server's
    own figures, in wall time: the server reads and writes on through a pause."""
    paused_s: float = 0.0
    """Of `latency_s` (the call's wall time), the seconds the run clock stood still: the
    user paused while the server answered (it goes on), or the SDK retried a local
    server that was not there. The displays say "answered in 1.0s (plus 1m20s paused)",
    the call's time by the run clock as the status line counted it; 0 in older logs."""


class ModelError(_Event):
    type: Literal["model_error"] = "model_error"
    agent: AgentRole
    model: str
    error: str
    fatal: bool = True
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    """What a call cut off midway (by the deadline, a stop, a connection lost mid-answer)
    had used, estimated: it is counted against the budgets though it left no answer."""
    cut_off: Literal["deadline", "stop", "connection_lost"] | None = None
    """Set when this is no failure of the model but a call the run's time limit, the
    user's stop or a connection lost while the answer came (the call is then asked again)
    cut off: the displays say so instead of "model error", and its tokens are an estimate
    of what may have been billed."""
    server_waited_s: float | None = None
    """Set where this failure ends a wait for a model server that went away (its
    `--server-wait` used up, agent/loop/server_wait.py): how long the run waited. The
    pause's and the end's notifications then say the server did not come back; a
    failure after a wait without it is the server answering, with an error."""


ServerAbsence = Literal["connection_lost", "not_answering", "loading_model", "not_ready"]
"""Why a model server is not there for a call: the connection was lost mid-answer (a
server killed or restarted), nothing answers at its address, it answers HTTP 503
"Loading model" (llama-server while it loads its model, after a restart), or a server
at `--base-url` answers 502, 503 or 504 past the SDK's retries (a proxy whose server is
down)."""


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
    cause: ServerAbsence | None = None
    """Set where the run waits for a server that went away (agent/loop/server_wait.py):
    the connection was lost mid-answer, nothing answers at its address, it answers that
    it is still loading its model, or it answers `status` 502/503/504, not ready."""
    wait_s: float | None = None
    """How long the run waits, its clock paused, before this retry."""
    wait_limit_s: float | None = None
    """Where the run waits for its server: how long it may wait in all for one call (its
    `--server-wait`), so a notification can say how long the run may stay waiting."""
    in_wait: int | None = None
    """Set on a retry the SDK makes (no `cause`) once the run waits for its server, where
    the server is still away (no answer, or 502/503/504): the `attempt` of the wait the
    call was asked again after. A retry after any other status (429, 500: the server is
    back) is left unset and printed as any retry. The displays print the wait's
    line, not each of these (one outage read as two counters, `retry 4/4 after 502`
    then `retry 2 after ...` then `retry 1/4` again); the log keeps them."""


class HistorySummarized(_Event):
    """Older steps of an agent's history were replaced by a summary to fit the context."""

    type: Literal["history_summarized"] = "history_summarized"
    agent: AgentRole
    summary: str
    first_turn: int
    last_turn: int
    tokens_before: int = 0
