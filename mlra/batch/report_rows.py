"""The batch report's numbers: a row per attempt of every run (from its result.json or its
folded log, batch/report_results.py, or its card where it never started) and a group per
task and model, mean ± standard error over seeds, one attempt a seed.

Apart from how they are written (batch/report_tables.py, batch/report_plots.py,
batch/report.py) so that every table, plot and closing line reads the same numbers.
"""

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mlra.agent.record.annotations import read_annotations, tag_counts
from mlra.agent.record.eventlog import EVENTS_FILE
from mlra.agent.record.run_result import UNFINISHED_MESSAGES as UNFINISHED
from mlra.agent.record.run_result import RunResult
from mlra.batch import report_judged as judged
from mlra.batch.report_results import load_run
from mlra.batch.state import NODE_LOST, RETIRED, RUNS, RunCard, read_cards, read_placements
from mlra.batch.task_labels import recorded_task, run_task_labels

Attempt = Literal["first", "last"]
"""Which attempt of each seed the group numbers count."""


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
    success: bool | None
    """None: never judged (never started, no outcome, `--ungraded`: batch/report_judged.py)."""
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
    outcome: bool = True
    """It ended by itself, or its seed used up its attempts: final (batch/report_judged.py)."""
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
    baseline_score: float | None = None
    """The task's reference scores as the grading recorded them: score.png's lines."""
    top_score: float | None = None
    detail: str = ""
    """For an attempt that never started or was lost: what happened, in a line; for one
    that ended without a score: why, as its log says (the grader's error, or the ending's
    message: "model provider failed: ...")."""
    nodes: list[str] = field(default_factory=list)
    """Where each start of the attempt ran ("host (node 1a2b3c4d)"), on Ray."""
    nodes_lost: list[str] = field(default_factory=list)
    """The nodes among those that were lost while they held the attempt."""
    lost: bool = False
    """The attempt's last start ended with its node (Ray), not by itself."""
    resumed: int = 0
    """Times the attempt was taken up again where its log ended, after it stopped midway
    (a batch killed or stopped with Ctrl-C, a crash): its time and cost count every part."""
    worker_alone: str | None = None
    """Why the worker took the whole task where it did ("chosen": `--agent worker`;
    "supervisor_idle", "supervisor_stuck": handed over); None: the supervisor led."""
    log_shortened: bool = False
    """The run's log neared its size budget and was shortened (result.json's)."""
    searched: bool = False
    """The run searched (`--search`): the search_ fields below are its numbers. (A search's
    attempts are solutions the agent tried within one run, not the batch's `attempt`, a
    start of the run.)"""
    search_tried: int | None = None
    """Attempts the search started, and how many ended validated, buggy, out of time,
    stopped and lost, or still ran (result.json's `attempts`: they add up to tried)."""
    search_validated: int | None = None
    search_buggy: int | None = None
    search_out_of_time: int | None = None
    search_stopped: int | None = None
    search_lost: int | None = None
    search_running: int | None = None
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
    success_rate: float | None  # of judged runs; None: none scored or judged (success_cell)
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
    judged_runs: int = 0
    """Counted runs whose success was judged: the success rate's denominator."""
    retries: int = 0
    """Attempts beyond the first, over the group's seeds (not in its numbers)."""
    lost_with_node: int = 0
    """Starts that ended with their Ray node (each followed by a resume or a retry)."""
    best_validation_mean: float | None = None
    """The runs' best validation scores, mean and standard error (runs that validated)."""
    best_validation_se: float | None = None
    experiments_mean: float | None = None
    """Experiments (validations) a run, on average."""
    worker_alone: int = 0
    """Counted runs where the worker took the whole task (`--agent worker`, or a supervisor
    that never handed a subtask): small models' runs are told from supervised ones."""
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


