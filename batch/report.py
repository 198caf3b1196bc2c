"""The batch report: per task and model, mean ± standard error over seeds, success
rate, time, tokens, cost and failures, from the run folders alone.

Every number comes from each run's `result.json` (or, for a run that never
finished, from folding its event log), so `mlra report DIR` gives the same
tables whenever and wherever it is run. Plots are written with matplotlib's
Agg backend (no display needed).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlra import events as ev
from mlra.agent.eventlog import EVENTS_FILE, LogDamage, read_events
from mlra.agent.state import RunResult, fold, result_of
from mlra.batch.state import RUNS

REPORT_FILES = ("report.md", "report.csv", "report.json", "score.png", "normalized.png")


@dataclass
class RunRow:
    run_id: str
    task: str
    model: str
    seed: int | None
    status: str
    reason: str
    score: float | None
    normalized_score: float | None
    success: bool
    duration_s: float
    tokens: int
    cost_usd: float
    failure: str | None
    """Why the run counts as failed (no score), or None."""
    isolation: str | None = None
    """The sandbox isolation the run had ("bwrap", "docker", "none")."""
    unisolated: bool = False
    """The run was scored without isolation: the agent could have reached the grader."""


@dataclass
class Group:
    task: str
    model: str
    runs: int
    scored: int
    score_mean: float | None
    score_se: float | None
    normalized_mean: float | None
    normalized_se: float | None
    success_rate: float
    median_duration_s: float | None
    tokens: int
    cost_usd: float
    failures: dict[str, int] = field(default_factory=dict)
    isolation: str = ""
    """The isolations the group's runs had, e.g. "bwrap" or "bwrap;none"."""
    unisolated: int = 0
    """Scored runs of the group that had no isolation (their scores are in the means)."""


def mean_se(values: list[float]) -> tuple[float | None, float | None]:
    """The mean and its standard error (sample standard deviation / sqrt n)."""
    if not values:
        return None, None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, statistics.stdev(values) / math.sqrt(len(values))


def load_run(run_dir: Path) -> tuple[RunResult, int | None] | None:
    log = run_dir / EVENTS_FILE
    events: list[ev.Event] = []
    if log.is_file():
        try:
            events = read_events(log)
        except LogDamage:
            events = []
    seed = None
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    if started is not None:
        seed = started.config.get("seed")
    result_file = run_dir / "result.json"
    if result_file.is_file():
        result = RunResult.model_validate_json(result_file.read_text(encoding="utf-8"))
        if result.isolation is None and started is not None:  # a result.json from before
            result.isolation = started.sandbox.isolation
        return result, seed
    if started is None:
        return None
    state = fold(events)
    result = result_of(state)
    if state.finished is None:
        result.status, result.reason = "unfinished", "unfinished"
    return result, seed


def failure_of(r: RunResult) -> str | None:
    if r.status == "finished" and r.score is not None:
        return None
    if r.status == "finished":
        return "no score"
    return r.reason if r.status != "unfinished" else "unfinished"


def collect(out: Path) -> list[RunRow]:
    rows = []
    runs_dir = out / RUNS if (out / RUNS).is_dir() else out
    for run_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        loaded = load_run(run_dir)
        if loaded is None:
            continue
        r, seed = loaded
        success = (
            bool(r.success)
            if r.success is not None
            else (r.normalized_score is not None and r.normalized_score >= 0.05)
        )
        rows.append(
            RunRow(
                run_id=r.run_id or run_dir.name,
                task=r.task,
                model=r.model,
                seed=seed,
                status=r.status,
                reason=r.reason,
                score=r.score,
                normalized_score=r.normalized_score,
                success=success,
                duration_s=r.duration_s,
                tokens=r.tokens,
                cost_usd=r.cost_usd,
                failure=failure_of(r),
                isolation=r.isolation,
                unisolated=r.unisolated and r.score is not None,
            )
        )
    return rows


def summarize(rows: list[RunRow]) -> list[Group]:
    groups: dict[tuple[str, str], list[RunRow]] = {}
    for row in rows:
        groups.setdefault((row.task, row.model), []).append(row)
    out = []
    for (task, model), members in sorted(groups.items()):
        scores = [m.score for m in members if m.score is not None]
        normalized = [m.normalized_score for m in members if m.normalized_score is not None]
        score_mean, score_se = mean_se(scores)
        norm_mean, norm_se = mean_se(normalized)
        out.append(
            Group(
                task=task,
                model=model,
                runs=len(members),
                scored=len(scores),
                score_mean=score_mean,
                score_se=score_se,
                normalized_mean=norm_mean,
                normalized_se=norm_se,
                success_rate=sum(m.success for m in members) / len(members),
                median_duration_s=statistics.median(m.duration_s for m in members),
                tokens=sum(m.tokens for m in members),
                cost_usd=round(sum(m.cost_usd for m in members), 6),
                failures=dict(Counter(m.failure for m in members if m.failure)),
                isolation=";".join(sorted({m.isolation or "unknown" for m in members})),
                unisolated=sum(m.unisolated for m in members),
            )
        )
    return out


