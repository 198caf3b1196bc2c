"""Which of a batch's runs were judged, and whether its report covers the whole batch.

A run that never started, or that has no outcome of the agent's (stopped midway by a
Ctrl-C or a SIGTERM, killed, still running, ended by an internal error or a model
provider that failed), or one run `--ungraded`, was never judged: its success is None,
not False. Counted as a failure, a batch stopped after two of its six runs read "success
17%" for one success in two judged runs, as if it were the batch's rate. A run that ended
by itself without a score (the deadline, a budget, no submission, a submission that scored
nothing) was judged, and failed: that ending is the agent's, and leaving it out would
raise a rate as retrying exactly those would (batch/state.py).

The report says it is partial where some runs never started or stopped before an
outcome, with how many of the batch's runs ran (batch/report_tables.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mlra.agent.record.run_result import RunResult
from mlra.batch.state import driven_elsewhere

NOT_STARTED = "not started"
"""The reason of a run the batch queued and never began (its card holds no other)."""


def never_begun(out: Path, run_id: str) -> str:
    """Why a run the batch queued has neither a folder nor a reason on its card: the batch
    driving it is still running (its lock held: batch/state.py), or was stopped first."""
    if run_id in driven_elsewhere(out):
        return "queued by an mlra batch still running"
    return "the batch was stopped before it began"


NO_OUTCOME = ("stopped", "interrupted", "running")
"""A run's statuses while it has no ending of its own: stopped midway, killed, still going."""


def judged_success(r: RunResult) -> bool | None:
    """Whether the run met its task's success bar; None where it was never judged."""
    if r.ungraded:
        return None  # whatever it scored is not the task's grading (`--ungraded`)
    if r.score is None and r.status != "finished":
        return None  # stopped, killed, running, or ended by an error: no outcome of the agent's
    if not r.direction_known:
        return None  # no one said which way the metric improves
    if r.self_reported and r.score is not None:
        return False  # the workspace's own report, not a measurement: never a success
    if r.success is not None:
        return r.success
    return r.normalized_score is not None and r.normalized_score >= 0.05


@dataclass
class Partial:
    """How much of the batch its report covers: one run a seed (the counted attempt)."""

    runs: int
    """The batch's runs (each task, model and seed)."""
    ran: int
    """Those whose counted attempt started."""
    never_started: int
    """Those that never started: the batch was stopped, or could not hold them, first."""
    lost: int
    """Those lost with their Ray node before any of their folder came back (not `ran`:
    nothing of them reached the batch folder)."""
    stopped_midway: int
    """Those that started and have no outcome: stopped, killed or still running."""


class _Row(Protocol):
    """What `partial_of` reads of a report row (batch/report_rows.py's RunRow)."""

    counted: bool
    started: bool
    score: float | None
    status: str
    lost: bool


def partial_of(rows: Sequence[_Row]) -> Partial | None:
    """The batch's coverage where some runs never started or stopped midway; None where
    every run has an outcome."""
    counted = [r for r in rows if r.counted]
    ran = [r for r in counted if r.started]
    midway = sum(r.score is None and r.status in NO_OUTCOME for r in ran)
    if len(ran) == len(counted) and not midway:
        return None
    lost = sum(r.lost for r in counted if not r.started)
    return Partial(len(counted), len(ran), len(counted) - len(ran) - lost, lost, midway)


def partial_words(p: Partial) -> str:
    """report.md's line saying that its numbers are not the whole batch's."""
    words = [f"{p.never_started} never started"]
    if p.lost:
        words.append(f"{p.lost} lost with {'its' if p.lost == 1 else 'their'} node")
    if p.stopped_midway:
        words.append(f"{p.stopped_midway} stopped before an outcome")
    if len(words) > 1:
        words[-1] = "and " + words[-1]
    return (
        f"Partial report: {p.ran} of {p.runs} runs ran; {', '.join(words)}. Runs with no "
        "outcome are not counted as failures: each success rate is over its group's "
        "judged runs (the cell says of how many where they are fewer than its runs), not "
        "the whole batch's."
    )
