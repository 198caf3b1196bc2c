"""The batch report: per task and model, mean ± standard error over seeds, success
rate, time, tokens, cost, failures and retries, from the run folders alone.

Every attempt of every run is a row, a run that never started included (from its
card, with the reason). The group numbers count one attempt per seed: by default
its first attempt that started, so that retrying cannot move a mean (a retried
seed's better second try is shown, not averaged in); `--attempt last` counts the
last attempt instead.

Every number comes from each run's `result.json` (or, for a run that never
finished, from folding its event log), so `mlra report DIR` gives the same
tables whenever and wherever it is run. Plots are written with matplotlib's
Agg backend (no display needed).

report.md is read with `cat` as often as rendered: every text in it from a run or a
task (a task's or model's name, a reason, a success bar, a node) has its control
characters escaped (mlra/terminal_text.py) and its `|` escaped so it stays in its
cell; report.csv's texts are escaped the same way. report.json is written with
`ensure_ascii`, so it holds nothing a terminal obeys.
"""

from __future__ import annotations

import csv
import importlib
import json
import math
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from mlra import events as ev
from mlra.agent.annotations import read_annotations, tag_counts
from mlra.agent.eventlog import EVENTS_FILE, LogDamage, read_events
from mlra.agent.state import RunResult, fold, result_of
from mlra.batch.state import RETIRED, RUNS, RunCard, read_cards, read_placements
from mlra.terminal_text import printable_line

Attempt = Literal["first", "last"]
"""Which attempt of each seed the group numbers count."""

REPORT_FILES = (
    "report.md",
    "report.csv",
    "report.json",
    "score.png",
    "normalized.png",
    "validation.png",
)


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
    tokens_estimated: bool = False
    """Some of `tokens` are mlra's estimates (the server sent no counts), not counts."""
    """The run was scored without isolation: the agent could have reached the grader."""
    attempt: int = 1
    """Which attempt of the run this is (1 = the first start; retries count up)."""
    counted: bool = True
    """Whether the group numbers count this attempt (one per seed)."""
    started: bool = True
    """False for an attempt that never started (no run_started): it has no outcome."""
    experiments: int = 0
    """Rows of the run's experiments table (one per validation)."""
    best_validation: float | None = None
    """The best validation score (the validation split, never the hidden test split)."""
    validation_metric: str | None = None
    validation_curve: list[tuple[float, float]] = field(default_factory=list)
    """(run clock seconds, score) of each scored validation: the report's validation plot."""
    success_bar: str | None = None
    """The task's success rule and bar as the grading recorded it (tasks/success.py)."""
    self_reported: bool = False
    """The score is the workspace's own report, not a measurement: never counted as a
    success, and marked."""
    direction_known: bool = True
    """False: no one said which way the metric improves, so success was not judged."""
    detail: str = ""
    """For an attempt that never started or was lost: what happened, in a line."""
    nodes: list[str] = field(default_factory=list)
    """Where each start of the attempt ran ("host (node 1a2b3c4d)"), on Ray."""
    nodes_lost: list[str] = field(default_factory=list)
    """The nodes among those that were lost while they held the attempt."""
    lost: bool = False
    """The attempt's last start ended with its node (Ray), not by itself."""
    searched: bool = False
    """The run searched (`--search`): the search_ fields below are its numbers. (A search's
    attempts are solutions the agent tried within one run, not the batch's `attempt`, a
    start of the run.)"""
    search_tried: int | None = None
    """Attempts the search started, and how many ended validated and buggy."""
    search_validated: int | None = None
    search_buggy: int | None = None
    search_best: str | None = None
    """The best validated attempt and its validation score."""
    search_best_validation: float | None = None
    search_submitted: str | None = None
    """The attempt graded on the hidden test split, and its validation score."""
    search_submitted_validation: float | None = None
    search_graded_unsubmitted: bool = False
    """Nothing was submitted: the run ended (a deadline, a budget, a stop) and its best
    validated attempt was graded instead."""
    search_test_score: float | None = None
    """The graded attempt's test score (the run's score) and its validation-to-test gap,
    test minus validation: what choosing by validation overfits."""
    search_gap: float | None = None
    annotations: int = 0
    """People's notes on the run's steps (annotations.jsonl, `mlra annotate`)."""
    tags: dict[str, int] = field(default_factory=dict)
    """Their tags, each with how many notes carry it."""


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
    tokens_estimated: int = 0
    """Runs of the group whose `tokens` hold estimates: the table marks the total "~"."""
    isolation: str = ""
    """The isolations the group's runs had, e.g. "bwrap" or "bwrap;none"."""
    unisolated: int = 0
    """Scored runs of the group that had no isolation (their scores are in the means)."""
    self_reported: int = 0
    """Scored runs whose score is the workspace's own report (in the means, marked, and
    never counted as successes)."""
    judged: bool = True
    """False where no run of the group had its success judged (the task's direction is
    unknown): its success is "not judged", not 0%."""
    retries: int = 0
    """Attempts beyond the first, over the group's seeds (not in its numbers)."""
    lost_with_node: int = 0
    """Starts that ended with their Ray node (each followed by a resume or a retry)."""
    best_validation_mean: float | None = None
    """The runs' best validation scores, mean and standard error (runs that validated)."""
    best_validation_se: float | None = None
    experiments_mean: float | None = None
    """Experiments (validations) a run, on average."""
    searched: int = 0
    """Counted runs that searched (`--search`); the search_ numbers are over them."""
    search_tried_mean: float | None = None
    """Attempts a searching run tried, on average."""
    search_best_validation_mean: float | None = None
    """The best attempt's validation score, mean and standard error."""
    search_best_validation_se: float | None = None
    search_test_mean: float | None = None
    """The graded attempt's test score, mean and standard error (runs that had one)."""
    search_test_se: float | None = None
    search_gap_mean: float | None = None
    """The validation-to-test gap (test minus validation), mean and standard error."""
    search_gap_se: float | None = None
    search_graded_unsubmitted: int = 0
    """Searching runs that submitted nothing, whose best validated attempt was graded."""


