"""Resume and fork: a run goes on from its log (and its workspace snapshots).

`mlra resume` reopens a run that crashed, was killed or was stopped, in its own
folder: the log is checked (a half-written last line is dropped, with a note),
the clock takes up the time already spent, and the agent catches up with the
log (agent/record/recording.py) before going live where it stopped.

`mlra fork` makes a new run from another's log up to a step: the events up to
there are copied, the workspace is restored as it was then, and the new run
catches up and goes live with, optionally, another model, the next action
replaced, or a message from the user.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mlra import events as ev
from mlra.agent.providers.base import ModelProvider
from mlra.agent.record.eventlog import EVENTS_FILE, EventLog, LogDamage, encode_stored, read_events
from mlra.agent.record.snapshots import SNAPSHOTS_DIR, SnapshotStore
from mlra.agent.record.state import BASELINE_READS_NO_MESSAGES, fold
from mlra.agent.record.workspace_history import WorkspaceHistory
from mlra.agent.run.controller import RunController
from mlra.agent.setup.config import RunConfig
from mlra.tasks.spec import TaskSpec


class ResumeError(Exception):
    """The run cannot go on (no log, still running, already submitted...): one line."""


@dataclass
class RecordedRun:
    run_dir: Path
    events: list[ev.Event]
    started: ev.RunStarted
    config: RunConfig
    torn: list[str] = field(default_factory=list)

    @property
    def elapsed_s(self) -> float:
        return max((e.t for e in self.events), default=0.0)


def load_run(run_dir: Path) -> RecordedRun:
    path = run_dir / EVENTS_FILE
    if not path.is_file():
        raise ResumeError(f"{run_dir} is not a run folder (no {EVENTS_FILE})")
    torn: list[str] = []
    try:
        events = read_events(path, on_torn_tail=torn.append)
    except LogDamage as exc:
        # Going on from a log with a line missing or forged would build on a run that
        # never happened; the log stays as it is for someone to look at.
        raise ResumeError(f"the log is damaged, so the run cannot go on: {exc}") from None
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    if started is None:
        raise ResumeError(f"{path} has no run_started event: the run never started")
    config = RunConfig.model_validate(started.config)
    return RecordedRun(
        run_dir=run_dir.resolve(), events=events, started=started, config=config, torn=torn
    )


def _drop_torn_tail(path: Path) -> None:
    """Cut the log back to its last whole line (what a SIGKILL mid-write leaves)."""
    with open(path, "rb+") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            f.truncate(end)


RELOADS = 5
"""Readings of a log that grows under them before a resume gives up: a run ends with a
few events, so a second reading is all but always its last."""


def _lock(run: RecordedRun) -> EventLog:
    """The run's log, locked (a live run cannot be resumed twice), with `run` read again
    where it grew meanwhile: a run still ending when it was read (a stop's last events,
    a resume started as it ended) wrote on, and a resume from the older reading numbered
    its own events as those, a log damaged for good."""
    from mlra.agent.record.eventlog import LogMoved, RunInUse

    path = run.run_dir / EVENTS_FILE
    for _ in range(RELOADS):
        try:
            log = EventLog(path, start_seq=max((e.seq for e in run.events), default=0))
        except LogMoved:
            fresh = load_run(run.run_dir)
            run.events, run.started, run.config, run.torn = (
                fresh.events, fresh.started, fresh.config, fresh.torn,
            )  # fmt: skip
            continue
        except RunInUse:
            break
        try:
            resumable(run)  # as it ended, which the reading before the lock may not have seen
        except ResumeError:
            log.close()
            raise
        if run.torn:
            _drop_torn_tail(path)
        return log
    raise ResumeError(f"{run.run_dir} is still running in another mlra process; stop it first")


def _reopen(controller: RunController, run: RecordedRun, log: EventLog) -> None:
    """Give a controller the run's locked log."""
    controller.log = log
    controller.log.subscribe(controller.state.apply)
    for callback in controller._subscribers:
        controller.log.subscribe(callback)
    controller.clock = type(controller.clock)(controller.time_limit_s, already=run.elapsed_s)


LIMIT_SETTINGS = ("time_limit_s", "max_steps", "max_cost_usd", "max_tokens", "log_budget_mb")
"""The limits a resume or a fork may change (`--time-limit`..., `--log-budget`: a run its
log's budget ended goes on only under a larger one), by their config names:
recorded in its `run_resumed` or `run_forked`, so the log says what the run went on under."""


