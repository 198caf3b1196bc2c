"""Which of a batch's runs were judged, and whether its report covers the whole batch.

A run that never started, or that has no outcome of the agent's yet (stopped midway by a
Ctrl-C or a SIGTERM, killed, still running, ended by an internal error or a model
provider that failed, with attempts left), or one run `--ungraded`, was never judged: its
success is None, not False. Counted as a failure, a batch stopped after two of its six
runs read "success 17%" for one success in two judged runs, as if it were the batch's
rate. A run that ended by itself without a score (the deadline, a budget, no submission,
a submission that scored nothing, a replay that diverged, a request the model's window
cannot hold, a run Ray killed for its memory) was judged, and failed: that ending is the
agent's or its model's (final: a batch does not retry them, batch/state.py, but for the
run Ray killed, which it resumes), and leaving it out would flatter weak models. So was
a seed that used up its attempts with none an outcome.

A seed's success is its first attempt with an outcome: the ones before it ended for
reasons that say nothing of the agent, as the batch retries exactly those, so that
counting it cannot raise a rate as a retry of a poor ending would.

The report says it is partial where some runs have no outcome yet, with how many of the
batch's runs ran, are running, queued, lost or never started (batch/report_tables.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mlra.agent.record.run_result import RunResult
from mlra.batch.spec import SPEC_FILE
from mlra.batch.state import NODE_LOST, OUT_OF_MEMORY, Placement, driven_elsewhere

__all__ = ["OUT_OF_MEMORY"]  # a placement's outcome judged failed (batch/report_rows.py)

DEFAULT_ATTEMPTS = 3
"""A batch's `--max-attempts` where its batch.json does not say (batch/spec.py)."""

NOT_STARTED = "not started"
"""The reason of a run the batch queued and never began (its card holds no other)."""

QUEUED = "queued by an mlra batch still running"
"""Why a run not begun has none yet: another `mlra batch` holds it (its driver lock)."""


def never_begun(run_id: str, driven: set[str]) -> str:
    """Why a run the batch queued has neither a folder nor a reason on its card: the batch
    driving it is still running (its lock held, in `driven`: batch/state.py), or was
    stopped first."""
    return QUEUED if run_id in driven else "the batch was stopped before it began"


def batch_state(out: Path) -> tuple[set[str], int]:
    """The runs another `mlra batch` drives now (read once: a probe of every lock), and how
    many starts a run of this batch folder gets (`--max-attempts`)."""
    driven = set(driven_elsewhere(out))
    try:
        limit = json.loads((out / SPEC_FILE).read_text(encoding="utf-8")).get("max_attempts")
    except (OSError, ValueError, AttributeError):
        return driven, DEFAULT_ATTEMPTS
    return driven, limit if isinstance(limit, int) and limit > 0 else DEFAULT_ATTEMPTS


def has_outcome(r: RunResult) -> bool:
    """Whether the run ended by itself: with a score, by its own ending, or by one that
    would come again (a replay that diverged, a window too small for the request)."""
    return (
        r.score is not None
        or r.status == "finished"
        or r.reason == "replay_diverged"
        or r.cause == "window_overflow"
    )


GRADED_ENDINGS = frozenset({"submitted", "deadline", "budget", "stopped"})
"""The endings of a run that ended "finished" that grade what it left: the agent's
submission, the deadline, a budget, a person's graded stop (`stop`). The agent's own
others (stuck, no submission, a failing call, a supervisor calling no tool) hand nothing in."""


def graded_ending(r: RunResult) -> bool:
    """Whether the run's ending would have been graded: an `--ungraded` run's that hands
    nothing in (stuck, no submission) is a failure as any graded run's, not its choice."""
    return r.status == "finished" and r.reason in GRADED_ENDINGS


def killed_for_memory(placements: Sequence[Placement]) -> str | None:
    """Why Ray killed the run for its memory (its last placement's outcome, which its own
    log never says: it ends without `run_finished`), else None: the run's own failure,
    judged, as no lost node is."""
    last = placements[-1] if placements else None
    if last is None or last.outcome != OUT_OF_MEMORY:
        return None
    return last.detail or OUT_OF_MEMORY