def mean_se(values: list[float]) -> tuple[float | None, float | None]:
    """The mean and its standard error (sample standard deviation / sqrt n)."""
    if not values:
        return None, None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, statistics.stdev(values) / math.sqrt(len(values))


def load_run(run_dir: Path) -> tuple[RunResult, int | None, bool] | None:
    """A run folder's result, its seed and whether it started (None: nothing to read)."""
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
        return result, seed, started is not None or bool(result.task)
    if started is None:
        return None
    state = fold(events)
    result = result_of(state)
    if state.finished is None:
        result.status, result.reason = "unfinished", "unfinished"
    return result, seed, True


def failure_of(r: RunResult) -> str | None:
    if r.status == "finished" and r.score is not None:
        return None
    if r.status == "finished":
        return "no score" if r.reason == "submitted" else r.reason
    return r.reason if r.status != "unfinished" else "unfinished"


def _search_fields(r: RunResult) -> dict[str, Any]:
    """A searching run's numbers from result.json's `attempts` (none for one line of work)."""
    a = r.attempts
    if a is None:
        return {}
    return {
        "searched": True,
        "search_tried": a.tried,
        "search_validated": a.validated,
        "search_buggy": a.buggy,
        "search_best": a.best,
        "search_best_validation": a.best_validation,
        "search_submitted": a.submitted,
        "search_submitted_validation": a.submitted_validation,
        # A submitted attempt ends the run "submitted"; any other ending graded the best.
        "search_graded_unsubmitted": a.submitted is not None and r.reason != "submitted",
        "search_test_score": a.test_score,
        "search_gap": a.validation_to_test_gap,
    }


def _row(r: RunResult, run_id: str, seed: int | None, card: RunCard | None) -> RunRow:
    success = (
        bool(r.success)
        if r.success is not None
        else (r.direction_known and r.normalized_score is not None and r.normalized_score >= 0.05)
    ) and not (r.self_reported and r.score is not None)
    return RunRow(
        run_id=r.run_id or run_id,
        task=r.task or (card.task if card else ""),
        model=r.model or (card.model if card else ""),
        seed=seed if seed is not None else (card.seed if card else None),
        status=r.status,
        reason=r.reason,
        score=r.score,
        normalized_score=r.normalized_score,
        success=success,
        duration_s=r.duration_s,
        tokens=r.tokens,
        cost_usd=r.cost_usd,
        tokens_estimated=r.tokens_estimated,
        failure=failure_of(r),
        isolation=r.isolation,
        unisolated=r.unisolated and r.score is not None,
        experiments=r.experiments,
        best_validation=r.best_validation,
        validation_metric=r.validation_metric,
        validation_curve=[(t, score) for t, score in r.validation_curve],
        success_bar=r.success_bar,
        self_reported=bool(r.self_reported) and r.score is not None,
        direction_known=r.direction_known,
        **_search_fields(r),
    )