def _pm(mean: float | None, se: float | None) -> str:
    if mean is None:
        return "–"
    return f"{mean:.4g} ± {se:.2g}" if se is not None else f"{mean:.4g}"


def _unisolated_mark(g: Group) -> str:
    """What follows a group's scores when some were earned without isolation."""
    if not g.unisolated:
        return ""
    if g.unisolated == g.scored:
        return " (unisolated)"
    return f" ({g.unisolated} of {g.scored} unisolated)"


def markdown(groups: list[Group], rows: list[RunRow]) -> str:
    lines = [
        "# Batch report",
        "",
        f"{len(rows)} runs; mean ± standard error over seeds; success = at least 5% of the "
        "baseline-to-top gap closed (the task's own fraction where it sets one).",
        "",
        "| task | model | runs | scored | score | normalized | success | median time | tokens | cost | failures | isolation |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        failures = ", ".join(f"{k} ×{v}" for k, v in sorted(g.failures.items())) or "–"
        median = f"{g.median_duration_s:.1f}s" if g.median_duration_s is not None else "–"
        mark = _unisolated_mark(g)
        score = _pm(g.score_mean, g.score_se) + (mark if g.score_mean is not None else "")
        normalized = _pm(g.normalized_mean, g.normalized_se)
        normalized += mark if g.normalized_mean is not None else ""
        lines.append(
            f"| {g.task} | {g.model} | {g.runs} | {g.scored} | {score} | {normalized} | "
            f"{g.success_rate:.0%} | {median} | {g.tokens:,} | ${g.cost_usd:.4f} | {failures} | "
            f"{g.isolation.replace(';', ', ')} |"
        )
    if any(g.unisolated for g in groups):
        lines += [
            "",
            "Unisolated: scored with sandbox isolation none, so the agent's commands could "
            "reach what the grader reads; such scores are not comparable with isolated ones.",
        ]
    return "\n".join(lines) + "\n"


CSV_FIELDS = [
    "task", "model", "runs", "scored", "score_mean", "score_se", "normalized_mean",
    "normalized_se", "success_rate", "median_duration_s", "tokens", "cost_usd", "failures",
    "isolation", "unisolated",
]  # fmt: skip


def write_csv(path: Path, groups: list[Group]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for g in groups:
            row: dict[str, Any] = {k: getattr(g, k) for k in CSV_FIELDS}
            row["failures"] = ";".join(f"{k}={v}" for k, v in sorted(g.failures.items()))
            writer.writerow({k: "" if v is None else v for k, v in row.items()})


def plot(out: Path, groups: list[Group]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({g.task for g in groups})
    models = sorted({g.model for g in groups})
    by_key = {(g.task, g.model): g for g in groups}
    width = 0.8 / max(1, len(models))

    fig, axes = plt.subplots(
        1, len(tasks), figsize=(max(4.0, 3.5 * len(tasks)), 3.5), squeeze=False
    )
    for ax, task in zip(axes[0], tasks, strict=True):
        present = [m for m in models if (task, m) in by_key]
        means = [by_key[task, m].score_mean or 0.0 for m in present]
        errs = [by_key[task, m].score_se or 0.0 for m in present]
        ax.bar(range(len(present)), means, yerr=errs, capsize=4, color="tab:blue")
        ax.set_xticks(range(len(present)), present, rotation=20, ha="right", fontsize=8)
        ax.set_title(task)
        ax.set_ylabel("score (mean ± SE)")
    fig.tight_layout()
    fig.savefig(out / "score.png", dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(4.0, 1.5 * len(tasks) + 2), 3.5))
    for i, model in enumerate(models):
        xs = [t + i * width for t in range(len(tasks))]
        means = [(by_key.get((task, model)) or _EMPTY).normalized_mean or 0.0 for task in tasks]
        errs = [(by_key.get((task, model)) or _EMPTY).normalized_se or 0.0 for task in tasks]
        ax.bar(xs, means, width=width, yerr=errs, capsize=3, label=model)
    ax.axhline(0.0, color="gray", linewidth=0.8)
    ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xticks([t + width * (len(models) - 1) / 2 for t in range(len(tasks))], tasks)
    ax.set_ylabel("normalized score (0 baseline, 1 top)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "normalized.png", dpi=100)
    plt.close(fig)


_EMPTY = Group("", "", 0, 0, None, None, None, None, 0.0, None, 0, 0.0)


def write_report(out: Path, *, plots: bool = True) -> list[Group]:
    """Write report.md/.csv/.json (and the plots) into the batch folder; returns the groups."""
    rows = collect(out)
    groups = summarize(rows)
    (out / "report.md").write_text(markdown(groups, rows), encoding="utf-8")
    write_csv(out / "report.csv", groups)
    payload = {"groups": [asdict(g) for g in groups], "runs": [asdict(r) for r in rows]}
    (out / "report.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    if plots and groups:
        plot(out, groups)
    return groups