def changed_limits(overrides: dict[str, Any]) -> dict[str, Any]:
    """What a resume or a fork records of its own settings: the limits it changed, and
    whether it was started paused (`--paused`), said either way: the log's `run_started`
    is its source's, whose `start_paused` is not what this run was asked for."""
    changed = {k: overrides[k] for k in LIMIT_SETTINGS if overrides.get(k) is not None}
    return changed | {"start_paused": bool(overrides.get("start_paused"))}


def resumable(run: RecordedRun) -> None:
    state = fold(run.events)
    finished = state.finished
    if finished is not None and finished.reason == "attempt_ended":
        raise ResumeError(
            f"{run.run_dir.name} is a search's attempt and it ended, so there is nothing to "
            "resume; its search builds on it with another attempt (`mlra resume` of the "
            "search's run resumes the attempts it left running)"
        )
    if finished is not None and finished.reason == "submitted":
        raise ResumeError(
            f"{run.run_dir.name} ended with a submission, so there is nothing to resume; "
            f"fork it to try again from a step (`mlra fork {run.run_dir} --at STEP`)"
        )


def _recorded_budget(events: list[ev.Event]) -> ev.Budget | None:
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    return started.budget if started is not None else None


def resume_controller(
    run: RecordedRun,
    task: TaskSpec,
    provider: ModelProvider | None,
    *,
    overrides: dict[str, Any] | None = None,
    ready: Callable[[], None] | None = None,
) -> RunController:
    """A controller that continues `run` in its own folder. `ready` is called once the
    run is known to be resumable, before its log is reopened (the CLI asks the model
    server there, so a refusal leaves the log as it was)."""
    resumable(run)
    if ready is not None:
        ready()
    log = _lock(run)
    changed = changed_limits(overrides or {})
    config = run.config.model_copy(
        update={
            "run_id": run.run_dir.name,
            "runs_dir": run.run_dir.parent,
            # The budget it started with (agent/setup/run_budget.py), not one from what is free now.
            "budget": run.config.budget or _recorded_budget(run.events),
            # limits an earlier resume or the fork set hold unless this command sets others
            **fold(run.events).settings_changed,
            **(overrides or {}),
            "start_paused": changed["start_paused"],  # this command's own, never held over
        }
    )
    try:
        controller = RunController(config, task, provider)
    except BaseException:
        log.close()
        raise
    _reopen(controller, run, log)
    notes = [f"dropped a half-written last line of the log: {t}" for t in run.torn]

    # A new fork goes live where its log was cut: it was not stopped, so it is not resumed.
    tail = [e for e in run.events[-2:] if not isinstance(e, ev.Control)]
    fresh_fork = bool(tail) and isinstance(tail[-1], ev.RunForked)

    def going_live() -> list[ev.Event]:
        events: list[ev.Event] = (
            []
            if fresh_fork
            else [
                ev.RunResumed(
                    dropped_torn_line=bool(run.torn), model=config.model, settings=changed
                )
            ]
        )
        events += [ev.Notice(level="warning", message=n) for n in notes]
        return events

    controller.catch_up(list(run.events), going_live)
    stepping = recorded_stepping(run.events)
    controller.catchup.when_live(lambda: _step_on(controller, stepping))
    return controller


def recorded_stepping(events: list[ev.Event]) -> Literal["paused", "stepping"] | None:
    """How the user was stepping the run when it stopped, as its log's controls say:
    paused (by them, `--paused`, after a step's action, or a resume that restored it),
    or let one action through that had not ended yet; None where they last resumed it
    or never paused it. A resumed run kept its breakpoints but not this, so after the
    held call was approved it ran to its end, past the steps being inspected. A pause
    the run made for a failing provider is not stepping (the resume is the retry), nor
    is its source's stepping a fork's."""
    stepping: Literal["paused", "stepping"] | None = None
    for event in events:
        if isinstance(event, ev.RunForked):
            stepping = None  # a fork is a run of its own: stepped where it asks (--paused)
        if not isinstance(event, ev.Control) or event.target:
            continue  # an attempt's step leaves its search paused
        if event.action == "pause" and event.source != "system":
            stepping = "paused"
        elif event.action == "step":
            stepping = "stepping"
        elif event.action == "resume":
            stepping = None
    return stepping


