"""The words a search's attempt is said in, one line each: its start (its share, the
reserve kept at the run's end, the attempts it raised), its end (a validation score,
never the test split's) and, after a search's score, the attempt graded. Shared by every
text display, as console/text/event_lines.py is."""

from __future__ import annotations

from mlra import events as ev
from mlra.console.text.event_lines import SUBMITTED_BY, one_line
from mlra.durations import format_duration
from mlra.terminal_text import printable_line


def attempt_started_line(e: ev.AttemptStarted) -> str:
    """`attempt a2 started: improve from a1 (5m budget; 30s kept at the run's end to
    validate): <instructions>`: what a search began, as every text display shows it."""
    origin = f"from {printable_line(e.parent)}" if e.parent else "from the starter"
    what = e.operator
    if e.variant:
        what += " " + " ".join(f"{k}={v}" for k, v in e.variant.items())
    notes = [f"{format_duration(e.reserve_s)} kept at the run's end to validate"] * (
        e.reserve_s > 0
    ) + [f"{printable_line(a)}'s raised to {format_duration(s)}" for a, s in e.raised.items()]
    budget = "".join(f"; {note}" for note in notes)
    budget = f" ({format_duration(e.time_limit_s)} budget{budget})" if e.time_limit_s > 0 else ""
    line = f"attempt {printable_line(e.attempt)} started: {one_line(what, 120)} {origin}{budget}"
    if e.instructions.strip() and not e.variant:
        line += f": {one_line(e.instructions, 200)}"
    return line


def attempt_finished_line(e: ev.AttemptFinished) -> str:
    """`attempt a2 validated: accuracy 0.7812 after 4m 10s` (a validation score, never the
    test split's), `attempt a3 buggy: <why>`; what it changed after a dash."""
    line = f"attempt {printable_line(e.attempt)} {e.status}"
    if e.score is not None:
        line += f": {printable_line(e.metric or 'validation')} {e.score:.4g}"
        if e.status != "validated" and e.why:
            line += f" ({one_line(e.why, 160)})"
    elif e.why:
        line += f": {one_line(e.why, 200)}"
    line += f" after {format_duration(e.duration_s)}"
    if e.summary.strip():
        line += f" — {one_line(e.summary, 160)}"
    return line


def attempt_ok(e: ev.AttemptFinished) -> bool:
    return e.status == "validated"


def graded_attempt_words(
    submission: ev.Submission | None, validation: float | None, test: float | None
) -> str:
    """What follows a search's score: the attempt graded, its validation score and the
    gap (test minus validation), and, where nothing was submitted, that the best validated
    attempt was graded instead. Empty where no attempt was graded."""
    if submission is None or submission.attempt is None:
        return ""
    attempt = printable_line(submission.attempt)
    words = f"attempt {attempt}"
    if submission.by not in SUBMITTED_BY:  # a deadline, a budget, a stop: nothing was submitted
        words += ", the best validated: nothing was submitted"
    if validation is not None:
        words += f"; validation {validation:.4g}"
        if test is not None:
            words += f", gap {test - validation:+.3g}"
    return f"({words})"
