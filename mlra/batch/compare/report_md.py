"""The batch report's comparison (report.md's "Runs compared" section): per task, the
matrix of its runs (up to `MAX_RUNS`, runs as columns, the best starred, the settings
that differ), and the paired tables where two models (or settings) ran the same tasks.

Every text from a run (an id, a model's name, a setting's value) is escaped as
Markdown that renders as the very text (batch/report_text.py).
"""

from __future__ import annotations

from pathlib import Path

from mlra.batch.compare.matrix import BEST, build
from mlra.batch.compare.paired import Paired, paired, side_text
from mlra.batch.compare.runs import MAX_RUNS, ComparedRun, CompareError, is_run_dir, load
from mlra.batch.report_rows import RunRow
from mlra.batch.report_text import md_cell, md_text
from mlra.batch.state import RUNS


def _folder(out: Path, run_id: str) -> Path | None:
    for folder in (out / RUNS / run_id, out / run_id):
        if is_run_dir(folder):
            return folder
    return None


def _loaded(out: Path, rows: list[RunRow]) -> list[ComparedRun]:
    runs = []
    for row in rows:
        if not (row.counted and row.started):
            continue
        folder = _folder(out, row.run_id)
        if folder is None:
            continue
        try:
            run = load(folder)
        except CompareError:
            continue  # a damaged log: the report's tables say what they can of it
        run.task = row.task or run.task  # compared by the task the report's rows count
        runs.append(run)
    return runs


def _matrix_md(runs: list[ComparedRun]) -> list[str]:
    m = build(runs)
    head = "| | " + " | ".join(md_cell(r) for r in m.runs) + " |"
    lines = [head, "|" + " --- |" * (len(m.runs) + 1)]
    section = "outcome"
    for row in m.rows:
        if row.section != section:  # as the console's matrix: the settings under a heading
            section = row.section
            lines.append("| *settings* |" + " |" * len(m.runs))
        lines.append(f"| {md_cell(row.name)} | " + " | ".join(md_cell(c) for c in row.cells) + " |")
    notes = []
    if m.best:
        notes.append(f"{md_text(BEST)} the best {md_cell(m.metric)}{m.best_of}")
    if m.same_hidden:
        notes.append(f"{m.same_hidden} settings alike in every run, not shown")
    return [*lines, *(["", "; ".join(notes) + "."] if notes else [])]


def _paired_md(table: Paired) -> list[str]:
    def num(value: float | None, signed: bool = False) -> str:
        return "-" if value is None else f"{value:+.4g}" if signed else f"{value:.4g}"

    lines = [
        f"Paired by {table.by}: {md_cell(table.b)} against {md_cell(table.a)}, "
        f"{table.wins} wins, {table.losses} losses, {table.ties} ties.",
        "",
        f"| task | {md_cell(table.a)} | {md_cell(table.b)} | difference | outcome |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in table.rows:
        lines.append(
            f"| {md_cell(r.task)} | {side_text(r.a, r.a_n, r.a_runs)} "
            f"| {side_text(r.b, r.b_n, r.b_runs)} | {num(r.diff, True)} | {r.outcome} |"
        )
    return lines


def compared(out: Path, rows: list[RunRow]) -> tuple[dict[str, list[ComparedRun]], list[Paired]]:
    """Each task with two runs or more (its runs, all of them: whoever shows them takes
    the first `MAX_RUNS`), and the paired tables over every run: what the report and the
    shared batch page compare."""
    runs = _loaded(out, rows)
    tasks: dict[str, list[ComparedRun]] = {}
    for run in runs:
        tasks.setdefault(run.task, []).append(run)
    return {t: rs for t, rs in sorted(tasks.items()) if len(rs) >= 2}, paired(runs)


def comparison_markdown(out: Path, rows: list[RunRow]) -> str:
    """The section (empty where no task has two runs to compare)."""
    compared_tasks, tables = compared(out, rows)
    if not compared_tasks and not tables:
        return ""
    lines = [
        "",
        "## Runs compared",
        "",
        "Each task's runs side by side, as mlra compare shows them (with their curves).",
    ]
    for task, task_runs in compared_tasks.items():
        lines += ["", f"### {md_cell(task)}", ""]
        if len(task_runs) > MAX_RUNS:
            lines += [f"The first {MAX_RUNS} of its {len(task_runs)} runs.", ""]
        lines += _matrix_md(task_runs[:MAX_RUNS])
    for table in tables:
        lines += ["", *_paired_md(table)]
    return "\n".join(lines) + "\n"
