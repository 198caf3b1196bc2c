"""An attempt's closing validation (agent/agents/attempt_agent.py): mlra validates what
its workspace holds as it ends, whatever its worker used of the rate limit.

As it ends on its own, and as it reaches its own time limit (its share of the run's
time) with the task's artifact in its workspace: its training cut short still left an
artifact, and an attempt that is never validated can be neither compared nor submitted.
An artifact its worker validated already, unchanged since and still its best validated
copy, is not graded again.
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
from mlra.agent.record.eventlog import EVENTS_FILE, read_events
from mlra.agent.run.controller import RunController
from mlra.durations import format_duration
from mlra.tasks.validation import RunValidator, best_kept
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
    same = await asyncio.to_thread(_validations_of, ctl, validator, artifact)
    if _validated_unchanged(ctl, same, f"its time limit was reached with the {artifact}"):
        return
    cut_s = await asyncio.to_thread(_cut_s, ctl, same)
    # A grader the limit killed keeps nothing to go on from: the closing validation
    # grades from the start, and says so rather than reading as a first try.
    again = (
        f" again from the start (its validation cut at the limit after "
        f"{format_duration(cut_s)} left nothing to go on from)"
        if cut_s is not None
        else ""
    )
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
            message=f"{AT_LIMIT} {artifact} in its workspace: validating it{again}, within the "
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


async def validate_on_ending(
    ctl: RunController, role: ev.AgentRole, registry: ToolRegistry, validator: RunValidator
) -> None:
    """The attempt ended on its own (its worker reported): its artifact is validated, as
    its result, unless a validation of its worker's scored it as it is now."""
    artifact = ctl.task.evaluator.artifact
    if (ctl.workspace / artifact).exists():
        same = await asyncio.to_thread(_validations_of, ctl, validator, artifact)
        if _validated_unchanged(ctl, same, f"it ended with the {artifact}"):
            return
    step = await ctl.begin_step(role, counts=True)
    await closing_validation(ctl, role, registry, validator, None, step=step)


def _validated_unchanged(ctl: RunController, same: list[ev.Validation], ended: str) -> bool:
    """Whether the attempt's result, its best validation kept, is one of `same` (the
    artifact as it is now): a second grading would score the same bytes again, the
    grader's time (minutes of lm-eval for a model) spent for nothing. Said in the
    attempt's log. Not where the best kept is another artifact: a worker that validated
    A, then B as good (a tie keeps the later, and A's copy goes), then put A back ends
    with A, which only a validation of A makes its result."""
    best = best_kept(ctl.state.validations, ctl.run_dir)
    if best is None or not best.ok or not any(v.seq == best.seq for v in same):
        return False
    ctl.append(
        ev.Notice(
            level="info",
            message=f"{ended} it had validated, unchanged since: not validated again",
            kind="validated_unchanged",
        )
    )
    return True


def _validations_of(
    ctl: RunController, validator: RunValidator, artifact: str
) -> list[ev.Validation]:
    """The attempt's validations of the artifact as its workspace holds it now (the same
    digest), oldest first."""
    # Hashed only where a validation that scored, or that its time-out cut, could match:
    # the hash (of a model of gigabytes) is time taken from the reserve this one needs.
    told = [v for v in ctl.state.validations if v.sha256 and (v.ok or v.out_of_time)]
    digest = validator.digest(artifact) if told else None
    return [v for v in told if digest is not None and v.sha256 == digest]


def _cut_s(ctl: RunController, same: list[ev.Validation]) -> float | None:
    """How long the attempt's last `validate` call had run where the limit cut it (the
    run's end kills a call before it records a validation), or its own time-out did."""
    try:
        logged = read_events(ctl.run_dir / EVENTS_FILE)
    except Exception:  # a damaged log: no cut call to tell of, the validation goes on
        logged = []
    results = [e for e in logged if isinstance(e, ev.ToolResult) and e.tool == "validate"]
    last = results[-1] if results else None
    if last is not None and not last.ok and (last.error or "").startswith("killed"):
        return last.duration_s
    timed_out = next((v for v in reversed(same) if v.out_of_time), None)  # its own time-out
    return timed_out.duration_s if timed_out is not None else None
