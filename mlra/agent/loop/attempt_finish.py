"""An attempt's `attempt_finished`, from its own log alone (agent/loop/attempts.py), so a
resumed run writes the same one: its best validation kept, else why it has none."""

from __future__ import annotations

import contextlib
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE, read_events
from mlra.tools.shell import TIME_LIMIT_KEY


def finished_event(
    started: ev.AttemptStarted,
    run_dir: Path,
    parent_dir: Path,
    *,
    stopped: str = "",
    lost: str = "",
    run_deadline: bool = False,
) -> ev.AttemptFinished:
    """An attempt's `attempt_finished`, from its own log alone (so a resumed run writes the
    same one): its best validation kept, else why it has none. `run_deadline`: the run's
    time limit cancelled it, read as its own limit would be ("out of time"), not "stopped"
    (its own log says only that its run was cancelled), unless its own run had ended
    first and was only closing: then its own log says how it ended (a failed validation
    is "buggy", not "out of time")."""
    from mlra.agent.record.state import fold
    from mlra.tasks.validation import best_kept

    log = run_dir / EVENTS_FILE
    events: list[ev.Event] = []
    if log.is_file():
        with contextlib.suppress(Exception):
            events = read_events(log)
    state = fold(events)
    inherited = _inherited(events)
    own = [v for v in state.validations if v.sha256 is None or v.sha256 not in inherited]
    best = best_kept(own, run_dir)
    summary = next(
        (e.report for e in reversed(events) if isinstance(e, ev.SubtaskFinished) and e.report),
        "",
    )
    if not summary and started.operator == "variant":  # the plain recipe is a variant too
        words = " ".join(f"{k}={v}" for k, v in started.variant.items())
        summary = f"recipe with {words}" if words else "the recipe as it is"
    finished = state.finished
    if run_deadline and finished is not None and finished.reason != "stopped":
        # Its own run had ended (its report, its own limit) and was only closing when the
        # deadline cancelled it: its log says how it ended, not the run's time limit.
        run_deadline, stopped = False, ""
    if not stopped and finished is not None and finished.reason == "stopped":
        stopped = finished.message or "stopped"
    status: ev.AttemptStatus
    why = ""
    if lost:
        status, why = "lost", lost
    elif run_deadline and not (best is not None and best.ok):
        status, why = "out of time", _why_run_deadline(events)
    elif stopped and not run_deadline:
        status, why = "stopped", stopped
    elif best is not None and best.ok:
        status = "validated"
    else:
        status = "out of time" if _out_of_time(events, finished) else "buggy"
        why = _why_not_own(events) or _why_buggy(events, finished)
    scored = best if best is not None and best.ok and not lost else None
    kept = None
    if scored is not None and scored.kept is not None:
        kept = (run_dir / scored.kept).relative_to(parent_dir).as_posix()
    return ev.AttemptFinished(
        attempt=started.attempt,
        parent=started.parent,
        status=status,
        score=scored.score if scored is not None else None,
        metric=best.metric if best is not None else "",
        higher_is_better=best.higher_is_better if best is not None else True,
        normalized=scored.normalized if scored is not None else None,
        why=why,
        run_deadline=run_deadline and not lost,
        summary=summary.strip()[:2000],
        kept=kept,
        artifact=scored.artifact if scored is not None else None,
        sha256=scored.sha256 if scored is not None else None,
        duration_s=round(state.elapsed_s, 3),
        validation_s=max((v.duration_s for v in state.validations), default=0.0),
        steps=state.steps,
        tokens=state.tokens,
        input_tokens=state.input_tokens,
        output_tokens=state.output_tokens,
        estimated_tokens=state.estimated_tokens,
        cost_usd=round(state.cost_usd, 6),
    )


AT_LIMIT = "its time limit was reached with"
"""How the notice of an attempt validated at its own time limit begins
(agent/agents/closing_validation.py), which a log that predates its kind is read by."""


NO_TIME = "no_time_to_validate"
"""The notice's kind of an attempt at its own limit the run had no time left to validate."""

NO_TIME_WORDS = "its time limit was reached, and the run has no time left to"
"""How that notice begins, which a log that predates its kind is read by."""


def no_time_at_limit(event: ev.Event) -> bool:
    """Whether `event` is the notice that the attempt reached its own limit with no run
    time left to validate its artifact; by its words in a log from before its kind (a
    replay of one reads its recording so: agent/loop/replay_provider.py)."""
    if not isinstance(event, ev.Notice):
        return False
    if event.kind is not None:
        return event.kind == NO_TIME
    return event.message.startswith(NO_TIME_WORDS)


