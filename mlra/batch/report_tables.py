"""The batch report's text: report.md's tables, report.csv, and a group's numbers in a
line for the end of `mlra batch`.

Every text from a run or a task (a name, a reason, a success bar, a node, a tag) is
escaped here for where it goes: in report.md as Markdown that renders as the very text
(batch/report_text.py: no image, link or HTML formed from it, its `|` kept in its
cell, nothing a terminal obeys), in report.csv its control characters
(mlra/terminal_text.py). The numbers themselves are batch/report_rows.py's.
"""

import csv
from pathlib import Path
from typing import Any

from mlra.agent.record.attempt_tree import counts_words
from mlra.batch.report_judged import partial_of, partial_words
from mlra.batch.report_rows import Attempt, Group, RunRow
from mlra.batch.report_text import md_cell as _cell
from mlra.batch.report_text import md_text as _text
from mlra.scores import format_normalized
from mlra.terminal_text import printable_line

PLACES = 4
"""Decimal places every score, spread and gap is shown to: `.4g` showed 0.7674 beside
0.8 and 0.011 beside 0.0094, which read as different precisions of one measure; fixed
places line up down a column and across a line (0.0000, 0.7674, 0.8000, 1.0000)."""


def fixed(value: float, *, sign: bool = False) -> str:
    """`value` to PLACES decimals; one too small to show there, in powers of ten, so a
    score of 3e-06 never reads as nothing."""
    if value != 0 and abs(value) < 0.5 * 10**-PLACES:
        return f"{value:{'+' if sign else ''}.2e}"
    return f"{value:{'+' if sign else ''}.{PLACES}f}"


def _pm(mean: float | None, se: float | None) -> str:
    if mean is None:
        return "–"
    return fixed(mean) + (f" ± {fixed(se)}" if se is not None else "")


def normalized_pm(mean: float | None, se: float | None) -> str:
    """A group's mean normalized score as a run's is written, its spread to as many
    places."""
    if mean is None:
        return "–"
    return format_normalized(mean) + (f" ± {se:.3f}" if se is not None else "")


NONE_SCORED = "none scored"