def failure_of(r: RunResult) -> str | None:
    if r.status == "finished" and r.score is not None:
        return None
    if r.status == "finished":
        return "no score" if r.reason == "submitted" else r.reason
    return r.cause or r.reason  # a window overflow is no provider's failure: said so


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
        "search_out_of_time": a.out_of_time,
        "search_stopped": a.stopped,
        "search_lost": a.lost,
        "search_running": a.running,
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
    return RunRow(
        run_id=r.run_id or run_id,
        # What the batch called the task: its name, or where two of its tasks share that
        # name, the end of its folder's path (batch/task_labels.py), which the run never knew.
        task=(card.task if card else "") or r.task,
        model=r.model or (card.model if card else ""),
        seed=seed if seed is not None else (card.seed if card else None),
        status=r.status,
        reason=r.reason,
        score=r.score,
        normalized_score=r.normalized_score,
        success=judged.judged_success(r),
        outcome=judged.has_outcome(r),
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
        baseline_score=r.baseline_score,
        top_score=r.top_score,
        worker_alone=r.worker_alone,
        log_shortened=r.log_shortened is not None,
        resumed=r.resumed,
        # A run resumed after its grading, then killed: why it has no end, not that
        # grading's error.
        detail=(
            (r.message if r.status in UNFINISHED else r.evaluation_error or r.message)
            if failure_of(r)
            else ""
        ),
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
        success=None,
        duration_s=0.0,
        tokens=0,
        cost_usd=0.0,
        failure=reason,
        attempt=attempt,
        started=False,
        outcome=False,
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
    row.nodes_lost = [p.where for p in placements if p.node_id and p.outcome == NODE_LOST]
    row.lost = lost
    if lost and judged.killed_for_memory(placements):  # the run's own failure: judged
        row.outcome, row.success = True, False
    return row


def collect(out: Path, attempt: Attempt = "first") -> list[RunRow]:
    """Every attempt of every run, each marked whether the group numbers count it."""
    rows: list[RunRow] = []
    batch = (out / RUNS).is_dir() or (out / "batch.json").is_file()
    runs_dir = out / RUNS if batch else out
    cards = read_cards(out) if batch else {}
    driven, limit = judged.batch_state(out) if batch else (set[str](), 1)  # none retried
    retired_dir = out / RETIRED
    retired: dict[str, list[tuple[int, Path]]] = {}
    if runs_dir != out and retired_dir.is_dir():
        for folder in retired_dir.iterdir():
            name, sep, n = folder.name.rpartition("__a")
            if folder.is_dir() and sep and n.isdigit():
                retired.setdefault(name, []).append((int(n), folder))
    current = {p.name: p for p in runs_dir.iterdir() if p.is_dir()} if runs_dir.is_dir() else {}
    # A plain runs folder has no cards: its tasks are told apart as `mlra runs` lists them.
    recorded = {} if batch else {i: t for i, p in current.items() if (t := recorded_task(p))}
    labels = dict(zip(recorded, run_task_labels(list(recorded.values())), strict=True))
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
        elif card is not None and not attempts:  # queued, and the batch stopped first
            why = judged.never_begun(run_id, driven)
            attempts.append(_not_started(run_id, card, judged.NOT_STARTED, 1, why))
        if not attempts:
            continue
        for row in attempts:
            row.counted = False
            row.task = labels.get(run_id, row.task)
        tries = len(retired.get(run_id, [])) + (run_id in current)
        judged.count_one(attempts, tries, limit, last=attempt == "last")
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
        rated = [m for m in members if m.success is not None]
        rate = sum(bool(m.success) for m in rated) / len(rated) if scores and rated else None
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
                success_rate=rate,
                judged_runs=len(rated),
                self_reported=sum(m.self_reported for m in members),
                judged=any(m.direction_known for m in members),
                # Of the runs that started: one that never did took no time, and its 0 s
                # pulled the median down (a group of none said "0.0s").
                median_duration_s=(
                    statistics.median(m.duration_s for m in started) if started else None
                ),
                tokens=sum(m.tokens for m in every),
                tokens_estimated=sum(m.tokens_estimated for m in every),
                cost_usd=round(sum(m.cost_usd for m in every), 6),
                failures=dict(Counter(m.failure for m in members if m.failure)),
                isolation=";".join(
                    sorted({m.isolation or "unknown" for m in members if m.started})
                ),
                unisolated=sum(m.unisolated for m in members),
                # Attempts after a run's first that began, as the batch's last line
                # counts them: one refused before it began (its server down) is no retry.
                retries=sum(1 for m in every if m.attempt > 1 and m.started),
                lost_with_node=sum(
                    len(m.nodes_lost) or int(m.lost and m.reason == NODE_LOST) for m in every
                ),
                best_validation_mean=best_mean,
                best_validation_se=best_se,
                experiments_mean=(
                    sum(m.experiments for m in started) / len(started) if started else None
                ),
                worker_alone=sum(m.worker_alone is not None for m in members),
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
