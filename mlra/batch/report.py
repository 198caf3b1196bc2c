"""The batch report: per task and model, mean ± standard error over seeds, success
rate, time, tokens, cost, failures and retries, from the run folders alone.

Every attempt of every run is a row, a run that never started included (from its
card, with the reason, or "not started" where the batch was stopped before it). A run
never judged (never started, no outcome, `--ungraded`) is no failure in a success rate,
and a report some of whose runs never started or stopped midway says it is partial
(batch/report_judged.py). The group numbers count one attempt per seed: by default
its first attempt with an outcome (those before it ended for reasons that say nothing
of the agent, as the batch retries exactly those), so that retrying cannot move a mean
(a retried seed's better second try is shown, not averaged in); `--attempt last` counts the
last attempt instead.

Every number comes from each run's `result.json` where it was derived from the log
as it is now, else from folding its event log (a run that never finished, or one
resumed since), so `mlra report DIR` gives the same tables whenever and wherever it is
run. Plots are written with matplotlib's
Agg backend (no display needed).

report.md is read with `cat` as often as rendered: every text in it from a run or a
task (a task's or model's name, a series' name, a reason, a success bar, a node, a tag)
is escaped as Markdown that renders as the very text (batch/report_text.py: no image,
link or HTML formed from it, its `|` kept in its cell) with its control characters
escaped (mlra/terminal_text.py); report.csv's texts have their control characters
escaped. report.json is written with `ensure_ascii`, so it holds nothing a terminal
obeys.

This module writes the report's files; the rows and groups (the numbers) are
batch/report_rows.py, report.md's tables and report.csv batch/report_tables.py, the
plots batch/report_plots.py, the training curves batch/report_curves.py.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from mlra.batch.report_judged import partial_of
from mlra.batch.report_plots import can_plot, plot, plot_validation, references
from mlra.batch.report_rows import Attempt, Group, collect, summarize
from mlra.batch.report_tables import markdown, write_csv
from mlra.batch.state import driven_elsewhere

REPORT_FILES = (
    "report.md",
    "report.csv",
    "report.json",
    "score.png",
    "normalized.png",
    "validation.png",
)


def write_report(out: Path, *, plots: bool = True, attempt: Attempt = "first") -> list[Group]:
    """Write report.md/.csv/.json (and the plots, where matplotlib is installed: see
    `can_plot`) into the batch folder; returns the groups."""
    from mlra.batch.compare.report_md import comparison_markdown
    from mlra.batch.report_curves import curves_json, curves_markdown, plot_curves, read_curves

    rows = collect(out, attempt)
    groups = summarize(rows)
    curves = read_curves(out, rows)  # the runs' training curves (issue 31)
    plotting = plots and bool(groups) and can_plot()
    text = markdown(groups, rows, attempt) + curves_markdown(curves, plotting)
    text += comparison_markdown(out, rows)  # the runs of each task side by side
    (out / "report.md").write_text(text, encoding="utf-8")
    write_csv(out / "report.csv", groups)
    payload = {
        "attempt": attempt,
        # Where some runs never started or stopped midway: how many of the batch's ran.
        "partial": asdict(partial) if (partial := partial_of(rows)) else None,
        "groups": [asdict(g) for g in groups],
        "runs": [asdict(r) for r in rows],
        "curves": curves_json(curves),
    }
    (out / "report.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    if plotting:
        plot(out, groups, references(rows))
        plot_validation(out, rows)
        plot_curves(out, curves)
    return groups


def write_batch_report(out: Path) -> tuple[list[Group], str]:
    """The report a batch writes as it ends, and the words that say where it is. Not while
    another `mlra batch` on the folder still drives runs: it overwrote that batch's report
    with one calling its live runs failed ("success 0%") until that batch ended; the batch
    driving them writes it when it ends."""
    others = driven_elsewhere(out)
    if others:
        n = len(others)
        runs = f"{n} run{'' if n == 1 else 's'}"
        return [], f"report.md left to the mlra batch still driving {runs} (written as it ends)"
    return write_report(out), f"report {out / 'report.md'}"
