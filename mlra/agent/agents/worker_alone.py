"""The worker alone, given the task whole, as MLAgentBench's single agent is.

Small local models (135M to 1.5B, issue 40) never hand the worker a subtask: as
supervisors they answer in prose, or call nothing usable, until the run ends with
nothing submitted. Given the task whole, with `submit` instead of `report`, the same
model can still do what it can. Two ways lead here: the user's `--agent worker`, and a
supervisor that answered `MAX_NUDGES` + 1 turns in a row without a tool call and never
handed a subtask (agent/agents/supervisor.py). Either way a `worker_alone` event records
it, with one notice line, so the console, headless output, `mlra runs` and result.json
say the run was the worker's alone. The event is an agent's action: a resumed run
re-makes the decision from its recorded answers and meets it in the log.
"""

from __future__ import annotations

from typing import NoReturn

from mlra import events as ev
from mlra.agent.agents.worker import MAX_NUDGES, Worker
from mlra.agent.loop.ending import unsubmitted
from mlra.agent.run.controller import Agent, EndRun, RunController

INSTRUCTIONS = (
    "The whole task is yours: do it with your tools, keep a valid artifact where the task "
    "asks for it, and call `submit` when it is ready."
)
GO_ON = "Go on with the task; call `submit` when the artifact is ready."
"""A further stretch of work after the worker used up `subtask_max_steps` steps: alone,
only the run's own budgets (time, steps, cost) end it."""


class WorkerAloneAgent(Agent):
    """`--agent worker`: the worker alone from the first step."""

    role: ev.AgentRole = "worker"

    def __init__(self, controller: RunController) -> None:
        self.ctl = controller

    async def run(self) -> None:
        message = "the worker takes the whole task alone, with no supervisor (--agent worker)"
        await work_alone(self.ctl, "chosen", message)


async def work_alone(
    ctl: RunController,
    reason: ev.WorkerAloneReason,
    message: str,
    *,
    supervisor_turns: int = 0,
    before: str = "",
) -> NoReturn:
    """Record the hand-over, then let the worker work until it submits (the run ends
    there, graded) or stops calling tools; `before` is what the supervisor did, for the
    ending's message."""
    ctl.emit(ev.WorkerAlone(reason=reason, supervisor_turns=supervisor_turns, message=message))
    if not ctl.catchup.replaying:
        ctl.emit(ev.Notice(level="warning" if before else "info", message=message))
    _pass_on_messages(ctl)
    worker = Worker(ctl, alone=True)
    number = 0
    while True:
        number += 1
        result = await worker.run_subtask(number, INSTRUCTIONS if number == 1 else GO_ON, None)
        if result.outcome == "step_limit":
            continue
        # Only "no_report" returns here: `submit` and a stuck loop end the run in it.
        what = f"{before}; then the worker, " if before else "the worker, "
        raise EndRun(
            unsubmitted(
                "no_tool_calls",
                f"{what}given the whole task, answered without a tool {MAX_NUDGES + 1} times "
                "in a row and never called submit, so nothing was submitted",
            )
        )


def _pass_on_messages(ctl: RunController) -> None:
    """Messages the user sent the supervisor that it never read (queued just before the
    hand-over) go to the worker, which reads them at its first step (its `step_started`
    lists them as delivered); from here on a message to the supervisor is refused
    (agent/record/state.py `message_refusal`)."""
    pending = ctl.controls.take_messages("supervisor")
    for text in pending:
        ctl.controls.inject("worker", text)
    if pending and not ctl.catchup.replaying:
        count = "1 message" if len(pending) == 1 else f"{len(pending)} messages"
        goes = "goes" if len(pending) == 1 else "go"
        message = f"{count} to the supervisor, unread at the hand-over, {goes} to the worker"
        ctl.emit(ev.Notice(level="info", message=message))
