"""The experiments table: what the worker tried (its `note`s) beside how each try
validated, folded from the log.

Each `validation` event gets one `experiment` event right after it (written by
the controller, so a resumed run folds the recorded one and writes nothing): it
pairs the latest `experiment_note` no row has used yet with the validation's
score, and marks whether that score is the best so far in the metric's own
direction. The supervisor reads the table as text at each review and after each
subtask, so its plans compare experiments instead of repeating them; the
console, replay, `mlra runs` and batch reports read the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlra import events as ev
from mlra.durations import format_duration

TABLE_ROWS = 20
"""Rows the supervisor's table shows: the best one always, then the latest."""


@dataclass
class ExperimentTable:
    """The fold of notes, validations and experiment rows (one of `RunState`'s parts)."""

    rows: list[ev.Experiment] = field(default_factory=list)
    validations: dict[int, ev.Validation] = field(default_factory=dict)
    """Every validation, by `seq`: a row's metric, direction and outcome."""
    notes: int = 0
    pending: ev.ExperimentNote | None = None
    """The latest note no row has used yet (a failed validation's row shows it and leaves
    it for the next)."""
    job_since_note: str | None = None
    """The first background job started after the pending note: the job an experiment
    ran as when its note named none."""

    def apply(self, event: ev.Event) -> None:
        match event:
            case ev.ExperimentNote():
                self.notes += 1
                self.pending = event
                self.job_since_note = None
            case ev.JobStarted():
                if self.job_since_note is None:
                    self.job_since_note = event.job
            case ev.Validation():
                self.validations[event.seq] = event
            case ev.Experiment():
                self.rows.append(event)
                validation = self.validations.get(event.validation_seq)
                if validation is None or validation.ok:
                    # A failed validation tested nothing: the note waits for the retry.
                    self.pending = None
                    self.job_since_note = None
            case _:
                pass

    def add_attempt(self, finished: ev.AttemptFinished) -> None:
        """A search's attempt as a row (derived in the fold, never logged): its validation
        where it ended, so the chart, `result.json` and `mlra runs` show each attempt's
        validation over time as they show a line of work's. A buggy attempt is a failed
        row, one out of time a row marked so (`out_of_time`: its time, not its recipe,
        ended it); one stopped or lost tested nothing."""
        if finished.score is None and finished.status not in ("buggy", "out of time"):
            return
        validation = ev.Validation(
            seq=finished.seq,
            t=finished.t,
            artifact=finished.artifact or "",
            sha256=finished.sha256,
            kept=finished.kept,
            ok=finished.score is not None,
            metric=finished.metric,
            higher_is_better=finished.higher_is_better,
            score=finished.score,
            normalized=finished.normalized,
            told=finished.why or None,
            out_of_time=finished.status == "out of time",
        )
        self.validations[finished.seq] = validation
        what = finished.summary.splitlines()[0][:200] if finished.summary.strip() else ""
        row = ev.Experiment(
            seq=finished.seq,
            t=finished.t,
            number=len(self.rows) + 1,
            hypothesis=f"attempt {finished.attempt}" + (f": {what}" if what else ""),
            validation_seq=finished.seq,
            score=finished.score,
            normalized=finished.normalized,
            best=finished.score is not None and self._beats(finished.score, validation),
        )
        self.rows.append(row)

    # --- rows ---------------------------------------------------------------------------

    def validation_of(self, row: ev.Experiment) -> ev.Validation | None:
        return self.validations.get(row.validation_seq)

    @property
    def best(self) -> ev.Experiment | None:
        """The best row so far: the last one marked best when it was written."""
        for row in reversed(self.rows):
            if row.best:
                return row
        return None

    @property
    def metric(self) -> str:
        """The metric of the latest scored validation ("" before one)."""
        for row in reversed(self.rows):
            validation = self.validation_of(row)
            if validation is not None and validation.metric and row.score is not None:
                return validation.metric
        return ""

    @property
    def higher_is_better(self) -> bool:
        for row in reversed(self.rows):
            validation = self.validation_of(row)
            if validation is not None and row.score is not None:
                return validation.higher_is_better
        return True

    def next_row(self, validation: ev.Validation) -> ev.Experiment:
        """The row a validation just folded makes: the pending note, its job, the score,
        and whether the score beats every earlier one in the metric's direction."""
        note = self.pending
        score = validation.score if validation.ok else None
        return ev.Experiment(
            number=len(self.rows) + 1,
            hypothesis=note.hypothesis if note else "",
            change=note.change if note else "",
            job=(note.job if note else None) or self.job_since_note,
            validation_seq=validation.seq,
            score=score,
            normalized=validation.normalized if validation.ok else None,
            best=score is not None and self._beats(score, validation),
        )

    def _beats(self, score: float, validation: ev.Validation) -> bool:
        best = self.best
        if best is None or best.score is None:
            return True
        earlier = self.validation_of(best)
        if earlier is not None and earlier.metric != validation.metric:
            return True  # another metric: the first of it is the best of it
        return score > best.score if validation.higher_is_better else score < best.score

    def series(self) -> list[tuple[float, float | None, bool]]:
        """(run clock, score or None, best so far) for each row, for the charts."""
        return [(row.t, row.score, row.best) for row in self.rows]

    # --- as text ------------------------------------------------------------------------

    def render(self, limit: int = TABLE_ROWS) -> str:
        """The table as the supervisor reads it: one line a row, the best marked."""
        if not self.rows:
            waiting = (
                f" ({self.notes} note{'s' if self.notes != 1 else ''}, none validated yet)"
                if self.notes
                else ""
            )
            return f"No experiments validated yet{waiting}."
        best = self.best
        metric = self.metric or "score"
        direction = "higher is better" if self.higher_is_better else "lower is better"
        lines = [f"Experiments ({len(self.rows)}; {metric}, {direction}; * = best so far):"]
        shown = self.rows[-limit:]
        if best is not None and best not in shown:
            shown = [best, *shown[1:]]
        if len(self.rows) > len(shown):
            lines.append(f"  ({len(self.rows) - len(shown)} earlier rows not shown)")
        for row in shown:
            lines.append(self._line(row, best))
        if self.pending is not None:
            lines.append(f"  next (not validated yet): {self.pending.hypothesis}")
        return "\n".join(lines)

    def _line(self, row: ev.Experiment, best: ev.Experiment | None) -> str:
        validation = self.validation_of(row)
        if row.score is not None:
            score = f"{row.score:.4g}"
        elif validation is not None and not validation.ok:
            # What the agent was told, not the evaluator's words: the supervisor reads it.
            why = validation.told if validation.told is not None else validation.error
            word = "out of time" if validation.out_of_time else "failed"
            score = word + (f" ({why[:120]})" if why else "")
        else:
            score = "no score"
        mark = "*" if row is best else " "
        # The time in a form a deterministic re-run's comparison leaves out (agent/loop/fingerprint.py).
        parts = [f"{mark}#{row.number} {score} ({format_duration(row.t)} into the run)"]
        if row.hypothesis:
            parts.append(f"hypothesis: {row.hypothesis}")
        if row.change:
            parts.append(f"change: {row.change}")
        if row.job:
            parts.append(f"job: {row.job}")
        if validation is not None and validation.artifact:
            parts.append(f"artifact: {validation.artifact}")
        return " | ".join(parts)
