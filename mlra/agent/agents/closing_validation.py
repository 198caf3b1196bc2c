"""An attempt's closing validation (agent/agents/attempt_agent.py): mlra validates what
its workspace holds as it ends, whatever its worker used of the rate limit.

As it ends on its own, and as it reaches its own time limit (its share of the run's
time) with the task's artifact in its workspace: its training cut short still left an
artifact, and an attempt that is never validated can be neither compared nor submitted.
An artifact it began with, unchanged (its parent's copy, cut short before it wrote its
own), is not validated: it would score the parent's work as the child's.
That validation runs in the time the run has left past the attempt's limit, the reserve
its shares keep for it at the end (agent/loop/attempt_time.py `closing_reserve`), before
the run's deadline stops it (a raise of the attempt's limit then moves not its time-out,
which the run's deadline bounds). An attempt with no artifact ends unvalidated, as before.
"""

from __future__ import annotations

import asyncio
import time

from mlra import events as ev
from mlra.agent.loop.attempt_finish import AT_LIMIT
from mlra.agent.providers.base import ToolCallRequest
from mlra.agent.run.controller import RunController
from mlra.durations import format_duration
from mlra.tasks.validation import RunValidator
from mlra.tools.registry import ToolRegistry

STOP_MARGIN_S = 2.0
"""Of the run's time left, what stopping its attempts at its deadline takes: a
validation at an attempt's limit ends that long before."""


async def closing_validation(
    ctl: RunController,
    role: ev.AgentRole,
    registry: ToolRegistry,
    validator: RunValidator,
    path: str | None,
    *,
    step: int,
) -> bool:
    """One `validate` call of mlra's own on `path` (None: the task's artifact), recorded
    as the agent's: its step, its call, its `validation`. Whether it scored."""
    ctl.emit(ev.StepStarted(agent=role, step=step, turn=step))
    call = ToolCallRequest(
        id=ctl.next_call_id(role),
        name="validate",
        arguments={"path": path} if path else {},
    )
    validator.closing_calls.add(call.id)
    outcome = await ctl.execute_tool(role, call, registry, step=step, turn=step)
    return outcome.ok


async def validate_at_limit(
    ctl: RunController,
    role: ev.AgentRole,
    registry: ToolRegistry,
    validator: RunValidator,
    path: str | None,
) -> None:
    """The attempt reached its time limit (its run's `_finish`, its commands stopped):
    validate its artifact, if its workspace holds one, within the run's time left."""
    artifact = path or ctl.task.evaluator.artifact
    if not (ctl.workspace / artifact).exists():
        return
    whose = await asyncio.to_thread(validator.unchanged, artifact)
    if whose is not None:  # only what it began with (a child cut short): not its own
        validator.not_own(artifact, whose)
        return
    left = (ctl.closing_left() if ctl.closing_left is not None else 0.0) - STOP_MARGIN_S
    if left < 1.0:
        ctl.append(
            ev.Notice(
                level="warning",
                message="its time limit was reached, and the run has no time left to "
                f"validate the {artifact} in its workspace",
                kind="no_time_to_validate",
            )
        )
        return
    ctl.append(
        ev.Notice(
            level="info",
            message=f"{AT_LIMIT} {artifact} in its workspace: validating it, within the "
            f"{format_duration(left)} the run has left",
            kind="validating_at_limit",
        )
    )
    validator.bind_to(time.monotonic() + left)  # the run's deadline: no raise moves it
    ctl.clock.resume()  # its validation is the attempt's time, as one it ends with is
    try:
        await closing_validation(ctl, role, registry, validator, path, step=ctl.state.steps + 1)
    finally:
        ctl.clock.pause()
