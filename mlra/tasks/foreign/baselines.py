"""A measured baseline, recorded: where a benchmark publishes no baseline score (all
of MLAgentBench, MLRC-Bench's newer tasks), `mlra run PATH --model baseline` runs the
unchanged starter, and its graded score is written beside the prepared copy, which
every later load of the folder reads (tasks/foreign/loader.py).

A baseline is a measurement that succeeded. A recipe whose step failed, a grading
that failed or returned the evaluator's failure value (vectorization's starter fails
on numpy 2 and its eval.py then returns 1e10), a score that is not finite or not in
the metric's range: each records nothing and says why, since a false baseline makes
every later run a "success". Each baseline run that did succeed is one measurement,
and the baseline is their mean (tasks/foreign/measurements.py)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from mlra.tasks.foreign import measurements
from mlra.tasks.foreign.loader import marker
from mlra.tasks.foreign.mlrcbench import PUBLISHED, published_name
from mlra.tasks.spec import TaskSpec


def records_baselines(task: TaskSpec) -> bool:
    """Whether baseline runs of `task` measure its baseline: a prepared foreign folder
    whose benchmark publishes none."""
    found = marker(task.root)
    if found is None:
        return False
    if found.layout != "mlrcbench":
        return True
    # weather_forcast has a published top and no published baseline: measured here.
    return "test" not in PUBLISHED.get(published_name(task.root, found.name), {})


def record_measured_baseline(
    task: TaskSpec,
    score: float | None,
    *,
    run_id: str,
    problem: str | None = None,
) -> str | None:
    """Record `score` as a measurement of the task's baseline where baseline runs measure
    it and the run succeeded; the line the run's log gets (what was recorded, or why
    nothing was), or None where baselines are not measured."""
    if not records_baselines(task):
        return None
    m = task.metric
    if problem is None and score is None:
        problem = "the run has no score"
    if problem is None and score is not None:
        problem = measurements.failure_problem(score, m.failure_values, m.score_range)
    if problem is not None:
        return f"no baseline recorded for {task.name}: {problem}"
    assert score is not None
    runs = measurements.record(task.root, score, run_id, now=time.time())
    mean = statistics.fmean(float(r["score"]) for r in runs)
    over = f"the mean of {len(runs)} runs" if len(runs) > 1 else "measured by this run"
    return (
        f"the baseline of {task.name} is now {mean:g}, {over} of the unchanged starter "
        f"(this run: {score:g}; recorded in {task.root / measurements.BASELINE_FILE})"
    )


def baseline_lines(task: TaskSpec, named: Path | None = None) -> list[str]:
    """What `mlra tasks show` says of the recorded baseline runs: each with its score,
    so one bad run is seen, and how to clear them (by `named`, the folder the user
    gave, where the task was read from its prepared copy)."""
    if not records_baselines(task):
        return []
    runs = measurements.runs_of(task.root, task.metric.failure_values)
    if not runs:
        return []
    lines = [f"baseline runs: {len(runs)} recorded (the baseline is their mean)"]
    for r in runs:
        when = r.get("measured_at")
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(when)) if when else "earlier"
        lines.append(f"  {float(r['score']):g}  {r.get('run') or '?'}  ({stamp})")
    lines.append(f"  clear them: mlra tasks clear-baseline {named or task.root} [RUN_ID]")
    return lines