def _not_started(
    run_id: str, card: RunCard | None, reason: str, attempt: int, detail: str = ""
) -> RunRow:
    """The row of an attempt that never started: no outcome, and why."""
    return RunRow(
        run_id=run_id,
        task=card.task if card else "",
        model=card.model if card else "",
        seed=card.seed if card else None,
        status="not started",
        reason=reason,
        score=None,
        normalized_score=None,
        success=False,
        duration_s=0.0,
        tokens=0,
        cost_usd=0.0,
        failure=reason,
        attempt=attempt,
        started=False,
        detail=detail,
    )


def _attempt_row(folder: Path, run_id: str, attempt: int, card: RunCard | None) -> RunRow:
    placements = read_placements(folder)
    loaded = load_run(folder)
    lost = bool(placements) and bool(placements[-1].outcome)
    if loaded is None:
        has_log = (folder / EVENTS_FILE).is_file()
        reason = "error" if has_log else "no event log"
        detail = ""
        if lost:  # lost with its node before anything of it reached the batch folder
            reason, detail = placements[-1].outcome, placements[-1].detail
        row = _not_started(run_id, card, reason, attempt, detail)
    else:
        result, seed, started = loaded
        row = _row(result, run_id, seed, card)
        row.attempt, row.started = attempt, started
    notes = read_annotations(folder)
    row.annotations, row.tags = len(notes), dict(tag_counts(notes))
    row.nodes = [p.where for p in placements if p.node_id]
    row.nodes_lost = [p.where for p in placements if p.node_id and p.outcome]
    row.lost = lost
    return row


def collect(out: Path, attempt: Attempt = "first") -> list[RunRow]:
    """Every attempt of every run, each marked whether the group numbers count it."""
    rows: list[RunRow] = []
    batch = (out / RUNS).is_dir() or (out / "batch.json").is_file()
    runs_dir = out / RUNS if batch else out
    cards = read_cards(out) if batch else {}
    retired_dir = out / RETIRED
    retired: dict[str, list[tuple[int, Path]]] = {}
    if runs_dir != out and retired_dir.is_dir():
        for folder in retired_dir.iterdir():
            name, sep, n = folder.name.rpartition("__a")
            if folder.is_dir() and sep and n.isdigit():
                retired.setdefault(name, []).append((int(n), folder))
    current = {p.name: p for p in runs_dir.iterdir() if p.is_dir()} if runs_dir.is_dir() else {}
    for run_id in sorted(set(current) | set(retired) | set(cards)):
        card = cards.get(run_id)
        attempts = [
            _attempt_row(folder, run_id, n, card) for n, folder in sorted(retired.get(run_id, []))
        ]
        if run_id in current:
            n = len(attempts) + 1
            if runs_dir == out and load_run(current[run_id]) is None:
                continue  # a plain runs folder: a folder that is no run is not listed
            attempts.append(_attempt_row(current[run_id], run_id, n, card))
        elif card is not None and card.not_started:
            attempts.append(
                _not_started(run_id, card, card.not_started, len(attempts) + 1, card.detail)
            )
        if not attempts:
            continue
        for row in attempts:
            row.counted = False
        if attempt == "last":
            attempts[-1].counted = True
        else:
            # The first attempt that started: one that never did has no outcome to bias.
            next((r for r in attempts if r.started), attempts[0]).counted = True
        rows += attempts
    return rows


