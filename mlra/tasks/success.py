"""Whether a score counts as a success, by the task's own rule.

Benchmarks judge success differently (MLRC-Bench: a fraction of the gap between
the baseline and the best human score; MLAgentBench: more than 10% better than the
baseline), and a task ported from one should be judged as that benchmark judged
it. The normalized gap score stays mlra's common yardstick beside it; the rule only
decides `success`, and `success_bar` says in words which bar applied, so a reader
of the log, `mlra runs` or a report knows what "success" meant for this task.
"""

from __future__ import annotations

from mlra.tasks.evaluators.base import normalize
from mlra.tasks.sections import Metric
from mlra.tasks.spec import TaskSpec

DIRECTION_UNKNOWN = (
    "which way the score improves is unknown; state it with `--direction higher|lower` "
    "or `[metric] higher_is_better` in the folder's mlra.toml (task.toml after import)"
)


def success_of(metric: Metric, score: float | None) -> bool | None:
    """True or False by `metric.success_rule`; None when the score or a reference the
    rule needs is missing (a gap rule without `top`, say), as before rules existed."""
    if score is None or not metric.direction_known:
        return None  # with the direction unknown, no rule can say which side is better
    match metric.success_rule:
        case "gap_fraction":
            normalized = normalize(score, metric.baseline, metric.top)
            if normalized is None:
                return None
            if metric.success_strictly_above:
                return normalized > metric.success_fraction
            return normalized >= metric.success_fraction
        case "relative_improvement":
            bar = improvement_bar(metric)
            if bar is None:
                return None
            return score > bar if metric.higher_is_better else score < bar
        case "threshold":
            if metric.success_threshold is None:
                return None
            if metric.higher_is_better:
                return score >= metric.success_threshold
            return score <= metric.success_threshold


def improvement_bar(metric: Metric) -> float | None:
    """The score a relative-improvement rule must beat: the baseline moved by the
    improvement fraction of |baseline| in the metric's direction."""
    if metric.baseline is None:
        return None
    step = metric.success_improvement * abs(metric.baseline)
    return metric.baseline + step if metric.higher_is_better else metric.baseline - step


def success_bar(metric: Metric) -> str | None:
    """The rule and its bar in words (`relative_improvement: acc > 0.55, 10% over
    baseline 0.5`), for the log and every display; None where the rule has no bar
    (a reference it needs is missing)."""
    if not metric.direction_known:
        return f"not judged: {DIRECTION_UNKNOWN}"
    match metric.success_rule:
        case "gap_fraction":
            if metric.baseline is None or metric.top is None:
                return None
            sign = ">" if metric.success_strictly_above else ">="
            return f"gap_fraction: normalized {sign} {metric.success_fraction:g}"
        case "relative_improvement":
            bar = improvement_bar(metric)
            if bar is None or metric.baseline is None:
                return None
            sign = ">" if metric.higher_is_better else "<"
            return (
                f"relative_improvement: {metric.name} {sign} {bar:.6g}, "
                f"{metric.success_improvement:.0%} over baseline {metric.baseline:g}"
            )
        case "threshold":
            if metric.success_threshold is None:
                return None
            sign = ">=" if metric.higher_is_better else "<="
            return f"threshold: {metric.name} {sign} {metric.success_threshold:g}"


def with_direction(task: TaskSpec, direction: str | None) -> TaskSpec:
    """`task` with the direction the user stated (`--direction higher|lower`) where its
    own files state none; a task whose direction is known keeps it (the CLI refuses a
    contradiction before the run: `direction_conflict`)."""
    if direction is None or task.metric.direction_known:
        return task
    metric = task.metric.model_copy(
        update={"higher_is_better": direction == "higher", "direction_known": True}
    )
    stated = task.model_copy(update={"metric": metric})
    stated.root = task.root
    return stated


def direction_conflict(task: TaskSpec, direction: str | None) -> str | None:
    """Why `--direction` cannot be taken for `task`, or None."""
    m = task.metric
    if direction is None or not m.direction_known:
        return None
    known = "higher" if m.higher_is_better else "lower"
    if direction == known:
        return None
    return (
        f"--direction {direction}: {task.name}'s {m.name} is already {known}-is-better "
        "by its own files"
    )
