"""The baseline runs recorded beside a prepared copy (`mlra-baseline.json`), read and
written here: each is one measurement of the unchanged starter, and the baseline is
the mean of those that are measurements at all. A file written before failures were
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


def measured_baseline(folder: Path, failure_values: Iterable[float] = ()) -> float | None:
    runs = runs_of(folder, failure_values)
    return statistics.fmean(float(r["score"]) for r in runs) if runs else None


def record(folder: Path, score: float, run_id: str, *, now: float) -> list[dict[str, Any]]:
    """Add (or, for a re-graded run, replace) one run's measurement; all runs after."""
    path = folder / BASELINE_FILE
    with locked(path.with_name(path.name + ".lock")):
        runs = [r for r in runs_of(folder) if r.get("run") != run_id]
        runs.append({"score": score, "run": run_id, "measured_at": now})
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
    data = {"score": statistics.fmean(float(r["score"]) for r in runs), "runs": runs}
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2))
    os.replace(partial, path)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
