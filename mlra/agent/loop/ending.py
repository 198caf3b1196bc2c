"""How a run ends, as the agent, the budgets, the deadline or the user end it.

Its own module so that the parts of a run (the model turn, the tool step) and
the agents can end it without importing the controller that drives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mlra import events as ev
from mlra.agent.record.state import RunState
from mlra.agent.setup.config import RunConfig

EndedBy = Literal["agent", "user", "deadline", "budget", "stop", "error"]
"""Who ended the run, as the `submission` event records it ("user": a person submitted
a search's attempt, the console's promote)."""

MESSAGES: dict[ev.FinishReason, str] = {
    "submitted": "the agent submitted",
    "deadline": "the time limit was reached",
    "stopped": "stopped by the user",
    "budget": "a budget was used up",
    "error": "the run failed",
    "no_submission": "the agent ended without submitting",
    "no_tool_calls": "the supervisor stopped calling tools, so nothing was submitted",
    "provider_error": "the model provider failed",
    "repeated_failure": "the same tool call kept failing",
    "replay_diverged": "the replay diverged from its recording",
    "stuck": "the agent made the same call again and again",
    "attempt_ended": "the attempt ended",
}
"""The `run_finished` message of an ending that brings none of its own."""

RECORDING_UNFINISHED = "the recorded run never finished (it was killed or crashed)"
"""A replay's `run_finished` message says this where its recording ends without one: it
ends "stopped" as a stop does, and its cause ("recording_unfinished") tells the trackers
it a crash, not a person's stop. Words for the reader only: no reader judges by them
(a log from before `cause` is read by the words it has: events/run.py `cause_as_read`)."""


@dataclass
class Ending:
    reason: ev.FinishReason
    status: ev.RunStatus = "finished"
    evaluate: bool = True
    by: EndedBy = "agent"
    path: str | None = None
    note: str = ""
    message: str = ""
    attempt: str | None = None
    """The search's attempt whose frozen artifact is submitted (agent/loop/attempts.py)."""
    cause: ev.EndCause | None = None
    """Why it ended where `reason` alone does not say how to judge it, recorded in its
    `run_finished` for the reports and the trackers (events/base.py `EndCause`)."""

    @property
    def finished_message(self) -> str:
        return self.message or MESSAGES[self.reason]

    def run_finished(self) -> ev.RunFinished:
        """The event that records this ending, its cause with it."""
        return ev.RunFinished(
            status=self.status, reason=self.reason, message=self.finished_message, cause=self.cause
        )


def unfinished_recording(done: str) -> Ending:
    """The ending of a replay whose recording ends, `done` (after its last model call),
    without `run_finished`: stopped where the recorded run was killed, not graded."""
    return Ending(
        reason="stopped",
        status="stopped",
        by="stop",
        evaluate=False,
        cause="recording_unfinished",
        message=f"the recording ends here, {done}: {RECORDING_UNFINISHED}, "
        "so the replay stops where it stopped",
    )


class EndRun(BaseException):
    """Raised anywhere inside the agent to end the run (submit, budget, provider failure).

    A BaseException, like CancelledError, so that no tool's or loop's
    `except Exception` can swallow it on its way up from a worker inside a
    supervisor's `assign_subtask` call.
    """

    def __init__(self, ending: Ending) -> None:
        super().__init__(ending.reason)
        self.ending = ending


UNSUBMITTED: frozenset[ev.FinishReason] = frozenset(
    {"no_submission", "no_tool_calls", "repeated_failure", "stuck"}
)
"""Endings where the agent stopped on its own without a submission: nothing is graded
(only an ending imposed from outside, a deadline or a budget, grades the workspace).
An agent going round in circles ("stuck", "repeated_failure") is ended by mlra, but
for what the agent did, not for a limit the user set: it handed nothing in."""


def unsubmitted(reason: ev.FinishReason, message: str, note: str = "") -> Ending:
    """The ending of a run the agent ended without a successful `submit`: never
    reported as a submission, and not graded (there is nothing it handed in)."""
    return Ending(reason=reason, evaluate=False, by="agent", message=message, note=note or message)


def budget_ending(config: RunConfig, state: RunState) -> Ending | None:
    """The ending of a run whose step, cost or token budget is used up, if one is."""
    c, s = config, state
    problem = None
    if c.max_steps is not None and s.steps >= c.max_steps:
        problem = f"step budget used up ({s.steps} of {c.max_steps} steps)"
    elif c.max_cost_usd is not None and s.cost_usd >= c.max_cost_usd:
        problem = f"cost budget used up (${s.cost_usd:.2f} of ${c.max_cost_usd:.2f})"
    elif c.max_tokens is not None and s.tokens >= c.max_tokens:
        problem = f"token budget used up ({s.tokens:,} of {c.max_tokens:,} tokens)"
    if problem is None:
        return None
    return Ending(reason="budget", by="budget", note=problem, message=problem)


def attempt_ending(note: str) -> Ending:
    """An attempt's end (agent/agents/attempt_agent.py): recorded as finished, never graded on
    the test split (the run it belongs to grades only the attempt it submits), and never
    said to be submitted: the search hands in one attempt, from its own log."""
    return Ending(reason="attempt_ended", evaluate=False, by="agent", note=note, message=note)


def unread_notices(queued: dict[str, list[str]]) -> list[ev.Notice]:
    """The user's messages no agent read before the run ended, one notice per agent: a
    message to the worker sent as its subtask ended (its report waiting for approval,
    say) waits for a next worker step that never comes, and the person who wrote it
    would otherwise wait for an answer that does not come. A resumed run reads them
    (agent/loop/catchup.py queues them again from their `control` events)."""
    notices = []
    for target, texts in queued.items():
        count = "your message" if len(texts) == 1 else f"your {len(texts)} messages"
        quoted = "; ".join(f'"{" ".join(text.split())}"' for text in texts)
        notices.append(
            ev.Notice(
                level="warning",
                message=f"{count} to the {target} went unread: the run ended before the "
                f"{target} took another step ({quoted})",
            )
        )
    return notices
