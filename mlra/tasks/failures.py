"""Scores that are not results: what an evaluator returns when it failed (a
benchmark's own failure value), a number that is not finite, one the metric cannot
take. Grading turns them into "no score", and a baseline run that gets one records
nothing (tasks/foreign/baselines.py). Imports nothing of the evaluators, so the
loaders can use it."""

from __future__ import annotations

import math
from collections.abc import Iterable


def failure_problem(
    score: float, failure_values: Iterable[float], score_range: tuple[float, float] | None
) -> str | None:
    """Why `score` is not a measurement (the evaluator's failure value, not finite, out
    of the metric's range), or None when it is one."""
    if not math.isfinite(score):
        return f"the score {score} is not a finite number"
    for value in failure_values:
        if math.isclose(score, value, rel_tol=1e-9, abs_tol=1e-12):
            return f"{score:g} is the value the evaluator returns when it fails"
    if score_range is not None:
        low, high = score_range
        if not low <= score <= high:
            return f"{score:g} is outside the scores the metric can take ({low:g} to {high:g})"
    return None
