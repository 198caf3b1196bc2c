"""The paired table: two groups of runs over the same tasks (two models, or two
settings of one model), the score difference per task and the wins, losses and ties.

A group is the runs of one model where the runs have several models, else the runs of
one settings (the settings that differ, as the matrix shows them); each further group
is paired with the first. A task's side is the mean of its runs' scores (seeds), and a
task is paired only where both sides have a score; each side says how many runs its
mean is over, of how many (`side_text`): two seeds' mean against one run's score is a
weaker difference than two against two, and the table gave no hint of it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from mlra.batch.compare.matrix import scored
from mlra.batch.compare.runs import ComparedRun

TIE = 1e-9


@dataclass
class PairedRow:
    task: str
    a: float | None
    b: float | None
    diff: float | None
    """b minus a."""
    outcome: str
    """`win` (b is better), `loss`, `tie`, or `-` where a side has no score."""
    a_n: int = 0
    b_n: int = 0
    """The scored runs each side's mean is over..."""
    a_runs: int = 0
    b_runs: int = 0
    """...of the side's runs of the task."""


def side_text(mean: float | None, n: int, runs: int) -> str:
    """A side's mean with its count: `0.45 (n=2)`, `0.5 (n=1 of 3)` where runs of it
    have no score, `- (n=0 of 2)`."""
    value = "-" if mean is None else f"{mean:.4g}"
    return f"{value} (n={n})" if n == runs else f"{value} (n={n} of {runs})"


@dataclass
class Paired:
    a: str
    b: str
    """The two groups' names (a model, or its settings)."""
    by: str
    """`model` or `settings`: what tells the groups apart."""
    rows: list[PairedRow] = field(default_factory=list)
    wins: int = 0
    losses: int = 0
    ties: int = 0


def _groups(runs: list[ComparedRun]) -> tuple[str, dict[str, list[ComparedRun]]]:
    models = {r.model for r in runs}
    groups: dict[str, list[ComparedRun]] = {}
    if len(models) > 1:
        for r in runs:
            groups.setdefault(r.model, []).append(r)
        return "model", groups
    keys = sorted({k for r in runs for k in r.settings})
    differing = [
        k
        for k in keys
        if len({r.settings.get(k) for r in runs}) > 1 and k not in ("seed", "run_id")
    ]
    for r in runs:
        name = " ".join(f"{k}={r.settings.get(k, '(unset)')}" for k in differing) or "same"
        groups.setdefault(name, []).append(r)
    return "settings", groups


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def paired(runs: list[ComparedRun], metric: str | None = None) -> list[Paired]:
    """Each further group against the first, over the tasks both ran; [] where the runs
    are one group, or no task was run by two groups."""
    by, groups = _groups(runs)
    if len(groups) < 2:
        return []
    names = list(groups)
    first = groups[names[0]]
    out = []
    for name in names[1:]:
        other = groups[name]
        tasks = sorted({r.task for r in first} & {r.task for r in other})
        if not tasks:
            continue
        table = Paired(names[0], name, by)
        for task in tasks:
            side_a = [scored(r, metric) for r in first if r.task == task]
            side_b = [scored(r, metric) for r in other if r.task == task]
            values_a = [s.value for s in side_a if s.value is not None]
            values_b = [s.value for s in side_b if s.value is not None]
            a, b = _mean(values_a), _mean(values_b)
            counts = {"a_n": len(values_a), "b_n": len(values_b)}
            counts |= {"a_runs": len(side_a), "b_runs": len(side_b)}
            if a is None or b is None:
                table.rows.append(PairedRow(task, a, b, None, "-", **counts))
                continue
            higher = (side_a + side_b)[0].higher_is_better
            diff = b - a
            if abs(diff) <= TIE:
                outcome = "tie"
            else:
                outcome = "win" if (diff > 0) == higher else "loss"
            table.rows.append(PairedRow(task, a, b, diff, outcome, **counts))
            table.wins += outcome == "win"
            table.losses += outcome == "loss"
            table.ties += outcome == "tie"
        out.append(table)
    return out