def _step_on(controller: RunController, stepping: Literal["paused", "stepping"] | None) -> None:
    """Once live: paused again (recorded, so the transcript says why), or in step mode
    with the one action granted (its step is the log's last control already)."""
    if stepping == "paused":
        controller.pause(source="resume")
    elif stepping == "stepping":
        controller.controls.step()


# --- fork ------------------------------------------------------------------------------


def _step_index(events: list[ev.Event], step: int) -> int:
    for i, event in enumerate(events):
        if isinstance(event, ev.StepStarted) and event.agent != "supervisor" and event.step == step:
            return i
    steps = [e.step for e in events if isinstance(e, ev.StepStarted) and e.agent != "supervisor"]
    have = f"steps 1 to {max(steps)}" if steps else "no agent steps"
    raise ResumeError(f"--at {step}: the run has {have}")


def _edited_prefix(
    events: list[ev.Event], start: int, edit: dict[str, Any]
) -> tuple[list[ev.Event], dict[str, Any]]:
    """The log up to the model's answer at the step, with its first tool call replaced."""
    for i in range(start, len(events)):
        call = events[i]
        if isinstance(call, ev.ModelCall) and call.purpose == "turn":
            break
    else:
        raise ResumeError("--edit-action: the model never answered at that step")
    if not call.tool_calls:
        raise ResumeError("--edit-action: the model made no tool call at that step")
    first = dict(call.tool_calls[0])
    if "arguments" in edit and isinstance(edit["arguments"], dict):
        tool = str(edit.get("tool") or edit.get("name") or first["name"])
        arguments = edit["arguments"]
    else:
        tool, arguments = str(first["name"]), edit
    first.update(name=tool, arguments=arguments, raw_arguments=json.dumps(arguments))
    first.pop("parse_error", None)
    edited = call.model_copy(deep=True)
    edited.tool_calls = [first, *call.tool_calls[1:]]
    edited.text = call.text
    return [*events[:i], edited], {"tool": tool, "arguments": arguments}


def _edited_recipe_call(
    events: list[ev.Event], start: int, edit: dict[str, Any]
) -> tuple[ev.Control, dict[str, Any]]:
    """The baseline's call at the step with the user's arguments, as an edit at its
    breakpoint is logged: the baseline makes the same call again there (the recipe and
    its call ids are fixed), and it runs as edited (agent/loop/tool_step.py); the recipe
    goes on with its next step after it. Its tool stays the recipe's."""
    call = next((e for e in events[start:] if isinstance(e, ev.ToolCall)), None)
    if call is None:
        raise ResumeError("--edit-action: the baseline made no tool call at that step")
    if "arguments" in edit and isinstance(edit["arguments"], dict):
        tool = str(edit.get("tool") or edit.get("name") or call.tool)
        arguments = edit["arguments"]
    else:
        tool, arguments = call.tool, edit
    if tool != call.tool:
        raise ResumeError(
            f"--edit-action: the baseline's step runs {call.tool}, from its recipe; an edit "
            f"gives it other arguments, not another tool ({tool})"
        )
    control = ev.Control(action="edit", call_id=call.call_id, arguments=arguments)
    return control, {"tool": tool, "arguments": arguments}


def _link_tree(source: Path, target: Path) -> None:
    """Share the source run's snapshot objects (hard links where the disk allows)."""
    if not source.is_dir():
        return
    for root, _, files in os.walk(source):
        dest_root = target / Path(root).relative_to(source)
        dest_root.mkdir(parents=True, exist_ok=True)
        for name in files:
            src, dst = Path(root) / name, dest_root / name
            if dst.exists():
                continue
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)


