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
the run's deadline stops it. A validation under way as the limit falls, on the artifact as
it stands, is that validation (agent/loop/held_calls.py): killed, it would be graded again
from the start. An attempt with no artifact ends unvalidated, as before.
"""

from __future__ import annotations

import asyncio

from mlra import events as ev
from mlra.agent.loop.attempt_finish import AT_LIMIT, NO_TIME, NO_TIME_WORDS
from mlra.agent.loop.catchup import INTERRUPTED
from mlra.agent.loop.evaluation import run_validator
from mlra.agent.loop.held_calls import LIMIT
from mlra.agent.loop.replay_provider import ReplayProvider
from mlra.agent.providers.base import ToolCallRequest
from mlra.agent.record.eventlog import EVENTS_FILE, read_events
from mlra.agent.run.controller import RunController
from mlra.durations import format_duration
from mlra.tasks.validation import RunValidator, UnderWay, best_kept
from mlra.tools.artifact_copy import SubmissionRefused
from mlra.tools.registry import ToolRegistry
from mlra.tools.submission import workspace_relative

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
    validate its artifact, if its workspace holds one, within the run's time left. A
    validation under way on it as it stands goes on as that one."""
    artifact = _relative(ctl, path or ctl.task.evaluator.artifact)
    if not (ctl.workspace / artifact).exists() or _not_in_recording(ctl):
        return
    whose = await asyncio.to_thread(validator.unchanged, artifact)
    if whose is not None:  # only what it began with (a child cut short): not its own
        validator.not_own(artifact, whose)
        return
    held = await _held(ctl, validator)
    scored = _scored(ctl)
    digest = await asyncio.to_thread(validator.digest, artifact) if scored or held else None
    if _validated_unchanged(
        ctl, _of(scored, digest), f"its time limit was reached with the {artifact}"
    ):
        return
    left = time_to_validate(ctl)
    if left < 1.0:
        ctl.append(
            ev.Notice(
                level="warning",
                message=f"{NO_TIME_WORDS} validate the {artifact} in its workspace",
                kind=NO_TIME,
            )
        )
        return
    within = f", within the {format_duration(left)} the run has left"
    ctl.clock.resume()  # its validation is the attempt's time, as one it ends with is
    try:
        if held is not None and held[0].artifact == artifact and held[1] == digest:
            way = held[0]
            ran = format_duration(validator.elapsed() - way.started)
            _at_limit(
                ctl,
                f"{artifact} in its workspace: its validation under way ({way.call_id}, "
                f"{ran} in) goes on as the closing one{within}",
            )
            await ctl.tool_step.held.finish(way.call_id)
            return
        # Any call held is cut first: one left running would hold the validator, and
        # the closing validation would wait behind it.
        await ctl.tool_step.held.drop(LIMIT)
        cut = ""
        if held is not None and held[1] is not None:  # of another artifact, or changed
            way = held[0]
            was = "it as it was before it changed" if way.artifact == artifact else way.artifact
            cut = f" (its validation under way, {way.call_id}, was of {was}: cut)"
        elif ctl.state.resumed and (lost := await asyncio.to_thread(_lost, ctl)) is not None:
            cut = f" again (its validation {lost}, going on as the closing one, was lost as the run stopped)"
        _at_limit(ctl, f"{artifact} in its workspace: validating it{cut}{within}")
        await closing_validation(ctl, role, registry, validator, path, step=ctl.state.steps + 1)
    finally:
        ctl.clock.pause()


async def _held(ctl: RunController, validator: RunValidator) -> tuple[UnderWay, str | None] | None:
    """The validation under way that the limit held, if any, and the digest of the copy
    it grades. One still making its copy is waited for (it holds the validator: a
    closing validation begun now would wait behind it, then grade the same bytes
    again), within the run's time left: not made by then, or refused, its digest is
    None."""
    way = validator.under_way
    if way is None or not ctl.tool_step.held.holds(way.call_id):
        return None
    if not way.frozen.done():  # a model of gigabytes takes a while: said, not silent
        ctl.append(
            ev.Notice(
                level="info",
                message=f"its time limit was reached as its validation under way "
                f"({way.call_id}) was still copying {way.artifact}: waiting for that copy, "
                "to tell whether it is the artifact as it stands",
            )
        )
    try:
        async with asyncio.timeout(max(0.0, time_to_validate(ctl))):
            return way, await asyncio.shield(way.frozen)
    except TimeoutError:
        return way, None


