"""The typed events a run is made of.

The run's append-only `events.jsonl` is the single source of truth: the console,
the headless transcript, `result.json`, replay, resume and scoring are all derived
from these events. So every event carries enough to rebuild what the agent saw
(prompts, observations, summaries) and what the human did (control actions),
and nothing a display needs is kept only in memory.

Every line is one event with a `type` discriminator and the schema version `v`.
`seq` and `ts` are stamped by the log when the event is appended; `t` is the run
clock (active seconds counted against the deadline, pauses excluded) at that moment.

The vocabulary is one package so every layer shares it, in modules by concern: what
every event has (`base`), the run's own events (`run`), what the agents do (`agents`),
what happens around them (`environment`), how a run is judged (`ending`) and a search's
attempts (`attempts`). Every event is re-exported here: `from mlra import events as ev`
and `ev.ToolCall` are how the rest of mlra names them; this module adds the union of
them all (`Event`) and reading a log line back (`parse_event`). A new event goes in
the module of its concern, and here: in its import, in `Event` and in `__all__`.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError, model_serializer

from mlra.events.agents import (
    ApprovalRequested,
    ContextWindowLearned,
    HistorySummarized,
    ModelAnswering,
    ModelCall,
    ModelError,
    ModelRetry,
    PlanStep,
    PlanUpdated,
    Review,
    ServerAbsence,
    StepStarted,
    SubtaskFinished,
    SubtaskOutcome,
    SubtaskStarted,
    SupervisorMessage,
    TextDelta,
    ToolCall,
    ToolOutput,
    ToolResult,
    ToolStarted,
    WorkerAlone,
    WorkerAloneReason,
    WorkerThought,
    subtask_outcome_words,
)
from mlra.events.attempts import (
    AttemptFinished,
    AttemptOperator,
    AttemptStarted,
    AttemptStatus,
    SearchPolicy,
)
from mlra.events.base import (
    SCHEMA_VERSION,
    AgentRole,
    EndCause,
    FinishReason,
    PlanStatus,
    RunStatus,
    _Event,
)
from mlra.events.ending import (
    EvaluationFinished,
    EvaluationProgress,
    EvaluationStarted,
    Experiment,
    ExperimentNote,
    Submission,
    Validation,
)
from mlra.events.environment import (
    REPLAYED,
    Control,
    ControlAction,
    FileChange,
    GpuSample,
    JobEnd,
    JobEnded,
    JobStarted,
    ResourceSample,
    RunForked,
    RunResumed,
    SnapshotLeftOut,
    WorkspaceSnapshot,
)
from mlra.events.run import (
    Budget,
    Limits,
    LimitsInForce,
    MetricPoint,
    Metrics,
    Notice,
    NoticeKind,
    RulesSummary,
    RunFinished,
    RunStarted,
    SandboxInfo,
    TimeLimitRaised,
    TimeWarning,
    as_read,
    cause_as_read,
    reason_as_read,
)


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
    | TimeLimitRaised
    | Metrics
    | PlanUpdated
    | SupervisorMessage
    | SubtaskStarted
    | SubtaskFinished
    | WorkerAlone
    | Review
    | StepStarted
    | TextDelta
    | ModelAnswering
    | ContextWindowLearned
    | WorkerThought
    | ToolCall
    | ToolStarted
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


__all__ = [
    "EVENT_ADAPTER",
    "EVENT_NAME",
    "REPLAYED",
    "SCHEMA_VERSION",
    "AgentRole",
    "ApprovalRequested",
    "AttemptFinished",
    "AttemptOperator",
    "AttemptStarted",
    "AttemptStatus",
    "Budget",
    "ContextWindowLearned",
    "Control",
    "ControlAction",
    "EndCause",
    "EvaluationFinished",
    "EvaluationProgress",
    "EvaluationStarted",
    "Event",
    "Experiment",
    "ExperimentNote",
    "FileChange",
    "FinishReason",
    "GpuSample",
    "HistorySummarized",
    "JobEnd",
    "JobEnded",
    "JobStarted",
    "Limits",
    "LimitsInForce",
    "MetricPoint",
    "Metrics",
    "ModelAnswering",
    "ModelCall",
    "ModelError",
    "ModelRetry",
    "Notice",
    "NoticeKind",
    "PlanStatus",
    "PlanStep",
    "PlanUpdated",
    "ResourceSample",
    "Review",
    "RulesSummary",
    "RunFinished",
    "RunForked",
    "RunResumed",
    "RunStarted",
    "RunStatus",
    "SandboxInfo",
    "SearchPolicy",
    "ServerAbsence",
    "SnapshotLeftOut",
    "StepStarted",
    "Submission",
    "SubtaskFinished",
    "SubtaskOutcome",
    "SubtaskStarted",
    "SupervisorMessage",
    "TextDelta",
    "TimeLimitRaised",
    "TimeWarning",
    "ToolCall",
    "ToolOutput",
    "ToolResult",
    "ToolStarted",
    "UnknownEvent",
    "Validation",
    "WorkerAlone",
    "WorkerAloneReason",
    "WorkerThought",
    "WorkspaceSnapshot",
    "as_read",
    "cause_as_read",
    "parse_event",
    "reason_as_read",
    "stamped",
    "subtask_outcome_words",
]