def validating_at_limit(event: ev.Event) -> bool:
    """Whether `event` is the notice that the attempt, at its own time limit, is having
    its artifact validated. Its words are read only in a log written before the notice
    had its kind: a run taken up again recomputes an attempt's ending from that log."""
    if not isinstance(event, ev.Notice):
        return False
    if event.kind is not None:
        return event.kind == "validating_at_limit"
    return event.message.startswith(AT_LIMIT)


def _inherited(events: list[ev.Event]) -> set[str]:
    """Digests of the artifacts the attempt began with (agent/setup/config.py
    `AttemptSettings.inherited`), as its `run_started` recorded them."""
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    attempt = started.config.get("attempt") if started is not None else None
    return set((attempt or {}).get("inherited") or {})


def _why_not_own(events: list[ev.Event]) -> str:
    """Its artifact was one it began with, unchanged, and so never validated: said so."""
    for event in reversed(events):
        if isinstance(event, ev.Validation) and event.ok:
            return ""
        if isinstance(event, ev.Notice) and event.kind == "inherited_artifact":
            return event.message
    return ""


def _out_of_time(events: list[ev.Event], finished: ev.RunFinished | None) -> bool:
    """Whether the clock, not its recipe, left it unscored: it reached its time limit
    with no artifact of its own validated (none written, its parent's unchanged, or its
    validation cut by the time left), or its last validation was cut so. A validation
    at its limit that failed on its own merits leaves it buggy."""
    last = next((e for e in reversed(events) if isinstance(e, ev.Validation)), None)
    if last is not None and last.out_of_time:
        return True
    if any(isinstance(e, ev.ToolResult) and e.data.get(TIME_LIMIT_KEY) for e in events):
        return True  # a command the time limit killed: its run may end before the deadline
    if finished is None or finished.reason != "deadline":
        return False
    at_limit = next((i for i, e in enumerate(events) if validating_at_limit(e)), None)
    if at_limit is None:
        return True
    return not any(
        isinstance(e, ev.Validation) or (isinstance(e, ev.ToolResult) and e.tool == "validate")
        for e in events[at_limit:]
    )


def _no_time_to_validate(events: list[ev.Event]) -> str:
    """Where it reached its limit with an artifact the run had no time left to validate
    (agent/agents/closing_validation.py), that notice: it wrote one, and the run's
    reserve was spent, which "before a validation scored it" did not say. A log from
    before the notice had its kind gives the words without it."""
    notice = next((e for e in events if isinstance(e, ev.Notice) and e.kind == NO_TIME), None)
    return notice.message if notice is not None else ""


RUN_DEADLINE = "the run's time limit was reached before a validation scored it"
"""Why an attempt the run's deadline ended has no score, as its own limit's words say it."""


def _why_run_deadline(events: list[ev.Event]) -> str:
    """Why an attempt the run's deadline ended has no score: its last validation cut by
    the time left, else that the run's time limit fell before one scored it."""
    last = next((e for e in reversed(events) if isinstance(e, ev.Validation)), None)
    if last is not None and last.out_of_time:
        return f"its validation was cut by the time left: {last.error or 'timed out'}"
    return RUN_DEADLINE


def _why_buggy(events: list[ev.Event], finished: ev.RunFinished | None) -> str:
    """Why an attempt ended with nothing validated: its last validation's failure as its
    worker was told it, else the refused validation (no artifact), else how it ended. Its
    time limit first, where nothing was validated at it (no artifact): the validation it
    cut off read "its artifact could not be validated: [killed after 0.0 s: ...]"."""
    last = next((e for e in reversed(events) if isinstance(e, ev.Validation)), None)
    if last is not None and last.out_of_time:
        return f"its validation was cut by the time left: {last.error or 'timed out'}"
    if finished is not None and finished.reason == "deadline":
        if not any(validating_at_limit(e) for e in events):
            return _no_time_to_validate(events) or (
                "its time limit was reached before a validation scored it"
            )
    for event in reversed(events):
        if isinstance(event, ev.Validation) and not event.ok:
            return f"its validation failed: {event.told or event.error or 'no score'}"
        if isinstance(event, ev.ToolResult) and event.tool == "validate" and not event.ok:
            lines = event.output.strip().splitlines()
            return "its artifact could not be validated: " + (lines[0] if lines else "-")
    if finished is not None and finished.reason != "attempt_ended" and finished.message:
        return finished.message
    return "it ended with no artifact validated"