def _lost(ctl: RunController) -> str | None:
    """The call whose validation went on as the attempt's closing one when its run
    stopped under it (killed, crashed): resumed, it is closed `interrupted`, and the
    closing validation begins again, where the log said that one went on."""
    try:
        logged = read_events(ctl.run_dir / EVENTS_FILE)
    except Exception:  # a damaged log: nothing to tell of, the validation goes on
        return None
    notices = [
        e.seq for e in logged if isinstance(e, ev.Notice) and e.kind == "validating_at_limit"
    ]
    if not notices:
        return None
    asked = {e.call_id: e.seq for e in logged if isinstance(e, ev.ToolCall)}
    return next(
        (
            e.call_id
            for e in reversed(logged)
            if isinstance(e, ev.ToolResult)
            and e.tool == "validate"
            and e.error == INTERRUPTED
            and asked.get(e.call_id, notices[-1]) < notices[-1] < e.seq
        ),
        None,
    )


def _not_in_recording(ctl: RunController) -> bool:
    """A replay's attempt whose search stopped its recording before its own limit (the
    supervisor, a person, the run's deadline): the recording has no closing validation,
    and a replay that reaches the limit sooner, by its own timing, adds none."""
    provider = ctl.provider
    return (
        isinstance(provider, ReplayProvider)
        and provider.stopped is not None
        and (not provider.at_limit)
    )


def _relative(ctl: RunController, artifact: str) -> str:
    """The artifact's path as a `validate` call names what it grades (`./answer.txt`,
    `model/`: `answer.txt`, `model`), so one under way of it is told from one of another
    path by the path alone."""
    try:
        workdir = ctl.sandbox.workdir if ctl.sandbox is not None else None
        return workspace_relative(ctl.workspace, artifact, workdir=workdir)
    except SubmissionRefused:  # outside the workspace: the validation says so
        return artifact


def _at_limit(ctl: RunController, said: str) -> None:
    """The notice that the attempt, at its limit, is having its artifact validated."""
    ctl.append(ev.Notice(level="info", message=f"{AT_LIMIT} {said}", kind="validating_at_limit"))


def time_to_validate(ctl: RunController) -> float:
    """Of the run's time left, what a search's attempt's validation may take: none past
    its attempt's limit but its closing one, which the run's deadline bounds."""
    return (ctl.closing_left() if ctl.closing_left is not None else 0.0) - STOP_MARGIN_S


def attempt_validator(ctl: RunController) -> RunValidator:
    """A search's attempt's `validate` host side. Its gradings end within the run's time
    left, not the attempt's: one under way as the attempt's limit falls may go on as its
    closing validation (`validate_at_limit`), which only the run's deadline bounds, or is
    cut there where the artifact changed since; a raise of the attempt's limit moves
    nothing of it."""
    validator = run_validator(ctl)
    if ctl.closing_left is not None:
        validator.bind_to(lambda: time_to_validate(ctl))
    return validator


async def validate_on_ending(
    ctl: RunController, role: ev.AgentRole, registry: ToolRegistry, validator: RunValidator
) -> None:
    """The attempt ended on its own (its worker reported): its artifact is validated, as
    its result, unless a validation of its worker's scored it as it is now."""
    artifact = ctl.task.evaluator.artifact
    if (ctl.workspace / artifact).exists() and (scored := _scored(ctl)):
        digest = await asyncio.to_thread(validator.digest, artifact)
        if _validated_unchanged(ctl, _of(scored, digest), f"it ended with the {artifact}"):
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


def _of(scored: list[ev.Validation], digest: str | None) -> list[ev.Validation]:
    """Those of `scored` of the artifact whose digest is `digest` (None: not hashed)."""
    return [v for v in scored if digest is not None and v.sha256 == digest]


def _scored(ctl: RunController) -> list[ev.Validation]:
    """The attempt's validations that scored, oldest first: those the artifact as it is
    now may match. The artifact is hashed only where one may (the hash of a model of
    gigabytes is time taken from the reserve a validation needs)."""
    return [v for v in ctl.state.validations if v.sha256 and v.ok]