def _attempts_at_the_cut(
    source: RecordedRun, prefix: list[ev.Event], run_dir: Path, at_step: int
) -> list[ev.Event]:
    """A search's attempts in the fork: those that had ended by the step are shared with
    the source (their folders no longer change: hard links), so the fork can build on
    and submit them; one still running then is recorded lost in the fork, since what it
    did after that point belongs to the source's timeline, not the fork's."""
    from mlra.agent.loop.attempts import ATTEMPTS_DIR

    tree = fold(prefix).attempts
    lost: list[ev.Event] = []
    seq = max((e.seq for e in prefix), default=0)
    t = max((e.t for e in prefix), default=0.0)
    for node in tree.nodes.values():
        if node.finished is not None:
            _link_tree(source.run_dir / ATTEMPTS_DIR / node.id, run_dir / ATTEMPTS_DIR / node.id)
            continue
        seq += 1
        lost.append(
            ev.AttemptFinished(
                seq=seq,
                ts=prefix[-1].ts if prefix else 0.0,
                t=t,
                attempt=node.id,
                parent=node.parent,
                status="lost",
                why=f"it was running when the run was forked at step {at_step}; what it "
                "did after that belongs to the run forked from",
            )
        )
    return lost


def fork_run(
    source: RecordedRun,
    task: TaskSpec,
    *,
    at_step: int,
    run_dir: Path,
    model: str,
    edit_action: dict[str, Any] | None = None,
    message: str | None = None,
    ready: Callable[[], None] | None = None,
    settings: dict[str, Any] | None = None,
    check_action: Callable[[str, dict[str, Any]], str | None] | None = None,
) -> RecordedRun:
    """Make the new run's folder: the log up to the step, and the workspace as it was.
    `ready` is called once the fork is known to be possible, before anything is written
    (the CLI asks the model server there, so a refusal leaves no folder). `check_action`
    says what is wrong with the edited action (a tool the agent lacks, arguments the
    tool refuses): refused, rather than the fork's first step spent on the tool's error."""
    if source.started.model == "baseline" and message is not None:
        raise ResumeError(f"--message: {BASELINE_READS_NO_MESSAGES}")
    index = _step_index(source.events, at_step)
    prefix = list(source.events[:index])
    edited = None
    recipe_edit: ev.Control | None = None
    if edit_action is not None and source.started.model == "baseline":
        recipe_edit, edited = _edited_recipe_call(source.events, index, edit_action)
        if check_action is not None and (
            problem := check_action(edited["tool"], edited["arguments"])
        ):
            raise ResumeError(f"--edit-action: {problem}")
    elif edit_action is not None:
        prefix, edited = _edited_prefix(source.events, index, edit_action)
        if check_action is not None and (
            problem := check_action(edited["tool"], edited["arguments"])
        ):
            raise ResumeError(f"--edit-action: {problem}")
        prefix = [*source.events[:index], *prefix[index:]]
    # Earlier endings (a stop, then a resume) stay: the copy keeps every event up to
    # the step, numbering included, so it reads as whole (`seq` 1, 2, 3...).
    if ready is not None:
        ready()
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir(mode=0o700, exist_ok=False)  # private, as RunController.prepare makes it
    workspace = run_dir / "workspace"
    workspace.mkdir()
    _link_tree(source.run_dir / SNAPSHOTS_DIR, run_dir / SNAPSHOTS_DIR)
    history = WorkspaceHistory(source.events, SnapshotStore(source.run_dir))
    cut_seq = max((e.seq for e in source.events[:index]), default=0)
    missing = history.restore(
        cut_seq, workspace, fallbacks=[source.run_dir / "workspace", *task.starter_paths()]
    )
    prefix += _attempts_at_the_cut(source, prefix, run_dir, at_step)
    # The copy keeps the source's numbering and times; the fork's own events follow.
    with open(run_dir / EVENTS_FILE, "wb") as f:
        for event in prefix:
            f.write(encode_stored(event))
    log = EventLog(run_dir / EVENTS_FILE, start_seq=max((e.seq for e in prefix), default=0))
    elapsed = max((e.t for e in prefix), default=0.0)
    try:
        forked: list[ev.Event] = [
            ev.RunForked(
                run_id=run_dir.name,
                # the source's own id: a fork's log opens with its source's
                # run_started, so a fork of a fork named the first run
                source_run=fold(source.events).run_id or source.started.run_id,
                source_dir=str(source.run_dir),
                at_step=at_step,
                model=model,
                edited_action=edited,
                message=message,
                missing_files=missing,
                not_recorded=history.not_recorded(cut_seq),
                settings=changed_limits(settings or {}),
            )
        ]
        if message:
            forked.append(ev.Control(action="inject", target="worker", text=message))
        if recipe_edit is not None:
            forked.append(recipe_edit)
        for event in forked:
            event.t = elapsed
            log.append(event)
    finally:
        log.close()
    return load_run(run_dir)
