"""The lm-eval evaluator's scores from lm-eval's results: the "task/metric" table,
the primary score (one metric, an unweighted mean, or a mean weighted by each task's
examples, `primary_weighting = "samples"`) and the JSON-safe copy kept in the details.

Apart from tasks/evaluators/lm_eval.py, which runs lm-eval, so how a score is made
from its numbers reads (and is tested) without lm-eval, torch or a model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def flatten_metrics(results: Mapping[str, Mapping[str, object]]) -> dict[str, float]:
    """{"task/metric": value} for every finite numeric metric; stderr entries are left out.

    lm-eval keys metrics as "metric,filter"; the filter is dropped when it is "none".
    """
    metrics: dict[str, float] = {}
    for task, values in results.items():
        for key, value in values.items():
            if "," not in key or "_stderr" in key:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if not math.isfinite(float(value)):
                continue
            metric, _, filt = key.partition(",")
            metrics[f"{task}/{metric if filt == 'none' else key}"] = float(value)
    return metrics


def sample_counts(n_samples: Any) -> dict[str, int]:
    """{task: examples scored} from lm-eval's "n-samples" ({"effective": n, ...})."""
    out: dict[str, int] = {}
    if isinstance(n_samples, dict):
        for task, counts in n_samples.items():
            n = counts.get("effective") if isinstance(counts, dict) else None
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                out[str(task)] = n
    return out


def primary_score(
    metrics: dict[str, float],
    primary: str | list[str],
    *,
    sizes: dict[str, int] | None = None,
) -> tuple[float | None, list[str], list[str]]:
    """(score, the metrics it averages, the entries that matched nothing).

    One "task/metric" is the score itself; a list is averaged without weights, as
    a benchmark that reports "the SuperGLUE average" means; a glob entry stands
    for every metric it matches. With `sizes` ({task: examples}), each metric
    counts by its task's examples, as lm-eval 0.4.0-0.4.2 averaged a group; a task
    without a count is then missing.
    """
    import fnmatch

    used: list[str] = []
    missing: list[str] = []
    for entry in primary if isinstance(primary, list) else [primary]:
        if any(c in entry for c in "*?["):
            hits = sorted(k for k in metrics if fnmatch.fnmatchcase(k, entry))
        else:
            hits = [entry] if entry in metrics else []
        if not hits:
            missing.append(entry)
        used += [h for h in hits if h not in used]
    if sizes is not None:
        missing += [k for k in used if k.split("/")[0] not in sizes]
    if missing or not used:
        return None, used, missing
    if sizes is not None:
        total = sum(sizes[k.split("/")[0]] for k in used)
        return sum(metrics[k] * sizes[k.split("/")[0]] for k in used) / total, used, missing
    return sum(metrics[k] for k in used) / len(used), used, missing


def plain(value: Any) -> Any:
    """JSON-safe copy (NaN and odd types as strings) for the outcome's details."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
