"""The comparison's matrix: one column a run, one row a fact (status, task, model, the
score and its verdict with the best starred, attempts, time, tokens, cost), then the
run settings that differ between the runs (`all_settings` for every one).

Cells are plain strings here; whoever prints them escapes them (the console with
mlra/terminal_text.py, the report with batch/report_text.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mlra.batch.compare.runs import ComparedRun, CompareError
from mlra.batch.task_labels import told_apart
from mlra.counts import format_tokens
from mlra.durations import format_duration
from mlra.scores import format_normalized

BEST = "*"
"""After the best score (by the metric's direction); ties all get it."""

_LOWER_IS_BETTER = re.compile(r"loss|err|perplex|ppl|mse|mae|rmse|nll|wer|cer|dist", re.I)


_SCORE_NAME = re.compile(r"acc|f1|auc|precision|recall|score|bleu|rouge|exact|map\b|iou", re.I)


def lower_by_name(name: str) -> bool:
    """A metric no run says the direction of: a loss or an error goes down."""
    return bool(_LOWER_IS_BETTER.search(name))


def higher_by_name_or_values(name: str, values: list[float]) -> bool:
    """Which way a number no run states the direction of is better, by the rule the
    curves' panels sort series by (overlay.py): a name that says loss or error goes down,
    one that says a score goes up, any other up where its values lie within 0 to 1 and
    down where they do not. tiny-lm prints its validation loss as `valid` (4.5): by its
    name alone it was higher-is-better, and the worse run starred."""
    if lower_by_name(name):
        return False
    if _SCORE_NAME.search(name):
        return True
    return bool(values) and all(0.0 <= v <= 1.0 for v in values)


@dataclass(frozen=True)
class Scored:
    value: float | None
    higher_is_better: bool


def metric_names(runs: list[ComparedRun]) -> set[str]:
    """What `--metric` may name: the gradings' metrics, the validations', the curves'."""
    names: set[str] = set()
    for run in runs:
        names.update(n for n in (run.metric, run.validation_metric) if n)
        names.update(run.metrics)
        names.update(s.name for s in run.series)
    return names


SHOWN_METRICS = 30
"""How many names an unknown `--metric` is answered with (a run's curves may be many)."""


def check_metric(runs: list[ComparedRun], metric: str | None) -> None:
    if metric is not None and metric not in metric_names(runs):
        # Cut at 8 without a word, tiny-lm's list left out `valid`, its validation loss.
        names = sorted(metric_names(runs))
        known = ", ".join(names[:SHOWN_METRICS]) or "none recorded"
        if len(names) > SHOWN_METRICS:
            known += f" and {len(names) - SHOWN_METRICS} more"
        raise CompareError(f"unknown metric {metric!r}: these runs have {known}")


def scored(run: ComparedRun, metric: str | None) -> Scored:
    """The run's number for `metric` (None: its own score) and which way is better: its
    grading's, else its best validation's, else a curve's last value (direction by
    name: a loss goes down)."""
    if metric is None or metric == run.metric:
        return Scored(run.score, run.higher_is_better is not False)
    if metric in run.metrics:
        value = run.metrics[metric]
        return Scored(value, higher_by_name_or_values(metric, [value]))
    if metric == run.validation_metric:
        return Scored(run.best_validation, run.validation_higher_is_better is not False)
    for series in run.series:
        if series.name == metric and series.points:
            values = [p.value for p in series.points]
            return Scored(values[-1], higher_by_name_or_values(metric, values))
    return Scored(None, not lower_by_name(metric))


def best_columns(runs: list[ComparedRun], metric: str | None) -> set[int]:
    """The columns holding the best score (by its direction) among each task's runs: two
    tasks' scores are not one scale (a batch folder of two tasks starred one task's 0.82
    over the other's 0.53); none for a task none of whose runs has a score."""
    marked: set[int] = set()
    for task in dict.fromkeys(r.task for r in runs):
        known = [
            (i, v, s.higher_is_better)
            for i, r in enumerate(runs)
            if r.task == task
            for s in [scored(r, metric)]
            if (v := s.value) is not None
        ]
        if not known:
            continue
        values = [v for _, v, _ in known]
        best = max(values) if known[0][2] else min(values)
        marked |= {i for i, v, _ in known if v == best}
    return marked


def verdict(run: ComparedRun) -> str:
    if run.score is None:
        return "no score" if run.status not in ("running", "interrupted") else "-"
    if run.self_reported:
        return "self-reported"
    if not run.direction_known or run.success is None:
        return "not judged"
    return "success" if run.success else "below bar"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _normalized(value: float | None) -> str:
    return "-" if value is None else format_normalized(value)


@dataclass
class Row:
    name: str
    cells: list[str]
    section: str = "outcome"
    """`outcome` (the facts) or `settings` (run_started's config)."""


@dataclass
class Matrix:
    runs: list[str]
    """The columns' run ids."""
    rows: list[Row] = field(default_factory=list)
    best: set[int] = field(default_factory=set)
    """Columns with the best score (starred)."""
    metric: str = ""
    """The compared metric's name and direction, as the score row says it."""
    same_hidden: int = 0
    """Settings left out because every run has the same value."""
    best_of: str = ""
    """What the star is the best of, where the runs have more than one task (" of each
    task's runs"): the footnotes say it after the metric."""
    tasks_apart: str = ""
    """Where runs of two tasks of one name are compared, the line that says so and what
    each is called (batch/task_labels.py `told_apart`); empty where none are."""


def one_metric(runs: list[ComparedRun], metric: str | None) -> bool:
    """Whether one metric names every run's score: `--metric`, or the one metric each
    task's gradings recorded. A task none of whose runs was graded says no metric: runs
    of two tasks, one scored, had the score row labelled `accuracy ↑` over the other
    task's empty cells, as if they were accuracies not reached."""
    if metric is not None:
        return True
    names = {r.metric for r in runs if r.metric}
    return len(names) <= 1 and {r.task for r in runs if r.metric} >= {r.task for r in runs}


def score_label(runs: list[ComparedRun], metric: str | None) -> str:
    if not one_metric(runs, metric):
        return "score"  # not the first run's metric for every run: each in its own
    name = metric or next((r.metric for r in runs if r.metric), None) or "score"
    if not any(scored(r, metric).value is not None for r in runs):
        return name
    higher = next(scored(r, metric) for r in runs if scored(r, metric).value is not None)
    return f"{name} {'↑' if higher.higher_is_better else '↓'}"


def outcome_rows(runs: list[ComparedRun], metric: str | None, best: set[int]) -> list[Row]:
    def attempts(r: ComparedRun) -> str:
        return r.attempts.in_words if r.attempts is not None else "-"

    def status(r: ComparedRun) -> str:
        return f"{r.status} ({r.reason})" if r.reason else r.status

    def score(i: int, r: ComparedRun) -> str:
        s = scored(r, metric).value
        mark = ("^" if r.self_reported and metric is None else "") + (BEST if i in best else "")
        return _num(s) + mark

    return [
        Row("status", [status(r) for r in runs]),
        Row("task", [r.task or "-" for r in runs]),
        Row("model", [r.model or "-" for r in runs]),
        Row(score_label(runs, metric), [score(i, r) for i, r in enumerate(runs)]),
        Row("verdict", [verdict(r) for r in runs]),
        Row("normalized", [_normalized(r.normalized) for r in runs]),
        Row("best validation", [_num(r.best_validation) for r in runs]),
        Row("attempts", [attempts(r) for r in runs]),
        Row("time", [format_duration(r.duration_s) for r in runs]),
        Row("tokens", [format_tokens(r.tokens, estimated=r.tokens_estimated) for r in runs]),
        Row("cost", [f"${r.cost_usd:.2f}" for r in runs]),
    ]


def settings_rows(runs: list[ComparedRun], *, all_settings: bool) -> tuple[list[Row], int]:
    """The settings rows (those that differ, or all) and how many were alike."""
    names = sorted({k for r in runs for k in r.settings})
    rows, same = [], 0
    for name in names:
        cells = [r.settings.get(name, "(unset)") for r in runs]
        if len(set(cells)) == 1:
            same += 1
            if not all_settings:
                continue
        rows.append(Row(name, cells, "settings"))
    return rows, same


def _best_of(runs: list[ComparedRun], metric: str | None) -> str:
    if len({r.task for r in runs}) < 2:
        return ""
    if not one_metric(runs, metric):
        return " of each task's runs, each in its task's metric"
    return " of each task's runs"


def build(
    runs: list[ComparedRun], metric: str | None = None, *, all_settings: bool = False
) -> Matrix:
    check_metric(runs, metric)
    best = best_columns(runs, metric)
    settings, same = settings_rows(runs, all_settings=all_settings)
    return Matrix(
        runs=[r.id for r in runs],
        rows=outcome_rows(runs, metric, best) + settings,
        best=best,
        metric=score_label(runs, metric),
        same_hidden=0 if all_settings else same,
        best_of=_best_of(runs, metric),
        tasks_apart=told_apart([r.task_name or r.task for r in runs], [r.task for r in runs]),
    )
