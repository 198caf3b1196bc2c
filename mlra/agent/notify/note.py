"""What one notification says, and the one interface every destination implements.

A notification is derived from the run's typed events (agent/notify/triggers.py) and
is the same whatever it is sent to: the bell ignores its words, a desktop pop-up shows
its title and message, a command reads it as JSON on stdin, a webhook gets it as the
JSON body. So a user's script sees exactly the fields a webhook receiver does.

Its text comes partly from the agent (a held call's arguments, a metric's name, an
error): a lone surrogate or a NUL in it would stop the notification at every
destination (JSON cannot encode the one as UTF-8, an environment variable or an
argument cannot hold the other), so both are U+FFFD from the moment a notification is
made, and it is always sent. What each destination's own format needs (Slack's
markup, a desktop's) is escaped by the destination (payload.py, desktop.py).
"""

from __future__ import annotations

import re
from typing import Any, Literal, Protocol

from pydantic import BaseModel, model_validator

_UNSENDABLE = re.compile("[\x00\ud800-\udfff]")


def sendable(value: Any) -> Any:
    """`value` (a str, or a dict or list of them) with every NUL and lone surrogate
    as U+FFFD."""
    if isinstance(value, str):
        return _UNSENDABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {sendable(k): sendable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sendable(v) for v in value]
    return value


NotificationKind = Literal[
    "approval",
    "best_validation",
    "provider_paused",
    "server_wait",
    "server_back",
    "time_warning",
    "finished",
    "batch_finished",
]
"""Why the user is told: a call waits for their approval; a validation beat every
earlier one; the model provider failed and the run is paused for them; the run waits
for its model server, which went away, and the server came back (a wait that gives up
is told by the pause or the end that follows); the run's time is nearly spent; the run
ended (with its score, where it has one); a batch ended (`mlra batch --notify`, whose
runs each notify "finished" as they end for good)."""


class Notification(BaseModel):
    kind: NotificationKind
    title: str
    message: str
    text: str = ""
    """`title: message` in one line: what a chat webhook (Slack's `text`) shows."""
    run_id: str
    run_dir: str
    task: str = ""
    seq: int = 0
    """The `seq` of the event in the run's log that caused it."""
    t: float = 0.0
    """The run clock (active seconds) at that event."""
    call_id: str | None = None
    tool: str | None = None
    metric: str | None = None
    score: float | None = None
    normalized: float | None = None
    success: bool | None = None
    status: str | None = None
    reason: str | None = None
    attempt: str | None = None
    """Set where an event of a search's attempt caused it (a wait for the model server):
    `seq` and `t` are then in that attempt's log (`attempts/<id>/events.jsonl`)."""
    counts: dict[str, int] | None = None
    """A batch's end: its runs by how they ended ("finished", "unscored", "failed")."""

    @model_validator(mode="before")
    @classmethod
    def _sendable(cls, data: Any) -> Any:
        return sendable(data)


class NotifyFailed(Exception):
    """A destination did not take a notification: one line saying why."""


class Notifier(Protocol):
    """One destination of `--notify`. `send` raises NotifyFailed (or times out: the
    caller bounds it); it never prints, since the console may own the terminal."""

    described: str
    """Where it sends, in words safe for the log: never a URL's path or a command."""

    async def send(self, note: Notification) -> None: ...