def judged_success(r: RunResult) -> bool | None:
    """Whether the run met its task's success bar; None where it was never judged."""
    if r.ungraded:
        return None  # whatever it scored is not the task's grading (`--ungraded`)
    if not has_outcome(r):
        return None  # stopped, killed, running, or ended by an error: no outcome of the agent's
    if not r.direction_known:
        return None  # no one said which way the metric improves
    if r.self_reported and r.score is not None:
        return False  # the workspace's own report, not a measurement: never a success
    if r.success is not None:
        return r.success
    return r.normalized_score is not None and r.normalized_score >= 0.05


class _Row(Protocol):
    """What these read of a report row (batch/report_rows.py's RunRow)."""

    counted: bool
    started: bool
    outcome: bool
    success: bool | None
    status: str
    reason: str
    detail: str
    lost: bool


def count_one(attempts: Sequence[_Row], tries: int, limit: int, *, last: bool) -> None:
    """Mark the attempt of a seed that its group's numbers count: its last (`--attempt
    last`), or its first with an outcome, else its first that started; and judge a seed
    that used up its `limit` of `tries` with no outcome (none running now) failed."""
    first = next((r for r in attempts if r.outcome), None)
    counted = first or next((r for r in attempts if r.started), attempts[0])
    (attempts[-1] if last else counted).counted = True
    used_up(attempts, tries, limit)


def used_up(attempts: Sequence[_Row], tries: int, limit: int) -> None:
    """A seed whose every attempt ended with no outcome and that has none left was judged
    by the batch it ran in: it failed (its counted attempt)."""
    if tries < limit or any(r.outcome or r.status == "running" for r in attempts):
        return
    for r in attempts:
        if r.counted:
            r.outcome, r.success = True, False


@dataclass
class Partial:
    """How much of the batch its report covers: one run a seed (the counted attempt)."""

    runs: int
    """The batch's runs (each task, model and seed)."""
    ran: int
    """Those that started and ended: with an outcome, or stopped before one."""
    never_started: int
    """Those that never started: the batch was stopped, or could not hold them, first."""
    lost: int
    """Those lost with their Ray node before any of their folder came back (not `ran`:
    nothing of them reached the batch folder)."""
    stopped_midway: int
    """Those that started and have no outcome, nor attempts left to them in this batch
    session: stopped, killed, ended by an error, or by Ray on a node still up."""
    running: int = 0
    """Those running now."""
    queued: int = 0
    """Those an `mlra batch` still running holds and has not begun."""


def partial_of(rows: Sequence[_Row]) -> Partial | None:
    """The batch's coverage where some runs have no outcome; None where every one has."""
    counted = [r for r in rows if r.counted]
    open_ = [r for r in counted if not r.outcome]
    if not open_:
        return None
    running = sum(r.status == "running" for r in open_)
    queued = sum(not r.started and r.detail == QUEUED for r in open_)
    lost = sum(not r.started and r.reason == NODE_LOST for r in open_)
    never = sum(not r.started and not r.lost and r.detail != QUEUED for r in open_)
    ran = len(counted) - running - queued - lost - never
    midway = ran - (len(counted) - len(open_))
    return Partial(len(counted), ran, never, lost, midway, running, queued)


def partial_words(p: Partial) -> str:
    """report.md's line saying that its numbers are not the whole batch's."""
    counts = [
        (p.never_started, "never started"),
        (p.lost, f"lost with {'its' if p.lost == 1 else 'their'} node"),
        (p.stopped_midway, "stopped before an outcome"),
        (p.running, "still running"),
        (p.queued, "queued"),
    ]
    words = [f"{n} {what}" for n, what in counts if n]
    if len(words) > 1:
        words[-1] = "and " + words[-1]
    return (
        f"Partial report: {p.ran} of {p.runs} runs ran; {', '.join(words)}. Runs with no "
        "outcome are not counted as failures: each success rate is over its group's "
        "judged runs (the cell says of how many where they are fewer than its runs), not "
        "the whole batch's."
    )