def summarize(rows: list[RunRow]) -> list[Group]:
    """One group per task and model: its numbers over the counted attempt of each seed;
    tokens and cost over every attempt (all of it was spent)."""
    groups: dict[tuple[str, str], list[RunRow]] = {}
    for row in rows:
        groups.setdefault((row.task, row.model), []).append(row)
    out = []
    for (task, model), every in sorted(groups.items()):
        members = [m for m in every if m.counted]
        if not members:
            continue
        scores = [m.score for m in members if m.score is not None]
        normalized = [m.normalized_score for m in members if m.normalized_score is not None]
        score_mean, score_se = mean_se(scores)
        norm_mean, norm_se = mean_se(normalized)
        best = [m.best_validation for m in members if m.best_validation is not None]
        best_mean, best_se = mean_se(best)
        started = [m for m in members if m.started]
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
                self_reported=sum(m.self_reported for m in members),
                judged=any(m.direction_known for m in members),
                median_duration_s=statistics.median(m.duration_s for m in members),
                tokens=sum(m.tokens for m in every),
                tokens_estimated=sum(m.tokens_estimated for m in every),
                cost_usd=round(sum(m.cost_usd for m in every), 6),
                failures=dict(Counter(m.failure for m in members if m.failure)),
                isolation=";".join(
                    sorted({m.isolation or "unknown" for m in members if m.started})
                ),
                unisolated=sum(m.unisolated for m in members),
                retries=len(every) - len(members),
                lost_with_node=sum(len(m.nodes_lost) or int(m.lost) for m in every),
                best_validation_mean=best_mean,
                best_validation_se=best_se,
                experiments_mean=(
                    sum(m.experiments for m in started) / len(started) if started else None
                ),
            )
        )
        _summarize_search(out[-1], members)
    return out


def _summarize_search(group: Group, members: list[RunRow]) -> None:
    """A group's search numbers, over its counted runs that searched."""
    searched = [m for m in members if m.searched]
    if not searched:
        return
    group.searched = len(searched)
    group.search_tried_mean = statistics.fmean(m.search_tried or 0 for m in searched)
    group.search_best_validation_mean, group.search_best_validation_se = mean_se(
        [m.search_best_validation for m in searched if m.search_best_validation is not None]
    )
    group.search_test_mean, group.search_test_se = mean_se(
        [m.search_test_score for m in searched if m.search_test_score is not None]
    )
    group.search_gap_mean, group.search_gap_se = mean_se(
        [m.search_gap for m in searched if m.search_gap is not None]
    )
    group.search_graded_unsubmitted = sum(m.search_graded_unsubmitted for m in searched)


def _text(value: object) -> str:
    """A run's or a task's text as report.md shows it: one line, nothing a terminal obeys."""
    return printable_line(str(value))


def _cell(value: object) -> str:
    """A table cell: `_text`, with a `|` that would end the cell escaped."""
    return _text(value).replace("|", "\\|")


def _pm(mean: float | None, se: float | None) -> str:
    if mean is None:
        return "–"
    return f"{mean:.4g} ± {se:.2g}" if se is not None else f"{mean:.4g}"


def _success_cell(g: Group) -> str:
    return f"{g.success_rate:.0%}" if g.judged else "not judged"


def _unisolated_mark(g: Group) -> str:
    """What follows a group's scores when some were earned without isolation, or are
    the workspace's own report."""
    marks = []
    if g.self_reported:
        n = "" if g.self_reported == g.scored else f"{g.self_reported} of {g.scored} "
        marks.append(f"{n}self-reported")
    if g.unisolated:
        n = "" if g.unisolated == g.scored else f"{g.unisolated} of {g.scored} "
        marks.append(f"{n}unisolated")
    return f" ({'; '.join(marks)})" if marks else ""


