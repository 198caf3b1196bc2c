"""`mlra compare --no-tui`'s text: the matrix and the paired tables as plain text that
fits the terminal's width (80 columns at least), and the same as JSON.

A matrix too wide for the width is cut into blocks of runs, each with the row names,
so no run is dropped; each run's column is named by a letter and the legend above
gives its full id. A cell too long for its column is cut with `…` (its start kept: the
status before its reason). Everything a run's folder says is printed with its control
characters escaped (mlra/terminal_text.py).
"""

from __future__ import annotations

import math
import string
from dataclasses import asdict
from typing import Any

from mlra.batch.compare.matrix import Matrix
from mlra.batch.compare.paired import Paired, side_text
from mlra.terminal_text import printable_line

NAME_WIDTH = 18
"""A row name's width on an 80-column terminal; a wider one gives names up to
`MAX_NAME` (a metric's name, `minimal_pair_accuracy ↑`, whole)."""
MAX_NAME = 32
MIN_CELL = 10
"""A cell's least width: a status (`finished …`) and a score still read."""
GAP = "  "


def letter(index: int) -> str:
    return string.ascii_uppercase[index]


def cut(text: str, width: int) -> str:
    text = printable_line(text)
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def name_cut(name: str, width: int) -> str:
    """A row name cut to `width`, its direction (` ↑`, ` ↓`) kept: the score row's name
    is the metric's, and the arrow says which way is better."""
    text = printable_line(name)
    if len(text) > width and text[-2:] in (" ↑", " ↓") and width > 4:
        return cut(text[:-2], width - 2) + text[-2:]
    return cut(text, width)


def _blocks(widths: list[int], room: int) -> list[list[int]]:
    """Runs' columns grouped so that each group fits `room` (one at least a group)."""
    blocks: list[list[int]] = [[]]
    used = 0
    for i, w in enumerate(widths):
        need = w + len(GAP)
        if blocks[-1] and used + need > room:
            blocks.append([])
            used = 0
        blocks[-1].append(i)
        used += need
    return blocks


def matrix_text(matrix: Matrix, width: int = 80) -> str:
    width = max(width, 40)
    lines = [f"{letter(i)}  {cut(run, width - 3)}" for i, run in enumerate(matrix.runs)]
    names = [name_cut(r.name, NAME_WIDTH) for r in matrix.rows]
    name_w = max([len(n) for n in names] + [3])
    room = width - name_w
    fit = max(1, room // (MIN_CELL + len(GAP)))
    blocks = math.ceil(len(matrix.runs) / fit)
    per_block = math.ceil(len(matrix.runs) / blocks)
    # a cell takes the room its block leaves it: at 150 columns two runs' models
    # (`openai/qwen2.5-coder-0.5b`, `-1.5b`) read whole, not both `openai/qwen2.5-coder-…`
    cell_w = max(MIN_CELL, room // per_block - len(GAP))
    widths = [
        max([1] + [len(cut(row.cells[i], cell_w)) for row in matrix.rows])
        for i in range(len(matrix.runs))
    ]
    used = max(sum(widths[i] + len(GAP) for i in b) for b in _blocks(widths, room))
    if room - used > 0:  # what the runs leave: longer row names, up to MAX_NAME
        names = [name_cut(r.name, min(MAX_NAME, name_w + room - used)) for r in matrix.rows]
        name_w = max([len(n) for n in names] + [3])
        room = width - name_w
    for block in _blocks(widths, room):
        lines.append("")
        head = "".ljust(name_w) + "".join(GAP + letter(i).ljust(widths[i]) for i in block)
        lines.append(head.rstrip())
        section = "outcome"
        for name, row in zip(names, matrix.rows, strict=True):
            if row.section != section:
                section = row.section
                lines.append("settings that differ:" if matrix.same_hidden else "settings:")
            cells = "".join(GAP + cut(row.cells[i], cell_w).ljust(widths[i]) for i in block)
            lines.append((name.ljust(name_w) + cells).rstrip())
    if matrix.best:
        lines.append("")
        lines.append(f"{'*'} best {matrix.metric}{matrix.best_of}")
    if matrix.tasks_apart:
        lines.append(printable_line(matrix.tasks_apart))
    if matrix.same_hidden:
        lines.append(
            f"{matrix.same_hidden} settings alike in every run, not shown (--all shows them)"
        )
    return "\n".join(lines)


def _num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.4g}" if signed else f"{value:.4g}"


def paired_text(table: Paired, width: int = 80) -> str:
    """The sides are `1st` and `2nd`, never letters: the matrix above names runs by
    letters, and its run B is not the paired table's second side (`B = baseline` under
    a matrix whose B was one run of baseline and C the other model's)."""
    width = max(width, 40)
    head = (
        f"paired by {table.by}, 2nd against 1st: "
        f"{table.wins} wins, {table.losses} losses, {table.ties} ties"
    )
    rows = [("task", "1st side", "2nd side", "2nd-1st", "")] + [
        (
            r.task,
            side_text(r.a, r.a_n, r.a_runs),
            side_text(r.b, r.b_n, r.b_runs),
            _num(r.diff, signed=True),
            r.outcome,
        )
        for r in table.rows
    ]
    num_w = [max(len(r[k]) for r in rows) for k in (1, 2, 3, 4)]
    task_w = max(4, min(max(len(printable_line(r[0])) for r in rows), width - sum(num_w) - 8))
    out = [cut(head, width), f"1st = {cut(table.a, width - 6)}", f"2nd = {cut(table.b, width - 6)}"]
    for r in rows:
        cells = [cut(r[0], task_w).ljust(task_w)] + [r[k].rjust(num_w[k - 1]) for k in (1, 2, 3, 4)]
        out.append(GAP.join(cells).rstrip())
    return "\n".join(out)


def as_json(matrix: Matrix, tables: list[Paired]) -> dict[str, Any]:
    """The matrix and paired tables; `best_of` says, as the text's footnote does, when
    the starred runs are each task's best (runs of several tasks), not one ranking."""
    return {
        "runs": matrix.runs,
        "metric": matrix.metric,
        "best": [matrix.runs[i] for i in sorted(matrix.best)],
        "best_of": matrix.best_of.strip() or "all the runs",
        "rows": [{"name": r.name, "section": r.section, "cells": r.cells} for r in matrix.rows],
        "settings_alike_hidden": matrix.same_hidden,
        "paired": [asdict(t) for t in tables],
    } | ({"tasks_apart": matrix.tasks_apart} if matrix.tasks_apart else {})