def success_cell(g: Group) -> str:
    """A group's success rate, "none scored" where no run of it has a score (a group of
    killed runs read "0%", a rate of runs that were never graded), and "not judged" where
    none of its scored runs was (no one said which way its metric improves, `--ungraded`).
    Over the judged runs, which it names where they are fewer than the group's: a run that
    never started or has no outcome is no failure (batch/report_judged.py)."""
    if not g.scored:
        return NONE_SCORED
    if g.success_rate is None or not g.judged:
        return "not judged"
    of = f" of {g.judged_runs} judged" if g.judged_runs < g.runs else ""
    return f"{g.success_rate:.0%}{of}"


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
        "the first attempt of each seed with an outcome (retries are shown, not averaged in)"
        if attempt == "first"
        else "the last attempt of each seed (`--attempt last`)"
    )
    partial = partial_of(rows)
    lines = [
        "# Batch report",
        "",
        *([partial_words(partial), ""] if partial else []),
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
        normalized = normalized_pm(g.normalized_mean, g.normalized_se)
        normalized += mark if g.normalized_mean is not None else ""
        best = _pm(g.best_validation_mean, g.best_validation_se)
        experiments = f"{g.experiments_mean:.3g}" if g.experiments_mean is not None else "–"
        lines.append(
            f"| {_cell(g.task)} | {_cell(g.model)} | {g.runs} | {g.scored} | {score} | {normalized} | "
            f"{best} | {experiments} | "
            f"{success_cell(g)} | {median} | {'~' if g.tokens_estimated else ''}{g.tokens:,} | "
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
        lines += [
            "",
            "Success bars, by each task's rule, as its runs were judged (a measured "
            "baseline may have moved since: `mlra tasks show TASK` gives it now):",
            "",
        ]
        lines += [f"- {_text(task)}: {_text(bar)}" for task, bar in bars]
    alone = [g for g in groups if g.worker_alone]
    if alone:
        lines += [
            "",
            "Worker alone: "
            + ", ".join(f"{_text(g.task)} · {_text(g.model)} ({_worker_alone(g)})" for g in alone)
            + ": the worker took the whole task, with no supervisor (`--agent worker`, or a "
            "supervisor that never handed it a subtask).",
        ]
    resumed = [r for r in rows if r.resumed]
    if resumed:
        lines += [
            "",
            "Resumed: "
            + ", ".join(
                f"{_text(r.run_id)} (attempt {r.attempt}, {r.resumed} "
                f"time{'' if r.resumed == 1 else 's'})"
                for r in resumed
            )
            + ": stopped midway (a batch killed or stopped, a crash) and taken up again where "
            "its log ended; its time, tokens and cost count every part.",
        ]
    shortened = [r for r in rows if r.log_shortened]
    if shortened:
        lines += [
            "",
            "Log shortened: "
            + ", ".join(_text(r.run_id) for r in shortened)
            + ": the run's log neared its size budget (`--log-budget`), so from there its "
            "commands' output was cut, for the model too; its grading is unchanged.",
        ]
    if any(g.unisolated for g in groups):
        lines += [
            "",
            "Unisolated: scored with sandbox isolation none, so the agent's commands could "
            "reach what the grader reads; such scores are not comparable with isolated ones.",
        ]
    lines += _search_tables(groups, rows)
    why = [r for r in rows if r.started and r.failure and r.detail]
    if why:
        lines += ["", "No score, and why (as each run's log says):", ""]
        lines += [
            f"- {_text(r.run_id)} (attempt {r.attempt}): {_text(r.failure or '')}: "
            f"{_text(r.detail)}"
            for r in why
        ]
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
    return fixed(mean, sign=True) + (f" ± {fixed(se)}" if se is not None else "")


def score_text(value: float | None) -> str:
    """A score as every batch line shows it: a run's line, its notification, the tables."""
    return fixed(value) if value is not None else "–"


def search_counts(row: RunRow) -> str:
    """A searching run's attempts in the words of every verdict line (`counts_words`)."""
    return counts_words(
        row.search_tried or 0,
        validated=row.search_validated,
        buggy=row.search_buggy,
        out_of_time=row.search_out_of_time,
        stopped=row.search_stopped,
        lost=row.search_lost,
        running=row.search_running,
    )


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
            f"{_gap(g.search_gap_mean, g.search_gap_se)} | "
            f"{g.search_graded_unsubmitted} |"
        )
    lines += [
        "",
        'Per run (graded: the attempt scored on the test split; "best, unsubmitted": '
        "nothing was submitted, so the best validated attempt was graded):",
        "",
        "| run | task | model | seed | attempts | best "
        "| best validation | graded | its validation | test | gap |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r.searched:
            continue
        run = _cell(r.run_id) + ("" if r.counted else f" (start {r.attempt}, not counted)")
        graded = _cell(r.search_submitted) if r.search_submitted else "–"
        if r.search_submitted and r.search_graded_unsubmitted:
            graded += " (best, unsubmitted)"
        gap = _gap(r.search_gap, None)
        lines.append(
            f"| {run} | {_cell(r.task)} | {_cell(r.model)} | "
            f"{r.seed if r.seed is not None else '–'} | {search_counts(r)} | "
            f"{_cell(r.search_best) if r.search_best else '–'} | "
            f"{score_text(r.search_best_validation)} | {graded} | "
            f"{score_text(r.search_submitted_validation)} | {score_text(r.search_test_score)} | {gap} |"
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
    "experiments_mean", "self_reported", "judged", "worker_alone",
    "searched", "search_tried_mean", "search_best_validation_mean", "search_best_validation_se",
    "search_test_mean", "search_test_se", "search_gap_mean", "search_gap_se",
    "search_graded_unsubmitted", "judged_runs",  # last: added later, columns keep their place
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
                    k: "" if v is None else printable_line(v) if isinstance(v, str) else v
                    for k, v in row.items()
                }
            )


def _worker_alone(g: Group) -> str:
    return "worker alone" + (
        "" if g.worker_alone == g.runs else f" in {g.worker_alone} of {g.runs}"
    )


def group_line(g: Group) -> str:
    """A group's numbers in a line, as the report's table gives them: for the end of
    `mlra batch`, where a person reads the outcome before opening report.md."""
    mark = _unisolated_mark(g) if g.score_mean is not None else ""
    parts = [
        f"score {_pm(g.score_mean, g.score_se)}{mark}, {g.scored} of {g.runs} "
        f"seed{'' if g.runs == 1 else 's'} scored"
    ]
    if g.normalized_mean is not None:
        parts.append(f"normalized {normalized_pm(g.normalized_mean, g.normalized_se)}")
    parts.append(f"success {success_cell(g)}")
    if g.self_reported:
        parts.append(f"{g.self_reported} self-reported (not measured; never a success)")
    if g.worker_alone:
        parts.append(_worker_alone(g))
    if g.searched:
        tried = f"{g.search_tried_mean:.3g}" if g.search_tried_mean is not None else "–"
        search = f"search: {tried} attempts a run"
        if g.search_best_validation_mean is not None:
            search += f", best validation {_pm(g.search_best_validation_mean, g.search_best_validation_se)}"
        if g.search_gap_mean is not None:
            gap = _gap(g.search_gap_mean, g.search_gap_se)
            search += f", validation-to-test gap {gap}"
        if g.search_graded_unsubmitted:
            search += f", {g.search_graded_unsubmitted} graded their best (nothing submitted)"
        parts.append(search)
    return f"{printable_line(g.task)} · {printable_line(g.model)}: " + " · ".join(parts)