def markdown(groups: list[Group], rows: list[RunRow], attempt: Attempt = "first") -> str:
    counted = [r for r in rows if r.counted]
    which = (
        "the first attempt of each seed that started (retries are shown, not averaged in)"
        if attempt == "first"
        else "the last attempt of each seed (`--attempt last`)"
    )
    lines = [
        "# Batch report",
        "",
        f"{len(counted)} runs; mean ± standard error over seeds, counting {which}; "
        "success = by each task's own rule (below the table; at least 5% of the "
        "baseline-to-top gap closed where a run recorded none); tokens and cost include "
        "every attempt.",
        "",
        "| task | model | runs | scored | score | normalized | best validation | experiments | success | median time | tokens | cost | failures | retries | isolation |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        failures = ", ".join(f"{_cell(k)} ×{v}" for k, v in sorted(g.failures.items())) or "–"
        median = f"{g.median_duration_s:.1f}s" if g.median_duration_s is not None else "–"
        mark = _unisolated_mark(g)
        score = _pm(g.score_mean, g.score_se) + (mark if g.score_mean is not None else "")
        normalized = _pm(g.normalized_mean, g.normalized_se)
        normalized += mark if g.normalized_mean is not None else ""
        best = _pm(g.best_validation_mean, g.best_validation_se)
        experiments = f"{g.experiments_mean:.3g}" if g.experiments_mean is not None else "–"
        lines.append(
            f"| {_cell(g.task)} | {_cell(g.model)} | {g.runs} | {g.scored} | {score} | {normalized} | "
            f"{best} | {experiments} | "
            f"{_success_cell(g)} | {median} | {'~' if g.tokens_estimated else ''}{g.tokens:,} | "
            f"${g.cost_usd:.4f} | {failures} | "
            f"{g.retries}{f' ({g.lost_with_node} lost with a node)' if g.lost_with_node else ''} | "
            f"{_cell(g.isolation.replace(';', ', '))} |"
        )
    if any(g.tokens_estimated for g in groups):
        lines += [
            "",
            "~ tokens: some runs' counts are mlra's estimates (four characters a token), "
            "where the server sent none.",
        ]
    reported = [g for g in groups if g.self_reported]
    if reported:
        lines += [
            "",
            "Self-reported: "
            + ", ".join(f"{_text(g.task)} ({g.self_reported} runs)" for g in reported)
            + ": the score is a number the workspace's own code wrote, not a measurement; "
            "it is in the means and never counted as a success.",
        ]
    bars = sorted({(r.task, r.success_bar) for r in counted if r.success_bar})
    if bars:
        lines += ["", "Success bars, by each task's rule:", ""]
        lines += [f"- {_text(task)}: {_text(bar)}" for task, bar in bars]
    if any(g.unisolated for g in groups):
        lines += [
            "",
            "Unisolated: scored with sandbox isolation none, so the agent's commands could "
            "reach what the grader reads; such scores are not comparable with isolated ones.",
        ]
    lines += _search_tables(groups, rows)
    never = [r for r in rows if not r.started]
    if never:
        # A node-lost attempt may have run a while: none of it reached the batch folder.
        lines += [
            "",
            "No outcome (never started, or lost with its node before its run folder came "
            "back), so not a draw of the agent's score:",
            "",
        ]
        lines += [
            f"- {_text(r.run_id)} (attempt {r.attempt}): {_text(r.reason)}"
            + (f": {_text(r.detail)}" if r.detail else "")
            for r in never
        ]
    lines += _annotations_list(rows)
    lines += _nodes_table(rows)
    return "\n".join(lines) + "\n"


def _annotations_list(rows: list[RunRow]) -> list[str]:
    """The tags people gave each run's steps (`mlra annotate`, the consoles' keys)."""
    noted = [r for r in rows if r.annotations]
    if not noted:
        return []
    lines = [
        "",
        "Annotations, by run (tags × notes carrying them; `mlra annotate RUN` lists them):",
        "",
    ]
    for r in noted:
        tags = ", ".join(f"#{_text(t)} ×{n}" for t, n in sorted(r.tags.items())) or "no tags"
        attempt = f" (attempt {r.attempt})" if r.attempt > 1 else ""
        lines.append(f"- {_text(r.run_id)}{attempt}: {tags}; {r.annotations} notes")
    return lines


def _gap(mean: float | None, se: float | None) -> str:
    """A gap, signed: below zero the test score fell short of the validation score."""
    if mean is None:
        return "–"
    return f"{mean:+.3g} ± {se:.2g}" if se is not None else f"{mean:+.3g}"


def _score(value: float | None) -> str:
    return f"{value:.4g}" if value is not None else "–"


def _search_tables(groups: list[Group], rows: list[RunRow]) -> list[str]:
    """The runs that searched over attempts (`--search`): per group and per run, attempts
    tried, the best validation, the graded attempt's test score and the gap between them.
    Nothing where no run searched: such a report reads as it always has."""
    searched = [g for g in groups if g.searched]
    if not searched:
        return []
    lines = [
        "",
        "Search over attempts (`--search`): attempts tried a run, the best attempt's "
        "validation score, the graded attempt's test score and its validation-to-test gap "
        "(test minus validation: what choosing by validation overfits), mean ± standard "
        "error over the counted runs that searched. Only the graded attempt was scored on "
        "the hidden test split.",
        "",
        "| task | model | searched | attempts a run | best validation | test | gap | nothing submitted |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in searched:
        tried = f"{g.search_tried_mean:.3g}" if g.search_tried_mean is not None else "–"
        lines.append(
            f"| {_cell(g.task)} | {_cell(g.model)} | {g.searched} | {tried} | "
            f"{_pm(g.search_best_validation_mean, g.search_best_validation_se)} | "
            f"{_pm(g.search_test_mean, g.search_test_se)} | "
            f"{_gap(g.search_gap_mean, g.search_gap_se)} | {g.search_graded_unsubmitted} |"
        )
    lines += [
        "",
        'Per run (graded: the attempt scored on the test split; "best, unsubmitted": '
        "nothing was submitted, so the best validated attempt was graded):",
        "",
        "| run | task | model | seed | tried | validated | buggy | best | best validation "
        "| graded | its validation | test | gap |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r.searched:
            continue
        run = _cell(r.run_id) + ("" if r.counted else f" (start {r.attempt}, not counted)")
        graded = _cell(r.search_submitted) if r.search_submitted else "–"
        if r.search_submitted and r.search_graded_unsubmitted:
            graded += " (best, unsubmitted)"
        gap = f"{r.search_gap:+.3g}" if r.search_gap is not None else "–"
        lines.append(
            f"| {run} | {_cell(r.task)} | {_cell(r.model)} | "
            f"{r.seed if r.seed is not None else '–'} | {r.search_tried} | "
            f"{r.search_validated} | {r.search_buggy} | "
            f"{_cell(r.search_best) if r.search_best else '–'} | "
            f"{_score(r.search_best_validation)} | {graded} | "
            f"{_score(r.search_submitted_validation)} | {_score(r.search_test_score)} | {gap} |"
        )
    return lines


def _nodes_table(rows: list[RunRow]) -> list[str]:
    """Where the attempts ran (Ray): per node, starts, scored runs and starts lost with it."""
    table: dict[str, list[int]] = {}
    for row in rows:
        for i, where in enumerate(row.nodes):
            counts = table.setdefault(where, [0, 0, 0])
            counts[0] += 1
            counts[1] += int(i == len(row.nodes) - 1 and row.score is not None)
        for where in row.nodes_lost:
            table.setdefault(where, [0, 0, 0])[2] += 1
    if not table:
        return []
    lines = ["", "Where the attempts ran (a resumed attempt counts a start on each node):", ""]
    lines += ["| node | starts | scored | lost with the node |", "|---|---|---|---|"]
    lines += [
        f"| {_cell(where)} | {s} | {ok} | {lost} |"
        for where, (s, ok, lost) in sorted(table.items())
    ]
    return lines


CSV_FIELDS = [
    "task", "model", "runs", "scored", "score_mean", "score_se", "normalized_mean",
    "normalized_se", "success_rate", "median_duration_s", "tokens", "cost_usd", "failures",
    "isolation", "unisolated", "retries", "lost_with_node", "best_validation_mean", "best_validation_se",
    "experiments_mean", "self_reported", "judged",
    "searched", "search_tried_mean", "search_best_validation_mean", "search_best_validation_se",
    "search_test_mean", "search_test_se", "search_gap_mean", "search_gap_se",
    "search_graded_unsubmitted",
]  # fmt: skip


def write_csv(path: Path, groups: list[Group]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for g in groups:
            row: dict[str, Any] = {k: getattr(g, k) for k in CSV_FIELDS}
            row["failures"] = ";".join(f"{k}={v}" for k, v in sorted(g.failures.items()))
            writer.writerow(
                {
                    k: "" if v is None else _text(v) if isinstance(v, str) else v
                    for k, v in row.items()
                }
            )


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


def plot_validation(out: Path, rows: list[RunRow]) -> None:
    """validation.png: each run's validation score over its run clock, one panel a task,
    a colour a model; a run's best so far is marked. Validation scores, never the test
    split's: what the agent saw while it worked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r.validation_curve]
    tasks = sorted({r.task for r in shown}) or ["(no validations)"]
    models = sorted({r.model for r in shown})
    colours = {m: f"C{i % 10}" for i, m in enumerate(models)}
    fig, axes = plt.subplots(
        1, len(tasks), figsize=(max(4.5, 4.0 * len(tasks)), 3.5), squeeze=False
    )
    for ax, task in zip(axes[0], tasks, strict=True):
        labelled: set[str] = set()
        metric = ""
        for run in (r for r in shown if r.task == task):
            minutes = [t / 60 for t, _ in run.validation_curve]
            scores = [score for _, score in run.validation_curve]
            label = run.model if run.model not in labelled else None
            labelled.add(run.model)
            colour = colours[run.model]
            ax.plot(minutes, scores, marker=".", color=colour, alpha=0.8, label=label)
            if run.best_validation is not None and run.best_validation in scores:
                i = scores.index(run.best_validation)
                ax.plot(minutes[i], scores[i], marker="*", markersize=11, color=colour)
            metric = metric or (run.validation_metric or "")
        ax.set_title(task)
        ax.set_xlabel("run clock (minutes)")
        ax.set_ylabel(f"validation {metric or 'score'}")
        if not shown:
            ax.text(0.5, 0.5, "no run validated", ha="center", va="center")
        elif labelled:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "validation.png", dpi=100)
    plt.close(fig)


_EMPTY = Group("", "", 0, 0, None, None, None, None, 0.0, None, 0, 0.0)


PLOTS_MISSING = (
    "note: no plots: matplotlib is not installed (pip install 'mlra[batch]' adds it); "
    "the tables are written"
)
"""Said in place of the plots where matplotlib is missing: the quick start's install
leaves out the batch extra, and the tables need nothing beyond mlra itself."""


def can_plot() -> bool:
    """Whether matplotlib can be imported here (it is the `batch` extra's)."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        return False
    return True


def group_line(g: Group) -> str:
    """A group's numbers in a line, as the report's table gives them: for the end of
    `mlra batch`, where a person reads the outcome before opening report.md."""
    mark = _unisolated_mark(g) if g.score_mean is not None else ""
    parts = [
        f"score {_pm(g.score_mean, g.score_se)}{mark}, {g.scored} of {g.runs} "
        f"seed{'' if g.runs == 1 else 's'} scored"
    ]
    if g.normalized_mean is not None:
        parts.append(f"normalized {_pm(g.normalized_mean, g.normalized_se)}")
    parts.append(f"success {_success_cell(g)}")
    if g.self_reported:
        parts.append(f"{g.self_reported} self-reported (not measured; never a success)")
    if g.searched:
        tried = f"{g.search_tried_mean:.3g}" if g.search_tried_mean is not None else "–"
        search = f"search: {tried} attempts a run"
        if g.search_best_validation_mean is not None:
            search += f", best validation {_pm(g.search_best_validation_mean, g.search_best_validation_se)}"
        if g.search_gap_mean is not None:
            search += f", validation-to-test gap {_gap(g.search_gap_mean, g.search_gap_se)}"
        if g.search_graded_unsubmitted:
            search += f", {g.search_graded_unsubmitted} graded their best (nothing submitted)"
        parts.append(search)
    return f"{printable_line(g.task)} · {printable_line(g.model)}: " + " · ".join(parts)


def write_report(out: Path, *, plots: bool = True, attempt: Attempt = "first") -> list[Group]:
    """Write report.md/.csv/.json (and the plots, where matplotlib is installed: see
    `can_plot`) into the batch folder; returns the groups."""
    from mlra.batch.report_curves import curves_json, curves_markdown, plot_curves, read_curves

    rows = collect(out, attempt)
    groups = summarize(rows)
    curves = read_curves(out, rows)  # the runs' training curves (issue 31)
    plotting = plots and bool(groups) and can_plot()
    text = markdown(groups, rows, attempt) + curves_markdown(curves, plotting)
    (out / "report.md").write_text(text, encoding="utf-8")
    write_csv(out / "report.csv", groups)
    payload = {
        "attempt": attempt,
        "groups": [asdict(g) for g in groups],
        "runs": [asdict(r) for r in rows],
        "curves": curves_json(curves),
    }
    (out / "report.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    if plotting:
        plot(out, groups)
        plot_validation(out, rows)
        plot_curves(out, curves)
    return groups
