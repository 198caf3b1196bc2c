"""A search's attempts' time limits after they start: raised to a later attempt's share.

An attempt's share is the time left over the waves still to come, the running attempts
counted in the wave a new one begins (agent/loop/attempts.py `time_share`). So a running
attempt may run as long as the share of one started beside it: with four attempts two
at a time, one started as a1 ended, beside a2 (two waves seemingly to come), got half
the time left, and the last, started 0.2 s later as a2 ended, all of it, though the two
ran side by side. The new attempt's `attempt_started.raised` records each raise; the
tree folds it (agent/record/attempt_tree.py) and the attempt's own run takes it here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from mlra import events as ev
from mlra.agent.record.attempt_tree import AttemptNode, AttemptTree
from mlra.durations import format_duration, parse_duration

if TYPE_CHECKING:
    from mlra.agent.loop.clock import RunClock
    from mlra.agent.loop.tool_step import ToolStep
    from mlra.agent.record.eventlog import EventLog
    from mlra.agent.record.state import RunState


class AttemptRun(Protocol):
    """An attempt's own run as its limit is raised (agent/run/controller.py's
    RunController, which agent/loop does not import)."""

    clock: RunClock
    time_limit_s: float
    tool_step: ToolStep
    log: EventLog | None
    state: RunState

    def append(self, event: ev.Event) -> ev.Event: ...


SLACK_S = 1.0
"""A raise smaller than this is none: two attempts started a moment apart differ so."""

RESERVE_SHARE = 0.1
"""The most of the run's time limit kept at its end for the closing validations."""
RESERVE_MARGIN = (1.5, 10.0)
"""The longest validation seen, times this, and at least this many seconds more: the
reserve a measured validation asks (a loaded machine grades slower)."""


def closing_reserve(limit_s: float, evaluator_timeout: str | float, seen: list[float]) -> float:
    """Run-clock seconds the shares keep back at the run's end, so the attempts of the
    last wave end before its deadline with time to validate their artifact (the run's
    deadline stops them, and nothing of theirs can then be validated). Measured: the
    longest validation this run has seen (`seen`), with margin; none yet: the task's
    evaluator time-out, the longest a validation may take. Never over a tenth of the
    run's limit: a reserve that large would take the attempts' own time."""
    longest = max(seen, default=0.0)
    if longest > 0:
        factor, least = RESERVE_MARGIN
        wanted = max(longest * factor, longest + least)
    else:
        wanted = float(parse_duration(evaluator_timeout))
    return round(min(wanted, RESERVE_SHARE * limit_s), 3)


def short_share(
    tree: AttemptTree, started: ev.AttemptStarted, defaults: dict[str, str]
) -> ev.Notice | None:
    """A notice where an attempt starts with less time than its parent took to validate
    (`duration_s`, its own run's clock): the search's share-out gave it what was left,
    not what its work needs, and it will likely end "out of time". It still starts: the
    measure is one run on a machine whose load moves a recipe's time several-fold, its
    closing validation scores what a cut-short run wrote, and the person, told, can stop
    it or promote the best. A variant's changed settings are named (`defaults`: the
    recipe's `vars`), not scaled: mlra does not know which of them is the work. A parent
    that did not validate measured nothing of a whole run."""
    parent = tree.get(started.parent) if started.parent else None
    if parent is None or parent.finished is None or parent.status != "validated":
        return None
    took = parent.finished.duration_s
    if started.time_limit_s >= took:
        return None
    changed = []
    for key, value in started.variant.items():
        was = parent.started.variant.get(key, defaults.get(key))
        if was != value:
            changed.append(f"{key}={value}" + (f" ({parent.id}: {was})" if was else ""))
    message = (
        f"attempt {started.attempt} may run out of time: it has "
        f"{format_duration(started.time_limit_s)}, less than the {format_duration(took)} "
        f"its parent {parent.id} took" + (f", and it sets {', '.join(changed)}" if changed else "")
    )
    return ev.Notice(level="warning", message=message, kind="short_share")


def raised_limits(
    tree: AttemptTree, children: dict[str, Any], share: float, remaining: float, now: float
) -> dict[str, float]:
    """The running attempts with less time than `share`, a new attempt's, and their
    limit raised to it, never past the run's deadline (`remaining` from `now`, the run
    clock); one whose starter asked for less keeps it."""
    raised: dict[str, float] = {}
    for node in tree.running:
        if node.started.time_asked_s is not None or node.time_limit_s >= share - SLACK_S:
            continue
        child = children.get(node.id)
        spent = child.clock.elapsed() if child is not None else now - node.started.t
        limit = min(share, spent + remaining)
        if limit > node.time_limit_s + SLACK_S:
            raised[node.id] = round(limit, 3)
    return raised


def sync_limit(node: AttemptNode, child: AttemptRun, why: str = "") -> None:
    """The attempt's own run (`child`, its controller) takes the limit the tree gives it,
    where a later start raised it, its running commands' time-outs with it
    (`raise_time_limit`); one never raised keeps its own (a replay's attempt runs under the
    limit it was recorded with)."""
    if node.time_limit_s <= max(node.started.time_limit_s, child.clock.limit_s):
        return
    raise_time_limit(child, node.time_limit_s, why=why)


def raise_time_limit(run: AttemptRun, limit_s: float, *, why: str, stated: bool = True) -> None:
    """An attempt's run given more time while it runs (a later attempt's larger share, or
    its recording's). Its deadline moves, and with it the time-out of each running command
    the old deadline bound, so none is killed at the limit it started under; the log says
    so once the run has begun. `stated`: its prompts state the new limit (a replay's
    attempt keeps stating its recording's)."""
    was = run.clock.limit_s
    if limit_s <= was:
        return
    run.clock.limit_s = limit_s
    if stated:
        run.time_limit_s = limit_s
    commands = run.tool_step.raise_time_outs(limit_s - was)
    if run.log is not None and run.state.started and run.state.finished is None:
        raised = ev.TimeLimitRaised(limit_s=limit_s, was_s=was, why=why, commands=commands)
        run.append(raised)
