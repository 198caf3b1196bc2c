"""The baseline runs recorded beside a prepared copy (`mlra-baseline.json`), read and
written here: each is one measurement of the unchanged starter, and the baseline is
the mean of those that are measurements at all and ran alone on the machine. A file written before failures were
refused may hold one (vectorization's 1e10, a non-finite score): it is dropped when
read, never averaged in.

The file is rewritten whole, under a lock, so a load never reads half of it, and a
batch of baseline seeds finishing at once loses none of them."""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mlra.tasks.failures import failure_problem
from mlra.tasks.foreign.common import BASELINE_FILE, locked


def runs_of(folder: Path, failure_values: Iterable[float] = ()) -> list[dict[str, Any]]:
    """The baseline runs recorded for a prepared copy, oldest first, failures left out
    (a file from before runs were kept, with one score, is one run)."""
    path = folder / BASELINE_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict):
        return []
    runs = data.get("runs")
    if not isinstance(runs, list):
        runs = [{"score": data.get("score"), "run": data.get("run"), "measured_at": None}]
    fails = list(failure_values)
    return [
        r
        for r in runs
        if isinstance(r, dict)
        and _number(r.get("score"))
        and failure_problem(float(r["score"]), fails, None) is None
    ]


def shared_by(run: dict[str, Any]) -> int | None:
    """How many runs shared the machine as this one measured (1: it ran alone; None: a
    record from before mlra noted it)."""
    value = run.get("shared_by")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def counted(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs the baseline is the mean of: those that had the machine to themselves. A
    run of a batch beside others (`--parallel 2`) is kept, not counted: a timing metric
    measured so is not comparable (vectorization's run time, 9.4 s beside a sibling and
    3.8 s alone, made the unchanged starter a 3x "success" against their mean)."""
    return [r for r in runs if (shared_by(r) or 1) == 1]


def measured_baseline(folder: Path, failure_values: Iterable[float] = ()) -> float | None:
    runs = counted(runs_of(folder, failure_values))
    return statistics.fmean(float(r["score"]) for r in runs) if runs else None


def record(
    folder: Path, score: float, run_id: str, *, now: float, shared: int = 1
) -> list[dict[str, Any]]:
    """Add (or, for a re-graded run, replace) one run's measurement, made with `shared`
    runs on the machine at once (itself included); all runs after."""
    path = folder / BASELINE_FILE
    with locked(path.with_name(path.name + ".lock")):
        runs = [r for r in runs_of(folder) if r.get("run") != run_id]
        runs.append({"score": score, "run": run_id, "measured_at": now, "shared_by": shared})
        _write(path, runs)
    return runs


def clear(folder: Path, run_id: str | None = None) -> list[dict[str, Any]]:
    """Forget every recorded run, or the one named; the runs left."""
    path = folder / BASELINE_FILE
    with locked(path.with_name(path.name + ".lock")):
        runs = [] if run_id is None else [r for r in runs_of(folder) if r.get("run") != run_id]
        if runs:
            _write(path, runs)
        else:
            path.unlink(missing_ok=True)
    return runs


def _write(path: Path, runs: list[dict[str, Any]]) -> None:
    alone = counted(runs)
    mean = statistics.fmean(float(r["score"]) for r in alone) if alone else None
    data = {"score": mean, "runs": runs}
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2))
    os.replace(partial, path)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
