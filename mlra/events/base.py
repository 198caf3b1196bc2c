"""What every event has: the stamps the log writes (`v`, `seq`, `ts`, `t`), the schema's
version, and the words a run's roles, plan steps and endings are named by.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

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
    "attempt_ended",
]
"""Why a run ended. Only "submitted" means the agent's `submit` succeeded; the agent
stopping without one is "no_submission", a supervisor that answers without calling
any tool "no_tool_calls", the same call failing again and again "repeated_failure",
a model provider that keeps failing "provider_error" (older logs say "error"), a
`--model replay:RUN` re-run that asks what the recording did not "replay_diverged"
(it would diverge again: batches do not retry it), an agent that made the same call
with the same result again and again, past the bound it was told of, "stuck". A search's
attempt's own run ends "attempt_ended" once its work is done and mlra has validated it:
only the attempt the search submits is handed in (its logs from before the reason say
"submitted": events/run.py `as_read` reads them so)."""

EndCause = Literal["recording_unfinished", "window_overflow"]
"""Why a run ended, where its reason alone does not tell how to judge it, recorded by
the code that ends it: "recording_unfinished", a replay whose recording ends without
`run_finished` (its reason "stopped", as a person's stop, but the trackers tell it
killed, as the recorded run was); "window_overflow", a request the model's window
cannot hold (its reason "provider_error", but judged a failure: unlike a provider that
failed, it says something of the model, and would end the same way again)."""


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    v: int = SCHEMA_VERSION
    seq: int = 0
    ts: float = 0.0
    t: float = 0.0
