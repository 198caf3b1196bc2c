"""A measured baseline, recorded: where a benchmark publishes no baseline score (all
of MLAgentBench, MLRC-Bench's newer tasks), `mlra run PATH --model baseline` runs the
unchanged starter, and its graded score is written beside the prepared copy, which
every later load of the folder reads (tasks/foreign/loader.py).

A baseline is a measurement that succeeded. A recipe whose step failed, a grading
that failed or returned the evaluator's failure value (vectorization's starter fails
on numpy 2 and its eval.py then returns 1e10), a score that is not finite or not in
the metric's range, a recipe the user changed or stopped (agent/loop/evaluation.py):
each records nothing and says why, since a false baseline makes every later run a
"success". Each baseline run that did succeed is one measurement,
and the baseline is the mean of those that ran alone (tasks/foreign/measurements.py):
runs of a batch beside others on the machine are kept, listed and not counted."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from mlra.tasks.foreign import measurements
from mlra.tasks.foreign.loader import detect, marker
from mlra.tasks.foreign.mlrcbench import PUBLISHED, published_name
from mlra.tasks.spec import TaskSpec


def records_baselines(task: TaskSpec) -> bool:
    """Whether baseline runs of `task` measure its baseline: a prepared foreign folder
    whose benchmark publishes none."""
    found = marker(task.root)
    if found is None:
        return False
    return _measured(task.root, found.layout, found.name)


def will_record_baselines(task: TaskSpec) -> bool:
    """`records_baselines`, for a foreign folder not yet prepared too (a batch about to
    prepare it in its first run)."""
    if marker(task.root) is not None:
        return records_baselines(task)
    layout = detect(task.root)
    return layout is not None and _measured(task.root, layout, task.root.name)


def _measured(folder: Path, layout: str, name: str) -> bool:
    if layout != "mlrcbench":
        return True
    # weather_forcast has a published top and no published baseline: measured here.
    return "test" not in PUBLISHED.get(published_name(folder, name), {})


def record_measured_baseline(
    task: TaskSpec,
    score: float | None,
    *,
    run_id: str,
    problem: str | None = None,
    shared_by: int = 1,
) -> str | None:
    """Record `score` as a measurement of the task's baseline where baseline runs measure
    it and the run succeeded; the line the run's log gets (what was recorded, or why
    nothing was), or None where baselines are not measured. A run that shared the
    machine with `shared_by - 1` others of a batch is recorded, and not counted."""
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
    runs = measurements.record(task.root, score, run_id, now=time.time(), shared=shared_by)
    alone = measurements.counted(runs)
    where = task.root / measurements.BASELINE_FILE
    if shared_by > 1:
        others = f"{shared_by - 1} other run{'' if shared_by == 2 else 's'}"
        stays = (
            f"it stays {_mean(alone):g}, "
            + (f"the mean of {len(alone)} runs alone" if len(alone) > 1 else "one run's alone")
            if alone
            else "it has none until a run measures it alone (`mlra run` or `--parallel 1`)"
        )
        return (
            f"not counted in the baseline of {task.name}: this run shared the machine with "
            f"{others} of a batch, and a score measured so is not comparable with one "
            f"measured alone; {stays} (this run: {score:g}, kept in {where})"
        )
    return (
        f"the baseline of {task.name} is now {_mean(alone):g}, {_of_runs(alone)} of the "
        f"unchanged starter (this run: {score:g}; recorded in {where})"
    )


def _mean(runs: list[dict[str, Any]]) -> float:
    return statistics.fmean(float(r["score"]) for r in runs)


def _of_runs(runs: list[dict[str, Any]]) -> str:
    return f"the mean of {len(runs)} runs" if len(runs) > 1 else "measured by this run"


def baseline_lines(task: TaskSpec, named: Path | None = None) -> list[str]:
    """What `mlra tasks show` says of the recorded baseline runs: each with its score,
    so one bad run is seen, and how to clear them (by `named`, the folder the user
    gave, where the task was read from its prepared copy)."""
    if not records_baselines(task):
        return []
    runs = measurements.runs_of(task.root, task.metric.failure_values)
    if not runs:
        return []
    alone = measurements.counted(runs)
    mean = (
        "none ran alone: no baseline"
        if not alone
        else "the baseline is their mean"
        if len(alone) == len(runs)
        else f"the baseline is the mean of the {len(alone)} that ran alone"
    )
    lines = [f"baseline runs: {len(runs)} recorded ({mean})"]
    for r in runs:
        when = r.get("measured_at")
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(when)) if when else "earlier"
        lines.append(f"  {float(r['score']):g}  {r.get('run') or '?'}  ({stamp}, {_how(r)})")
    lines.append(f"  clear them: mlra tasks clear-baseline {named or task.root} [RUN_ID]")
    return lines


def _how(run: dict[str, Any]) -> str:
    """Whether a baseline run had the machine to itself, as `tasks show` says it."""
    shared = measurements.shared_by(run)
    if shared is None:
        return "recorded before mlra noted whether it ran alone; counted"
    if shared == 1:
        return "ran alone"
    return f"beside {shared - 1} other run{'' if shared == 2 else 's'} of a batch; not counted"
